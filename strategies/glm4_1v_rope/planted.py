"""Planted bugs and benign refactors for the glm4v-rot-pos-emb target (optimized/glm4_1v_rope.py).

Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why);
``old`` occurs once in the copy.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.glm4_1v_rope"
_TARGET = "glm4v-rot-pos-emb"

BUGS = [
    Plant("planted-glm4v-rot-pos-emb-swapped-hw", _TARGET, _OPT,
          "torch.stack([hpos_ids, wpos_ids], dim=-1)", "torch.stack([wpos_ids, hpos_ids], dim=-1)",
          "row and column ids swapped: each patch reads the column's rotary half first"),
    Plant("planted-glm4v-rot-pos-emb-max-of-h-only", _TARGET, _OPT,
          "max_grid_size = max(max(h, w) for _, h, w in grid_thw)",
          "max_grid_size = max(h for _, h, w in grid_thw)",
          "the cache is sliced to the tallest grid only: a grid wider than every height indexes "
          "past the slice (IndexError on CPU, a device assert on CUDA)"),
    Plant("planted-glm4v-rot-pos-emb-frames-not-repeated", _TARGET, _OPT,
          "dim=-1).repeat(t, 1))", "dim=-1))",
          "each image's ids once instead of once per frame: a video gets 1/t of its rows"),
]

BENIGN = [
    Plant("benign-glm4v-rot-pos-emb-cache-device", _TARGET, _OPT,
          "device = self.device", "device = self.rotary_pos_emb.cos_sin_cache.device",
          "the ids built on the cache's device (0.28.0's target device): in a loaded model the "
          "weights and the cache buffer live on one device"),
    Plant("benign-glm4v-rot-pos-emb-reshape", _TARGET, _OPT,
          "cos_combined = cos[pos_ids].flatten(1)", "cos_combined = cos[pos_ids].reshape(pos_ids.shape[0], -1)",
          "the same [N, 2, k] -> [N, 2k] view of a fresh contiguous gather"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-glm4v-rot-pos-emb-swapped-hw",
        base_target="glm4v-rot-pos-emb",
        legacy=("legacy.glm4_1v_rope", "torch.stack([hpos_ids, wpos_ids], dim=-1)",
                "torch.stack([wpos_ids, hpos_ids], dim=-1)"),
        optimized=("optimized.glm4_1v_rope", "torch.stack([hpos_ids, wpos_ids], dim=-1)",
                   "torch.stack([wpos_ids, hpos_ids], dim=-1)"),
        why="row and column ids swapped in both releases: every patch of a non-square neighbourhood reads "
        "the wrong rotary rows, and pos_ids holds [w, h]",
    ),
]
