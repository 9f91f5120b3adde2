"""Bugs planted in both ernie45_vl copies at once (docs/design.md rows 6-8).

The differential check cannot see them (legacy and optimized share the slip);
fuzz/oracles/ernie45_vl.py's invariants and references must.
"""

from __future__ import annotations

from tests.planted.plant import SharedPlant


def _both(old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy: the lines are shared text in 0.27.1 and 0.28.0."""
    return {"legacy": ("legacy.ernie45_vl", old, new), "optimized": ("optimized.ernie45_vl", old, new)}


SHARED_BUGS = [
    SharedPlant(
        name="shared-ernie-rot-swapped-hw",
        base_target="ernie-rot-pos-emb",
        **_both("torch.stack([hpos_ids, wpos_ids], dim=-1)", "torch.stack([wpos_ids, hpos_ids], dim=-1)"),
        why="the (h, w) position columns stacked in the wrong order: every token's rotary row holds its "
        "w position in the h half, so a frame with h != w points outside its grid and the merge windows "
        "come transposed",
    ),
    SharedPlant(
        name="shared-ernie-metadata-h-times-h",
        base_target="ernie-encoder-metadata",
        **_both("grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]", "grid_thw[:, 1] * grid_thw[:, 1], grid_thw[:, 0]"),
        why="per-frame sequence length h*h instead of h*w: cu_seqlens no longer adds up to the tokens the "
        "rotary table and hidden states hold whenever h != w",
    ),
    SharedPlant(
        name="shared-ernie-graph-max-seqlen-total",
        base_target="ernie-encoder-metadata-graph",
        **_both("max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()",
                "max_seqlen = cu_seqlens[-1] - cu_seqlens[0]"),
        why="max_seqlen taken as the packed length of the whole batch, not its longest sequence: flash "
        "attention is told every image may be the total long (replay with two or more images)",
    ),
]
