"""Planted bugs and benign refactors of keep-on-cpu-paddleocr-grid-thw (optimized/paddleocr_fields.py,
vllm 0.34.0), collected by tests/planted (fuzz/plants.py)."""

from fuzz.api import Plant, SharedPlant

_T = "keep-on-cpu-paddleocr-grid-thw"
_MOD = "optimized.paddleocr_fields"
_SPLIT = "vision_outputs.split([math.prod(grid) for grid in grids])"
_CU = "cu_seqlens = torch.from_numpy(np.cumsum([0, *seq_lens], dtype=np.int32))"

BUGS = [
    Plant("planted-paddleocr-fields-stale-grid", _T, _MOD,
          "grids = [tuple(grid) for grid in image_grid_thw.tolist()]",
          "grids = [tuple(image_grid_thw[0].tolist())] * len(image_grid_thw)",
          "stale host mirror: every image takes the first image's grid (sizes, ids and segments disagree)"),
    Plant("planted-paddleocr-fields-one-segment", _T, _MOD,
          _CU, "cu_seqlens = torch.tensor([0, sum(seq_lens)], dtype=torch.int32)",
          "cu_seqlens from the total only: the images attend to each other"),
    Plant("planted-paddleocr-fields-split-off-by-one", _T, _MOD,
          _SPLIT, "vision_outputs.split([math.prod(grid) - 1 for grid in grids] + [len(grids)])",
          "host-derived split sizes off by one per image (the remainder lumped at the end)"),
    Plant("planted-paddleocr-fields-ids-mod-width", _T, _MOD,
          "torch.arange(seq_len) % (h * w)", "torch.arange(seq_len) % w",
          "position ids wrap every row instead of every frame"),
]

BENIGN = [
    Plant("benign-paddleocr-fields-int-grids", _T, _MOD,
          "grids = [tuple(grid) for grid in image_grid_thw.tolist()]",
          "grids = [tuple(int(v) for v in grid) for grid in image_grid_thw.tolist()]",
          "the host grid read as Python ints explicitly: the same tuples"),
    Plant("benign-paddleocr-fields-torch-cumsum", _T, _MOD,
          _CU, "cu_seqlens = torch.tensor([0, *seq_lens]).cumsum(0, dtype=torch.int32)",
          "cu_seqlens by a host torch cumsum instead of numpy: the same int32 host tensor"),
]

SHARED_BUGS = [
    SharedPlant(
        "shared-paddleocr-fields-ids-mod-height", _T,
        legacy=("legacy.paddleocr_fields", "image_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])",
                "image_position_ids = torch.arange(numel) % thw_tuple[1]"),
        optimized=(_MOD, "torch.arange(seq_len) % (h * w)", "torch.arange(seq_len) % h"),
        why="position ids wrap every h tokens on both sides: only the tower-segments invariant sees it",
    ),
]

# Only the CUDA sync oracle sees it: the same values, with the grid's host reads turned into syncs.
SYNC_BUGS = [
    Plant("planted-paddleocr-fields-grid-on-device", _T, _MOD,
          'image_grid_thw=MultiModalFieldConfig.batched("image", keep_on_cpu=True)',
          'image_grid_thw=MultiModalFieldConfig.batched("image")',
          "keep_on_cpu dropped: the grid reaches the model on the device and every .tolist() syncs",
          shows_on=("cuda",)),
]

# Only frames t > 1 (the wide contract; PaddleOCR's processor makes t == 1 images) reach it:
# tests/unit/test_paddleocr_fields.py fuzzes it under --contract wide.
WIDE_BUGS = [
    Plant("planted-paddleocr-fields-sizes-spatial-only", _T, _MOD,
          "image_grid_sizes = image_grid_thw.prod(-1)", "image_grid_sizes = image_grid_thw[:, 1:].prod(-1)",
          "flat_from_sizes sizes without the frames: pixel slices disagree with the grid when t > 1 "
          "(wide contract only)"),
]
