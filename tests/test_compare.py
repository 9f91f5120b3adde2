"""Comparison and verdict rules (docs/verdicts.md), as a table of cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fuzz.compare import Verdict, compare_values, judge
from fuzz.outcome import Raised, SideResult
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
    "equal": (_ok(T([1])), _ok(T([1])), None, Verdict.AGREE),
    "values-differ": (_ok(T([1])), _ok(T([2])), None, Verdict.DIVERGENCE),
    "same-exception-type": (_raised("ValueError", "a"), _raised("ValueError", "b"), None, Verdict.AGREE),
    "different-exception-types": (_raised("ZeroDivisionError"), _raised("IndexError"), None, Verdict.ERROR_MISMATCH),
    "only-optimized-raises": (_ok(T([1])), _raised("TypeError"), None, Verdict.DIVERGENCE),
    "only-legacy-raises": (_raised("TypeError"), _ok(T([1])), None, Verdict.DIVERGENCE),
    "more-syncs-than-declared": (_ok(T([1]), 0), _ok(T([1]), 2), 1, Verdict.SYNC_REGRESSION),
    "syncs-within-declared": (_ok(T([1]), 3), _ok(T([1]), 1), 1, Verdict.AGREE),
    "divergence-beats-syncs": (_ok(T([1]), 0), _ok(T([2]), 5), 0, Verdict.DIVERGENCE),
}


def test_wide_contract_judges_syncs_against_legacy():
    legacy, optimized = _ok(T([1]), 4), _ok(T([1]), 2)
    assert judge(legacy, optimized, CLOSE, 0, "caller")[0] is Verdict.SYNC_REGRESSION
    assert judge(legacy, optimized, CLOSE, 0, "wide")[0] is Verdict.AGREE
    assert judge(legacy, _ok(T([1]), 5), CLOSE, 0, "wide")[0] is Verdict.SYNC_REGRESSION


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdict_rules(name):
    legacy, optimized, expected_syncs, verdict = VERDICTS[name]
    assert judge(legacy, optimized, CLOSE, expected_syncs)[0] is verdict


def test_severity_orders_the_verdicts():
    ordered = [v for v in sorted(Verdict, key=lambda v: v.severity)
               if v not in (Verdict.CRASH, Verdict.HANG, Verdict.UPSTREAM_DIVERGENCE)]
    assert ordered == [Verdict.AGREE, Verdict.SYNC_REGRESSION, Verdict.ERROR_MISMATCH, Verdict.DIVERGENCE]
    assert Verdict.CRASH.severity == Verdict.HANG.severity > Verdict.DIVERGENCE.severity
    assert Verdict.SYNC_REGRESSION.severity < Verdict.UPSTREAM_DIVERGENCE.severity < Verdict.DIVERGENCE.severity


def test_raised_keeps_first_line_and_qualified_type():
    class Custom(Exception):
        pass

    raised = Raised.of(Custom("first\nsecond"))
    assert raised.message == "first" and raised.type_name.endswith("Custom") and "." in raised.type_name
    assert Raised.of(ValueError("x")).type_name == "ValueError"
