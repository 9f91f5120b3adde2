"""Planted bugs and benign refactors of the qwen3vl-image-evs / qwen3vl-expanded-positions targets
(optimized/qwen3_vl_evs.py), collected by tests/planted (fuzz/plants.py).

Each is a one-edit mutant of the optimized copy; ``old`` occurs once in it. ``SHARED_BUGS`` are slips in
both copies, which only the oracles of strategies/qwen3_vl_evs/oracles.py can see.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.qwen3_vl_evs"
_LEG = "legacy.qwen3_vl_evs"
_IMAGE = "qwen3vl-image-evs"
_EXPANDED = "qwen3vl-expanded-positions"
_NORMAL_FRAME = ("grid_indices = np.indices((1, llm_grid_h, llm_grid_w)).reshape(3, -1)\n"
                 "                llm_pos_ids_list.append(grid_indices + text_len + st_idx)")

BUGS = [
    Plant("planted-q3-image-evs-dummy-channel-one", _IMAGE, _OPT,
          "torch.zeros_like(", "torch.ones_like(",
          "the dummy fifth channel set to 1: recompute_mrope_positions reads it as a video token flag"),
    Plant("planted-q3-image-evs-always-appends", _IMAGE, _OPT,
          "        if self.is_multimodal_pruning_enabled:\n            merge_size",
          "        if True:\n            merge_size",
          "positions appended with pruning off: the embeddings grow 5 columns the language model does not expect"),
    Plant("planted-q3-image-evs-unmerged-grid", _IMAGE, _OPT,
          "compute_mrope_for_media(size, merge_size), emb.device",
          "compute_mrope_for_media(size, 1), emb.device",
          "positions of the unmerged patch grid: 4x the rows, or a shape error"),
    Plant("planted-q3-expanded-mask-reversed", _EXPANDED, _OPT,
          "            ][retention_mask]", "            ][retention_mask.flip(0)]",
          "the kept tokens take the positions of the mirrored tokens"),
    Plant("planted-q3-expanded-start-flags-video", _EXPANDED, _OPT,
          "expanded_positions[..., 3] = is_vision_start", "expanded_positions[..., 3] = is_video_embed",
          "channel 3 flags video tokens: recompute_mrope_positions miscounts the timestamp tokens"),
    Plant("planted-q3-expanded-one-frame-short", _EXPANDED, _OPT,
          "[(h // merge_size) * (w // merge_size)] * num_frames,",
          "[(h // merge_size) * (w // merge_size)] * (num_frames - 1),",
          "the unpruned sequence built a frame short (get_video_repl's length assert)"),
]

BENIGN = [
    Plant("benign-q3-image-evs-slice-from-start", _IMAGE, _OPT,
          "positions[:, 0:1]", "positions[:, :1]", "0:1 and :1 are the same slice"),
    Plant("benign-q3-expanded-transpose", _EXPANDED, _OPT,
          "async_tensor_h2d(original_mrope_cpu, device).permute(1, 0)",
          "async_tensor_h2d(original_mrope_cpu, device).t()",
          "permute(1, 0) of a 2-D tensor is its transpose (the same view)"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-q3-image-evs-h-w-swapped",
        base_target=_IMAGE,
        legacy=(_LEG, "torch.stack([t_index, h_index, w_index, llm_grid_w], dim=1)",
                "torch.stack([t_index, w_index, h_index, llm_grid_w], dim=1)"),
        optimized=(_OPT, "torch.stack([t_index, h_index, w_index, llm_grid_w], dim=1)",
                   "torch.stack([t_index, w_index, h_index, llm_grid_w], dim=1)"),
        why="h and w position channels swapped: the language model's rope sees the image transposed",
    ),
    SharedPlant(
        name="shared-q3-expanded-frame-one-late",
        base_target=_EXPANDED,
        legacy=(_LEG, _NORMAL_FRAME, _NORMAL_FRAME.replace("+ st_idx)", "+ st_idx + 1)")),
        optimized=(_OPT, _NORMAL_FRAME, _NORMAL_FRAME.replace("+ st_idx)", "+ st_idx + 1)")),
        why="each frame's grid starts one position late: a gap after every vision_start",
    ),
]
