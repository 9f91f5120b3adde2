"""Planted bugs and benign refactors for the minicpmv-resampler-forward target (optimized/minicpmv.py).

Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why); the bugs are
the slips a rewrite of the per-slice loop into one gather makes. tests/planted collects them.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.minicpmv"
_T = "minicpmv-resampler-forward"

BUGS: list[Plant] = [
    Plant("planted-minicpmv-resampler-hw-swapped", _T, _OPT,
          "tgt_w = tgt_sizes[:, 1].unsqueeze(1)",
          "tgt_w = tgt_sizes[:, 0].unsqueeze(1)",
          "the gather strides by the slice's rows instead of its columns: every non-square slice gets "
          "another patch's positional embedding"),
    Plant("planted-minicpmv-resampler-mask-off-by-one", _T, _OPT,
          "key_padding_mask = seq_idx >= patch_len.unsqueeze(1)",
          "key_padding_mask = seq_idx > patch_len.unsqueeze(1)",
          "the first padded row of each shorter slice is attended to: the mask is off by one"),
    Plant("planted-minicpmv-resampler-pos-cache-not-adjusted", _T, _OPT,
          "            self._adjust_pos_cache(tgt_sizes, device=device)",
          "            pass",
          "the cache is never grown (as if always capturing): a slice past max_size gets clamped, repeated "
          "positions instead of its own"),
    Plant("planted-minicpmv-resampler-length-from-sizes-off-by-one", _T, _OPT,
          "max_patch_len = x.shape[1]",
          "max_patch_len = x.shape[1] - 1",
          "a host-derived length one short: the mask and positions no longer cover x"),
]

BENIGN: list[Plant] = [
    Plant("benign-minicpmv-resampler-floor-div", _T, _OPT,
          "h_idx = seq_idx // tgt_w",
          "h_idx = torch.div(seq_idx, tgt_w, rounding_mode=\"floor\")",
          "floor division spelled as torch.div: the same integers"),
    Plant("benign-minicpmv-resampler-new-zeros", _T, _OPT,
          "torch.zeros_like(pos_embed)",
          "pos_embed.new_zeros(pos_embed.shape)",
          "the same zeros of the same dtype and device"),
]

# The same slip in both copies: only the per-slice reference (strategies/minicpmv/oracles.py) can see it.
_ROW_MAJOR = "grid = np.meshgrid(grid_w, grid_h)  # here w goes first"
_COLUMN_FIRST = "grid = np.meshgrid(grid_w, grid_h)[::-1]  # here w goes first"
SHARED_BUGS: list[SharedPlant] = [
    SharedPlant(
        name="shared-minicpmv-resampler-pos-halves-swapped",
        base_target=_T,
        legacy=("legacy.minicpmv", _ROW_MAJOR, _COLUMN_FIRST),
        optimized=(_OPT, _ROW_MAJOR, _COLUMN_FIRST),
        why="the 2-D sin-cos cache puts the row's embedding in the first half and the column's in the second: "
            "every patch off the diagonal carries another patch's position, the same on both sides",
    ),
]
