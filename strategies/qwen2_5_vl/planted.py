"""Planted bugs and benign refactors for the qwen25-vl-rope-by-thw and qwen25-vl-encoder-metadata targets
(optimized/qwen2_5_vl.py).

Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why);
``old`` occurs once in the copy.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.qwen2_5_vl"
_TARGET = "qwen25-vl-rope-by-thw"

BUGS = [
    Plant("planted-qwen25-rope-cache-key-without-t", _TARGET, _OPT,
          "cache_key = (t, h, w)", "cache_key = (h, w)",
          "the per-tower cache keyed by the image size only: a video (or another frame count) of a "
          "size seen before gets the cached item's rows, window index and cu_seqlens"),
    Plant("planted-qwen25-rope-cache-sliced-to-h", _TARGET, _OPT,
          "self.rotary_pos_emb.get_cos_sin(max(h, w))", "self.rotary_pos_emb.get_cos_sin(h)",
          "the rope cache sliced to the grid's height: a grid wider than tall indexes past the slice "
          "(IndexError on CPU, a device assert on CUDA)"),
    Plant("planted-qwen25-rope-window-index-unapplied-to-sin", _TARGET, _OPT,
          "sin_thw = sin_thw[window_index_thw_dev, :, :]", "sin_thw = sin_thw[:, :, :]",
          "sin left in raster order while cos is in window order (any grid with more than one window)"),
]

BENIGN = [
    Plant("benign-qwen25-rope-pageable-window-index", _TARGET, _OPT,
          "window_index_thw_dev = async_tensor_h2d(window_index_thw, cos_thw.device)",
          "window_index_thw_dev = window_index_thw.to(cos_thw.device, non_blocking=True)",
          "0.29.0's pageable non-blocking copy of the window index: the same values, only the copy's "
          "asynchrony differs"),
    Plant("benign-qwen25-rope-no-cache-hit", _TARGET, _OPT,
          "if cache_key in self._rope_by_thw_cache:", "if False:",
          "recomputing every call: the method is a function of (t, h, w), the cache only saves work"),
]

_META = "qwen25-vl-encoder-metadata"

BUGS += [
    Plant("planted-qwen25-meta-window-offset-per-frame", _META, _OPT,
          "window_index_id += t * llm_h * llm_w", "window_index_id += llm_h * llm_w",
          "the next item's window index offset counts one frame of a video only: indices repeat across "
          "items and the embeddings are regrouped wrongly"),
    Plant("planted-qwen25-meta-reverse-is-forward", _META, _OPT,
          "reverse_indices = self.invert_permutation(window_index)", "reverse_indices = window_index.clone()",
          "the window permutation itself used to undo it: right only where it is its own inverse"),
    Plant("planted-qwen25-meta-window-pad-zero", _META, _OPT,
          "                            cu_window_seqlens[-1],\n", "                            0,\n",
          "padding window boundaries of 0: the padded window sequences get negative lengths in the graph"),
    Plant("planted-qwen25-meta-window-index-int32", _META, _OPT,
          "window_index = async_tensor_h2d(window_index, device)",
          "window_index = async_tensor_h2d(window_index, device, dtype=torch.int32)",
          "the window index staged as int32: the caller's index dtype changes"),
]

BENIGN += [
    Plant("benign-qwen25-meta-window-index-device-keyword", _META, _OPT,
          "window_index = async_tensor_h2d(window_index, device)",
          "window_index = async_tensor_h2d(window_index, device=device)",
          "the same call with the device named"),
    Plant("benign-qwen25-meta-window-index-pageable", _META, _OPT,
          "window_index = async_tensor_h2d(window_index, device)",
          "window_index = window_index.to(device=device, non_blocking=True)",
          "0.29.0's pageable non-blocking copy: the same values, only the copy's asynchrony differs"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-qwen25-meta-window-override-is-full",
        base_target=_META,
        legacy=("legacy.qwen2_5_vl", "max_seqlen_window_val = max_seqlen_window_override",
                "max_seqlen_window_val = max_seqlen_override"),
        optimized=(_OPT, "max_seqlen_window_val = max_seqlen_window_override",
                   "max_seqlen_window_val = max_seqlen_override"),
        why="capture bakes the full-attention override (token_budget * m**2) into the window blocks' "
        "max_seqlen in both releases instead of the window bound (window**2 * m**2)",
    ),
]
