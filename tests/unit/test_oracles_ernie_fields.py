"""keep-on-cpu-ernie-grid-thw: each invariant holds on both sides' real outputs and reports a hand-broken one
(strategies/ernie_fields/oracles.py); each side's engine places the grids by its own field config."""

from __future__ import annotations

import pytest
import torch

from fuzz.engine.execute import run_side
from fuzz.targets import lookup
from strategies.ernie_fields import oracles as O
from strategies.ernie_fields.inputs import PROCESSOR, ErnieGridThwInputs
from strategies.field_batches import field_configs

NAME = "keep-on-cpu-ernie-grid-thw"


def spec(**extra) -> dict:
    return {"device": "cpu", "dtype": "float32", "seed": 5, "field_dtype": "int64",
            "field_on": {"legacy": "engine", "optimized": "engine"},
            "image_grids": [[1, 2, 4], [1, 4, 2]], "video_grids": [[2, 2, 2]], "images_first": False,
            "patch": 1, "head_dim": 4, "blocks": 2, "text_hidden": 3, "attn_backend": "FLASH_ATTN", **extra}


def output(side: str, **extra):
    (target,) = lookup([NAME])
    result = run_side(target, side, spec(**extra))
    assert result.ok, result.raised
    return result.value


@pytest.mark.parametrize("backend", ["FLASH_ATTN", "TORCH_SDPA"])
@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_invariants_hold_on_both_sides(side, backend):
    out = output(side, attn_backend=backend)
    assert O.ernie_fields_one_embedding_per_item(spec(attn_backend=backend), out) is None
    assert O.ernie_fields_encoder_metadata(spec(attn_backend=backend), out) is None


def test_the_sides_keep_the_grids_where_their_configs_say():
    import legacy.ernie_fields as L
    import optimized.ernie_fields as P
    grids = {"image_grid_thw": torch.tensor([[1, 2, 2]]), "video_grid_thw": torch.tensor([[2, 2, 2]])}
    old, new = field_configs(L, PROCESSOR, grids), field_configs(P, PROCESSOR, grids)
    assert not old["image_grid_thw"].keep_on_cpu and not old["video_grid_thw"].keep_on_cpu
    assert new["image_grid_thw"].keep_on_cpu and new["video_grid_thw"].keep_on_cpu
    kwargs = ErnieGridThwInputs._kwargs(spec(), P, "optimized")
    assert list(kwargs) == ["pixel_values_videos", "video_grid_thw", "pixel_values", "image_grid_thw"]


def test_one_embedding_per_item_reports_a_missing_item():
    out = output("optimized")
    broken = dict(out, embeddings=tuple(out["embeddings"][1:]))
    assert "embeddings for 3 items" in O.ernie_fields_one_embedding_per_item(spec(), broken)


def test_one_embedding_per_item_reports_items_out_of_order():
    out = output("optimized")
    video, *images = out["embeddings"]
    broken = dict(out, embeddings=(*images, video))  # images first, but the kwargs put the video first
    assert "placeholders need" in O.ernie_fields_one_embedding_per_item(spec(), broken)


def test_one_embedding_per_item_reports_nan():
    out = output("optimized")
    first = out["embeddings"][0].clone()
    first[0, 0] = float("nan")
    broken = dict(out, embeddings=(first, *out["embeddings"][1:]))
    assert "non-finite" in O.ernie_fields_one_embedding_per_item(spec(), broken)


def _with_call(out, index: int, **changes):
    blocks = [list(calls) for calls in out["blocks"]]
    blocks[0][index] = dict(blocks[0][index], **changes)
    return dict(out, blocks=blocks)


def test_encoder_metadata_reports_merged_frames():
    out = output("optimized")
    broken = _with_call(out, 0, cu_seqlens=torch.tensor([0, 8], dtype=torch.int32))  # the video's 2 frames as one
    assert "cu_seqlens" in O.ernie_fields_encoder_metadata(spec(), broken)


def test_encoder_metadata_reports_a_short_rotary_table():
    out = output("optimized")
    rows = out["blocks"][0][1]["rotary_pos_emb"][:-1]
    assert "rotary rows" in O.ernie_fields_encoder_metadata(spec(), _with_call(out, 1, rotary_pos_emb=rows))


def test_encoder_metadata_reports_a_wrong_max_seqlen():
    out = output("optimized")
    assert "max_seqlen" in O.ernie_fields_encoder_metadata(spec(), _with_call(out, 1, max_seqlen=16))


def test_encoder_metadata_reports_a_missing_call():
    out = output("optimized")
    broken = dict(out, blocks=[calls[:1] for calls in out["blocks"]])
    assert "vision calls" in O.ernie_fields_encoder_metadata(spec(), broken)
