"""The 0.28.0 -> 0.34.0 keep-on-cpu targets (keep-on-cpu-paddleocr-grid-thw, keep-on-cpu-ernie-grid-thw): each
side's engine slices, batches and places the fields by that side's own ``_get_mm_fields_config``
(strategies/field_batches.py), and on CUDA the optimized side makes the syncs its record states."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

import legacy.ernie_fields as legacy_ernie
import legacy.paddleocr_fields as legacy_paddle
import optimized.ernie_fields as optimized_ernie
import optimized.paddleocr_fields as optimized_paddle
from fuzz.engine.execute import run_side
from fuzz.targets import lookup
from strategies.ernie_fields.inputs import ErnieGridThwInputs
from strategies.field_batches import CALLER_PLACEMENT, engine_kwargs, field_configs
from tests.conftest import requires_cuda

NAMES = ("keep-on-cpu-paddleocr-grid-thw", "keep-on-cpu-ernie-grid-thw")
PADDLE = "PaddleOCRVLMultiModalProcessor"
GRIDS = [[1, 2, 4], [1, 2, 4], [1, 4, 4]]


def _paddle_kwargs(module, side: str, **extra) -> dict:
    spec = {"device": "meta", "field_on": dict(CALLER_PLACEMENT), **extra}
    grid = torch.tensor(GRIDS)
    pixels = torch.arange(32.0).reshape(32, 1)
    configs = field_configs(module, PADDLE, {"image_grid_thw": grid})
    return engine_kwargs(spec, side, configs, {"pixel_values": pixels, "image_grid_thw": grid},
                         {"pixel_values": [8, 8, 16], "image_grid_thw": None})


def test_paddle_0_28_batches_per_image_pixels_and_puts_the_grid_on_the_device():
    kwargs = _paddle_kwargs(legacy_paddle, "legacy")
    pixels = kwargs["pixel_values"]
    assert isinstance(pixels, list) and [p.shape[0] for p in pixels] == [8, 8, 16]  # shapes differ: a list
    assert kwargs["image_grid_thw"].device.type == "meta"


def test_paddle_0_34_batches_flat_pixels_and_keeps_the_grid_on_the_host():
    kwargs = _paddle_kwargs(optimized_paddle, "optimized")
    assert kwargs["pixel_values"].shape == (32, 1) and kwargs["pixel_values"].device.type == "meta"
    assert kwargs["image_grid_thw"].device.type == "cpu"


def test_batched_items_of_one_shape_are_stacked():
    spec = {"device": "cpu", "field_on": dict(CALLER_PLACEMENT)}
    grid = torch.tensor([[1, 2, 2], [1, 2, 2]])
    configs = field_configs(legacy_paddle, PADDLE, {"image_grid_thw": grid})
    kwargs = engine_kwargs(spec, "legacy", configs, {"pixel_values": torch.ones(8, 1), "image_grid_thw": grid},
                           {"pixel_values": [4, 4], "image_grid_thw": None})
    assert kwargs["pixel_values"].shape == (2, 4, 1)


def test_the_wide_legacy_grid_on_the_host_and_only_the_grid():
    """The wide form moves the grid, never the pixels: 0.28.0's tower given host pixels beside device
    weights raised on CUDA (H200, lab/gpu-runs/2026-12-06g-h200.md), a form no engine passes."""
    kwargs = _paddle_kwargs(legacy_paddle, "legacy", field_on={"legacy": "cpu", "optimized": "engine"})
    assert kwargs["image_grid_thw"].device.type == "cpu"
    assert all(t.device.type == "meta" for t in kwargs["pixel_values"]), "the pixels stay on the device"


def test_flat_sizes_that_miscount_the_items_are_refused_like_the_engine():
    spec = {"device": "cpu", "field_on": dict(CALLER_PLACEMENT)}
    grid = torch.tensor(GRIDS)
    configs = field_configs(optimized_paddle, PADDLE, {"image_grid_thw": grid[:2]})  # sizes for 2 of 3 images
    with pytest.raises(ValueError, match="Cannot merge different batch sizes"):
        engine_kwargs(spec, "optimized", configs, {"pixel_values": torch.ones(32, 1), "image_grid_thw": grid},
                      {"pixel_values": [8, 8, 16], "image_grid_thw": None})


def _ernie_spec(**extra) -> dict:
    return {"device": "meta", "dtype": "float32", "seed": 1, "field_dtype": "int64",
            "field_on": dict(CALLER_PLACEMENT), "image_grids": [[1, 2, 2]], "video_grids": [[2, 2, 2]],
            "images_first": True, "patch": 1, **extra}


def test_ernie_grids_follow_each_sides_config(monkeypatch):
    old = ErnieGridThwInputs._kwargs(_ernie_spec(), legacy_ernie, "legacy")
    new = ErnieGridThwInputs._kwargs(_ernie_spec(), optimized_ernie, "optimized")
    for key in ("image_grid_thw", "video_grid_thw"):
        assert old[key].device.type == "meta" and new[key].device.type == "cpu"
    assert old["pixel_values"].device.type == new["pixel_values"].device.type == "meta"
    # An optimized config that stops keeping the grid puts it on the device: the placement is read, not assumed.
    cls = optimized_ernie.Ernie4_5VLMultiModalProcessor
    original = cls._get_mm_fields_config
    unkept = optimized_ernie.MultiModalFieldConfig.batched("image")
    monkeypatch.setattr(cls, "_get_mm_fields_config",
                        lambda self, hf, kw: {**original(self, hf, kw), "image_grid_thw": unkept})
    moved = ErnieGridThwInputs._kwargs(_ernie_spec(), optimized_ernie, "optimized")
    assert moved["image_grid_thw"].device.type == "meta"


@requires_cuda
@pytest.mark.parametrize("name", NAMES)
def test_optimized_sync_count_is_the_records(name):
    """0.34.0 with the grids on the host: no sync in the call (the records' derivations)."""
    (target,) = lookup([name])

    @given(target.input_model().specs(("cuda",), "caller"))
    @settings(max_examples=20, deadline=None, database=None)
    def check(spec):
        result = run_side(target, "optimized", spec)
        assert result.ok, result.raised
        assert result.syncs <= target.expected_optimized_syncs, (spec, result.syncs, result.hidden_syncs)

    check()
