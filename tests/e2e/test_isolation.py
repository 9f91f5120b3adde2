"""Crash isolation: a worker that aborts, segfaults or hangs is recorded as a
crash/hang with its input saved, a fresh worker continues, the other targets
finish, and replay reproduces the crash without taking the caller down."""

from __future__ import annotations

import json

import pytest

from tests.support import cli

CRASHERS = {"SYNCFUZZ_TARGET_MODULES": "tests.crashers"}


@pytest.fixture(scope="module")
def isolated_run(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("corpus")
    report = corpus / "report.json"
    result = cli("run", "--device", "cpu", "--seed", "0", "--max-examples", "20", "--example-timeout", "2",
                 "--max-restarts", "1", "--confirm", "1",
                 "--target", "crasher-abort", "--target", "crasher-segfault", "--target", "crasher-hang",
                 "--target", "fla-chunk-offsets", "--corpus", str(corpus), "--report", str(report),
                 extra_env=CRASHERS)
    return result, json.loads(report.read_text()), corpus


def _entry(report, name):
    return next(t for t in report["targets"] if t["name"] == name)


def test_run_survives_and_exits_1(isolated_run):
    result, report, _ = isolated_run
    assert result.returncode == 1, result.stderr
    assert report["exit_code"] == 1


@pytest.mark.parametrize("name,verdict,why", [
    ("crasher-abort", "crash", "SIGABRT"),
    ("crasher-segfault", "crash", "SIGSEGV"),
    ("crasher-hang", "hang", "watchdog"),
])
def test_each_death_is_recorded_once_with_its_input(isolated_run, name, verdict, why):
    _, report, _ = isolated_run
    entry = _entry(report, name)
    assert entry["verdict"] == verdict
    (failure,) = entry["failures"]  # restarts hit it again; reported once
    assert why in failure["mismatches"][0]["detail"]
    assert len(failure["input"]["cu_seqlens"]) > 3  # the journaled input is the one that trips
    assert entry["by_device"]["cpu"]["verdicts"][verdict] >= 1


def test_other_targets_finish_after_a_crash(isolated_run):
    _, report, _ = isolated_run
    entry = _entry(report, "fla-chunk-offsets")
    assert entry["verdict"] == "agree" and entry["examples"] == 20


def test_journal_names_the_last_example(isolated_run):
    _, _, corpus = isolated_run
    (path,) = (corpus / "journal").glob("*/crasher-abort.journal.json")  # the run's own folder
    journal = json.loads(path.read_text())
    assert journal["spec"]["device"] == "cpu" and "started" in journal


@pytest.mark.parametrize("name,expected", [("crasher-abort", "CRASH reproduced"),
                                           ("crasher-segfault", "CRASH reproduced"),
                                           ("crasher-hang", "HANG reproduced")])
def test_replay_reproduces_the_death_in_a_child(isolated_run, name, expected):
    _, report, _ = isolated_run
    repro = _entry(report, name)["failures"][0]["repro"]
    saved = json.loads(open(repro).read())
    assert saved["target_module"] == "tests.crashers" and saved["verdict"] in ("crash", "hang")
    result = cli("replay", repro, extra_env=CRASHERS)
    assert result.returncode == 1, result.stderr
    assert expected in result.stdout


def test_one_worker_process_runs_target_after_target_until_a_death(tmp_path, monkeypatch):
    """Start-up (torch import, CUDA context) is paid per worker, not per
    target; a crash costs one fresh process; stdout noise from the code under
    test cannot garble the job protocol."""
    from fuzz.config import RunConfig
    from fuzz.run.isolation import Isolation
    from fuzz.run.orchestrate import run_item
    from fuzz.run.plan import plan
    from fuzz.targets import lookup

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.crashers")
    names = ["chatty-stdout", "fla-chunk-offsets", "crasher-abort", "fla-chunk-indices"]
    targets = lookup(names, ["tests.crashers"])
    config = RunConfig(devices=("cpu",), seed=0, max_examples=10, corpus=str(tmp_path / "corpus"),
                       target_modules=("tests.crashers",), example_timeout=30, max_restarts=0)
    isolation = Isolation(workdir=tmp_path / "journal")
    pids, entries = [], {}
    for item in plan(targets, seed=0, pieces=1, max_examples=10):
        entries[item.target.name] = run_item(item, config, isolation, None)
        pids.append(isolation._process.process.pid if isolation._process else None)
    assert [entries[n].verdict for n in names] == ["agree", "agree", "crash", "agree"]
    assert entries["chatty-stdout"].examples == 10 and entries["fla-chunk-indices"].examples == 10
    assert pids[0] == pids[1] and pids[2] is None  # reused; the crash discarded it
    assert pids[3] not in (None, pids[0])
    isolation.discard_worker()
