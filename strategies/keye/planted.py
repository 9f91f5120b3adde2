"""Planted bugs and benign refactors of the keye targets, collected by tests/planted (fuzz/plants.py).

From keye: Planted bugs and benign refactors for the keye targets (optimized/keye.py).

From shared_keye_paddleocr: Bugs planted in both copies of keye and paddleocr_vl at once: legacy and
optimized agree on them, so only the targets' invariants and references
(strategies/keye/oracles.py, strategies/paddleocr_vl/oracles.py) can report them.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.keye"


_LEGACY_KEYE, _OPT_KEYE = "legacy.keye", "optimized.keye"


_LEGACY_KEYE, _OPT_KEYE = "legacy.keye", "optimized.keye"


# The video loop's lines, with the line before them so `old` is unique (the
# image loop has the same last two lines).
_VIDEO_CU = ("siglip_position_ids.append(video_position_ids)\n"
             "            sample_indices.append(torch.full((numel,), idx, dtype=torch.int64))\n"
             "            cu_seqlens.append(cu_seqlens[-1] + numel)")


_VIDEO_CU_BUG = ("siglip_position_ids.append(video_position_ids)\n"
                 "            sample_indices.append(torch.full((numel,), idx, dtype=torch.int64))\n"
                 "            cu_seqlens.append(numel)")


BUGS = [
    Plant("planted-keye-rope-min-side", "keye-encoder-rope", _OPT,
          "max(max(h, w) for _, h, w in flatten_image_grid_thw)",
          "max(min(h, w) for _, h, w in flatten_image_grid_thw)",
          "rope table sized by the shorter side: ids along the longer side index past it (only when h != w)"),
    Plant("planted-keye-rope-last-grid", "keye-encoder-rope", _OPT,
          "for _, h, w in flatten_image_grid_thw)",
          "for _, h, w in flatten_image_grid_thw[-1:])",
          "rope table sized by the last grid only (only when an earlier grid is larger)"),
    Plant("planted-keye-split-drops-t", "keye-vision-split", _OPT,
          "int(np.prod(thw))", "int(np.prod(thw[1:]))",
          "split sizes per frame instead of per image (only visible when t > 1)"),
    Plant("planted-keye-split-unflattened", "keye-vision-split", _OPT,
          "int(np.prod(thw)) for thw in self.encoder.flatten_list(image_grid_thw)",
          "int(np.prod(thw)) for thw in image_grid_thw",
          "nested video grids not flattened: one split for a whole group (only visible with nested lists)"),
    Plant("planted-keye-image-cu-seqlens-int64", "keye-process-image", _OPT,
          "cu_seqlens, dtype=torch.int32, device=pixel_values.device",
          "cu_seqlens, device=pixel_values.device",
          "dropped dtype: cu_seqlens staged as int64"),
    Plant("planted-keye-image-indices-from-one", "keye-process-image", _OPT,
          "for idx, thw in enumerate(image_grid_thw_list):",
          "for idx, thw in enumerate(image_grid_thw_list, 1):",
          "sample indices start at 1"),
    Plant("planted-keye-video-position-ids-int32", "keye-process-video", _OPT,
          "torch.concat(siglip_position_ids, dim=0).to(\n                pixel_values_videos.device, non_blocking=True",
          "torch.concat(siglip_position_ids, dim=0).to(\n"
          "                pixel_values_videos.device, torch.int32, non_blocking=True",
          "position ids staged as int32 like cu_seqlens"),
]

BENIGN = [
    Plant("benign-keye-rope-spare-row", "keye-encoder-rope", _OPT,
          "max(max(h, w) for _, h, w in flatten_image_grid_thw)",
          "max(max(h, w) for _, h, w in flatten_image_grid_thw) + 1",
          "one rope row more than needed: the gathered rows do not depend on the table size"),
    Plant("benign-keye-split-spelled-out", "keye-vision-split", _OPT,
          "int(np.prod(thw)) for thw", "int(thw[0] * thw[1] * thw[2]) for thw",
          "t*h*w without numpy"),
    Plant("benign-keye-image-cu-seqlens-tensor", "keye-process-image", _OPT,
          "async_tensor_h2d(\n                cu_seqlens, dtype=torch.int32, device=pixel_values.device\n            )",
          "torch.tensor(cu_seqlens, dtype=torch.int32).to(pixel_values.device, non_blocking=True)",
          "unpinned non-blocking copy instead of async_tensor_h2d"),
    Plant("benign-keye-video-grid-tolist", "keye-process-video", _OPT,
          "tuple(sub_thw.detach().cpu().numpy().tolist())", "tuple(sub_thw.tolist())",
          "read the row with tolist() directly, as the image path now does"),
]

# Only visible on CUDA (a sync regression, outputs unchanged).
SYNC_BUGS = [
    Plant("planted-keye-rope-also-reads-ids", "keye-encoder-rope", _OPT,
          "max_grid_size = max(max(h, w) for _, h, w in flatten_image_grid_thw)",
          "max_grid_size = max(max(max(h, w) for _, h, w in flatten_image_grid_thw), int(pids.max()) + 1)",
          "'defensive' table size that also reads the ids back: the sync the PR removed, values unchanged"),
]

SHARED_BUGS = [
    SharedPlant(
        "shared-keye-split-squeezes-wrong-dim", "keye-vision-split",
        legacy=(_LEGACY_KEYE, "tensor = last_hidden_state[:, start:end, :].squeeze(0)",
                "tensor = last_hidden_state[:, start:end, :].squeeze(1)"),
        optimized=(_OPT_KEYE, "tensor.squeeze(0) for tensor in last_hidden_state.split(split_sizes, dim=1)",
                   "tensor.squeeze(1) for tensor in last_hidden_state.split(split_sizes, dim=1)"),
        why="the batch dimension is squeezed at the token axis: pieces stay [1, n, hidden] (caught by "
            "keye_split_covers_sequence)",
    ),
    SharedPlant(
        "shared-keye-rope-repeat-interleaved", "keye-encoder-rope",
        legacy=(_LEGACY_KEYE, "rope_emb = rope_emb.repeat(1, 2)", "rope_emb = rope_emb.repeat_interleave(2, dim=1)"),
        optimized=(_OPT_KEYE, "rope_emb = rope_emb.repeat(1, 2)", "rope_emb = rope_emb.repeat_interleave(2, dim=1)"),
        why="rope columns interleaved ([a, a, b, b]) instead of tiled ([a, b, a, b]): the rotate-half "
            "halves no longer match (caught by the reference, same shape)",
    ),
    SharedPlant(
        "shared-keye-video-cu-seqlens-not-accumulated", "keye-process-video",
        legacy=(_LEGACY_KEYE, _VIDEO_CU, _VIDEO_CU_BUG),
        optimized=(_OPT_KEYE, _VIDEO_CU, _VIDEO_CU_BUG),
        why="cu_seqlens gets each row's size, not the running sum (visible with two grid rows or more; "
            "caught by keye_metadata_cu_seqlens_running_sum)",
    ),
]
