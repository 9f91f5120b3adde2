"""The minicpmv-resampler-forward target's invariants and reference, each broken by a hand-made output
(strategies/minicpmv/oracles.py)."""

import torch

from strategies.minicpmv.oracles import (
    PER_SLICE_REFERENCE,
    per_slice_expected,
    resampler_output_has_one_row_per_query,
    resampler_output_is_finite,
)

SPEC = {"device": "cpu", "images": [[2, 3], [1, 2]], "embed_dim": 8, "num_heads": 2, "kv_dim": 4,
        "num_queries": 3, "max_size": [70, 70], "dtype": "float32", "tgt_on": "cpu", "tgt_dtype": "int64",
        "seed": 7}


def _good() -> torch.Tensor:
    return per_slice_expected(SPEC)


def test_a_well_formed_output_keeps_both_invariants():
    assert resampler_output_has_one_row_per_query(SPEC, _good()) is None
    assert resampler_output_is_finite(SPEC, _good()) is None


def test_one_row_per_query_reports_a_missing_query_a_wrong_dtype_and_a_non_tensor():
    assert resampler_output_has_one_row_per_query(SPEC, _good()[:, :2]) is not None
    assert resampler_output_has_one_row_per_query(SPEC, _good().half()) is not None
    assert resampler_output_has_one_row_per_query(SPEC, [1.0]) is not None


def test_finite_reports_a_nan():
    broken = _good().clone()
    broken[1, 0, 0] = float("nan")
    assert resampler_output_is_finite(SPEC, broken) is not None


def test_the_reference_sees_a_slice_given_another_slices_positions():
    """The reference is a per-slice computation: swapping a slice's h and w changes its output."""
    swapped = per_slice_expected(dict(SPEC, images=[[3, 2], [1, 2]]))
    expected = PER_SLICE_REFERENCE.expected(SPEC)
    assert not torch.allclose(expected[0], PER_SLICE_REFERENCE.observed(swapped)[0])
    torch.testing.assert_close(expected[1], swapped[1])


def test_the_reference_says_nothing_about_half_precision():
    assert per_slice_expected(dict(SPEC, dtype="bfloat16")) is None
