"""Planted bugs and benign refactors for the staging-buffer targets (optimized/buffer_utils.py, vllm 0.34.0):
staged-write-tensor-apply-write, uva-buffer-pool-copy-to-uva and fused-staged-writer-apply."""

from fuzz.api import Plant

_OPT = "optimized.buffer_utils"
_STAGED = "staged-write-tensor-apply-write"
_POOL = "uva-buffer-pool-copy-to-uva"
_FUSED = "fused-staged-writer-apply"

BUGS = [
    Plant("planted-staged-write-dropped-list-chunk", _STAGED, _OPT,
          "                self._staged_write_chunks.append(contents)\n", "",
          "a dropped write: the list values staged before an ndarray are not flushed into the chunks, "
          "so apply_write uploads too few contents and every later write of the step shifts"),
    Plant("planted-staged-chunks-drops-tail", _STAGED, _OPT,
          "if not self._staged_write_contents:", "if self._staged_write_chunks:",
          "the list values staged after the last ndarray are left out of the upload (wrong test "
          "for 'nothing pending in the list')"),
    Plant("planted-clear-keeps-chunks", _STAGED, _OPT,
          "        self._staged_write_chunks.clear()\n", "",
          "clear_staged_writes forgets the by-reference chunks: the next step's upload starts with "
          "the last step's arrays, so its contents are read at the wrong offset"),
    Plant("planted-pool-round-robin-stuck", _POOL, _OPT,
          "self._curr = (self._curr + 1) % self.max_concurrency",
          "self._curr = self._curr % self.max_concurrency",
          "the round robin never advances: every call rewrites the slot the previous view still "
          "reads (the reused-host-buffer race of vLLM #24527 / #31841)"),
    Plant("planted-pool-grow-off-by-one", _POOL, _OPT,
          "if n > buf.cpu.shape[0]:", "if n > buf.cpu.shape[0] + 1:",
          "off by one: a slot one row too small is not grown, and the copy into it fails"),
    Plant("planted-fused-content-base-not-advanced", _FUSED, _OPT,
          "            content_base += t._staged_write_len\n", "",
          "wrong offset: every group's cu_lens count from 0, so the second group's writes read the "
          "first group's contents"),
    Plant("planted-fused-drops-list-contents", _FUSED, _OPT,
          "contents.extend(t._staged_chunks())", "contents.extend(t._staged_write_chunks)",
          "a dropped write: only the by-reference chunks are uploaded, the values staged from lists "
          "(every block_table.py write) are lost"),
]

BENIGN = [
    Plant("benign-staged-write-extend-list", _STAGED, _OPT,
          "contents.fromlist(x)", "contents.extend(x)",
          "extend takes a list as fromlist does, only without sizing the array once"),
    Plant("benign-pool-grow-larger", _POOL, _OPT,
          "capacity = 1 << (n - 1).bit_length()", "capacity = 1 << n.bit_length()",
          "a grown slot one power of two larger still holds n rows; views are sliced to n"),
    Plant("benign-fused-group-ids-generator", _FUSED, _OPT,
          "group_ids.extend([group_id] * n)", "group_ids.extend(group_id for _ in range(n))",
          "the same n group ids, from a generator instead of a list"),
]
