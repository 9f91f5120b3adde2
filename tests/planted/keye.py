"""Planted bugs and benign refactors for the keye targets (optimized/keye.py)."""

from tests.planted.plant import Plant

_OPT = "optimized.keye"

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
          "torch.concat(siglip_position_ids, dim=0).to(\n                pixel_values_videos.device, torch.int32, non_blocking=True",
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
