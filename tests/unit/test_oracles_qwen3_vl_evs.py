"""The qwen3vl-image-evs / qwen3vl-expanded-positions invariants and references, each broken by a hand-made
output (strategies/qwen3_vl_evs/oracles.py), and kept by the real copies' output."""

from __future__ import annotations

import torch

import optimized.qwen3_vl_evs as copy
from strategies.qwen3_vl_evs.inputs import Qwen3ExpandedPositionsInputs, Qwen3ImageEvsInputs
from strategies.qwen3_vl_evs.oracles import (
    EXPANDED_POSITIONS_REFERENCE,
    IMAGE_EVS_REFERENCE,
    expanded_positions_flag_their_tokens,
    expanded_positions_text_counts_up_and_frames_sit_after_it,
    image_evs_embeddings_come_first_and_unchanged,
    image_evs_items_have_their_shape,
    unpruned_positions,
)

_OWNER = copy.Qwen3VLForConditionalGeneration


class _Impl:
    """What materialize reads of an Impl: the method and its class."""

    def __init__(self, name: str) -> None:
        self.owner = _OWNER
        self.function = getattr(_OWNER, name)
        self.module = copy


def _image_spec(**overrides) -> dict:
    spec = {"device": "cpu", "grids": [[1, 4, 6], [1, 2, 2]], "merge": 2, "hidden": 3, "dtype": "bfloat16",
            "seed": 5, "pruning": True, "grid_on_device": False}
    spec.update(overrides)
    return spec


def _video_spec(**overrides) -> dict:
    spec = {"device": "cpu", "grid": [3, 4, 6], "merge": 2, "timestamps": [0.5, 1.5, 12.5],
            "mask_style": "evs", "mask_seed": 11, "mask_on_device": True, "timestamps_tensor": False}
    spec.update(overrides)
    return spec


def _image(spec: dict) -> tuple[torch.Tensor, ...]:
    return Qwen3ImageEvsInputs().materialize(spec, _Impl("_postprocess_image_embeds_evs"), "optimized")()


def _expanded(spec: dict) -> torch.Tensor:
    return Qwen3ExpandedPositionsInputs().materialize(spec, _Impl("_get_expanded_positions"), "optimized")()


def test_unpruned_positions_follow_qwen3_mrope():
    spec = _video_spec(grid=[1, 2, 4], timestamps=[0.5])
    ids, positions = unpruned_positions(spec)
    text = len("<0.5 seconds>") + 1  # the timestamp's ids and vision_start
    assert positions[:text].tolist() == [[i, i, i] for i in range(text)]
    assert positions[text:text + 2].tolist() == [[text, text, text], [text, text, text + 1]]
    assert positions[-1].tolist() == [text + 2] * 3  # vision_end after a 1x2 grid: max(1, 2) on


def test_the_real_copies_keep_every_oracle():
    for spec in (_image_spec(), _image_spec(pruning=False)):
        output = _image(spec)
        assert image_evs_items_have_their_shape(spec, output) is None
        assert image_evs_embeddings_come_first_and_unchanged(spec, output) is None
        expected, observed = IMAGE_EVS_REFERENCE.expected(spec), IMAGE_EVS_REFERENCE.observed(output)
        assert all(torch.equal(a, b) for a, b in zip(expected, observed))
    for style in ("evs", "vidcom2", "any", "none_kept", "all_kept"):
        spec = _video_spec(mask_style=style)
        output = _expanded(spec)
        assert expanded_positions_flag_their_tokens(spec, output) is None
        assert expanded_positions_text_counts_up_and_frames_sit_after_it(spec, output) is None
        assert torch.equal(EXPANDED_POSITIONS_REFERENCE.expected(spec), EXPANDED_POSITIONS_REFERENCE.observed(output))


def test_image_shape_reports_pruning_off_with_positions():
    spec = _image_spec(pruning=False)
    output = _image(_image_spec())
    assert "shape" in image_evs_items_have_their_shape(spec, output)


def test_image_embeddings_report_a_nonzero_dummy_channel():
    spec = _image_spec()
    output = _image(spec)
    broken = output[0].clone()
    broken[0, -1] = 1
    assert "dummy" in image_evs_embeddings_come_first_and_unchanged(spec, (broken, output[1]))


def test_image_embeddings_report_positions_first():
    spec = _image_spec()
    output = _image(spec)
    broken = torch.cat([output[0][:, -5:], output[0][:, :-5]], dim=1)
    assert "not the embeddings" in image_evs_embeddings_come_first_and_unchanged(spec, (broken, output[1]))


def test_flags_report_a_wrong_channel():
    spec = _video_spec()
    broken = _expanded(spec).clone()
    broken[:, 3] = broken[:, 4]
    assert "channel 3" in expanded_positions_flag_their_tokens(spec, broken)


def test_flags_report_a_wrong_dtype():
    spec = _video_spec()
    assert "int64" in expanded_positions_flag_their_tokens(spec, _expanded(spec).int())


def test_positions_report_a_text_token_out_of_order():
    spec = _video_spec()
    broken = _expanded(spec).clone()
    broken[1, :3] = broken[0, :3]
    assert "text position" in expanded_positions_text_counts_up_and_frames_sit_after_it(spec, broken)


def test_positions_report_a_video_token_off_its_grid():
    spec = _video_spec()
    broken = _expanded(spec).clone()
    row = int(broken[:, 4].nonzero()[0])
    broken[row, 0] += 1
    assert "not on the grid" in expanded_positions_text_counts_up_and_frames_sit_after_it(spec, broken)


def test_the_expanded_reference_tells_a_shifted_frame():
    spec = _video_spec()
    broken = _expanded(spec).clone()
    broken[broken[:, 4] == 1, :3] += 1
    assert not torch.equal(EXPANDED_POSITIONS_REFERENCE.expected(spec), broken)
