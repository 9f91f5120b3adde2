"""The terminal says what the run says: known failures marked known, one closing
line with the counts and the exit code's meaning, ``--version``."""

from __future__ import annotations

import subprocess
import sys

from fuzz.records.model import DeviceTally, Failure, Report, TargetEntry
from fuzz.reports.report import closing_line, failure_lines, summary_table
from tests.support import ROOT

RAN = DeviceTally(examples=5, verdicts={"agree": 4, "divergence": 1})


def _entry(name: str, *failures: Failure, **fields) -> TargetEntry:
    return TargetEntry(name=name, devices=("cpu",), by_device={"cpu": RAN}, failures=failures, **fields)


def _failure(verdict: str = "divergence", known: str | None = None, **fields) -> Failure:
    return Failure(device="cpu", verdict=verdict, input={"device": "cpu"},
                   mismatches=({"path": f"[{verdict}]", "what": "values", "detail": "d"},), known=known, **fields)


def _row(report: Report, name: str) -> str:
    return next(line for line in summary_table(report.targets).splitlines() if line.startswith(name + " "))


def test_a_target_whose_failures_are_all_known_reads_known_in_the_table():
    report = Report((_entry("a", _failure(known="accepted: F9")),))
    assert "divergence (known)" in _row(report, "a")
    assert report.exit_code() == 0
    assert closing_line(report) == ("result: 0/1 targets agree, 0 with new failures (0 new), 1 with known failures "
                                    "only, 0 untested, 0 cannot-build; exit 0: no failure")


def test_a_new_failure_beside_a_known_one_shows_the_new_one():
    report = Report((_entry("a", _failure("crash", known="accepted"), _failure("sync-regression")),))
    assert "sync-regression" in _row(report, "a") and "known" not in _row(report, "a")
    assert report.exit_code() == 1
    assert "1 with new failures (1 new)" in closing_line(report)
    assert closing_line(report).endswith("exit 1: a failing verdict was found")


def test_the_closing_line_counts_every_kind_of_target_once():
    report = Report((_entry("agrees"), _entry("new", _failure(), _failure("crash")),
                     _entry("known", _failure(known="why")),
                     TargetEntry(name="untested", devices=("cpu",)),
                     _entry("unbuilt", cannot_build="no such function in 0.33.0")))
    assert closing_line(report) == ("result: 1/5 targets agree, 1 with new failures (2 new), 1 with known failures "
                                    "only, 1 untested, 1 cannot-build; exit 1: a failing verdict was found")


def test_an_incomplete_or_interrupted_run_says_so_in_its_last_line():
    untested = Report((TargetEntry(name="u", devices=("cpu",)),))
    assert closing_line(untested).endswith("exit 3: incomplete: no failure found, but the run did not show all it "
                                           "was asked to")
    stopped = Report((_entry("a"),), interrupted="SIGTERM")
    assert closing_line(stopped).endswith("exit 143: interrupted by SIGTERM: the report holds what finished")


def test_upstream_asked_for_but_compared_nowhere_is_incomplete():
    why = "cannot import vllm: ModuleNotFoundError"
    report = Report((_entry("a", upstream_check=why),), run={"upstream": True})
    assert report.upstream_not_compared() and report.exit_code() == 3
    assert "(--upstream compared no target with the real vllm)" in closing_line(report)
    compared = Report((_entry("a", upstream_check="compared with the real vllm function"),
                       _entry("b", upstream_check=why)), run={"upstream": True})
    assert not compared.upstream_not_compared() and compared.exit_code() == 0
    assert Report((_entry("a", upstream_check=why),)).exit_code() == 0  # not asked for: no rule


def test_an_unconfirmed_failure_says_why_in_its_line():
    entry = _entry("a", _failure(repro="r.json", unconfirmed="the run was interrupted (SIGTERM) before its replays"))
    assert "(not confirmed: the run was interrupted (SIGTERM) before its replays)" in failure_lines([entry])[0]


def test_version_names_the_code_it_runs():
    done = subprocess.run([sys.executable, "-m", "fuzz", "--version"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("syncfuzz 0.1.0 (code ")


def test_the_readme_counts_the_targets_there_are():
    """"all N targets" in the README is the catalog's count (it said 21 of 22 for a while)."""
    import re

    from fuzz.targets import catalog_targets

    TARGETS = catalog_targets()

    text = (ROOT / "README.md").read_text()
    counts = {int(n) for n in re.findall(r"\ball (\d+) targets\b", text)}
    assert counts == {len(TARGETS)}, counts
