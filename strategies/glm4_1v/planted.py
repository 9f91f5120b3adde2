"""Planted bugs and benign refactors of the glm4_1v targets, collected by tests/planted (fuzz/plants.py).

From fla_glm4: Planted bugs and benign refactors for the FLA index helpers and glm4_1v.

From shared_fla_glm4: Bugs planted in both copies at once: the FLA index helpers, glm4_1v, async_tensor_h2d
and CpuGpuBuffer.copy_to_gpu.

The differential check cannot see them (legacy and optimized share the slip);
the invariants and references of strategies/fla_index/oracles.py, glm4_1v.py,
torch_utils.py and v1_utils.py must.
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the line is shared text of both releases."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


BUGS = [
    Plant("planted-glm4-wrong-modulo", "glm4v-embeddings", "optimized.glm4_1v",
          "np.arange(len(lengths)) % shapes_np.shape[0]",
          "np.minimum(np.arange(len(lengths)), shapes_np.shape[0] - 1)",
          "data-parallel cycling clamps to the last shape instead of wrapping"),
    Plant("planted-glm4-swapped-hw", "glm4v-embeddings", "optimized.glm4_1v",
          "np.repeat(shapes_np[shape_idx, 1], lengths)", "np.repeat(shapes_np[shape_idx, 2], lengths)",
          "target height taken from the width column (only visible when h != w)"),
    Plant("planted-glm4-reused-staging-buffer", "glm4v-embeddings", "optimized.glm4_1v",
          "from optimized.torch_utils import async_tensor_h2d",
          "from tests.racy import reused_buffer_h2d as async_tensor_h2d",
          "target_h and target_w staged through one reused host buffer without waiting"),
    Plant("planted-pos-embeds-no-repeat", "glm4v-pos-embeds", "optimized.glm4_1v",
          "async_tensor_h2d(w_coords.repeat(t), device=device)", "async_tensor_h2d(w_coords.repeat(1), device=device)",
          "w coordinates not repeated over frames (only visible when t > 1)"),
]

BENIGN = [
    Plant("benign-pos-embeds-w-times-h", "glm4v-pos-embeds", "optimized.glm4_1v",
          "lengths = [h * w] * t", "lengths = [w * h for _ in range(t)]",
          "the same frame lengths, built another way"),
    Plant("benign-glm4-column-first", "glm4v-embeddings", "optimized.glm4_1v",
          "np.repeat(shapes_np[shape_idx, 1], lengths)", "np.repeat(shapes_np[:, 1][shape_idx], lengths)",
          "select the column, then cycle: same values"),
]

# Invisible to a plain run: the output aliases a caller-owned host buffer, so
# only poisoning the caller's inputs after return (--stress) shows it.
STRESS_BUGS = [
    Plant("planted-glm4-output-aliases-input", "glm4v-embeddings", "optimized.glm4_1v",
          "embeddings = embeddings + adapted_pos_embed", "embeddings += adapted_pos_embed",
          "adds in place: the result is the caller's embeddings buffer"),
]

SHARED_BUGS = [
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
]
