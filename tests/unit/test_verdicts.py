"""fuzz.verdicts: the two verdict enums, the severity order (stated once, shown in docs/verdicts.md) and the
rendering of a failure's leaf path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from fuzz.compare import compare_values
from fuzz.targets import Comparison
from fuzz.verdicts import (
    EXAMPLE_VERDICTS,
    SEVERITY,
    SKIPPED,
    TARGET_VERDICTS,
    TargetVerdict,
    Verdict,
    blank_indices,
    render_path,
    worst,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdicts.md"


def test_every_example_verdict_has_exactly_one_severity() -> None:
    assert set(SEVERITY) == {v.value for v in Verdict} == EXAMPLE_VERDICTS
    assert len(SEVERITY) == len(Verdict)
    assert all(isinstance(SEVERITY[v.value], int) and v.severity == SEVERITY[v.value] for v in Verdict)


def test_target_verdicts_extend_the_example_verdicts() -> None:
    assert {v.value for v in Verdict} < {v.value for v in TargetVerdict} == TARGET_VERDICTS
    assert SKIPPED is TargetVerdict.SKIPPED and SKIPPED == "skipped"


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
