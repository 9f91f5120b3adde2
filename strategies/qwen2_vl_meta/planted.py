"""Planted bugs and benign refactors for the qwen2-vl-encoder-metadata target (optimized/qwen2_vl_meta.py).

Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why);
``old`` occurs once in the copy.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.qwen2_vl_meta"
_TARGET = "qwen2-vl-encoder-metadata"

BUGS = [
    Plant("planted-qwen2-meta-seqlens-per-image", _TARGET, _OPT,
          "            grid_thw_np[:, 0],\n        ).cumsum", "            1,\n        ).cumsum",
          "one attention sequence per image instead of per frame: a video's frames attend as one"),
    Plant("planted-qwen2-meta-max-batch-wins", _TARGET, _OPT,
          "max_frames_per_batch if max_frames_per_batch is not None else max_batch_size",
          "max_batch_size if max_batch_size is not None else max_frames_per_batch",
          "the image budget pads a video capture: cu_seqlens shorter than the frame budget"),
    Plant("planted-qwen2-meta-pad-with-zero", _TARGET, _OPT,
          "                            cu_seqlens[-1],\n", "                            0,\n",
          "padding boundaries of 0: the padded sequences get negative lengths"),
    Plant("planted-qwen2-meta-staged-dtype", _TARGET, _OPT,
          '"cu_seqlens": async_tensor_h2d(cu_seqlens, device)',
          '"cu_seqlens": async_tensor_h2d(cu_seqlens, device, dtype=torch.int64)',
          "cu_seqlens staged as int64: the flash kernels take int32"),
]

BENIGN = [
    Plant("benign-qwen2-meta-staged-dtype-explicit", _TARGET, _OPT,
          '"cu_seqlens": async_tensor_h2d(cu_seqlens, device)',
          '"cu_seqlens": async_tensor_h2d(cu_seqlens, device, dtype=torch.int32)',
          "naming the dtype cu_seqlens already has"),
    Plant("benign-qwen2-meta-pad-with-numpy-full", _TARGET, _OPT,
          "                            cu_seqlens[-1],\n", "                            int(cu_seqlens[-1]),\n",
          "the last boundary as a Python int: torch.full casts it to the given int32 either way (a host read "
          "of a host tensor)"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-qwen2-meta-frame-is-h-squared",
        base_target=_TARGET,
        legacy=("legacy.qwen2_vl_meta", "grid_thw_np[:, 1] * grid_thw_np[:, 2],",
                "grid_thw_np[:, 1] * grid_thw_np[:, 1],"),
        optimized=(_OPT, "grid_thw_np[:, 1] * grid_thw_np[:, 2],", "grid_thw_np[:, 1] * grid_thw_np[:, 1],"),
        why="each frame's sequence counted as h * h patches in both releases: any image wider or taller than "
        "square gets wrong attention boundaries",
    ),
]
