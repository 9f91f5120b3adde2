"""Planted bugs and benign refactors of keep-on-cpu-ernie-grid-thw (optimized/ernie_fields.py, vllm 0.34.0),
collected by tests/planted (fuzz/plants.py)."""

from fuzz.api import Plant, SharedPlant

_T = "keep-on-cpu-ernie-grid-thw"
_MOD = "optimized.ernie_fields"
_TABLE = "max_grid_size = grid_thw[:, 1:].max()"
_SIZES = "sizes = grid_thw.prod(-1) // merge_size // merge_size"
_CU = "grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]"

BUGS = [
    Plant("planted-ernie-fields-table-off-by-one", _T, _MOD,
          _TABLE, "max_grid_size = grid_thw[:, 1:].max() - 1",
          "rotary table sized from the host grid one row short: the largest position gathers past its end"),
    Plant("planted-ernie-fields-split-sizes-one-merge", _T, _MOD,
          _SIZES, "sizes = grid_thw.prod(-1) // merge_size",
          "host split sizes divided by the merge once: they no longer add up to the resampler's rows"),
    Plant("planted-ernie-fields-cu-seqlens-int64", _T, _MOD,
          ").cumsum(dim=0, dtype=torch.int32)", ").cumsum(dim=0)",
          "cu_seqlens built on the host without its int32 dtype: the varlen kernels get int64 offsets"),
    Plant("planted-ernie-fields-temporal-pairs-from-one", _T, _MOD,
          "1 if temporoal_size > 1 else 0, temporoal_size, 2", "1, temporoal_size, 2",
          "the second frame of a pair from 1 for single-frame images too: no rows to pair with"),
]

BENIGN = [
    Plant("benign-ernie-fields-table-spare-row", _T, _MOD,
          _TABLE, "max_grid_size = grid_thw[:, 1:].max() + 1",
          "one rotary row more than any position gathers: the same rows"),
    Plant("benign-ernie-fields-split-sizes-one-division", _T, _MOD,
          _SIZES, "sizes = grid_thw.prod(-1) // (merge_size * merge_size)",
          "floor division by the product at once: the same host ints"),
]

# Only CUDA shows them (a CPU run has one device): tests/gpu fuzzes SYNC_BUGS there.
SYNC_BUGS = [
    Plant("planted-ernie-fields-grid-on-device", _T, _MOD,
          'image_grid_thw=MultiModalFieldConfig.batched("image", keep_on_cpu=True)',
          'image_grid_thw=MultiModalFieldConfig.batched("image")',
          "keep_on_cpu dropped: the image grid reaches the model on the device, the rotary loop syncs per "
          "row and async_tensor_h2d refuses the device cu_seqlens",
          shows_on=("cuda",)),
    Plant("planted-ernie-fields-ids-on-grid-device", _T, _MOD,
          "device = self.device\n        pos_ids = []", "device = grid_thw.device\n        pos_ids = []",
          "position ids built on the (host) grid's device: the device rotary table is indexed with host ids",
          shows_on=("cuda",)),
]

SHARED_BUGS = [
    SharedPlant(
        "shared-ernie-fields-frames-h-by-h", _T,
        legacy=("legacy.ernie_fields", _CU, "grid_thw[:, 1] * grid_thw[:, 1], grid_thw[:, 0]"),
        optimized=(_MOD, _CU, "grid_thw[:, 1] * grid_thw[:, 1], grid_thw[:, 0]"),
        why="frames sized h*h on both sides: the segments stop tiling the patches when h != w (caught by the "
            "encoder-metadata and finite-embedding invariants)",
    ),
]
