"""qwen3vl-rot-pos-emb oracles (strategies/qwen3_vl/oracles.py): each invariant holds on both real copies'
output and flags a hand-broken one; the reference matches both copies."""

from __future__ import annotations

import pytest
import torch

from fuzz.engine.execute import run_side
from fuzz.targets import lookup
from strategies.qwen3_vl import oracles as Q3

ROT = "qwen3vl-rot-pos-emb"


def rot_spec(grid=([1, 2, 4], [2, 4, 4], [1, 2, 4], [1, 2, 6])) -> dict:
    # h != w, t > 1, a repeated (h, w) (cache hit) and a key differing in w only
    return {"device": "cpu", "merge": 2, "rotary_half": 2, "dtype": "float32", "seed": 7,
            "grid_thw": [list(g) for g in grid], "grid_form": "list"}


def output(spec: dict, side: str):
    (target,) = lookup([ROT])
    result = run_side(target, side, spec)
    assert result.ok, result.raised
    return result.value


def replaced(tensor: torch.Tensor, index: int, value) -> torch.Tensor:
    fresh = tensor.clone()
    fresh[index] = value
    return fresh


INVARIANTS = [Q3.qwen3_rot_pos_emb_shape_follows_grids, Q3.qwen3_rot_pos_emb_frames_repeat,
              Q3.qwen3_rot_pos_emb_rows_follow_the_patches]


@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_invariants_hold_on_both_copies(side):
    spec = rot_spec()
    out = output(spec, side)
    for invariant in INVARIANTS:
        assert invariant(spec, out) is None, invariant.__name__
    ref = Q3.QWEN3_ROT_POS_EMB_REFERENCE
    for got, want in zip(ref.observed(out), ref.expected(spec)):
        assert torch.equal(got, want)


def test_each_invariant_flags_a_broken_output():
    spec = rot_spec()
    cos, sin = output(spec, "optimized")
    breaks = [
        (Q3.qwen3_rot_pos_emb_shape_follows_grids, (cos[:-1], sin[:-1])),
        (Q3.qwen3_rot_pos_emb_shape_follows_grids, (cos.double(), sin)),
        # rows 8..39 are item 1 (2 frames of 16 patches): frame 1's first row changed
        (Q3.qwen3_rot_pos_emb_frames_repeat, (replaced(cos, 8 + 16, cos[8 + 17]), sin)),
        # the last item ([1, 2, 6], rows 48..59): its patch (0, 4) given patch (0, 0)'s rows
        (Q3.qwen3_rot_pos_emb_rows_follow_the_patches, (replaced(cos, 56, cos[48]), sin)),
        (Q3.qwen3_rot_pos_emb_rows_follow_the_patches, (cos, torch.cat([sin[:, 2:], sin[:, :2]], dim=1))),
    ]
    for invariant, broken in breaks:
        assert invariant(spec, broken) is not None, invariant.__name__
