"""Bugs planted in both copies at once: the FLA index helpers, glm4_1v, async_tensor_h2d
and CpuGpuBuffer.copy_to_gpu.

The differential check cannot see them (legacy and optimized share the slip);
the invariants and references of fuzz/oracles/fla_index.py, glm4_1v.py,
torch_utils.py and v1_utils.py must.
"""

from __future__ import annotations

from tests.planted.plant import SharedPlant


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the line is shared text of both releases."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


SHARED_BUGS = [
    SharedPlant(
        name="shared-fla-indices-ids-from-one",
        base_target="fla-chunk-indices",
        **_both("fla_index", "indices.eq(0).cumsum(0) - 1", "indices.eq(0).cumsum(0)"),
        why="sequence ids counted from 1: every chunk names the sequence after its own, so the kernels "
        "read the next sequence's bounds from cu_seqlens (and past its end for the last one)",
    ),
    SharedPlant(
        name="shared-fla-offsets-floor-division",
        base_target="fla-chunk-offsets",
        legacy=("legacy.fla_index",
                "[cu_seqlens.new_tensor([0]), triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]",
                "[cu_seqlens.new_tensor([0]), prepare_lens(cu_seqlens) // chunk_size]"),
        optimized=("optimized.fla_index",
                   "[cu_seqlens.new_zeros(1), triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]",
                   "[cu_seqlens.new_zeros(1), prepare_lens(cu_seqlens) // chunk_size]"),
        why="chunks per sequence rounded down: a sequence whose length is not a multiple of the chunk "
        "size loses its last, partial chunk, so every later sequence's state slots start one too early",
    ),
    SharedPlant(
        name="shared-glm4-dp-shapes-clamped",
        base_target="glm4v-embeddings",
        legacy=("legacy.glm4_1v", "shape_idx = i % image_shapes.shape[0]",
                "shape_idx = min(i, image_shapes.shape[0] - 1)"),
        optimized=("optimized.glm4_1v", "np.arange(len(lengths)) % shapes_np.shape[0]",
                   "np.minimum(np.arange(len(lengths)), shapes_np.shape[0] - 1)"),
        why="data-parallel cycling clamps to the last image shape instead of wrapping: on a rank holding "
        "fewer shapes than frames, the extra frames are resampled to the wrong grid",
    ),
    SharedPlant(
        name="shared-glm4-w-corner-aligned",
        base_target="glm4v-pos-embeds",
        **_both("glm4_1v", "norm_w = ((w_coords + 0.5) / target_w) * 2 - 1",
                "norm_w = (w_coords / target_w) * 2 - 1"),
        why="the half-pixel offset dropped from the w coordinate: patches are sampled at their left "
        "edges, not their centres (align_corners=False), so every column is shifted half a patch",
    ),
    SharedPlant(
        name="shared-h2d-dropped-dtype",
        base_target="async-tensor-h2d",
        **_both("torch_utils", "return t.to(device=device, dtype=dtype, non_blocking=True)",
                "return t.to(device=device, non_blocking=True)"),
        why="a tensor or array source keeps its own dtype when another is asked for",
    ),
    SharedPlant(
        name="shared-copy-to-gpu-whole-buffer",
        base_target="cpu-gpu-buffer-copy-to-gpu",
        legacy=("legacy.v1_utils", "return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)",
                "self.gpu.copy_(self.cpu, non_blocking=True)\n        return self.gpu[:n]"),
        optimized=("optimized.v1_utils",
                   "return gpu.copy_(cpu.pin_memory() if PIN_MEMORY else cpu, non_blocking=True)",
                   "self.gpu.copy_(self.cpu, non_blocking=True)\n        return gpu"),
        why="the whole host buffer copied whatever n says: device rows past n, the previous step's, "
        "are overwritten with stale host rows (same returned rows, so only the buffer shows it)",
    ),
]
