"""Reach end to end through ``fuzz.cli.main``: ``fuzz run --coverage``, ``fuzz coverage REPORT``, the change's
coverage of sides from source packs (``--require-changes-covered``), and ``merge-reports`` of shards."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from fuzz.cli import main
from fuzz.records.model import Report

try:
    from fuzz.records import reachdata as data
except ImportError:  # pragma: no cover -- the layout before the JSON model moved out of fuzz/reach/collect.py
    from fuzz.reach.collect import collect as data

ROOT = Path(__file__).resolve().parents[2]
INDEX = "vllm/third_party/flash_linear_attention/ops/index.py"
SIDES_ARGS = ["--legacy", "vllm==0.28.0", "--optimized", "vllm==0.33.0"]


def run_main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def fuzz_run(folder: Path, *extra: str, name: str = "r") -> tuple[int, str, str, Path]:
    """``fuzz run`` in-process on CPU, 15 examples, its report (and Markdown, JUnit) in ``folder``."""
    report = folder / f"{name}.json"
    code, out, err = run_main(["run", "--in-process", "--device", "cpu", "--confirm", "0", "--max-examples", "15",
                               "--seed", "3", "--corpus", str(folder / f"corpus-{name}"), "--report", str(report),
                               "--markdown", str(folder / f"{name}.md"), "--junit", str(folder / f"{name}.xml"),
                               *extra])
    return code, out, err, report


def needs_packs(*versions: str) -> None:
    missing = [v for v in versions if not (ROOT / "sources" / f"vllm-{v}").is_dir()]
    if missing:
        pytest.skip(f"no source pack for vllm {', '.join(missing)} in sources/")


@pytest.fixture(scope="module", autouse=True)
def no_other_tracer():
    import coverage

    if coverage.Coverage.current() is not None:
        pytest.skip("this process is measured by coverage already (pytest-cov): a run does not measure then")


# --------------------------------------------------------------------------- run --coverage, fuzz coverage

@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("measured")
    code, out, err, report = fuzz_run(folder, "--coverage", "--target", "fla-chunk-offsets",
                                      "--target", "paddleocr-encoder")
    return code, out, err, report


def test_coverage_puts_reach_in_the_json_report(measured):
    code, _, err, report = measured
    assert code == 0, err
    found = json.loads(report.read_text())
    assert found["run"]["coverage"] is True
    targets = {t["name"]: t for t in found["targets"]}
    assert set(targets) == {"fla-chunk-offsets", "paddleocr-encoder"}
    for name, target in targets.items():
        assert set(target["reach"]) == {"cpu"}, name
        assert set(target["reach"]["cpu"]) == {"legacy", "optimized"}
        for side, rec in target["reach"]["cpu"].items():
            assert rec["definitions"] and all(data.entered(u) for u in rec["definitions"].values()), (name, side)
            assert rec["executed"]
        assert target["verdict_by_device"] == {"cpu": "agree"}
    # What was written reads back.
    Report.from_json(found, str(report))


def test_the_table_has_the_reached_column_with_percentages(measured):
    _, out, _, report = measured
    header = next(line for line in out.splitlines() if line.startswith("target "))
    assert header.rstrip().endswith("reached legacy/optimized")
    entries = {e.name: e for e in Report.from_json(json.loads(report.read_text()), "r").targets}
    for name, entry in entries.items():
        row = next(line for line in out.splitlines() if line.startswith(name + " "))
        cell = row.split()[-1]
        assert re.fullmatch(r"\d+%/\d+%", cell), row
        expected = "/".join(data.percent(*data.line_counts(entry.reach["cpu"][s])) for s in ("legacy", "optimized"))
        assert cell == expected
    assert "fla-chunk-offsets" in out and "100%/100%" in out
    assert any(line.startswith("reach: lines of the claimed definitions run, legacy ") for line in out.splitlines())
    markdown = report.with_suffix(".md").read_text()
    assert "| reached legacy/optimized |" in markdown
    assert re.search(r"\| fla-chunk-offsets \| cpu \| 15 \| 0 \| agree \| .* \| \d+%/\d+% \|", markdown)
    assert "## Changed definitions" not in markdown  # copies on both sides: no change to cover


def test_fuzz_coverage_prints_the_lines_not_run(measured, capsys):
    _, _, _, report = measured
    capsys.readouterr()
    assert main(["coverage", str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    entries = {e.name: e for e in Report.from_json(json.loads(report.read_text()), "r").targets}
    missing = {(name, side): [line for line in u["lines"] if line not in u["reached"]]
               for name, e in entries.items() for side, rec in e.reach["cpu"].items()
               for u in rec["definitions"].values()}
    if not any(missing.values()):
        assert not any("not run:" in line for line in out)
    for (name, side), lines in missing.items():
        if not lines:
            continue
        head = next(i for i, line in enumerate(out) if line.startswith(f"{name} on cpu, {side} ("))
        assert "  not run:" in out[head:head + 5]
        listed = [int(m.group(1)) for line in out[head:] if (m := re.match(r"    (\d+) ", line))]
        assert set(lines) <= set(listed)
    # The shipped copies are the code that ran: each line not run shows its text and its upstream line.
    assert all(re.match(r"    \d+ \(upstream \d+\)\s+\S", line) for line in out if re.match(r"    \d+ ", line))


def test_fuzz_coverage_of_a_fully_run_target_says_every_line_ran(measured, capsys):
    _, _, _, report = measured
    entry = next(e for e in Report.from_json(json.loads(report.read_text()), "r").targets
                 if e.name == "fla-chunk-offsets")
    complete = all(data.line_counts(r)[0] == data.line_counts(r)[1] and
                   data.arc_counts(r)[0] == data.arc_counts(r)[1] for r in entry.reach["cpu"].values())
    capsys.readouterr()
    assert main(["coverage", str(report), "--target", "fla-chunk-offsets"]) == 0
    out = capsys.readouterr().out.splitlines()
    if complete:
        assert out == ["every line and branch of every claimed definition ran"]
    else:
        assert any("not run:" in line or "branches not taken" in line for line in out)
    # --all lists each definition anyway; --side and --device filter.
    assert main(["coverage", str(report), "--target", "fla-chunk-offsets", "--all", "--side", "optimized"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("fla-chunk-offsets on cpu, optimized (optimized/fla_index.py:")
    assert "prepare_chunk_offsets" in listed[0] and INDEX in listed[0]
    assert not any(", legacy (" in line for line in listed)
    assert listed[1].startswith("  lines ") and "%" in listed[1]


def test_fuzz_coverage_with_an_unknown_target_exits_2(measured, capsys):
    _, _, _, report = measured
    capsys.readouterr()
    assert main(["coverage", str(report), "--target", "no-such-target"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fuzz: error: ") and "no-such-target" in err[0]
    assert "fla-chunk-offsets" in err[0]  # it names those it has
    assert captured.out == ""


def test_fuzz_coverage_of_a_report_without_reach_exits_2_with_one_line(tmp_path, capsys):
    code, _, err, report = fuzz_run(tmp_path, "--no-coverage", "--target", "fla-chunk-offsets", "--max-examples",
                                    "5")
    assert code == 0, err
    found = json.loads(report.read_text())
    assert found["targets"][0]["reach"] == {} and found["run"]["coverage"] is False
    capsys.readouterr()
    assert main(["coverage", str(report)]) == 2
    captured = capsys.readouterr()
    err_lines = captured.err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("fuzz: error: ") and "--coverage" in err_lines[0]
    assert captured.out == ""
    # The table's column says it was not measured.
    assert "| - |" in report.with_suffix(".md").read_text()


def test_fuzz_coverage_of_a_damaged_report_exits_2(measured, tmp_path, capsys):
    _, _, _, report = measured
    found = json.loads(report.read_text())
    found["targets"][0]["reach"]["cpu"]["legacy"]["definitions"] = []
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(found))
    capsys.readouterr()
    assert main(["coverage", str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "definitions" in err[0]


# --------------------------------------------------------------------------- --require-changes-covered

@pytest.mark.parametrize("extra", [[], ["--coverage"], ["--legacy", "copy", "--optimized", "copy"],
                                   [*SIDES_ARGS, "--no-coverage"]])
def test_require_changes_covered_without_what_it_needs_exits_2_before_any_work(tmp_path, extra):
    code, out, err, report = fuzz_run(tmp_path, "--require-changes-covered", "--target", "fla-chunk-offsets",
                                      *extra)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fuzz: error: --require-changes-covered")
    assert not report.exists() and not (tmp_path / "corpus-r").exists() and "[fuzz]" not in out
    assert not report.with_suffix(".md").exists() and not report.with_suffix(".xml").exists()


@pytest.fixture(scope="module")
def from_sources(tmp_path_factory):
    needs_packs("0.28.0", "0.33.0")
    folder = tmp_path_factory.mktemp("sources")
    plain = fuzz_run(folder, *SIDES_ARGS, "--target", "fla-chunk-offsets", "--coverage", name="plain")
    required = fuzz_run(folder, *SIDES_ARGS, "--target", "fla-chunk-offsets", "--coverage",
                        "--require-changes-covered", name="required")
    return plain, required


@pytest.fixture(scope="module")
def sync_required(tmp_path_factory):
    """0.28.0 -> 0.33.0 with fla-chunk-indices, the target that runs prepare_chunk_indices (sync-relevant:
    its async_tensor_h2d call changed), under --require-changes-covered=sync."""
    needs_packs("0.28.0", "0.33.0")
    folder = tmp_path_factory.mktemp("sync")
    return fuzz_run(folder, *SIDES_ARGS, "--target", "fla-chunk-indices", "--require-changes-covered=sync",
                    name="sync")


def test_sides_from_sources_list_the_changed_definitions(from_sources):
    (code, out, err, report), _ = from_sources
    found = json.loads(report.read_text())
    assert code == found["exit_code"] and code in (0, 1), err
    changes = found["run"]["changes"]
    assert changes["legacy"] == "vllm==0.28.0" and changes["optimized"] == "vllm==0.33.0"
    assert changes["required"] is False and changes["measured"] is True
    listed = changes["changed"]
    assert listed and all({"path", "qualname", "change", "line", "ref", "targets", "lines", "reached",
                           "sync_relevant", "sync", "changed_lines"} <= set(c) for c in listed)
    assert all(c["ref"] == f"{c['path']}::{c['qualname']}" for c in listed)
    assert all(c["change"] in ("changed", "added", "removed") for c in listed)
    # prepare_chunk_indices changed between these releases, and fla-chunk-offsets does not run it.
    refs = {c["ref"]: c for c in listed}
    assert refs[f"{INDEX}::prepare_chunk_indices"]["change"] == "changed"
    assert refs[f"{INDEX}::prepare_chunk_indices"]["targets"] == []
    # Its diff changes the async_tensor_h2d call (fuzz/code/syncdiff.py): sync-relevant, and the footer says so.
    assert refs[f"{INDEX}::prepare_chunk_indices"]["sync"] == ["non_blocking", "async_tensor_h2d"]
    assert changes["sync_relevant"] == sum(c["sync_relevant"] for c in listed) >= 1
    assert changes["require"] is None
    assert changes["not_covered"] == [c["ref"] for c in listed if not c["targets"]]
    assert f"{INDEX}::prepare_chunk_indices" in changes["not_covered"]
    assert changes["fuzzed"] == len([c for c in listed if c["targets"]])
    sync = [c for c in listed if c["sync_relevant"]]
    head = (f"changed: {len(listed)} definitions between vllm==0.28.0 and vllm==0.33.0; sync-relevant {len(sync)} "
            f"(fuzzed {sum(bool(c['targets']) for c in sync)}); other {len(listed) - len(sync)} (fuzzed ")
    assert any(line.startswith(head) for line in out.splitlines()), out


def test_without_the_flag_not_covered_changes_do_not_fail_the_run(from_sources):
    (code, _, _, report), _ = from_sources
    found = Report.from_json(json.loads(report.read_text()), "plain")
    assert found.changes_not_covered() == [] and code == found.exit_code()
    assert code != 3 or found.untested() or found.unreached()
    markdown = report.with_suffix(".md").read_text()
    assert "## Changed definitions" in markdown
    assert (f"| `{INDEX}::prepare_chunk_indices` | changed | yes: non_blocking, async_tensor_h2d | **not covered** "
            "| - | - |") in markdown
    suite = ET.fromstring(report.with_suffix(".xml").read_text())
    cases = [c for c in suite.iter("testcase") if c.get("classname") == "syncfuzz.changes"]
    assert len(cases) == 1 and cases[0].find("failure") is None
    assert (f"{INDEX}::prepare_chunk_indices (changed; sync-relevant: non_blocking, async_tensor_h2d): not covered"
            in cases[0].find("system-out").text)


def test_with_require_changes_covered_a_not_covered_change_exits_3(from_sources):
    _, (code, out, err, report) = from_sources
    found = json.loads(report.read_text())
    assert code == 3 == found["exit_code"], err
    changes = found["run"]["changes"]
    assert changes["required"] is True and changes["require"] == "reached" and changes["not_covered"]
    assert Report.from_json(found, "required").changes_not_covered() == sorted(changes["not_covered"])
    closing = out.strip().splitlines()[-1]
    assert closing.startswith("result: ") and "exit 3" in closing
    assert f"({len(changes['not_covered'])} changed definitions no target reached)" in closing
    suite = ET.fromstring(report.with_suffix(".xml").read_text())
    case = next(c for c in suite.iter("testcase") if c.get("classname") == "syncfuzz.changes")
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == \
        f"{len(changes['not_covered'])} changed definitions no target reached"
    assert f"{INDEX}::prepare_chunk_indices" in failure.text.splitlines()
    assert int(suite.get("failures")) >= 1
    assert "## Changed definitions" in report.with_suffix(".md").read_text()


def test_require_sync_counts_only_the_sync_relevant_and_their_untaken_changed_branches(sync_required):
    """--require-changes-covered=sync: the other changed definitions no target reached do not count; the
    sync-relevant ones do, and so does a changed branch of one that ran but no example took."""
    code, out, err, report = sync_required
    found = json.loads(report.read_text())
    changes = found["run"]["changes"]
    assert changes["require"] == "sync" and found["run"]["require_changes_covered"] == "sync"
    listed = {c["ref"]: c for c in changes["changed"]}
    ran = listed[f"{INDEX}::prepare_chunk_indices"]
    assert ran["sync_relevant"] and ran["targets"] == ["fla-chunk-indices"]
    assert set(ran["untaken"]) == {"legacy", "optimized"}
    assert all({"statements", "lines", "branches", "arcs"} <= set(side) for side in ran["untaken"].values())
    others = [ref for ref, c in listed.items() if not c["targets"] and not c["sync_relevant"]]
    assert others  # not covered, yet not counted under =sync
    loaded = Report.from_json(found, "sync")
    expected = sorted([ref for ref, c in listed.items() if c["sync_relevant"] and not c["targets"]]
                      + [ref for ref, c in listed.items() if c["sync_relevant"] and c["targets"]
                         and any(side.get("arcs") for side in c["untaken"].values())])
    assert loaded.changes_not_covered() == expected
    assert not set(others) & set(loaded.changes_not_covered())
    assert code == found["exit_code"] == (3 if expected else code), err
    if expected:
        assert "sync-relevant changed definitions" in out.strip().splitlines()[-1]
    # The full list of the changed code no example took.
    listed_code, listing, listing_err = run_main(["coverage", str(report), "--changes", "--all"])
    assert listed_code == 0, listing_err
    assert listing.startswith("changed: ")
    assert (f"{INDEX}::prepare_chunk_indices (changed; sync-relevant: non_blocking, async_tensor_h2d): "
            "fla-chunk-indices") in listing.splitlines()
    untaken = ran["untaken"]["optimized"]
    assert (f"  optimized (vllm==0.33.0): changed lines {len(untaken['lines'])}/{untaken['statements']} not run, "
            f"branches {len(untaken['arcs'])}/{untaken['branches']} not taken") in listing.splitlines()


def test_a_change_a_target_ran_is_covered(tmp_path):
    """0.27.1 -> 0.28.0 changed prepare_chunk_offsets (PR #52369): the fla-chunk-offsets run covers it."""
    needs_packs("0.27.1", "0.28.0")
    code, out, err, report = fuzz_run(tmp_path, "--legacy", "vllm==0.27.1", "--optimized", "vllm==0.28.0",
                                      "--target", "fla-chunk-offsets", "--coverage", "--max-examples", "10")
    found = json.loads(report.read_text())
    assert code == found["exit_code"] and code in (0, 1), err
    changes = found["run"]["changes"]
    refs = {c["ref"]: c for c in changes["changed"]}
    covered = refs[f"{INDEX}::prepare_chunk_offsets"]
    assert covered["change"] == "changed" and covered["targets"] == ["fla-chunk-offsets"]
    assert 0 < covered["reached"] <= covered["lines"]
    assert f"{INDEX}::prepare_chunk_offsets" not in changes["not_covered"]
    assert changes["fuzzed"] >= 1 and changes["lines"] >= covered["lines"]
    markdown = report.with_suffix(".md").read_text()
    assert (f"| `{INDEX}::prepare_chunk_offsets` | changed | no | fla-chunk-offsets | "
            f"{covered['reached']}/{covered['lines']} | - |") in markdown
    # It ran: each side's changed code, all taken.
    assert set(covered["untaken"]) == {"legacy", "optimized"}
    assert all(found["lines"] == [] and found["arcs"] == [] for found in covered["untaken"].values())


# --------------------------------------------------------------------------- merge-reports adds reach up

def test_merge_reports_of_two_shards_adds_reach_up(tmp_path, capsys):
    shards = []
    for i in (1, 2):
        code, _, err, report = fuzz_run(tmp_path, "--coverage", "--target", "paddleocr-encoder", "--target",
                                        "fla-chunk-offsets", "--pieces", "2", "--shard", f"{i}/2", "--max-examples",
                                        "10", name=f"s{i}")
        assert code == 0, err
        shards.append(json.loads(report.read_text()))
    # Each shard ran a piece of each target; edit each shard's reach down to a different part of what it ran,
    # so that only their sum has both parts (the lines two real shards reach are often the same).
    expected: dict = {}
    for i, shard in enumerate(shards):
        for target in shard["targets"]:
            assert target["reach"], target["name"]
            for side, rec in target["reach"]["cpu"].items():
                for qualname, unit in rec["definitions"].items():
                    unit["reached"] = unit["reached"][i::2]
                    unit["reached_arcs"] = unit["reached_arcs"][i::2]
                    key = (target["name"], side, qualname)
                    lines, arcs = expected.setdefault(key, (set(), set()))
                    lines.update(unit["reached"])
                    arcs.update(tuple(a) for a in unit["reached_arcs"])
                for qualname, ran in rec["executed"].items():
                    ran["reached"] = ran["reached"][i::2]
                    expected.setdefault((target["name"], side, "executed", qualname), set()).update(ran["reached"])
        (tmp_path / f"e{i + 1}.json").write_text(json.dumps(shard))
    merged = tmp_path / "merged.json"
    capsys.readouterr()
    assert main(["merge-reports", str(merged), str(tmp_path / "e1.json"), str(tmp_path / "e2.json")]) == 0
    result = json.loads(merged.read_text())
    assert result["run"]["scope"]["complete"] is True
    by_name = {t["name"]: t for t in result["targets"]}
    assert set(by_name) == {"paddleocr-encoder", "fla-chunk-offsets"}
    grew = False
    for key, want in expected.items():
        name, side = key[:2]
        rec = by_name[name]["reach"]["cpu"][side]
        if key[2] == "executed":
            assert set(rec["executed"][key[3]]["reached"]) == want, key
            continue
        unit = rec["definitions"][key[2]]
        assert set(unit["reached"]) == want[0], key
        assert {tuple(a) for a in unit["reached_arcs"]} == want[1], key
        parts = [set(t["reach"]["cpu"][side]["definitions"][key[2]]["reached"])
                 for s in shards for t in s["targets"] if t["name"] == name]
        grew = grew or all(part < want[0] for part in parts)
    assert grew  # some definition's merged lines are more than either shard's
    # Edited shard 2 alone never entered prepare_chunk_offsets (its part of one reached line is empty): merged,
    # the claim shard 1 reached is reached.
    assert by_name["fla-chunk-offsets"]["verdict_by_device"] == {"cpu": "agree"}
    alone = Report.from_json(json.loads((tmp_path / "e2.json").read_text()), "e2")
    assert next(e for e in alone.targets if e.name == "fla-chunk-offsets").verdict_on("cpu") == "unreached"
    for target in by_name.values():
        assert target["examples"] == 10
    # The merge renders the sum: the table of the merged report, and fuzz coverage reads it.
    assert main(["coverage", str(merged)]) == 0


def _two_shards(tmp_path, examples: int) -> list[Path]:
    """The reports of fla-chunk-offsets' two shards (``--pieces 2``), reach measured."""
    reports = []
    for i in (1, 2):
        code, _, err, report = fuzz_run(tmp_path, "--coverage", "--target", "fla-chunk-offsets", "--pieces", "2",
                                        "--shard", f"{i}/2", "--max-examples", str(examples), name=f"s{i}")
        assert code == 0, err
        reports.append(report)
    return reports


def test_merge_reports_of_two_real_shards_keeps_their_reach(tmp_path, capsys):
    reports = _two_shards(tmp_path, 10)
    merged = tmp_path / "merged.json"
    assert main(["merge-reports", str(merged), *map(str, reports)]) == 0
    shards = [json.loads(r.read_text())["targets"][0]["reach"] for r in reports]
    total = json.loads(merged.read_text())["targets"][0]
    assert total["reach"] == data.add_reach(shards[0], shards[1], "fla-chunk-offsets")
    assert total["verdict_by_device"] == {"cpu": "agree"}
    table = capsys.readouterr().out.splitlines()
    assert any(line.startswith("target ") and line.rstrip().endswith("reached legacy/optimized") for line in table)
    row = next(line for line in table if line.startswith("fla-chunk-offsets "))
    assert row.split()[-1] == "/".join(data.percent(*data.line_counts(total["reach"]["cpu"][side]))
                                       for side in ("legacy", "optimized"))


def test_merge_reports_refuses_shards_whose_reach_ran_different_code(tmp_path, capsys):
    reports = _two_shards(tmp_path, 6)
    edited = json.loads(reports[1].read_text())
    for unit in edited["targets"][0]["reach"]["cpu"]["legacy"]["definitions"].values():
        unit["digest"] = "0" * 16
    reports[1].write_text(json.dumps(edited))
    merged = tmp_path / "merged.json"
    capsys.readouterr()
    assert main(["merge-reports", str(merged), *map(str, reports)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different code" in err[0] and not merged.exists()
