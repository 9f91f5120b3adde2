"""fuzz.records.verdicts: the two verdict enums, the severity order (stated once, shown in docs/verdicts.md), how one
example's findings and a target's devices decide its verdict, and the rendering of a failure's leaf path."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fuzz.oracles.compare import compare_values
from fuzz.records.verdicts import (
    EXAMPLE_VERDICTS,
    SEVERITY,
    TARGET_VERDICTS,
    Mismatch,
    TargetVerdict,
    Verdict,
    blank_indices,
    decide_example,
    device_verdict,
    overall_verdict,
    render_path,
    target_state,
    worst,
)
from fuzz.targets import Comparison

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdicts.md"


def test_every_example_verdict_has_exactly_one_severity() -> None:
    assert set(SEVERITY) == {v.value for v in Verdict} == EXAMPLE_VERDICTS
    assert len(SEVERITY) == len(Verdict)
    assert all(isinstance(SEVERITY[v.value], int) and v.severity == SEVERITY[v.value] for v in Verdict)


def test_target_verdicts_extend_the_example_verdicts() -> None:
    assert {v.value for v in Verdict} < {v.value for v in TargetVerdict} == TARGET_VERDICTS
    assert TargetVerdict.SKIPPED is TargetVerdict.SKIPPED and TargetVerdict.SKIPPED == "skipped"


def test_the_doc_table_states_the_severity_order() -> None:
    rows = re.findall(r"^\| `([a-z-]+)` \| (\d) \|", DOC.read_text(), re.MULTILINE)
    assert {verdict: int(severity) for verdict, severity in rows} == SEVERITY


@pytest.mark.parametrize("member", [*Verdict, *TargetVerdict])
def test_a_member_prints_and_dumps_as_its_value(member: Verdict | TargetVerdict) -> None:
    assert str(member) == f"{member}" == "%s" % member == format(member, "") == member.value
    assert f"{member:>25}" == f"{member.value:>25}"
    assert json.dumps({"verdict": member}) == json.dumps({"verdict": member.value})
    read_back = json.loads(json.dumps(member))
    assert read_back == member and type(read_back) is str and hash(read_back) == hash(member)
    assert member in {member.value} and {member.value: 1}[member] == 1


def test_worst() -> None:
    assert worst([]) == "agree"
    assert worst(["agree", "sync-regression", "error-mismatch"]) == "error-mismatch"
    assert worst([Verdict.DIVERGENCE, "crash", "agree"]) == "crash"
    assert worst(["agree", "divergence", "invariant-violation"]) == "divergence"  # ties: the first of the most severe


EXACT = Comparison("exact")
T = torch.tensor

# The output trees compare_values walks, and the leaf path it names: list and tuple indices, dict keys, nested.
SHAPES = [
    (T([1]), T([2]), ()),
    ([1, 2], [1, 3], (1,)),
    ((1, (2, 3)), (1, (2, 4)), (1, 1)),
    ({"a": 1}, {"a": 2}, ("a",)),
    ({2: 1}, {2: 3}, (2,)),
    ([T([1]), {"cu_seqlens": (T([2.0]), 3)}], [T([1]), {"cu_seqlens": (T([2.0]), 4)}], (1, "cu_seqlens", 1)),
    ({"x": [{"y": T([1])}]}, {"x": [{"y": T([2])}]}, ("x", 0, "y")),
]


@pytest.mark.parametrize("legacy, optimized, parts", SHAPES)
def test_compare_values_keeps_the_parts_and_renders_them(legacy: object, optimized: object, parts: tuple) -> None:
    (mismatch,) = compare_values(legacy, optimized, EXACT)
    assert mismatch.parts == parts
    # the text is the one the string-built path gave: each part in brackets as its repr
    assert mismatch.path == "".join(f"[{p!r}]" for p in parts) == render_path(parts)


def test_render_then_blank_indices() -> None:
    assert render_path(()) == ""
    assert render_path((1, "cu_seqlens", 0)) == "[1]['cu_seqlens'][0]"
    assert blank_indices(render_path((2, "cu_seqlens"))) == "[]['cu_seqlens']"
    assert blank_indices(render_path(("x", 10, "y", 3))) == "['x'][]['y'][]"
    assert blank_indices("invariant sorted") == "invariant sorted"


# --------------------------------------------------------------------------- deciding an example

def _found(name: str, asked: list[str] | None = None) -> Callable[[], list[Mismatch]]:
    """An oracle that finds ``name`` (and notes that it was asked)."""
    def oracle() -> list[Mismatch]:
        if asked is not None:
            asked.append(name)
        return [Mismatch(name, "values", name)]
    return oracle


def _nothing(name: str, asked: list[str]) -> Callable[[], list[Mismatch]]:
    def oracle() -> list[Mismatch]:
        asked.append(name)
        return []
    return oracle


AGREED = (Verdict.AGREE, [])
DIVERGED = (Verdict.DIVERGENCE, [Mismatch("[0]", "values", "differ")])

# (differential, which oracles find something) -> (verdict, oracles named); docs/verdicts.md's order.
PRECEDENCE = {
    "nothing": (AGREED, set(), Verdict.AGREE, ()),
    "divergence-beats-every-oracle": (DIVERGED, {"sync", "invariant x", "reference", "consumer"},
                                      Verdict.DIVERGENCE, ("differential", "invariant x")),
    "invariant-beats-reference-and-syncs": (AGREED, {"sync", "invariant x", "reference", "consumer"},
                                            Verdict.INVARIANT_VIOLATION,
                                            ("sync", "invariant x", "reference", "consumer-sync")),
    "reference-beats-syncs": (AGREED, {"sync", "reference"}, Verdict.REFERENCE_DIVERGENCE, ("sync", "reference")),
    "the-function-s-syncs-before-the-consumer-s": (AGREED, {"sync", "consumer"}, Verdict.SYNC_REGRESSION,
                                                   ("sync", "consumer-sync")),
    "the-consumer-s-syncs": (AGREED, {"consumer"}, Verdict.SYNC_REGRESSION, ("consumer-sync",)),
}


@pytest.mark.parametrize("case", sorted(PRECEDENCE))
def test_the_first_finding_in_the_documented_order_is_the_verdict(case: str) -> None:
    differential, finds, verdict, oracles = PRECEDENCE[case]
    asked: list[str] = []

    def oracle(name: str) -> Callable[[], list[Mismatch]]:
        return _found(name, asked) if name in finds else _nothing(name, asked)

    decision = decide_example(differential, True, sync=oracle("sync"),
                              invariants=lambda: [Mismatch("invariant x", "invariant", "x")] if "invariant x" in finds
                              else [], reference=oracle("reference"), consumer=oracle("consumer"))
    assert (decision.verdict, decision.oracles) == (verdict, oracles)
    assert decision.mismatches or verdict is Verdict.AGREE


def test_the_sync_rule_reference_and_consumer_are_asked_only_where_the_sides_agree_and_returned() -> None:
    for differential, both_returned in ((DIVERGED, True), (AGREED, False)):
        asked: list[str] = []
        decide_example(differential, both_returned, sync=_nothing("sync", asked),
                       invariants=_nothing("invariants", asked), reference=_nothing("reference", asked),
                       consumer=_nothing("consumer", asked), upstream=_nothing("upstream", asked))
        # invariants judge each side that returned, whatever the other did; upstream only an agreeing example
        assert asked == (["invariants"] if differential is DIVERGED else ["invariants", "upstream"])


def test_upstream_is_asked_last_and_only_when_nothing_failed() -> None:
    asked: list[str] = []
    decision = decide_example(AGREED, True, sync=_nothing("sync", asked), invariants=_nothing("invariants", asked),
                              reference=_nothing("reference", asked), consumer=_nothing("consumer", asked),
                              upstream=_found("vllm", asked))
    assert asked == ["sync", "invariants", "reference", "consumer", "vllm"]
    assert (decision.verdict, decision.oracles) == (Verdict.UPSTREAM_DIVERGENCE, ("upstream",))
    asked.clear()
    failed = decide_example(AGREED, True, sync=_found("sync"), invariants=list, reference=list, consumer=list,
                            upstream=_nothing("vllm", asked))
    assert failed.verdict is Verdict.SYNC_REGRESSION and asked == []


# --------------------------------------------------------------------------- deciding a target

def test_a_device_s_verdict_state_first_then_failures_then_examples_then_evidence() -> None:
    broken = TargetVerdict.FUZZER_ERROR

    def not_asked() -> TargetVerdict | None:
        raise AssertionError("the reach was read although the verdict was decided before it")

    assert device_verdict(broken, ["divergence"], 5, not_asked) is broken
    assert device_verdict(None, ["sync-regression", "crash", "divergence"], 5, not_asked) is TargetVerdict.CRASH
    assert device_verdict(None, [], 0, not_asked) is TargetVerdict.UNTESTED
    assert device_verdict(None, [], 3, lambda: TargetVerdict.UNREACHED) is TargetVerdict.UNREACHED
    assert device_verdict(None, [], 3, lambda: None) is TargetVerdict.AGREE


def test_a_target_s_verdict_over_its_devices() -> None:
    untested, unreached, same = TargetVerdict.UNTESTED, TargetVerdict.UNREACHED, TargetVerdict.SAME_CODE
    agree = TargetVerdict.AGREE

    def never_read():  # noqa: ANN202 -- the devices' verdicts, which a state or a failure makes moot
        raise AssertionError("a device's verdict was read although the target's was decided before it")
        yield

    assert overall_verdict(TargetVerdict.SKIPPED, [], never_read()) is TargetVerdict.SKIPPED
    assert overall_verdict(None, ["error-mismatch"], never_read()) is TargetVerdict.ERROR_MISMATCH
    assert overall_verdict(None, [], []) is untested  # no device ran: nothing is known
    assert overall_verdict(None, [], [agree, untested]) is untested
    assert overall_verdict(None, [], [same, unreached, agree]) is unreached
    assert overall_verdict(None, [], [same, agree]) is same
    assert overall_verdict(None, [], [agree, agree]) is agree
    assert target_state(True, True, True) is TargetVerdict.SKIPPED
    assert target_state(False, True, True) is TargetVerdict.FUZZER_ERROR
    assert target_state(False, False, True) is TargetVerdict.CANNOT_BUILD
    assert target_state(False, False, False) is None
