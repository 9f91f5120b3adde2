"""Planted bugs and benign refactors of sampling-mask-tensors-to-cpu (optimized/sample_output.py), collected by
tests/planted. Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why).
(A plant must edit the target's own copy module: ``SamplingMaskLists.to_nested_list`` lives in
optimized/outputs.py, so its slips cannot be planted here; the thunk's to_nested_list reads still judge them.)

On the CPU ``to_cpu_nonblocking`` returns ``self`` (no copy), so these sit in what runs on both devices:
``tolists`` and ``to_nested_list``.
"""

from fuzz.api import Plant

_OPT = "optimized.sample_output"
_TARGET = "sampling-mask-tensors-to-cpu"

BUGS = [
    Plant("planted-mask-bitmask-big-endian", _TARGET, _OPT,
          'packed_mask[row], count=self.vocab_size, bitorder="little"',
          'packed_mask[row], count=self.vocab_size, bitorder="big"',
          "the bitmask fallback (rows wider than max_num_kept) unpacked in the wrong bit order: wrong token ids"),
    Plant("planted-mask-compact-row-untruncated", _TARGET, _OPT,
          "                return token_ids[row, : counts[row]]",
          "                return token_ids[row, :width]",
          "the whole compact row taken: the unwritten columns past the row's count come along"),
    Plant("planted-mask-flat-ids-lose-int32", _TARGET, _OPT,
          "flat = np.concatenate([np.empty(0, dtype=np.int32), *supports])",
          "flat = np.concatenate([np.empty(0), *supports])",
          "the empty seed array is float64: every id becomes a float (3.0 for 3) in the scheduler's CSR"),
    Plant("planted-mask-fallback-one-late", _TARGET, _OPT,
          "            if counts[row] <= width:",
          "            if counts[row] <= width + 1:",
          "a row one id wider than the compact buffer read from it: the slice stops at the buffer, its last id lost"),
]

BENIGN = [
    Plant("benign-mask-bitmask-for-full-rows", _TARGET, _OPT,
          "            if counts[row] <= width:",
          "            if counts[row] < width:",
          "a row exactly as wide as the compact buffer read from the bitmask: the bitmask is exact for every row"),
]


# No SHARED_BUGS: 0.28.0 reads every row through the bitmask and 0.34.0 only rows wider than max_num_kept, so
# one slip in both copies' tolists shows as a divergence, not as a bug only the invariants can see.
