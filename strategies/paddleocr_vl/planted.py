"""Planted bugs and benign refactors of the paddleocr_vl targets, collected by tests/planted (fuzz/plants.py).

From paddleocr_vl: Planted bugs and benign refactors for paddleocr_vl (docs/design.md row 5).

``BUGS`` and ``BENIGN`` are fuzzed under the caller contract by
tests/e2e/test_planted.py. ``WIDE_BUGS`` only show on inputs today's callers never
build (several or nested grids), so tests/e2e/test_paddleocr_vl.py fuzzes them
under the wide contract.

From shared_keye_paddleocr: Bugs planted in both copies of keye and paddleocr_vl at once: legacy and
optimized agree on them, so only the targets' invariants and references
(strategies/keye/oracles.py, strategies/paddleocr_vl/oracles.py) can report them.
"""

from fuzz.api import Plant, SharedPlant

_MOD = "optimized.paddleocr_vl"


_ROPE_SIZE = "max_grid_size = max(max(h, w) for _, h, w in flatten_image_grid_thw)"


_LEGACY_PADDLE, _OPT_PADDLE = "legacy.paddleocr_vl", "optimized.paddleocr_vl"


_LEGACY_PADDLE, _OPT_PADDLE = "legacy.paddleocr_vl", "optimized.paddleocr_vl"


_PADDLE_IDS = "sample_hids = image_pids // w\n                sample_wids = image_pids % w"


_PADDLE_IDS_BUG = "sample_hids = image_pids // h\n                sample_wids = image_pids % h"


BUGS = [
    Plant("planted-paddleocr-rope-height-only", "paddleocr-encoder", _MOD,
          _ROPE_SIZE, "max_grid_size = max(h for _, h, w in flatten_image_grid_thw)",
          "rope table sized by the height only: wide images gather past its end (only visible when w > h)"),
    Plant("planted-paddleocr-rope-off-by-one", "paddleocr-encoder", _MOD,
          _ROPE_SIZE, "max_grid_size = max(max(h, w) - 1 for _, h, w in flatten_image_grid_thw)",
          "pids.max() translated literally: the largest id has no row"),
    Plant("planted-paddleocr-cu-seqlens-dropped-dtype", "paddleocr-encode-image", _MOD,
          "cu_seqlens, dtype=torch.int32, device=pixel_values.device",
          "cu_seqlens, device=pixel_values.device",
          "cu_seqlens staged as int64 instead of int32"),
    Plant("planted-paddleocr-position-ids-like-pixels", "paddleocr-encode-image", _MOD,
          "pixel_values.device, non_blocking=True", "pixel_values, non_blocking=True",
          "`.to(pixel_values)` takes the pixels' float dtype as well as their device"),
    Plant("planted-paddleocr-position-ids-mod-width", "paddleocr-encode-image", _MOD,
          "torch.arange(numel) % np.prod(thw_tuple[1:])", "torch.arange(numel) % np.prod(thw_tuple[2:])",
          "position ids wrap every row (w) instead of every frame (h*w)"),
]

BENIGN = [
    Plant("benign-paddleocr-rope-spare-row", "paddleocr-encoder", _MOD,
          _ROPE_SIZE, _ROPE_SIZE + " + 1",
          "one row more than any id gathers: 0.27.1's table size for the grid's ids"),
    Plant("benign-paddleocr-cu-seqlens-blocking", "paddleocr-encoder", _MOD,
          "cu_seqlens = cu_seqlens.to(device=device, non_blocking=True)", "cu_seqlens = cu_seqlens.to(device)",
          "the legacy blocking copy: same values, only slower"),
    Plant("benign-paddleocr-cu-seqlens-tensor-then-copy", "paddleocr-encode-image", _MOD,
          "async_tensor_h2d(\n            cu_seqlens, dtype=torch.int32, device=pixel_values.device\n        )",
          "torch.tensor(cu_seqlens, dtype=torch.int32).to(pixel_values.device, non_blocking=True)",
          "build on the host unpinned, then copy: same tensor"),
    Plant("benign-paddleocr-frame-size-product", "paddleocr-encode-image", _MOD,
          "torch.arange(numel) % np.prod(thw_tuple[1:])", "torch.arange(numel) % (thw_tuple[1] * thw_tuple[2])",
          "h*w as a Python int instead of a numpy product: same int64 ids"),
]

SHARED_BUGS = [
    SharedPlant(
        "shared-paddleocr-ids-split-by-height", "paddleocr-encoder",
        legacy=(_LEGACY_PADDLE, _PADDLE_IDS, _PADDLE_IDS_BUG),
        optimized=(_OPT_PADDLE, _PADDLE_IDS, _PADDLE_IDS_BUG),
        why="patch ids divided by the height instead of the width: not row-major (h, w) when h != w, yet "
            "inside the table (caught by the reference)",
    ),
]

WIDE_BUGS = [
    Plant("planted-paddleocr-rope-unflattened", "paddleocr-encoder", _MOD,
          "for _, h, w in flatten_image_grid_thw)", "for _, h, w in image_grid_thw)",
          "table size read from the unflattened grids: a nested list of grids does not unpack"),
    Plant("planted-paddleocr-rope-first-image", "paddleocr-encoder", _MOD,
          "for _, h, w in flatten_image_grid_thw)", "for _, h, w in flatten_image_grid_thw[:1])",
          "table sized for the first image only: a larger later image gathers past its end"),
]
