"""Profiles, xdist workers, shards and merged reports, known issues, flakiness,
Markdown and JUnit outputs."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from xml.etree import ElementTree as ET

import pytest

from fuzz.cli import main
from fuzz.config import RunConfig
from fuzz.records.model import EXIT_OK
from fuzz.run import session
from tests.support import cli

TWO = ["--target", "fla-chunk-offsets", "--target", "glm4v-embeddings"]


def _report(path):
    return json.loads(path.read_text())


def _totals(report):
    return {t["name"]: (t["examples"], {d: v["verdicts"] for d, v in t["by_device"].items()})
            for t in report["targets"]}


def test_workers_distribute_items_over_xdist(tmp_path):
    # The caller's own pytest options (a CI job's PYTEST_ADDOPTS, say --cov) are
    # not the internal pytest's: it loads no plugin that would understand them.
    (tmp_path / "tmp").mkdir()
    result = cli("run", "--device", "cpu", "--seed", "1", "--max-examples", "20", "--workers", "2", "--pieces", "2",
                 *TWO, "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"), "--quiet",
                 extra_env={"PYTEST_ADDOPTS": "--cov=fuzz", "PYTEST_PLUGINS": "no_such_plugin_module",
                            "TMPDIR": str(tmp_path / "tmp")})
    assert result.returncode == 0, result.stdout + result.stderr
    report = _report(tmp_path / "r.json")
    workers = {p["worker"] for t in report["targets"] for p in t["placement"]}
    assert workers == {"gw0", "gw1"}
    assert all(t["examples"] == 20 for t in report["targets"])
    # The xdist run's own folder (run file, results, budget board) is gone once read.
    assert not list((tmp_path / "tmp").glob("syncfuzz-xdist-*"))


@pytest.mark.slow
def test_each_workers_last_item_is_told_so_and_given_a_share(tmp_path):
    """3 items on 2 workers: pytest-xdist hands them out round-robin at once, one worker gets 1 and the
    other 2; the last item on each worker knows it (fuzz/run/xdist_last.py), so it may run to the run's end
    (the shares themselves: tests/unit/test_budget.py). 24 s, twice the minimum, so a busy host's slow
    start-up still leaves every item examples."""
    result = cli("run", "--device", "cpu", "--seed", "1", "--budget", "24", "--confirm", "0", "--workers", "2",
                 *TWO, "--target", "async-tensor-h2d", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    placed = [p for t in _report(tmp_path / "r.json")["targets"] for p in t["placement"]]
    by_worker: dict[str, list[dict]] = {}
    for p in placed:
        by_worker.setdefault(p["worker"], []).append(p)
    assert sorted(len(v) for v in by_worker.values()) == [1, 2]
    for items in by_worker.values():
        assert [p["last_on_worker"] for p in items].count(True) == 1
        assert all(p["share"] > 0 for p in items)
    (lone,) = (v[0] for v in by_worker.values() if len(v) == 1)
    assert lone["last_on_worker"]


def test_two_shards_merge_into_the_totals_of_one_run(tmp_path):
    # Behaviour, not argument parsing: the runs go through the session API; merge-reports is the CLI's.
    def shard_run(name, shard=None):
        config = RunConfig(targets=("fla-chunk-offsets", "glm4v-embeddings"), devices=("cpu",), seed=4,
                           max_examples=30, pieces=2, shard=shard, isolated=False, confirm=0,
                           corpus=str(tmp_path / "c"))
        assert session.run(config, outputs={"report": tmp_path / name}).exit_code == EXIT_OK

    shard_run("whole.json")
    shard_run("s1.json", "1/2")
    shard_run("s2.json", "2/2")
    assert _totals(_report(tmp_path / "s1.json")) != _totals(_report(tmp_path / "whole.json"))
    assert main(["merge-reports", str(tmp_path / "m.json"), str(tmp_path / "s1.json"), str(tmp_path / "s2.json"),
                 "--markdown", str(tmp_path / "m.md")]) == 0
    assert _totals(_report(tmp_path / "m.json")) == _totals(_report(tmp_path / "whole.json"))
    assert "fla-chunk-offsets" in (tmp_path / "m.md").read_text()


@pytest.mark.parametrize("shard", ["0/2", "3/2", "a/b", "1"])
def test_bad_shard_is_a_usage_error(shard, capsys, tmp_path):
    assert main(["run", "--shard", shard, "--corpus", str(tmp_path)]) == 2
    assert "--shard" in capsys.readouterr().err


def test_premerge_profile_is_deterministic(tmp_path):
    reports = []
    for attempt in range(2):
        path = tmp_path / f"r{attempt}.json"
        assert main(["run", "--profile", "premerge", "--device", "cpu", "--in-process", "--quiet", *TWO,
                     "--corpus", str(tmp_path / f"c{attempt}"), "--report", str(path)]) == 0
        reports.append(_report(path))
    assert reports[0]["run"]["seed"] == 0 and reports[0]["run"]["max_examples"] == 100
    assert _totals(reports[0]) == _totals(reports[1])


def test_nightly_profile_rotates_the_seed_daily_and_takes_a_budget(tmp_path):
    path = tmp_path / "r.json"
    before = int(datetime.now(timezone.utc).strftime("%Y%m%d"))
    code = main(["run", "--profile", "nightly", "--budget", "2", "--device", "cpu", "--in-process", "--quiet",
                 "--target", "fla-chunk-offsets", "--corpus", str(tmp_path / "c"), "--report", str(path)])
    after = int(datetime.now(timezone.utc).strftime("%Y%m%d"))
    assert code in (0, 3)  # 3: a host too busy to run an example in the share; never a failure
    run = _report(path)["run"]
    assert run["seed"] in (before, after) and run["budget"] == 2 and run["profile"] == "nightly"


def _known_file(tmp_path, **issue):
    path = tmp_path / "known.json"
    path.write_text(json.dumps({"format": "syncfuzz-known-issues/1", "issues": [issue]}))
    return str(path)


PLANTED = {"SYNCFUZZ_TARGET_MODULES": "tests.planted"}


def test_known_issue_is_reported_but_does_not_fail_the_run(tmp_path):
    known = _known_file(tmp_path, target="planted-offsets-off-by-one", verdict="divergence",
                        reason="accepted for this test")
    result = cli("run", "--target", "planted-offsets-off-by-one", "--device", "cpu", "--seed", "0",
                 "--max-examples", "30", "--in-process", "--confirm", "0", "--known-issues", known,
                 "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"),
                 "--junit", str(tmp_path / "r.xml"), extra_env=PLANTED)
    assert result.returncode == 0, result.stdout + result.stderr
    (failure,) = _report(tmp_path / "r.json")["targets"][0]["failures"]
    assert failure["known"] == "accepted for this test"
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.get("failures") == "0" and "known divergence" in ET.tostring(suite, encoding="unicode")


def test_unknown_failure_fails_junit(tmp_path):
    result = cli("run", "--target", "planted-offsets-off-by-one", "--device", "cpu", "--seed", "0",
                 "--max-examples", "30", "--in-process", "--confirm", "0", "--corpus", str(tmp_path / "c"),
                 "--junit", str(tmp_path / "r.xml"), "--markdown", str(tmp_path / "r.md"), extra_env=PLANTED)
    assert result.returncode == 1
    assert ET.parse(tmp_path / "r.xml").getroot().get("failures") == "1"
    assert "**new**" in (tmp_path / "r.md").read_text()


BAD_KNOWN = {
    "missing": (None, "does not exist"),
    "not-json": ("{", "not valid JSON"),
    "wrong-format": (json.dumps({"format": "x", "issues": []}), "must be an object"),
    "no-reason": (json.dumps({"format": "syncfuzz-known-issues/1", "issues": [{"target": "a", "verdict": "b"}]}),
                  "needs 'target', 'verdict' and 'reason'"),
    "empty-reason": (json.dumps({"format": "syncfuzz-known-issues/1",
                                 "issues": [{"target": "a", "verdict": "b", "reason": " "}]}), "empty reason"),
}


@pytest.mark.parametrize("name", sorted(BAD_KNOWN))
def test_bad_known_issues_file_is_a_usage_error(name, tmp_path, capsys):
    content, expected = BAD_KNOWN[name]
    path = tmp_path / "known.json"
    if content is not None:
        path.write_text(content)
    assert main(["run", "--known-issues", str(path), "--corpus", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err


def test_failure_that_does_not_always_reproduce_is_labelled_flaky(tmp_path):
    env = {"SYNCFUZZ_TARGET_MODULES": "tests.crashers", "SYNCFUZZ_TEST_TOGGLE": str(tmp_path / "toggle")}
    result = cli("run", "--target", "flaky-alternating", "--device", "cpu", "--seed", "0", "--max-examples", "40",
                 "--in-process", "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"),
                 extra_env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    entry = _report(tmp_path / "r.json")["targets"][0]
    assert entry["flaky"]
    failure = entry["failures"][0]
    assert failure["flaky"] and failure["confirmed"] in ("1/3", "2/3")
    assert "(flaky" in result.stdout


@pytest.mark.parametrize("content,expected", [(None, "does not exist"), ("{", "not valid JSON"),
                                              ('{"format": "x", "targets": []}', "not a syncfuzz report")])
def test_bad_merge_input_is_a_usage_error(content, expected, tmp_path, capsys):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    assert main(["merge-reports", str(tmp_path / "out.json"), str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_two_runs_on_one_corpus_each_report_what_they_ran(tmp_path):
    """Concurrent runs share the corpus' example database and failures/, but
    each has its own journal folder: neither reads the other's results (they
    used to, 7 of 12 trials: a run of 300 examples reported the other's 40)."""
    import subprocess
    import sys

    from tests.support import ROOT

    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    runs = [subprocess.Popen([sys.executable, "-m", "fuzz", "run", "--target", "fla-chunk-offsets", "--target",
                              "fla-chunk-indices", "--device", "cpu", "--seed", str(n), "--max-examples", str(n),
                              "--quiet", "--corpus", str(tmp_path / "shared"),
                              "--report", str(tmp_path / f"r{n}.json")],
                             env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for n in (300, 40)]
    for run in runs:
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0, out
    for n in (300, 40):
        assert [t["examples"] for t in _report(tmp_path / f"r{n}.json")["targets"]] == [n, n]
    assert len(list((tmp_path / "shared" / "journal").iterdir())) == 2


@pytest.mark.parametrize("pieces,examples", [(50, 5), (3, 100), (2, 7)])
def test_pieces_add_up_to_exactly_the_examples_asked_for(pieces, examples, tmp_path):
    from fuzz.run.plan import plan
    from fuzz.targets import lookup

    items = plan(lookup(["fla-chunk-offsets"]), seed=0, pieces=pieces, max_examples=examples)
    assert sum(item.max_examples for item in items) == examples  # --pieces 50 --max-examples 5 ran 50
    config = RunConfig(targets=("fla-chunk-offsets",), devices=("cpu",), seed=0, max_examples=examples,
                       pieces=pieces, isolated=False, confirm=0, corpus=str(tmp_path / "c"))
    result = session.run(config)
    assert result.exit_code == EXIT_OK and result.report.targets[0].examples == examples
