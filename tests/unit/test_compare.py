"""Comparison and verdict rules (docs/verdicts.md), as a table of cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fuzz.oracles.compare import compare_values, differential
from fuzz.oracles.outcome import Raised, SideResult
from fuzz.records.verdicts import Verdict
from fuzz.targets import Comparison

CLOSE, EXACT = Comparison("close"), Comparison("exact")
T = torch.tensor

SAME = {
    "int-tensors": (T([1, 2]), T([1, 2]), CLOSE),
    "float-within-tolerance": (T([1.0]), T([1.0 + 1e-7]), CLOSE),
    "nan-equals-nan": (T([float("nan")]), T([float("nan")]), EXACT),
    "nested": ([T([1]), {"a": (T([2.0]), 3)}], [T([1]), {"a": (T([2.0]), 3)}], EXACT),
    "numpy-vs-numpy": (np.arange(3), np.arange(3), EXACT),
    "empty": (T([]), T([]), EXACT),
    "scalars": (3, 3, EXACT),
}

DIFFERENT = {
    "int-off-by-one": (T([1, 2]), T([1, 3]), CLOSE, "", "values"),
    "float-beyond-exact": (T([1.0]), T([1.0 + 1e-7]), EXACT, "", "values"),
    "float-beyond-tolerance": (T([1.0]), T([1.1]), CLOSE, "", "values"),
    "shape": (T([1, 2]), T([1]), CLOSE, "", "shape"),
    "dtype": (T([1], dtype=torch.int32), T([1], dtype=torch.int64), CLOSE, "", "dtype"),
    "tensor-vs-list": (T([1]), [1], CLOSE, "", "type"),
    "length": ([T([1])], [T([1]), T([2])], CLOSE, "", "length"),
    "leaf-path": ([T([1]), {"cu": T([0, 3])}], [T([1]), {"cu": T([0, 4])}], CLOSE, "[1]['cu']", "values"),
    "keys": ({"a": 1}, {"b": 1}, CLOSE, "", "keys"),
    "scalar": (1, 2, CLOSE, "", "values"),
    "int-vs-float": (1, 1.0, CLOSE, "", "type"),
}


@pytest.mark.parametrize("name", sorted(SAME))
def test_equal_outputs_have_no_mismatch(name):
    legacy, optimized, policy = SAME[name]
    assert list(compare_values(legacy, optimized, policy)) == []


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_different_outputs_name_the_leaf(name):
    legacy, optimized, policy, path, what = DIFFERENT[name]
    mismatches = list(compare_values(legacy, optimized, policy))
    assert mismatches and mismatches[0].path == path and mismatches[0].what == what


def test_exact_mismatch_reports_first_index_and_both_values():
    (mismatch,) = compare_values(T([[1, 2], [3, 4]]), T([[1, 2], [3, 5]]), EXACT)
    assert "index (1, 1)" in mismatch.detail and "legacy 4" in mismatch.detail and "optimized 5" in mismatch.detail


def test_close_mismatch_uses_assert_close_wording():
    (mismatch,) = compare_values(T([1.0, 2.0]), T([1.0, 3.0]), CLOSE)
    assert "Greatest absolute difference" in mismatch.detail


def _ok(value, syncs=None):
    return SideResult(value=value, syncs=syncs)


def _raised(kind, message="boom"):
    return SideResult(raised=Raised(kind, message))


VERDICTS = {
    "equal": (_ok(T([1])), _ok(T([1])), Verdict.AGREE),
    "values-differ": (_ok(T([1])), _ok(T([2])), Verdict.DIVERGENCE),
    "same-exception-type": (_raised("ValueError", "a"), _raised("ValueError", "b"), Verdict.AGREE),
    "different-exception-types": (_raised("ZeroDivisionError"), _raised("IndexError"), Verdict.ERROR_MISMATCH),
    "only-optimized-raises": (_ok(T([1])), _raised("TypeError"), Verdict.DIVERGENCE),
    "only-legacy-raises": (_raised("TypeError"), _ok(T([1])), Verdict.DIVERGENCE),
}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdict_rules(name):
    legacy, optimized, verdict = VERDICTS[name]
    assert differential(legacy, optimized, CLOSE)[0] is verdict


def test_severity_orders_the_verdicts():
    ordered = [v for v in sorted(Verdict, key=lambda v: v.severity)
               if v not in (Verdict.CRASH, Verdict.HANG, Verdict.UPSTREAM_DIVERGENCE, Verdict.INVARIANT_VIOLATION,
                            Verdict.REFERENCE_DIVERGENCE, Verdict.RACE, Verdict.COPY_POLICY)]
    assert ordered == [Verdict.AGREE, Verdict.SYNC_REGRESSION, Verdict.ERROR_MISMATCH, Verdict.DIVERGENCE]
    # A wrong answer both copies share is as serious as one they disagree on.
    assert Verdict.INVARIANT_VIOLATION.severity == Verdict.REFERENCE_DIVERGENCE.severity == Verdict.DIVERGENCE.severity
    # A race corrupts values as a divergence does; a rejected copy costs what a sync does (a stalled host).
    assert Verdict.RACE.severity == Verdict.DIVERGENCE.severity
    assert Verdict.COPY_POLICY.severity == Verdict.SYNC_REGRESSION.severity
    assert Verdict.CRASH.severity == Verdict.HANG.severity > Verdict.DIVERGENCE.severity
    assert Verdict.SYNC_REGRESSION.severity < Verdict.UPSTREAM_DIVERGENCE.severity < Verdict.DIVERGENCE.severity


def test_raised_keeps_first_line_and_qualified_type():
    class Custom(Exception):
        pass

    raised = Raised.of(Custom("first\nsecond"))
    assert raised.message == "first" and raised.type_name.endswith("Custom") and "." in raised.type_name
    assert Raised.of(ValueError("x")).type_name == "ValueError"


# Layout (docs/verdicts.md#layout): strides and contiguity, only where the target declares it.
LAYOUT = Comparison("exact", layout=True)
ROW_MAJOR = torch.arange(6).reshape(2, 3)
COLUMN_MAJOR = ROW_MAJOR.t().contiguous().t()  # same values and shape, strides (1, 2)


def test_layout_mismatch_is_reported_when_declared():
    (mismatch,) = compare_values(ROW_MAJOR, COLUMN_MAJOR, LAYOUT)
    assert (mismatch.path, mismatch.what) == ("", "layout")
    assert "(3, 1)" in mismatch.detail and "(1, 2)" in mismatch.detail and "contiguous True" in mismatch.detail


def test_layout_is_ignored_when_not_declared():
    assert list(compare_values(ROW_MAJOR, COLUMN_MAJOR, EXACT)) == []
    assert Comparison().layout is False


def test_layout_names_the_leaf_and_leaves_non_tensor_leaves_alone():
    legacy = {"table": [ROW_MAJOR, 3, "x", None], "n": 2.5}
    optimized = {"table": [COLUMN_MAJOR, 3, "x", None], "n": 2.5}
    assert [(m.path, m.what) for m in compare_values(legacy, optimized, LAYOUT)] == [("['table'][0]", "layout")]
    assert list(compare_values([1, (2.0, "a")], [1, (2.0, "a")], LAYOUT)) == []


SAME_LAYOUT = {
    "size-1-dims": (T([[1, 2, 3]]), T([[1], [2], [3]]).t()),  # (1, 3): the stride of the size-1 dim is free
    "empty": (torch.empty(0, 3), torch.empty(3, 0).t()),
    "0-d": (T(5), T([5])[0]),
    "storage-offset": (T([1, 2]), T([0, 1, 2])[1:]),  # offsets are not layout: kernels get the data pointer
    "numpy": (np.arange(4).reshape(2, 2), np.arange(4).reshape(2, 2)),
}


@pytest.mark.parametrize("name", sorted(SAME_LAYOUT))
def test_layout_ignores_what_no_kernel_can_see(name):
    legacy, optimized = SAME_LAYOUT[name]
    assert list(compare_values(legacy, optimized, LAYOUT)) == []


def test_layout_sees_expanded_and_numpy_strides():
    expanded = T([1, 2, 3]).expand(2, 3)
    assert [m.what for m in compare_values(ROW_MAJOR.new_tensor([[1, 2, 3]] * 2), expanded, LAYOUT)] == ["layout"]
    fortran = np.asfortranarray(np.arange(6).reshape(2, 3))
    assert [m.what for m in compare_values(np.arange(6).reshape(2, 3), fortran, LAYOUT)] == ["layout"]


def test_values_come_before_layout_and_shape_stops_both():
    mismatches = list(compare_values(ROW_MAJOR, COLUMN_MAJOR + 1, LAYOUT))
    assert [m.what for m in mismatches] == ["values", "layout"]
    assert [m.what for m in compare_values(ROW_MAJOR, COLUMN_MAJOR.t(), LAYOUT)] == ["shape"]


def test_a_layout_mismatch_is_a_divergence():
    verdict, mismatches = differential(_ok(ROW_MAJOR), _ok(COLUMN_MAJOR), LAYOUT)
    assert verdict is Verdict.DIVERGENCE and mismatches[0].what == "layout"
    assert differential(_ok(ROW_MAJOR), _ok(COLUMN_MAJOR), EXACT)[0] is Verdict.AGREE


def test_layout_must_be_a_bool():
    from fuzz.errors import HarnessError

    with pytest.raises(HarnessError):
        Comparison("exact", layout="yes")
    assert LAYOUT.as_json() == {"floats": "exact", "integers": "exact", "layout": True}


# -- outputs no oracle can tell apart (fuzz.engine.execute asks the oracles once for them) --

@pytest.mark.parametrize("legacy, optimized, same", [
    ([T([1.0, float("nan")]), {"a": 3}], [T([1.0, float("nan")]), {"a": 3}], True),
    (T([1.0]), T([1.0 + 1e-7]), False),  # close enough for assert_close, not the same bits
    (ROW_MAJOR, COLUMN_MAJOR, False),  # the same values in another layout
    (T([1], dtype=torch.int32), T([1]), False),
])
def test_same_exactly_means_bitwise_values_and_layout(legacy, optimized, same):
    from fuzz.oracles.compare import same_exactly

    assert same_exactly(legacy, optimized) is same


def test_values_known_equal_are_not_compared_again(monkeypatch):
    import fuzz.oracles.compare as compare

    monkeypatch.setattr(compare, "compare_values", lambda *args: pytest.fail("compared again"))
    assert differential(_ok(T([1]), 2), _ok(T([1]), 3), CLOSE, known_equal=True) == (Verdict.AGREE, [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("scale", [0.0, 1e-7, 1e-5, 1e-3, 1e-2, 1e-1])
def test_the_fast_closeness_check_passes_exactly_what_assert_close_passes(dtype, scale):
    from fuzz.oracles.compare import _close_fast

    generator = torch.Generator().manual_seed(int(scale * 1e7) + 1)
    a = torch.randn(64, generator=generator).to(dtype)
    b = (a.double() * (1 + scale * torch.randn(64, generator=generator).double())).to(dtype)
    a[3], b[3] = float("nan"), float("nan")  # NaN against NaN passes both
    try:
        torch.testing.assert_close(b, a, equal_nan=True)
        passes = True
    except AssertionError:
        passes = False
    assert _close_fast(a, b) is passes


@pytest.mark.parametrize("a, b", [
    (T([1, 2]), T([1, 3])),  # values, bitwise
    (T([1.0, 2.0]), T([1.0, 9.0])),  # values, assert_close's text
    (T([1]), T([1, 2])),  # shape
    ([1, 2], (1, 2)),  # type
    ([1], [1, 2]),  # length
    ({"a": 1}, {"b": 1}),  # keys
    (1, 2),  # plain values
    (T([[1, 2], [3, 4]]), T([[1, 2], [3, 4]]).t().contiguous().t()),  # layout
])
def test_labels_are_written_once_as_the_old_replace_wrote_them(a, b):
    """The upstream check's and the reference oracle's labels come in as a parameter: the text is the one
    the former ``str.replace("legacy", ...).replace("optimized", ...)`` made of the default-labelled one."""
    for labels in (("copy", "vllm"), ("reference", "copy")):
        default = [m.detail for m in compare_values(a, b, LAYOUT)]
        labelled = [m.detail for m in compare_values(a, b, LAYOUT, labels=labels)]
        assert default and labelled == [d.replace("legacy", labels[0]).replace("optimized", labels[1])
                                        for d in default]


def test_exception_verdicts_name_the_labels():
    raised = SideResult(raised=Raised("ValueError", "bad"))
    other = SideResult(raised=Raised("TypeError", "worse"))
    assert differential(raised, other, CLOSE, labels=("copy", "vllm"))[1][0].detail == \
        "copy raised ValueError, vllm raised TypeError"
    assert differential(_ok(T([1])), raised, CLOSE, labels=("copy", "vllm"))[1][0].detail == \
        "only vllm raised ValueError: bad; copy returned a value"


def test_a_declared_tolerance_replaces_the_default_for_its_dtype_only():
    """Comparison.tolerances: the record's (rtol, atol) for float32; other dtypes keep assert_close's."""
    from fuzz.errors import HarnessError

    loose = Comparison(floats="close", tolerances=(("float32", 1e-4, 1e-4),))
    a32, b32 = torch.tensor([9.26]), torch.tensor([9.26 + 2.67e-5])  # the H200's paddleocr pair
    assert list(compare_values(a32, b32, Comparison(floats="close")))  # past the default (2.2e-5 allowed)
    assert not list(compare_values(a32, b32, loose))
    assert list(compare_values(a32, torch.tensor([9.27]), loose))  # 1e-2 apart: still a mismatch
    a16, b16 = a32.half(), (a32 + 0.02).half()
    assert list(compare_values(a16, b16, loose)) == list(compare_values(a16, b16, Comparison(floats="close")))
    assert loose.as_json()["tolerances"] == {"float32": {"rtol": 1e-4, "atol": 1e-4}}
    for bad in ((("float32", 1e-4),), (("int32", 1e-4, 1e-4),), (("float32", -1.0, 0.0),)):
        with pytest.raises(HarnessError, match="tolerances entry"):
            Comparison(floats="close", tolerances=bad)
    with pytest.raises(HarnessError, match="tolerances entry"):
        Comparison(floats="exact", tolerances=(("float32", 1e-4, 1e-4),))


def test_the_paddleocr_records_half_tolerances_hold_the_measured_pair_and_not_a_real_bug():
    """keep-on-cpu-paddleocr-grid-thw's float16 tolerance: the H100's --stress seed-3 pair (2 ulps at -0.183,
    lab/gpu-runs/2026-12-06h-h100.md) fails the default and passes the record's; a wrong segment, O(1e-2) and
    more apart, fails both; the same holds for bfloat16 at its own scale."""
    from fuzz.targets import lookup

    record = lookup(["keep-on-cpu-paddleocr-grid-thw"])[0].comparison
    a, b = torch.tensor([-0.183], dtype=torch.float16), torch.tensor([-0.183 + 2.44e-4], dtype=torch.float16)
    assert list(compare_values(a, b, Comparison(floats="close")))
    assert not list(compare_values(a, b, record))
    assert list(compare_values(a, torch.tensor([-0.173], dtype=torch.float16), record))
    assert list(compare_values(a.bfloat16(), torch.tensor([-0.23], dtype=torch.bfloat16), record))
