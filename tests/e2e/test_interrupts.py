"""SIGTERM / SIGINT in every phase of a run still write its report (fuzz/run/interrupts.py).

Each test reaches its phase by an event it waits for -- a line in the run's
phase file (SYNCFUZZ_PHASE_FILE), with the run held at that phase's start
(SYNCFUZZ_HOLD_PHASE), or the pid file of a process stuck in an example or a
replay (tests/slow_targets.py) -- never by a sleep. Every report must apply the
known-issues file, label the failures it could not confirm, and carry the
signal's exit code, which the process returns too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT

KNOWN = {"format": "syncfuzz-known-issues/1",
         "issues": [{"target": "always-diverges", "verdict": "divergence",
                     "reason": "planted for the interrupt tests (tests/slow_targets.py)"}]}
WAIT_SECONDS = 300.0  # how long a loaded CI host may take to reach a phase (never needed when all is well)


def _start(tmp_path: Path, *targets: str, hold: str | None = None, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    (tmp_path / "known.json").write_text(json.dumps(KNOWN))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SYNCFUZZ_TARGET_MODULES": "tests.slow_targets",
           "SYNCFUZZ_TEST_STUCK": str(tmp_path / "stuck"), "SYNCFUZZ_PHASE_FILE": str(tmp_path / "phases")}
    if hold:
        env["SYNCFUZZ_HOLD_PHASE"] = hold
    command = [sys.executable, "-m", "fuzz", "run", *(a for t in targets for a in ("--target", t)), "--device", "cpu",
               "--seed", "0", "--max-examples", "30", "--in-process", "--corpus", str(tmp_path / "corpus"),
               "--known-issues", str(tmp_path / "known.json"), "--report", str(tmp_path / "r.json"),
               "--markdown", str(tmp_path / "r.md"), "--junit", str(tmp_path / "r.xml"), *extra]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(child: subprocess.Popen, ready: object) -> None:
    """Until ``ready()`` is true (the event), or the child ended / the wait is absurdly long."""
    waited = time.monotonic()
    while not ready() and child.poll() is None and time.monotonic() - waited < WAIT_SECONDS:
        time.sleep(0.05)
    if not ready():
        child.kill()
        raise AssertionError(f"the run never reached its phase: {child.communicate()}")


def _phase_reached(tmp_path: Path, phase: str) -> object:
    phases = tmp_path / "phases"
    return lambda: phases.exists() and phase in phases.read_text().split()


def _stopped(child: subprocess.Popen, how: str) -> tuple[dict, str, str]:
    child.send_signal(getattr(signal, how))
    out, err = child.communicate(timeout=180)
    assert child.returncode == 128 + getattr(signal, how), out + err
    assert "Traceback" not in out + err, out + err
    report = json.loads((Path(child.args[child.args.index("--report") + 1])).read_text())
    assert report["interrupted"] == how and report["exit_code"] == child.returncode
    return report, out, err


def _says_partial(tmp_path: Path, report: dict, how: str, phase: str, never: list[str]) -> None:
    """Every output of the stopped run says it is partial, why, and which targets never ran: the JSON
    (``partial``, ``never_ran``), the Markdown (its first lines, and the ``result:`` line a job summary ends
    with) and the JUnit (an error case per target that never ran, so CI does not read a green run)."""
    import xml.etree.ElementTree as ET

    assert report["partial"] == f"interrupted by {how} in {phase}" and report["never_ran"] == never
    text = (tmp_path / "r.md").read_text()
    assert f"**Interrupted by {how}** in {phase}: a partial report" in text
    assert text.index("Interrupted by") < text.index("| target |")
    assert ("**Never ran**: " + ", ".join(never)) in text if never else "**Never ran**: none" in text
    (result,) = [line for line in text.splitlines() if line.startswith("result: ")]
    assert f"exit {128 + getattr(signal, how)}: interrupted by {how}" in result
    assert (f"{len(never)} never ran" in result) == bool(never)
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert {p.get("name"): p.get("value") for p in suite.iter("property")}["partial"] == report["partial"]
    missing = [c for c in suite.iter("testcase") if c.get("name") == "never ran"]
    assert [c.get("classname") for c in missing] == [f"syncfuzz.{name}" for name in never]
    assert all(c.find("error") is not None for c in missing)
    assert int(suite.get("errors")) == len(never) and int(suite.get("tests")) == len(list(suite.iter("testcase")))


def _gone(pid: int) -> bool:
    for _ in range(100):  # the kernel's parent-death signal, or the run's own kill, is prompt
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return False


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_signal_in_set_up_writes_an_empty_report_that_says_where_it_stopped(how, tmp_path):
    child = _start(tmp_path, "always-diverges", hold="set-up")
    _wait_for(child, _phase_reached(tmp_path, "set-up"))
    report, out, err = _stopped(child, how)
    assert report["targets"] == [] and report["run"]["interrupted_in"] == "set-up"
    assert f"interrupted by {how} in set-up" in err
    assert f"exit {128 + getattr(signal, how)}: interrupted by {how}" in out
    assert report["run"]["planned"] == ["always-diverges"]  # looked up from the config as given
    _says_partial(tmp_path, report, how, "set-up", ["always-diverges"])
    assert "never ran: always-diverges" in out


def test_a_signal_while_fuzzing_reports_the_finished_targets_with_known_issues_applied(tmp_path):
    child = _start(tmp_path, "always-diverges", "stuck")
    _wait_for(child, (tmp_path / "stuck").exists)
    report, out, _ = _stopped(child, "SIGTERM")
    assert [t["name"] for t in report["targets"]] == ["always-diverges"]
    (failure,) = report["targets"][0]["failures"]
    assert failure["known"] == KNOWN["issues"][0]["reason"]  # the known-issues file was applied
    assert failure["confirmed"] is None and "interrupted (SIGTERM)" in failure["unconfirmed"]
    assert report["run"]["interrupted_in"] == "fuzzing"
    assert "divergence (known)" in out  # the terminal table says what the report says
    assert report["run"]["planned"] == ["always-diverges", "stuck"]
    _says_partial(tmp_path, report, "SIGTERM", "fuzzing", ["stuck"])
    assert "never ran: stuck (1 of the 2 targets planned" in out
    assert "known" in (tmp_path / "r.md").read_text()
    assert _gone(int((tmp_path / "stuck").read_text()))


def test_a_signal_while_confirming_keeps_the_confirmed_failures_and_kills_the_replay(tmp_path):
    """The first target's failure is confirmed, the second's replay is stuck: the
    report has both, the first confirmed and known, the second labelled
    unconfirmed; the replay's process does not outlive the run."""
    child = _start(tmp_path, "always-diverges", "stuck-in-replay", extra=("--confirm", "1"))
    _wait_for(child, (tmp_path / "stuck").exists)
    report, _, err = _stopped(child, "SIGTERM")
    assert report["run"]["interrupted_in"] == "confirmation"
    first, second = report["targets"]
    assert first["failures"][0]["confirmed"] == "1/1" and first["failures"][0]["known"]
    assert first["failures"][0]["unconfirmed"] is None
    assert second["failures"][0]["confirmed"] is None and "interrupted" in second["failures"][0]["unconfirmed"]
    assert second["failures"][0]["known"] is None  # not in the known-issues file: new
    assert "interrupted by SIGTERM in confirmation" in err
    _says_partial(tmp_path, report, "SIGTERM", "confirmation", [])  # every item had finished
    assert _gone(int((tmp_path / "stuck").read_text())), "the stuck replay outlived the run"


def test_a_signal_while_writing_lets_the_outputs_finish_then_says_so(tmp_path):
    child = _start(tmp_path, "always-diverges", hold="writing", extra=("--confirm", "1"))
    _wait_for(child, _phase_reached(tmp_path, "writing"))
    report, _, err = _stopped(child, "SIGTERM")
    assert report["run"]["interrupted_in"] == "writing"
    (failure,) = report["targets"][0]["failures"]
    assert failure["confirmed"] == "1/1" and failure["known"] and failure["unconfirmed"] is None
    assert "while writing" in err
    assert "exit code 143" in (tmp_path / "r.md").read_text()
    _says_partial(tmp_path, report, "SIGTERM", "writing", [])


def test_the_phase_file_names_every_phase_of_a_whole_run(tmp_path):
    child = _start(tmp_path, "always-diverges", extra=("--confirm", "0"))
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, out + err  # the one failure is known
    assert [line.split()[0] for line in (tmp_path / "phases").read_text().splitlines()] == \
        ["set-up", "fuzzing", "confirmation", "writing"]
    assert "result: 0/1 targets agree, 0 with new failures (0 new), 1 with known failures only" in out
    assert "exit 0: no failure" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["partial"] is None and report["never_ran"] == [] and report["run"]["planned"] == ["always-diverges"]
    assert "Interrupted" not in (tmp_path / "r.md").read_text() and "never ran" not in (tmp_path / "r.xml").read_text()


def test_a_signal_swallowed_where_it_landed_is_raised_again_without_a_traceback(capsys):
    """Raised inside a gc callback (Hypothesis installs one), the KeyboardInterrupt is
    swallowed by Python with a traceback; the guard hides that and raises it again."""
    import gc
    import threading

    from fuzz.run.interrupts import RETRY_SECONDS, guard_signals, interrupted_by

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can be set in the main thread only")

    def signal_inside_gc(phase: str, _info: dict) -> None:
        if phase == "start" and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # a few bytecodes: the handler runs here, inside the callback

    fired: list[bool] = []
    gc.callbacks.append(signal_inside_gc)
    try:
        with guard_signals():
            with pytest.raises(KeyboardInterrupt):
                gc.collect()
                waited = time.monotonic()
                while time.monotonic() - waited < 20 * RETRY_SECONDS:  # the retry comes after RETRY_SECONDS
                    time.sleep(0.01)
            assert interrupted_by() == "SIGTERM"
    finally:
        gc.callbacks.remove(signal_inside_gc)
    assert fired and "Traceback" not in capsys.readouterr().err
