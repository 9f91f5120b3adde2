"""keep-on-cpu-paddleocr-grid-thw: each invariant holds on both sides' real outputs and reports a hand-broken
one (strategies/paddleocr_fields/oracles.py); the input model batches each side by its own field config."""

from __future__ import annotations

import copy

import pytest
import torch

from fuzz.engine.execute import run_side
from fuzz.targets import lookup
from strategies.paddleocr_fields import oracles as O
from strategies.paddleocr_fields.inputs import PROCESSOR, field_configs

NAME = "keep-on-cpu-paddleocr-grid-thw"
GRIDS = [[1, 2, 4], [1, 4, 2], [1, 2, 4]]  # h != w; two images of one shape (stacked by `batched`)


def spec(grids=GRIDS, **extra) -> dict:
    return {"device": "cpu", "dtype": "float32", "seed": 3, "field_dtype": "int64",
            "field_on": {"legacy": "engine", "optimized": "engine"}, "grids": [list(g) for g in grids],
            "patch": 1, "vision_hidden": 2, "text_hidden": 3, **extra}


def output(side: str, **extra):
    (target,) = lookup([NAME])
    result = run_side(target, side, spec(**extra))
    assert result.ok, result.raised
    return result.value


@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_invariants_hold_on_both_sides(side):
    out = output(side)
    assert O.paddleocr_fields_one_embedding_per_image(spec(), out) is None
    assert O.paddleocr_fields_tower_segments(spec(), out) is None


def test_the_sides_get_their_own_field_configs():
    import legacy.paddleocr_fields as L
    import optimized.paddleocr_fields as P
    grid = torch.tensor(GRIDS)
    old = field_configs(L, PROCESSOR, {"image_grid_thw": grid})
    new = field_configs(P, PROCESSOR, {"image_grid_thw": grid})
    assert (old["pixel_values"].kind, old["image_grid_thw"].keep_on_cpu) == ("batched", False)
    assert (new["pixel_values"].kind, new["image_grid_thw"].keep_on_cpu) == ("flat", True)
    assert new["pixel_values"].sizes.tolist() == [8, 8, 8]


def test_one_embedding_per_image_reports_a_missing_image():
    out = output("optimized")
    broken = dict(out, embeddings=tuple(out["embeddings"][:-1]))
    assert "embeddings for 3 images" in O.paddleocr_fields_one_embedding_per_image(spec(), broken)


def test_one_embedding_per_image_reports_a_wrong_token_count():
    out = output("optimized")
    first = out["embeddings"][0]
    broken = dict(out, embeddings=(first[:-1], *out["embeddings"][1:]))
    assert "placeholders need" in O.paddleocr_fields_one_embedding_per_image(spec(), broken)


def test_one_embedding_per_image_reports_nan():
    out = output("optimized")
    first = out["embeddings"][0].clone()
    first[0, 0] = float("nan")
    broken = dict(out, embeddings=(first, *out["embeddings"][1:]))
    assert "non-finite" in O.paddleocr_fields_one_embedding_per_image(spec(), broken)


def test_tower_segments_reports_a_merged_segment():
    out = output("optimized")
    tower = dict(out["tower"], seq_lens=torch.tensor([16, 8]))
    assert "segments" in O.paddleocr_fields_tower_segments(spec(), dict(out, tower=tower))


def test_tower_segments_reports_wrong_position_ids():
    out = output("optimized")
    ids = out["tower"]["position_ids"].clone()
    ids[3] = 0
    tower = dict(out["tower"], position_ids=ids)
    assert "position ids" in O.paddleocr_fields_tower_segments(spec(), dict(out, tower=tower))


def test_tower_segments_reports_swapped_grids():
    out = output("optimized")
    tower = copy.copy(out["tower"])
    tower["grids"] = [tuple(GRIDS[1]), tuple(GRIDS[0]), tuple(GRIDS[2])]
    assert "tower saw grids" in O.paddleocr_fields_tower_segments(spec(), dict(out, tower=tower))
