"""idefics2-position-ids oracles (strategies/idefics2_vision_model/oracles.py): each invariant holds on both real
copies' output and flags a hand-broken one, the tie tolerance accepts both releases at F20's ties and nothing
else, and the copies satisfy every oracle over the target's own caller and wide specs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.engine.execute import run_side
from fuzz.targets import lookup, resolve_object
from strategies.idefics2_vision_model import oracles as I2

NAME = "idefics2-position-ids"
SAMPLE = settings(max_examples=25, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def target():
    (found,) = lookup([NAME])
    return found


def spec(kind="grid", images=([3, 5], [7, 2]), n=32, **extra) -> dict:
    # h != w, two images of different sizes, padding in both directions (grid) or at the end (flat)
    return {"device": "cpu", "n": n, "kind": kind, "images": [list(i) for i in images],
            "pad": [1, 2] if kind == "grid" else [0, 0], "tgt_dtype": "int32", "tgt_on": "cpu",
            "mask_on": "device", **extra}


def output(s: dict, side: str = "optimized") -> torch.Tensor:
    result = run_side(target(), side, s)
    assert result.ok, result.raised
    return result.value


def invariants():
    return [resolve_object(path) for path in target().invariants]


@pytest.mark.parametrize("kind", ["grid", "flat", "flat_v25"])
@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_invariants_hold_on_the_copies(side, kind):
    s = spec(kind)
    out = output(s, side)
    for invariant in invariants():
        assert invariant(s, out) is None, invariant.__name__


def test_each_invariant_flags_a_broken_output():
    s = spec("grid")
    out = output(s)  # image 0: 3 x 5 patches of a [2, 8, 7] mask; (0, 0) is id 0, (0, 1) is bucket 6
    padding = out.clone()
    padding[0, 5] = 7  # row 0, column 5: past image 0's 5 columns
    moved = out.clone()
    moved[0, 1] = moved[0, 2]  # patch (0, 1) given patch (0, 2)'s bucket
    swapped = out.clone()
    swapped[1, :] = 0  # image 1's patches all at the origin
    breaks = [
        (I2.position_ids_shape_follows_the_mask, out[:, :-1]),
        (I2.position_ids_shape_follows_the_mask, out.int()),
        (I2.position_ids_shape_follows_the_mask, out.tolist()),
        (I2.position_ids_padding_is_zero, padding),
        (I2.position_ids_bucket_each_coordinate, moved),
        (I2.position_ids_bucket_each_coordinate, swapped),
    ]
    assert {fn.__name__ for fn, _ in breaks} == {fn.__name__ for fn in invariants()}
    for invariant, broken in breaks:
        assert invariant(s, broken), (invariant.__name__, "missed a broken output")


def test_ties_accept_either_bucket_and_nothing_else():
    # F20's minimal input: a 27 x 27 slice on the 27-grid; the releases differ at column 10 (10 vs 9)
    s = spec("flat", images=([27, 27],), n=27)
    legacy, optimized = output(s, "legacy"), output(s, "optimized")
    assert not torch.equal(legacy, optimized)
    assert I2.position_ids_bucket_each_coordinate(s, legacy) is None
    assert I2.position_ids_bucket_each_coordinate(s, optimized) is None
    two_off = legacy.clone()
    two_off[0, 10] = 8  # bucket 8 for column 10: neither the exact 10 nor the tie's 9
    assert I2.position_ids_bucket_each_coordinate(s, two_off)
    assert I2._allowed(10, 27, 27) == {9, 10} and I2._allowed(3, 7, 32) == {13}


@SAMPLE
@given(data=st.data())
def test_the_copies_satisfy_every_oracle_over_drawn_specs(data):
    record = target()
    inputs = resolve_object(record.inputs)()
    for contract in ("caller", "wide"):
        s = data.draw(inputs.specs(["cpu"], contract))
        for side in ("legacy", "optimized"):
            result = run_side(record, side, s)
            if not result.ok:
                continue  # a wide input (an empty image) one release refuses; agreement is fuzzed elsewhere
            for invariant in invariants():
                assert invariant(s, result.value) is None, (side, invariant.__name__, s)


# --- idefics2-embeddings-forward ------------------------------------------------------------------------

FORWARD = "idefics2-embeddings-forward"


def forward_target():
    (found,) = lookup([FORWARD])
    return found


def forward_spec(kind="grid", images=([3, 5], [7, 2]), n=32, grid_hw=(8, 7), **extra) -> dict:
    # two images of different sizes, h != w, padding rows and columns (grid) or a padded bucket (flat)
    return {"device": "cpu", "n": n, "kind": kind, "images": [list(i) for i in images], "pad": [0, 0],
            "tgt_dtype": "int32", "tgt_on": "cpu", "mask_on": "device", "patch": 2, "image_size": 2 * n + 1,
            "hidden": 3, "seed": 7, "weight_dtype": "float32", "pixel_dtype": "float32", "noise_padding": False,
            "ids_given": False, "grid_hw": list(grid_hw), "extra": [1, 0] if kind == "grid" else [0, 0], **extra}


def forward_output(s: dict, side: str = "optimized") -> torch.Tensor:
    result = run_side(forward_target(), side, s)
    assert result.ok, result.raised
    return result.value


def forward_invariants():
    return [resolve_object(path) for path in forward_target().invariants]


def forward_reference():
    return resolve_object(forward_target().reference)


@pytest.mark.parametrize("s", [
    forward_spec("grid"),
    forward_spec("grid", ids_given=True),
    forward_spec("flat", grid_hw=(1, 21)),
    forward_spec("flat", grid_hw=(3, 8), tgt_on="device", tgt_dtype="int64"),
    forward_spec("flat_v25", grid_hw=(5, 5)),
    forward_spec("grid", weight_dtype="bfloat16", pixel_dtype="bfloat16"),
    forward_spec("flat", grid_hw=(1, 21), weight_dtype="float16", pixel_dtype="float32", noise_padding=True),
], ids=["grid", "grid-ids-given", "flat-row", "flat-bucket", "flat-v25", "grid-bf16", "flat-fp16-noise"])
@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_forward_oracles_hold_on_the_copies(side, s):
    out = forward_output(s, side)
    for invariant in forward_invariants():
        assert invariant(s, out) is None, invariant.__name__
    reference = forward_reference()
    expected = reference.expected(s)
    if s["weight_dtype"] == "float32":
        torch.testing.assert_close(reference.observed(out)["values"], expected["values"])
    else:
        assert expected is None


def test_each_forward_invariant_flags_a_broken_output():
    s = forward_spec("grid")  # image 0: 3 x 5 patches of an [8, 7] grid; image 1: 7 x 2
    out = forward_output(s)
    table = resolve_object("strategies.idefics2_vision_model.inputs:forward_weights")(s)[2]
    padding = out.clone()
    padding[0, 5] += table[1] - table[0]  # row 0, column 5 (past image 0's 5 columns) given row 1
    moved = out.clone()
    moved[0, 1] += table[0] - table[6]  # patch (0, 1) (bucket (0, 6)) given the origin's row
    unprojected = out.clone()
    unprojected[1, 0] -= 0.5  # patch (0, 0) of image 1 off its projection
    breaks = [
        (I2.embeddings_shape_follows_the_pixels, out[:, :-1]),
        (I2.embeddings_shape_follows_the_pixels, out.double()),
        (I2.embeddings_shape_follows_the_pixels, out.tolist()),
        (I2.embeddings_padding_reads_row_zero, padding),
        (I2.embeddings_patches_read_their_bucket, moved),
        (I2.embeddings_patches_read_their_bucket, unprojected),
    ]
    assert {fn.__name__ for fn, _ in breaks} == {fn.__name__ for fn in forward_invariants()}
    for invariant, broken in breaks:
        assert invariant(s, broken), (invariant.__name__, "missed a broken output")
    reference = forward_reference()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(reference.observed(moved)["values"], reference.expected(s)["values"])


def test_forward_ties_accept_either_bucket():
    # F20 through the forward: a 27 x 27 MiniCPM-V slice on the 27-grid; the copies' ids differ at column 10,
    # so their embeddings differ there, and the tie-tolerant invariant accepts both (the input model never
    # draws such a size: they are untied)
    s = forward_spec("flat", images=([27, 27],), n=27, grid_hw=(27, 27))
    legacy, optimized = forward_output(s, "legacy"), forward_output(s, "optimized")
    assert not torch.allclose(legacy, optimized)
    for out in (legacy, optimized):
        assert I2.embeddings_patches_read_their_bucket(s, out) is None
        assert I2.embeddings_padding_reads_row_zero(s, out) is None


@SAMPLE
@given(data=st.data())
def test_the_copies_satisfy_every_forward_oracle_over_drawn_specs(data):
    record = forward_target()
    inputs = resolve_object(record.inputs)()
    reference = forward_reference()
    for contract in ("caller", "wide"):
        s = data.draw(inputs.specs(["cpu"], contract))
        for side in ("legacy", "optimized"):
            result = run_side(record, side, s)
            if not result.ok:
                continue  # a wide input one release refuses; agreement is fuzzed elsewhere
            for invariant in forward_invariants():
                assert invariant(s, result.value) is None, (side, invariant.__name__, s)
            expected = reference.expected(s)
            if expected is not None:
                torch.testing.assert_close(reference.observed(result.value)["values"], expected["values"])
