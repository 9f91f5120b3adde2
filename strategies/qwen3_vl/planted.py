"""Planted bugs and benign refactors for the qwen3vl-rot-pos-emb target (optimized/qwen3_vl.py).

Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why);
``old`` occurs once in the copy. A bug both copies share, which only the oracles can see, is a
``SharedPlant`` in ``SHARED_BUGS``.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.qwen3_vl"
_LEG = "legacy.qwen3_vl"
_TARGET = "qwen3vl-rot-pos-emb"

BUGS = [
    Plant("planted-qwen3-rot-pos-ids-cache-key-drops-w", _TARGET, _OPT,
          "cache_key = (h, w, spatial_merge_size)", "cache_key = (h, h, spatial_merge_size)",
          "the per-tower cache keyed without w: an item of a cached h but another w gets the cached "
          "item's ids (wrong rows, wrong count)"),
    Plant("planted-qwen3-rot-pos-ids-swapped-hw", _TARGET, _OPT,
          "result = torch.from_numpy(np.stack([hpos_ids, wpos_ids], axis=-1))",
          "result = torch.from_numpy(np.stack([wpos_ids, hpos_ids], axis=-1))",
          "row and column ids swapped: each patch reads the column's rotary half first"),
]

BENIGN = [
    Plant("benign-qwen3-rot-pos-ids-no-cache-hit", _TARGET, _OPT,
          "if cache_key in self._rot_pos_ids_cache:", "if cache_key in ():",
          "never reading the cache recomputes the same ids: the cache only saves host work"),
]

SHARED_BUGS = [
    SharedPlant(
        "shared-qwen3-rot-pos-emb-frames-not-repeated", _TARGET,
        (_LEG, "else self.rot_pos_ids(h, w, self.spatial_merge_size).repeat(t, 1)",
         "else self.rot_pos_ids(h, w, self.spatial_merge_size)"),
        (_OPT, "else self.rot_pos_ids(h, w, self.spatial_merge_size).repeat(t, 1)",
         "else self.rot_pos_ids(h, w, self.spatial_merge_size)"),
        "a video's ids once instead of once per frame, in both copies: 1/t of its rows",
    ),
]
