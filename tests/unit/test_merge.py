"""Merges that cannot lie (issue #24): merge-reports adds up only disjoint shards of one run.

Every refusal is one ``fuzz: error:`` line naming both files, and leaves OUT as
it was. A merge of every shard of a real run equals that run's report.
"""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from fuzz.cli import main
from fuzz.config import RunConfig
from fuzz.records.model import REPORT_FORMAT, DeviceTally, Report, TargetEntry
from fuzz.reports.scope import run_scope

COPY = {"legacy": {"kind": "copy", "code_sha256": "c0de"}, "optimized": {"kind": "copy", "code_sha256": "c0de"}}
RAN = DeviceTally(examples=5, verdicts={"agree": 5})


def entry(name: str = "t", tally: DeviceTally = RAN) -> TargetEntry:
    return TargetEntry(name=name, upstream=("vllm/x.py::f",), devices=("cpu",), by_device={"cpu": tally})


def scoped(config: RunConfig, shard: tuple[int, int] | None = None, identities: dict = COPY) -> dict:
    """A report's run object as a fresh ``fuzz run`` invocation writes it (its scope built by the same
    function). ``replace`` keeps a config's run id, so each call here draws its own, as each invocation does."""
    config = config.replace(run_id=uuid.uuid4().hex)
    return {**config.to_json(), "scope": run_scope(config, identities, shard)}


def write(tmp_path, name: str, run: dict, *entries: TargetEntry) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(Report(entries or (entry(),), run=run).to_json()))
    return str(path)


PLAN = RunConfig(targets=("t",), seed=3, max_examples=40, pieces=4)


def refused(tmp_path, capsys, *inputs: str, out_exists: bool = False) -> str:
    """merge-reports on ``inputs``: exit 2, one error line, OUT untouched; the line."""
    out = tmp_path / "out.json"
    # An earlier merge's report: OUT may replace only a report (fuzz.reports.preflight.check_overwrite).
    before = json.dumps({"format": REPORT_FORMAT, "note": "an earlier merge"}).encode()
    if out_exists:
        out.write_bytes(before)
    assert main(["merge-reports", str(out), *inputs]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fuzz: error: "), err
    assert (out.read_bytes() == before) if out_exists else not out.exists()
    return err


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("out_exists", [False, True])
def test_the_same_report_twice_is_refused(tmp_path, capsys, out_exists):
    shard = write(tmp_path, "s1.json", scoped(PLAN.replace(shard="1/2"), (1, 2)))
    copy = str(tmp_path / "s1-copy.json")
    shutil.copy(shard, copy)
    err = refused(tmp_path, capsys, shard, copy, out_exists=out_exists)
    assert "s1.json" in err and "s1-copy.json" in err and "the same report given twice" in err


def test_the_same_path_twice_is_refused(tmp_path, capsys):
    whole = write(tmp_path, "whole.json", scoped(PLAN))
    assert "the same report given twice" in refused(tmp_path, capsys, whole, whole)


@pytest.mark.parametrize("out_exists", [False, True])
def test_a_whole_run_plus_one_of_its_shards_is_refused(tmp_path, capsys, out_exists):
    whole = write(tmp_path, "whole.json", scoped(PLAN))
    shard = write(tmp_path, "s2.json", scoped(PLAN.replace(shard="2/2"), (2, 2)))
    err = refused(tmp_path, capsys, shard, whole, out_exists=out_exists)
    assert "'" + whole + "' and '" + shard + "' overlap" in err and "whole run" in err


def test_one_shard_from_two_invocations_is_refused(tmp_path, capsys):
    first = write(tmp_path, "host1.json", scoped(PLAN.replace(shard="1/2"), (1, 2)))
    again = write(tmp_path, "host1-again.json", scoped(PLAN.replace(shard="1/2"), (1, 2)))  # a fresh run id
    err = refused(tmp_path, capsys, first, again)
    assert "host1.json" in err and "host1-again.json" in err and "two invocations" in err and "1/2" in err


def test_two_whole_runs_of_one_plan_are_refused(tmp_path, capsys):
    one, two = (write(tmp_path, f"night{i}.json", scoped(PLAN)) for i in (1, 2))
    assert "two invocations" in refused(tmp_path, capsys, one, two)


def test_shards_of_two_splits_are_refused(tmp_path, capsys):
    half = write(tmp_path, "half.json", scoped(PLAN.replace(shard="1/2"), (1, 2)))
    quarter = write(tmp_path, "quarter.json", scoped(PLAN.replace(shard="2/4"), (2, 4)))
    err = refused(tmp_path, capsys, half, quarter)
    assert "half.json" in err and "quarter.json" in err and "split one run differently" in err


OTHER_PLANS = {
    "seed": (PLAN.replace(seed=4), "seed 3 vs 4"),
    "contract": (PLAN.replace(contract="wide"), 'contract "caller" vs "wide"'),
    "targets": (PLAN.replace(targets=("t", "u")), "targets"),
    "pieces": (PLAN.replace(pieces=2), "pieces 4 vs 2"),
    "examples": (PLAN.replace(max_examples=80), "max_examples 40 vs 80"),
    "stress": (PLAN.replace(stress=True), "stress false vs true"),
    "devices": (PLAN.replace(devices=("cpu", "cuda")), "devices"),
}


@pytest.mark.parametrize("setting", sorted(OTHER_PLANS))
def test_shards_of_different_runs_are_refused_naming_the_setting(tmp_path, capsys, setting):
    config, said = OTHER_PLANS[setting]
    one = write(tmp_path, "a.json", scoped(PLAN.replace(shard="1/2"), (1, 2)))
    two = write(tmp_path, "b.json", scoped(config.replace(shard="2/2"), (2, 2)))
    err = refused(tmp_path, capsys, one, two)
    assert "a.json" in err and "b.json" in err and "different runs" in err and said in err, err


def test_shards_whose_sides_run_other_code_are_refused(tmp_path, capsys):
    release = {**COPY, "legacy": {"kind": "release", "version": "0.33.0", "files_sha256": "f11e"}}
    one = write(tmp_path, "a.json", scoped(PLAN.replace(shard="1/2"), (1, 2)))
    two = write(tmp_path, "b.json", scoped(PLAN.replace(shard="2/2", legacy="vllm==0.33.0"), (2, 2), release))
    assert "legacy_side" in refused(tmp_path, capsys, one, two)


def test_where_a_side_was_read_from_is_not_part_of_the_plan(tmp_path):
    """Hosts find a release's pack in different folders: still one run."""
    here = {**COPY, "legacy": {"kind": "release", "version": "0.33.0", "files_sha256": "f11e", "from": "/a"}}
    there = {**here, "legacy": {**here["legacy"], "from": "/b"}}
    one = scoped(PLAN.replace(shard="1/2"), (1, 2), here)
    two = scoped(PLAN.replace(shard="2/2"), (2, 2), there)
    assert one["scope"]["plan_digest"] == two["scope"]["plan_digest"]


def test_the_corpus_workers_shard_and_confirm_are_not_part_of_the_plan():
    one = scoped(PLAN.replace(shard="1/2", corpus="/x", workers=4, confirm=0), (1, 2))
    two = scoped(PLAN.replace(shard="2/2", corpus="/y", workers=1, confirm=3), (2, 2))
    assert one["scope"]["plan_digest"] == two["scope"]["plan_digest"]
    assert one["scope"]["run_id"] != two["scope"]["run_id"]


def test_a_report_without_a_scope_is_refused(tmp_path, capsys):
    old = write(tmp_path, "old.json", {"seed": 0})
    err = refused(tmp_path, capsys, old)
    assert "old.json" in err and "predates scope recording" in err and "re-run" in err


def test_a_scope_whose_plan_was_edited_is_refused(tmp_path, capsys):
    run = scoped(PLAN)
    run["scope"]["plan"]["seed"] = 4
    assert "plan_digest does not match" in refused(tmp_path, capsys, write(tmp_path, "edited.json", run))


BAD_COUNTS = {
    "negative examples": ({"examples": -5, "verdicts": {}}, "examples -5 is negative"),
    "negative verdict count": ({"examples": 5, "verdicts": {"agree": 7, "divergence": -2}}, "negative"),
    "more verdicts than examples": ({"examples": 5, "verdicts": {"agree": 6}}, "add up to 6, more than its 5"),
    "both_raised over examples": ({"both_raised": 6}, "both_raised 6 is not between 0 and its 5"),
    "negative both_raised": ({"both_raised": -1}, "both_raised -1"),
    "negative sync count": ({"syncs_per_call": {"legacy": {"1": -3}, "optimized": {}}}, "-3 calls with 1 syncs"),
}


@pytest.mark.parametrize("case", sorted(BAD_COUNTS))
def test_impossible_counts_are_refused_when_read(tmp_path, capsys, case):
    change, said = BAD_COUNTS[case]
    data = Report((entry(),), run=scoped(PLAN)).to_json()
    data["targets"][0]["by_device"]["cpu"].update(change)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(data))
    err = refused(tmp_path, capsys, str(path), out_exists=True)
    assert "damaged.json" in err and "on cpu" in err and said in err and "re-run" in err, err


# --------------------------------------------------------------------------- what a merge records


def test_a_partial_merge_is_written_with_complete_false_and_can_be_completed(tmp_path, capsys):
    shards = [write(tmp_path, f"s{i}.json", scoped(PLAN.replace(shard=f"{i}/3"), (i, 3))) for i in (1, 2, 3)]
    partial = tmp_path / "partial.json"
    # Exit 3 (incomplete): the merge was not stopped, but it does not show all its run was asked to.
    assert main(["merge-reports", str(partial), shards[0], shards[2]]) == 3
    out, err = capsys.readouterr()
    err = err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("note: a partial merge") and "missing 2/3" in err, err
    assert "exit 3: incomplete" in out and "a partial merge: the merge covers 2 of the run's 3 shards" in out
    scope = json.loads(partial.read_text())["run"]["scope"]
    assert scope["complete"] is False and scope["missing"] == [2] and scope["covered"] == [1, 3]
    assert scope["shard_count"] == 3 and scope["plan_digest"] == scoped(PLAN)["scope"]["plan_digest"]

    # The partial merge holds shard 3 already: merging it with shard 3 again is refused.
    err = refused(tmp_path, capsys, str(partial), shards[2])
    assert "partial.json" in err and "s3.json" in err and "the same report given twice" in err

    whole = tmp_path / "whole.json"
    assert main(["merge-reports", str(whole), str(partial), shards[1]]) == 0
    assert capsys.readouterr().err == ""
    data = json.loads(whole.read_text())
    assert data["run"]["scope"]["complete"] is True and data["run"]["scope"]["missing"] == []
    assert len(data["run"]["scope"]["run_ids"]) == 3 and data["targets"][0]["examples"] == 15


def test_one_whole_run_alone_merges_complete(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["merge-reports", str(out), write(tmp_path, "whole.json", scoped(PLAN))]) == 0
    assert json.loads(out.read_text())["run"]["scope"]["complete"] is True
    assert "note" not in capsys.readouterr().err


# --------------------------------------------------------------------------- a real run and its shards

RUN = ["run", "--target", "fla-chunk-offsets", "--target", "fla-chunk-indices", "--device", "cpu", "--seed", "3",
       "--max-examples", "40", "--pieces", "4", "--in-process", "--confirm", "0", "--quiet"]


def _counts(path) -> dict:
    """Per target per device: what a merge must reproduce (not seconds, placement or run ids)."""
    report = json.loads(path.read_text())
    return {(t["name"], device): (tally["examples"], tally["verdicts"], tally["both_raised"],
                                  tally["syncs_per_call"], tally["hidden_syncs_per_call"],
                                  tally["consumer_syncs_per_call"],
                                  sorted(json.dumps([f["verdict"], f["mismatches"][:1], f["exceptions"]])
                                         for f in t["failures"] if f["device"] == device))
            for t in report["targets"] for device, tally in t["by_device"].items()}


def test_a_merge_of_every_shard_of_a_run_equals_that_run(tmp_path, capsys):
    def run(name: str, *extra: str) -> object:
        report = tmp_path / f"{name}.json"
        assert main([*RUN, *extra, "--corpus", str(tmp_path / f"corpus-{name}"), "--report", str(report)]) == 0
        return report

    whole, first, second = run("whole"), run("s1", "--shard", "1/2"), run("s2", "--shard", "2/2")
    # Seeded items: the same shard run again (fresh corpus) draws the same examples.
    assert _counts(run("s1-again", "--shard", "1/2")) == _counts(first)
    assert _counts(first) != _counts(whole)

    merged = tmp_path / "merged.json"
    assert main(["merge-reports", str(merged), str(second), str(first)]) == 0
    assert _counts(merged) == _counts(whole)
    assert all(n[0] == 40 for n in _counts(merged).values())
    scopes = {name: json.loads((tmp_path / f"{name}.json").read_text())["run"]["scope"]
              for name in ("whole", "s1", "s2", "merged")}
    assert len({s["plan_digest"] for s in scopes.values()}) == 1
    assert scopes["merged"]["complete"] is True
    assert scopes["merged"]["run_ids"] == sorted([scopes["s1"]["run_id"], scopes["s2"]["run_id"]])
    assert scopes["whole"]["shard"] == [1, 1] and scopes["s2"]["shard"] == [2, 2]
    # run.planned: the targets a report is to hold (a shard: those it has an item of), so an interrupted one's
    # missing targets can be named (issue 45).
    planned = {name: json.loads((tmp_path / f"{name}.json").read_text())["run"]["planned"] for name in ("whole", "s1")}
    both = ["fla-chunk-offsets", "fla-chunk-indices"]
    assert planned == {"whole": both, "s1": both}  # four pieces each: both shards hold items of both
    one_each = run("one-each", "--pieces", "1", "--shard", "2/2")
    assert json.loads(one_each.read_text())["run"]["planned"] == ["fla-chunk-indices"]

    capsys.readouterr()
    assert "whole run" in refused(tmp_path, capsys, str(whole), str(first))
    assert "the same report given twice" in refused(tmp_path, capsys, str(merged), str(first))
    assert "two invocations" in refused(tmp_path, capsys, str(first), str(tmp_path / "s1-again.json"))


# --------------------------------------------------------------------------- issue 45: a part cut short by a signal


def stopped(tmp_path, name: str, run: dict, planned: list[str], *entries: TargetEntry) -> str:
    """A report as a run stopped by SIGTERM while fuzzing writes it: the targets it planned, those finished."""
    path = tmp_path / name
    report = Report(entries, run={**run, "planned": planned, "interrupted_in": "fuzzing"}, interrupted="SIGTERM")
    assert report.exit_code() == 143  # the run's own exit: its process was stopped
    path.write_text(json.dumps(report.to_json()))
    return str(path)


def test_a_merge_exits_by_what_it_holds_not_by_the_signal_that_stopped_an_input(tmp_path, capsys):
    """Merging an interrupted report is not an interrupted merge: exit 3 (incomplete), or 1 where a failure was
    found; every output names the part that was stopped and the targets that never ran."""
    import xml.etree.ElementTree as ET

    plan = RunConfig(targets=("t", "u"), seed=3, max_examples=40)
    alone = stopped(tmp_path, "alone.json", scoped(plan), ["t", "u"], entry("t"))
    out, md, xml = tmp_path / "out.json", tmp_path / "out.md", tmp_path / "out.xml"
    assert main(["merge-reports", str(out), alone, "--markdown", str(md), "--junit", str(xml)]) == 3
    said, err = capsys.readouterr()
    assert "note: a partial merge (the whole run was interrupted by SIGTERM in fuzzing; never ran: u)" in err
    assert "1 never ran; exit 3: incomplete" in said and "a partial merge: the whole run was interrupted" in said
    data = json.loads(out.read_text())
    assert data["exit_code"] == 3 and data["interrupted"] == "SIGTERM" and data["never_ran"] == ["u"]
    assert data["partial"] == "the whole run was interrupted by SIGTERM in fuzzing"
    assert "**Partial**: the whole run was interrupted by SIGTERM in fuzzing" in md.read_text()
    assert "**Never ran**: u" in md.read_text() and "result: " in md.read_text()
    (case,) = [c for c in ET.parse(xml).getroot().iter("testcase") if c.get("name") == "never ran"]
    assert case.get("classname") == "syncfuzz.u" and case.find("error") is not None

    # Shard 2 stopped, shard 1 whole: shard 2's unfinished target never ran; a new failure makes it exit 1.
    config = plan.replace(pieces=2)
    first = write(tmp_path, "s1.json", {**scoped(config.replace(shard="1/2"), (1, 2)), "planned": ["t"]})
    second = stopped(tmp_path, "s2.json", scoped(config.replace(shard="2/2"), (2, 2)), ["u"])
    assert main(["merge-reports", str(out), first, second]) == 3
    data = json.loads(out.read_text())
    assert data["partial"] == "shard 2/2 was interrupted by SIGTERM in fuzzing" and data["never_ran"] == ["u"]
    assert data["run"]["scope"]["complete"] is True  # every shard is there; one of them is partial
    capsys.readouterr()
    from fuzz.records.model import Failure

    failing = entry("t").with_failures([Failure(device="cpu", verdict="divergence", input={})])
    found = stopped(tmp_path, "found.json", scoped(plan), ["t", "u"], failing)
    assert main(["merge-reports", str(out), found]) == 1
    assert "exit 1: a failing verdict" in capsys.readouterr().out


def test_reports_from_before_run_planned_read_as_before(tmp_path, capsys):
    """No ``run.planned``: a whole report is whole (never_ran []), an interrupted one cannot name its gaps."""
    whole = Report((entry(),), run=scoped(PLAN))
    assert whole.partial() is None and whole.never_ran() == [] and whole.exit_code() == 0
    cut = Report((entry(),), run=scoped(PLAN), interrupted="SIGINT")
    assert cut.partial() == "interrupted by SIGINT" and cut.never_ran() is None and cut.exit_code() == 130
    path = tmp_path / "old.json"
    path.write_text(json.dumps(cut.to_json()))
    assert main(["merge-reports", str(tmp_path / "out.json"), str(path), "--junit", str(tmp_path / "o.xml")]) == 3
    assert "which targets never ran is not recorded" in capsys.readouterr().err
    assert 'classname="syncfuzz.run" name="never ran"' in (tmp_path / "o.xml").read_text()


def test_a_report_stopped_in_set_up_is_refused_as_what_it_is(tmp_path, capsys):
    """Stopped before its run was planned, a report has no scope: not one "from before scopes were recorded"."""
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(Report((), run={"planned": ["t"], "interrupted_in": "set-up"},
                                      interrupted="SIGTERM").to_json()))
    err = refused(tmp_path, capsys, str(path))
    assert "was stopped in set-up, before its run was planned" in err and "predates" not in err


def test_a_merge_missing_a_shard_says_so_in_markdown_and_junit(tmp_path, capsys):
    """Its targets cannot be named, but the gap can: one JUnit error per missing shard, and the Markdown's top."""
    import xml.etree.ElementTree as ET

    shards = [write(tmp_path, f"s{i}.json", scoped(PLAN.replace(shard=f"{i}/3"), (i, 3))) for i in (1, 2, 3)]
    out, md, xml = tmp_path / "out.json", tmp_path / "out.md", tmp_path / "out.xml"
    assert main(["merge-reports", str(out), shards[0], "--markdown", str(md), "--junit", str(xml)]) == 3
    assert "**Partial**: the merge covers 1 of the run's 3 shards (missing 2/3, 3/3)" in md.read_text()
    cases = [(c.get("classname"), c.get("name")) for c in ET.parse(xml).getroot().iter("testcase")
             if c.find("error") is not None]
    assert cases == [("syncfuzz.shards", "shard 2/3"), ("syncfuzz.shards", "shard 3/3")]
    assert json.loads(out.read_text())["never_ran"] == []  # what it holds ran whole; the gap is the shards


def test_shrink_steps_add_up_and_an_older_report_has_none():
    """DeviceTally.shrink_steps (issue #45): summed like the examples; absent in a report from before: 0."""
    from fuzz.records.model import ReportError

    merged = DeviceTally(examples=10, verdicts={"agree": 10}, shrink_steps=2) + DeviceTally(
        examples=5, verdicts={"agree": 4, "divergence": 1}, shrink_steps=30)
    assert (merged.examples, merged.shrink_steps) == (15, 32)
    data = merged.to_json()
    assert DeviceTally.from_json(data, "t").shrink_steps == 32
    assert DeviceTally.from_json({k: v for k, v in data.items() if k != "shrink_steps"}, "t").shrink_steps == 0
    with pytest.raises(ReportError, match="shrink_steps -1 is negative"):
        DeviceTally.from_json({**data, "shrink_steps": -1}, "t")
