"""The findings we keep are usable: every repro file loads and names a real
target, and the known-issues file is valid and names real targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.replay import replay_file
from fuzz.repro import load_repro
from fuzz.targets import lookup
from fuzz.triage import load_known_issues

ROOT = Path(__file__).resolve().parents[2]
REPROS = sorted((ROOT / "docs" / "findings" / "repros").glob("*.json"))


@pytest.mark.parametrize("path", REPROS, ids=lambda p: p.name)
def test_finding_repro_is_a_valid_file_of_a_real_target(path):
    payload = load_repro(path)
    lookup([payload["target"]])
    assert payload["verdict"] != "agree"


def test_findings_f2_reproduces_on_cpu():
    result = replay_file(str(ROOT / "docs/findings/repros/glm4v-embeddings-error-mismatch-212cb7f35ca9.json"), "cpu")
    assert result.verdict == "error-mismatch"


def test_known_issues_file_names_real_targets():
    issues = load_known_issues(ROOT / "known-issues.json")
    names = {t.name for t in lookup([])}
    assert issues and all(issue["target"] in names for issue in issues)
    # Under the caller contract only a documented finding of one oracle is accepted (F17: a consumer sync the
    # PR added on one attention backend), never a whole verdict of a target.
    for issue in issues:
        if issue.get("contract") != "wide":
            assert issue.get("oracle") and issue["reason"].startswith("F"), issue


def test_findings_f16_reproduces_on_cpu():
    """A bug both copies share: only the invariant (and the reference) report it."""
    result = replay_file(str(ROOT / "docs/findings/repros/fla-chunk-indices-invariant-violation-25977428ea1e.json"),
                         "cpu")
    assert result.verdict == "invariant-violation"
