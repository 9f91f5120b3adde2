"""The qwen25-vl-image-evs / qwen25-vl-video-evs invariants and reference, each broken by a hand-made output
(strategies/qwen2_5_vl_evs/oracles.py), and kept by the real copies' output."""

from __future__ import annotations

import torch

import optimized.qwen2_5_vl_evs as copy
from strategies.qwen2_5_vl_evs.inputs import Qwen25ImageEvsInputs, Qwen25VideoEvsInputs
from strategies.qwen2_5_vl_evs.oracles import (
    IMAGE_EVS_REFERENCE,
    evs_items_have_their_shape,
    evs_rows_are_input_rows_with_their_positions,
    media_positions,
)

_OWNER = copy.Qwen2_5_VLForConditionalGeneration


class _Impl:
    """What materialize reads of an Impl: the method and its class."""

    def __init__(self, name: str) -> None:
        self.owner = _OWNER
        self.function = getattr(_OWNER, name)
        self.module = copy


def _spec(kind: str, **overrides) -> dict:
    spec = {"device": "cpu", "kind": kind, "grids": [[3, 4, 6], [1, 2, 2]], "hidden": 3, "dtype": "float32",
            "seed": 7, "merge": 2, "tokens_per_second": 2, "second_per_grid": [2.0, 0.5], "q": 0.5,
            "grid_on_device": False, "seconds_on_device": False, "transposed": False}
    if kind == "image":
        spec["grids"] = [[1, 4, 6], [1, 2, 2]]
    spec.update(overrides)
    return spec


def _run(spec: dict) -> tuple[torch.Tensor, ...]:
    model = Qwen25ImageEvsInputs() if spec["kind"] == "image" else Qwen25VideoEvsInputs()
    name = f"_postprocess_{spec['kind']}_embeds_evs"
    return model.materialize(spec, _Impl(name), "optimized")()


def test_media_positions_are_the_raster_of_the_merged_grid():
    assert media_positions([2, 2, 4], 2, 3.0).tolist() == [[0, 0, 0, 2], [0, 0, 1, 2], [3, 0, 0, 2], [3, 0, 1, 2]]


def test_the_real_copies_keep_every_invariant():
    for spec in (_spec("image"), _spec("video"), _spec("video", q=0.99), _spec("video", transposed=True)):
        output = _run(spec)
        assert evs_items_have_their_shape(spec, output) is None
        assert evs_rows_are_input_rows_with_their_positions(spec, output) is None


def test_shape_reports_a_video_with_too_few_rows():
    spec = _spec("video")
    output = _run(spec)
    broken = (output[0][:-1], output[1])
    assert "shape" in evs_items_have_their_shape(spec, broken)


def test_shape_reports_another_dtype():
    spec = _spec("image")
    output = _run(spec)
    assert "dtype" in evs_items_have_their_shape(spec, (output[0].double(), output[1]))


def test_shape_reports_a_missing_item():
    spec = _spec("image")
    assert "items" in evs_items_have_their_shape(spec, _run(spec)[:1])


def test_rows_report_rows_out_of_order():
    spec = _spec("video")
    output = _run(spec)
    broken = (output[0].flip(0), output[1])
    assert evs_rows_are_input_rows_with_their_positions(spec, broken) is not None


def test_rows_report_a_wrong_position():
    spec = _spec("image")
    output = _run(spec)
    broken = output[0].clone()
    broken[2, -2] += 1  # w_index
    assert "no later input row" in evs_rows_are_input_rows_with_their_positions(spec, (broken, output[1]))


def test_rows_report_a_dropped_first_frame_token():
    spec = _spec("video", q=0.9)
    output = _run(spec)
    broken = torch.cat([output[0][1:], output[0][-1:]])  # token 0 of frame 0 gone, same row count
    assert evs_rows_are_input_rows_with_their_positions(spec, (broken, output[1])) is not None


def test_rows_report_an_image_with_a_row_dropped():
    spec = _spec("image")
    output = _run(spec)
    assert evs_rows_are_input_rows_with_their_positions(spec, (output[0][:-1], output[1])) is not None


def test_the_image_reference_is_the_copy_output_and_not_a_shifted_one():
    spec = _spec("image")
    output = _run(spec)
    expected = IMAGE_EVS_REFERENCE.expected(spec)
    observed = IMAGE_EVS_REFERENCE.observed(output)
    assert all(torch.equal(e, o) for e, o in zip(expected, observed))
    shifted = IMAGE_EVS_REFERENCE.observed((output[0] + 1, output[1]))
    assert not torch.equal(expected[0], shifted[0])
