"""The findings we keep are usable: every repro file loads and names a real
target, and the known-issues file is valid and names real targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.engine.repro import load_repro
from fuzz.run.replay import replay_file
from fuzz.run.triage import load_known_issues
from fuzz.targets import lookup

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
    # Under the caller contract only a documented finding is accepted, and never a whole verdict of a target
    # everywhere: one oracle's (F17: a consumer sync the PR added on one attention backend), an upstream
    # change against the releases that made it (F19: "optimized": "vllm>=0.31.0"; the copies and older
    # sides are still held to the verdict), or one kind of difference (F20: values, F21: layout; a failure
    # showing another kind only is still new; F24: the copy-policy oracle's finding, not the target's other
    # verdicts).
    for issue in issues:
        if issue.get("contract") != "wide":
            narrowed = issue.get("oracle") or issue.get("optimized") or issue.get("mismatch")
            assert narrowed and issue["reason"].startswith("F"), issue


def test_a_known_issue_scoped_to_releases_holds_only_against_them(tmp_path):
    """F19's entries accept the sampler's divergence against 0.31.0 and later, not against the copy, 0.30.0,
    or an unversioned checkout; a range that is not 'vllm>=X' is refused with the form to write."""
    from fuzz.errors import UsageError
    from fuzz.records.model import Failure, TargetEntry
    from fuzz.run.triage import mark_known

    issues = load_known_issues(ROOT / "known-issues.json")
    failure = Failure.from_json({"verdict": "divergence", "device": "cpu", "input": {}, "mismatches": [],
                                 "exceptions": {}, "repro": None}, "failure")
    entry = TargetEntry(name="diffusion-gemma-sampler", devices=("cpu",), failures=(failure,))

    def known(optimized):
        (marked,) = mark_known([entry], issues, "caller", optimized)
        return marked.failures[0].known

    assert known("0.31.0") and known("0.34.0") and known("0.35.0rc1")
    assert known(None) is None and known("0.30.0") is None and known("0.28.0") is None
    bad = tmp_path / "known.json"
    bad.write_text('{"format": "syncfuzz-known-issues/1", "issues": [{"target": "diffusion-gemma-sampler", '
                   '"verdict": "divergence", "optimized": "0.31.0", "reason": "F19"}]}')
    with pytest.raises(UsageError, match="write it as 'vllm>=X.Y.Z'"):
        load_known_issues(bad)


def test_findings_f16_reproduces_on_cpu():
    """A bug both copies share: only the invariant (and the reference) report it."""
    result = replay_file(str(ROOT / "docs/findings/repros/fla-chunk-indices-invariant-violation-25977428ea1e.json"),
                         "cpu")
    assert result.verdict == "invariant-violation"
