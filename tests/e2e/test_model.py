"""The report model: one verdict rule, one same-bug rule, one exit-code rule,
and every renderer (table, failure lines, Markdown, JUnit, JSON, merge) saying
the same thing -- "untested" above all, never "agree" for a target that ran
no example."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree as ET

import pytest

from fuzz.cli import main
from fuzz.records.model import (
    EXIT_FAILURE,
    EXIT_FUZZER_BUG,
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    REPORT_FORMAT,
    DeviceTally,
    Failure,
    Report,
    ReportError,
    TargetEntry,
    failure_signature,
)
from fuzz.reports.formats import junit_xml, markdown
from fuzz.reports.report import failure_lines, summary_table

RAN = DeviceTally(examples=5, verdicts={"agree": 5})
NONE_RAN = DeviceTally()


def entry(name="t", **fields) -> TargetEntry:
    fields.setdefault("devices", ("cpu",))
    fields.setdefault("by_device", {d: RAN for d in fields["devices"]})
    return TargetEntry(name=name, upstream=("vllm/x.py::f",), **fields)


def failure(verdict="divergence", device="cpu", path="[0]", what="values", detail="d", **fields) -> Failure:
    return Failure(device=device, verdict=verdict, input={"device": device, "n": 1},
                   mismatches=({"path": path, "what": what, "detail": detail},), **fields)


UNTESTED = entry(devices=("cpu", "cuda"), by_device={"cpu": RAN, "cuda": NONE_RAN})


def test_a_device_that_ran_no_example_is_untested_in_every_format(capsys):
    report = Report((UNTESTED,))
    assert UNTESTED.verdict_on("cpu") == "agree" and UNTESTED.verdict_on("cuda") == "untested"
    assert UNTESTED.verdict == "untested"
    data = report.to_json()
    assert data["targets"][0]["verdict"] == "untested"
    assert data["targets"][0]["verdict_by_device"] == {"cpu": "agree", "cuda": "untested"}
    assert data["exit_code"] == EXIT_INCOMPLETE == report.exit_code() == 3
    table = summary_table(report.targets).splitlines()
    assert "untested" in next(line for line in table if "cuda" in line)
    assert any(line.startswith("UNTESTED: t on cuda") for line in failure_lines(report.targets))
    assert "| t | cuda | 0 | 0 | untested" in markdown(report)
    suite = ET.fromstring(junit_xml(report))
    cuda = next(case for case in suite if case.get("name") == "cuda")
    assert cuda.find("skipped") is not None and suite.get("skipped") == "1" and suite.get("failures") == "0"


def test_a_divergence_outranks_untested():
    report = Report((UNTESTED, entry("u", failures=(failure(),))))
    assert report.exit_code() == EXIT_FAILURE


def test_a_known_failure_does_not_fail_the_run_but_untested_still_counts():
    assert Report((entry(failures=(failure(known="accepted"),)),)).exit_code() == EXIT_OK
    assert Report((entry(failures=(failure(known="accepted"),)), UNTESTED)).exit_code() == EXIT_INCOMPLETE


def test_a_fuzzer_error_is_exit_4_and_named_everywhere():
    """A fuzzer bug has its own exit code: not a usage error's 2, and it outranks a failure found."""
    broken = entry(fuzzer_error="strategy exploded")
    report = Report((broken, entry("u", failures=(failure(),))))
    assert report.exit_code() == EXIT_FUZZER_BUG == 4 != EXIT_USAGE
    assert broken.verdict == broken.verdict_on("cpu") == "fuzzer-error"
    assert "fuzzer-error" in summary_table(report.targets)
    assert ET.fromstring(junit_xml(report)).get("errors") == "1"


def test_a_skipped_target_is_neither_untested_nor_a_failure():
    skipped = TargetEntry(name="gpu-only", devices=(), skipped="runs on cuda; this run has cpu")
    report = Report((skipped,))
    assert skipped.verdict == "skipped" and report.exit_code() == EXIT_OK
    assert "skipped" in summary_table(report.targets)


def test_entries_add_up_and_keep_each_bug_once():
    a = entry(by_device={"cpu": DeviceTally(3, {"agree": 2, "divergence": 1}, 1,
                                            {"legacy": {"1": 3}, "optimized": {"0": 3}})},
              failures=(failure(detail="first"),), first_failure_at=3, seconds=1.0)
    b = entry(devices=("cuda",), by_device={"cuda": DeviceTally(2, {"agree": 2}, 0,
                                                                {"legacy": {"2": 2}, "optimized": {"0": 2}})},
              failures=(failure(detail="same bug, other values"), failure(device="cuda", what="shape")),
              seconds=2.0)
    total = a + b + entry(by_device={"cpu": DeviceTally(1, {"agree": 1}, 0,
                                                        {"legacy": {"1": 1}, "optimized": {"0": 1}})})
    assert total.devices == ("cpu", "cuda") and total.examples == 6
    assert total.by_device["cpu"].examples == 4 and total.by_device["cpu"].syncs_per_call["legacy"] == {"1": 4}
    assert [f.mismatches[0]["detail"] for f in total.failures] == ["first", "d"]
    assert total.first_failure_at == 3 and total.seconds == 3.0


def test_the_same_bug_rule_ignores_values_but_not_where_or_what():
    base = failure()
    assert failure(detail="other numbers").signature == base.signature
    assert failure(path="['cu_seqlens']").signature != base.signature
    # The same leaf of another element of a list is the same bug (F12 counted one slip 18 times).
    assert failure(path="[1]['x']").signature == failure(path="[4]['x']").signature
    assert failure(verdict="error-mismatch").signature != base.signature
    # A dead worker has no leaf: the death stands in, the last output does not.
    crash = failure_signature("crash", [{"path": "<output>", "what": "crash",
                                         "detail": "worker killed by SIGABRT; last output: x"}], {})
    again = failure_signature("crash", [{"path": "<output>", "what": "crash",
                                         "detail": "worker killed by SIGABRT; last output: y"}], {})
    assert crash == again


def test_report_json_round_trips():
    report = Report((UNTESTED, entry("u", failures=(failure(repro="/c/f.json", confirmed="3/3"),),
                                     placement=({"worker": "gw0"},))), run={"seed": 1}, versions={"torch": "x"})
    data = json.loads(json.dumps(report.to_json()))
    assert data["format"] == REPORT_FORMAT
    again = Report.from_json(data, "r.json")
    assert again == report and again.to_json() == data


MALFORMED = {
    "old-format": ({"format": "syncfuzz-report/1", "targets": []},
                   "'syncfuzz-report/1', which this syncfuzz cannot read"),
    "not-a-report": ({"format": "x", "targets": []}, "not a syncfuzz report"),
    "no-targets": ({"format": REPORT_FORMAT, "run": {}, "versions": {}}, "has no 'targets' field"),
    "target-not-object": ({"format": REPORT_FORMAT, "run": {}, "versions": {}, "targets": [3]},
                          "must be a JSON object"),
    "bad-examples": ({"format": REPORT_FORMAT, "run": {}, "versions": {},
                      "targets": [{**entry().to_json(), "by_device": {"cpu": {**RAN.to_json(), "examples": "5"}}}]},
                     "field 'examples' must be int"),
    "bad-verdict": ({"format": REPORT_FORMAT, "run": {}, "versions": {},
                     "targets": [{**entry().to_json(), "failures": [{**failure().to_json(), "verdict": "banana"}]}]},
                    "verdict 'banana' is not one of"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_report_is_one_line_and_exit_2(name, tmp_path, capsys):
    data, expected = MALFORMED[name]
    with pytest.raises(ReportError, match="r.json"):
        Report.from_json(data, "r.json")
    path = tmp_path / "in.json"
    path.write_text(json.dumps(data))
    assert main(["merge-reports", str(tmp_path / "out.json"), str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "out.json").exists()


def _write(tmp_path, name, *entries, shard=(1, 1)) -> str:
    """A report of shard ``shard`` of one run plan, as a fresh invocation writes it (its own run id):
    merge-reports refuses reports whose scopes are not disjoint shards of one run (tests/unit/test_merge.py)."""
    from fuzz.config import RunConfig
    from fuzz.reports.scope import run_scope

    config = RunConfig(seed=0)
    copy = {"kind": "copy", "code_sha256": "c0de"}
    run = {**config.to_json(), "scope": run_scope(config, {"legacy": copy, "optimized": copy}, shard)}
    path = tmp_path / name
    path.write_text(json.dumps(Report(entries, run=run).to_json()))
    return str(path)


def test_merge_reports_exits_as_the_merged_run_would(tmp_path):
    out = str(tmp_path / "m.json")
    clean = _write(tmp_path, "clean.json", entry(), shard=(1, 2))
    # Shard 2/2 missing: the merge does not show all its run was asked to (issue 45).
    assert main(["merge-reports", out, clean]) == EXIT_INCOMPLETE
    bug = _write(tmp_path, "bug.json", entry(fuzzer_error="boom"), shard=(2, 2))
    assert main(["merge-reports", out, clean, bug]) == EXIT_FUZZER_BUG
    assert json.loads((tmp_path / "m.json").read_text())["exit_code"] == EXIT_FUZZER_BUG
    untested = _write(tmp_path, "untested.json", UNTESTED, shard=(2, 2))
    assert main(["merge-reports", out, clean, untested]) == EXIT_INCOMPLETE
    # One shard ran nothing on cuda, the other did: together the target is tested.
    other = entry(devices=("cuda",), by_device={"cuda": RAN})
    a, b = _write(tmp_path, "a.json", UNTESTED, shard=(1, 2)), _write(tmp_path, "b.json", other, shard=(2, 2))
    assert main(["merge-reports", out, a, b]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["targets"][0]["verdict"] == "agree"


def test_a_run_with_a_target_that_ran_no_example_says_untested_and_exits_3(tmp_path):
    """The budget is spent before fla-chunk-offsets' turn (tests/slow_targets.py):
    it must read "untested" in the JSON, the [fuzz] line, Markdown and JUnit."""
    from tests.support import cli

    result = cli("run", "--target", "slow-to-draw", "--target", "fla-chunk-offsets", "--budget", "1.2",
                 "--device", "cpu", "--seed", "0", "--in-process", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"),
                 "--junit", str(tmp_path / "r.xml"), extra_env={"SYNCFUZZ_TARGET_MODULES": "tests.slow_targets"})
    assert result.returncode == EXIT_INCOMPLETE, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    offsets = next(t for t in report["targets"] if t["name"] == "fla-chunk-offsets")
    assert offsets["examples"] == 0 and offsets["verdict"] == "untested" and report["exit_code"] == 3
    item_line = r"^\[fuzz\] fla-chunk-offsets\[1/1\]: 0 examples \(.*\), untested$"  # once, as the item finished
    assert re.search(item_line, result.stderr, re.M), result.stderr
    assert "UNTESTED: fla-chunk-offsets on cpu" in result.stdout and "incomplete" in result.stdout
    assert "| fla-chunk-offsets | cpu | 0 | 0 | untested" in (tmp_path / "r.md").read_text()
    case = next(c for c in ET.parse(tmp_path / "r.xml").getroot() if c.get("classname") == "syncfuzz.fla-chunk-offsets")
    assert case.find("skipped") is not None


@pytest.mark.parametrize("how,mode", [("SIGTERM", "--in-process"), ("SIGINT", "--in-process"),
                                      ("SIGTERM", "--max-restarts=0"), ("SIGTERM", "--workers=2")])
def test_a_signal_writes_the_partial_report_and_says_so(how, mode, tmp_path):
    """Stopped while stuck in its second target, the run reports the first one,
    in-process, in an isolated worker or in xdist workers -- and the process
    stuck in the example does not outlive the run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.support import ROOT

    stuck = tmp_path / "stuck"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SYNCFUZZ_TARGET_MODULES": "tests.slow_targets",
           "SYNCFUZZ_TEST_STUCK": str(stuck)}
    child = subprocess.Popen([sys.executable, "-m", "fuzz", "run", "--target", "fla-chunk-offsets", "--target",
                              "stuck", "--device", "cpu", "--seed", "0", "--max-examples", "50", mode,
                              "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json")],
                             env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waited = 0.0
    while not stuck.exists() and child.poll() is None and waited < 300:
        time.sleep(0.1)
        waited += 0.1
    assert stuck.exists(), child.communicate()
    child.send_signal(getattr(signal, how))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 128 + getattr(signal, how), out + err
    assert f"interrupted by {how}" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] == how and report["exit_code"] == child.returncode
    names = [t["name"] for t in report["targets"]]
    # xdist runs the two items side by side: the other may not have finished yet.
    assert names == ["fla-chunk-offsets"] or (mode.startswith("--workers") and names == [])
    assert all(t["examples"] == 50 for t in report["targets"])
    stuck_pid = int(stuck.read_text())
    for _ in range(100):  # the kernel's parent-death signal, or the process group's kill, is prompt
        try:
            os.kill(stuck_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(stuck_pid, signal.SIGKILL)
        raise AssertionError(f"the worker stuck in the example (pid {stuck_pid}) outlived the run")


def test_the_markdown_carries_the_result_line_and_says_when_it_is_partial():
    """A GitHub job summary shows the Markdown alone: it must end with the run's ``result:`` line, and an
    interrupted run's must say so before anything else, naming the signal and the phase."""
    from fuzz.reports.report import closing_line

    entry = TargetEntry(name="t", devices=("cpu",), by_device={"cpu": DeviceTally(examples=3, verdicts={"agree": 3})})
    whole = Report((entry,), run={"seed": 0, "devices": ["cpu"]})
    text = markdown(whole)
    assert closing_line(whole) in text and "result: 1/1 targets agree" in text
    assert text.rstrip().endswith("exit code 0") and "Interrupted" not in text
    cut = Report((entry,), run={"seed": 0, "devices": ["cpu"], "interrupted_in": "fuzzing"}, interrupted="SIGTERM")
    text = markdown(cut)
    assert "**Interrupted by SIGTERM** in fuzzing: a partial report" in text
    assert "interrupted by SIGTERM: the report holds what finished" in text  # the result line's meaning
    assert text.index("Interrupted by SIGTERM") < text.index("| target |")
    assert text.rstrip().endswith("exit code 143")


def test_every_format_of_a_partial_report_says_why_and_names_the_targets_that_never_ran():
    """issue 45: JSON, the result line, Markdown, HTML and JUnit of a run stopped after one of its three
    targets -- and of a merge holding it, which is partial without being interrupted itself."""
    from fuzz.reports.html import html_report
    from fuzz.reports.report import closing_line

    entry = TargetEntry(name="t", devices=("cpu",), by_device={"cpu": DeviceTally(examples=3, verdicts={"agree": 3})})
    run = {"seed": 0, "devices": ["cpu"], "planned": ["t", "u", "v"], "interrupted_in": "fuzzing",
           "scope": {"run_id": "r", "shard": [2, 2]}}
    cut = Report((entry,), run=run, interrupted="SIGTERM")
    data = cut.to_json()
    assert data["partial"] == "interrupted by SIGTERM in fuzzing" and data["never_ran"] == ["u", "v"]
    assert "2 never ran; exit 143" in closing_line(cut)
    assert "**Never ran**: u, v (2 of the 3 targets planned)" in markdown(cut)
    page = html_report(cut)
    assert "interrupted by SIGTERM in fuzzing: a partial report" in page and "never ran: u, v" in page
    suite = ET.fromstring(junit_xml(cut))
    assert [(c.get("classname"), c.find("error") is not None) for c in suite if c.get("name") == "never ran"] == \
        [("syncfuzz.u", True), ("syncfuzz.v", True)]
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("3", "2", "0")

    whole = Report((TargetEntry(name="w", devices=("cpu",), by_device={"cpu": DeviceTally(examples=1)}),),
                   run={"seed": 0, "planned": ["w"], "scope": {"run_id": "r", "shard": [1, 2]}})
    merged = whole + cut
    assert merged.exit_code() == 3 and merged.partial() == "shard 2/2 was interrupted by SIGTERM in fuzzing"
    assert merged.never_ran() == ["u", "v"]
    text = markdown(merged)
    assert "**Partial**: shard 2/2 was interrupted by SIGTERM in fuzzing" in text and "Interrupted by" not in text
    assert "exit 3: incomplete" in closing_line(merged) and "exit code 3" in text
    assert "shard 2/2 was interrupted" in html_report(merged)
