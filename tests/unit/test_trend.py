"""``fuzz trend``: nightly reports side by side and what the last night changed (fuzz/reports/trend.py)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pytest

from fuzz.cli import main
from fuzz.records.model import DeviceTally, Failure, Report, TargetEntry
from fuzz.reports.merge import read_report
from fuzz.reports.trend import (
    KNOWN,
    NEW,
    NOT_SEEN,
    Trend,
    examples_per_second_chart,
    optimized_syncs_chart,
    what_changed,
)

H200 = Path(__file__).parents[1] / "data" / "h200-cuda.json"  # a real `fuzz run --device cuda` on an H200
SINCE = "since 2026-11-30 02:17: "


def _failure(verdict: str, leaf: str, known: str | None = None) -> Failure:
    return Failure(device="cuda", verdict=verdict, input={"n": 1}, known=known,
                   mismatches=({"path": leaf, "what": "value", "detail": "1 != 2"},))


def _entry(name: str, examples: int, seconds: float, optimized: dict[str, int], failures=()) -> TargetEntry:
    tally = DeviceTally(examples=examples, verdicts={"agree": examples - len(failures)},
                        syncs_per_call={"legacy": {"2": examples}, "optimized": optimized})
    return TargetEntry(name=name, devices=("cuda",), by_device={"cuda": tally}, failures=tuple(failures),
                       seconds=seconds)


def _report(night: str, started: str | None, entries: list[TargetEntry]) -> Report:
    run = {"seed": int(night), "scope": {"run_id": f"run-{night}", "shard": [1, 1]}}
    if started:
        run["started"] = started
    return Report(tuple(entries), run=run, versions={"syncfuzz": "0.1.0"})


def night1(started: str | None = "2026-11-30T02:17:03+00:00") -> Report:
    return _report("20261130", started, [
        _entry("alpha", 200, 2.0, {"0": 150, "1": 50}, [_failure("divergence", "[0]['x']")]),
        _entry("beta", 100, 1.0, {"0": 100}),
        _entry("gamma", 300, 3.0, {"1": 300}, [_failure("sync-regression", "[]", known="F9: accepted")]),
    ])


def night2(started: str | None = "2026-12-01T02:17:41+00:00", beta: str = "beta") -> Report:
    return _report("20261201", started, [
        # syncs rose (median 0 -> 2, max 1 -> 3); its divergence is gone; examples fell by 10% only
        _entry("alpha", 180, 2.0, {"0": 60, "2": 100, "3": 20}),
        _entry(beta, 100, 1.0, {"0": 100}, [_failure("divergence", "[1]['y']")]),  # a new failure
        _entry("gamma", 100, 3.0, {"1": 100}, [_failure("sync-regression", "[]", known="F9: accepted")]),
    ])


EXPECTED = [
    SINCE + "new failure: beta divergence on cuda",
    SINCE + "not seen tonight: alpha divergence on cuda (no failure in 180 examples there)",
    SINCE + "alpha: optimized syncs per call rose against legacy: median 0 -> 2, max 1 -> 3 "
            "(legacy median 2 -> 2, max 2 -> 2)",
    SINCE + "gamma: examples fell by 67% (300 -> 100)",
]


def _write(path: Path, report: Report) -> str:
    path.write_text(json.dumps(report.to_json()))
    return str(path)


@pytest.fixture
def nights(tmp_path):
    return _write(tmp_path / "n1.json", night1()), _write(tmp_path / "n2.json", night2())


def test_what_changed_names_the_rise_the_fix_the_new_failure_and_the_fall(nights):
    trend = Trend.from_reports([(name, read_report(name)) for name in reversed(nights)])  # ordered by start time
    assert [n.name for n in trend.nights] == list(nights)
    assert what_changed(trend) == EXPECTED
    assert what_changed(trend, threshold=0.7) == EXPECTED[:3]  # 67% is not more than 70%
    statuses = {(f.target, f.status) for f in trend.nights[-1].failures}
    assert statuses == {("beta", NEW), ("alpha", NOT_SEEN), ("gamma", KNOWN)}


def test_the_chart_data_are_the_reports_numbers(nights):
    trend = Trend.from_reports([(name, read_report(name)) for name in nights])
    rates = examples_per_second_chart(trend)
    assert rates.nights == ("2026-11-30 02:17", "2026-12-01 02:17")
    assert rates.series == {"alpha": (100.0, 90.0), "beta": (100.0, 100.0), "gamma": (100.0, 100 / 3)}
    assert optimized_syncs_chart(trend).series == {"alpha": (1.0, 3.0), "beta": (0.0, 0.0), "gamma": (1.0, 1.0)}
    alpha = trend.nights[-1].targets["alpha"].syncs
    assert (alpha["optimized"].median, alpha["optimized"].max, alpha["legacy"].max) == (2, 3, 2)


def test_without_a_start_time_the_command_line_order_is_kept(tmp_path, capsys):
    first = _write(tmp_path / "a.json", night1(started=None))
    second = _write(tmp_path / "b.json", night2(started=None))
    assert main(["trend", first, second]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == f"since {first}: new failure: beta divergence on cuda"
    assert "in the order given" in err


def test_nothing_changed_untested_cannot_build_verdict_and_targets(tmp_path):
    same = Trend.from_reports([("a", night1()), ("b", _report("20261201", "2026-12-01T02:17:00+00:00",
                                                              list(night1().targets)))])
    assert what_changed(same) == [SINCE + "nothing changed"]
    later = [TargetEntry(name="alpha", devices=("cuda",), cannot_build="no such module", seconds=1.0),
             _entry("beta", 100, 1.0, {"0": 100}, [_failure("divergence", "[0]", known="F3: accepted")]),
             TargetEntry(name="gamma", devices=("cuda",), seconds=1.0),  # ran nothing: its failure is not "fixed"
             _entry("delta", 10, 1.0, {"0": 10})]
    trend = Trend.from_reports([("a", night1()), ("b", _report("20261201", "2026-12-01T02:17:00+00:00", later))])
    assert what_changed(trend) == [
        SINCE + "alpha: newly cannot-build (no such module)",
        SINCE + "gamma: newly untested on cuda",
        SINCE + "beta: verdict agree -> divergence",  # a known failure: not new, but the verdict changed
        SINCE + "delta: new target",
    ]
    gone = Trend.from_reports([("a", night1()), ("b", _report("20261201", None, list(night1().targets)[:2]))])
    assert what_changed(gone) == ["since a: gamma: no longer in the report"]


def _refused(capsys, argv: list[str], *words: str) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


def test_refusals_are_one_line_exit_2_and_write_nothing(tmp_path, nights, capsys):
    n1, n2 = nights
    md, page = tmp_path / "t.md", tmp_path / "t.html"
    outputs = ["--markdown", str(md), "--html", str(page)]
    old = json.loads(Path(n1).read_text())
    old["format"] = "syncfuzz-report/1"
    older = tmp_path / "old.json"
    older.write_text(json.dumps(old))
    _refused(capsys, ["trend", str(older), n2, *outputs], "format 'syncfuzz-report/1'")
    _refused(capsys, ["trend", n1, *outputs], "a trend needs two nights")
    _refused(capsys, ["trend", n1, str(tmp_path / "." / "n1.json"), *outputs], "given twice")
    _refused(capsys, ["trend", n1, n2, "--markdown", n1], "is also the input REPORT")
    _refused(capsys, ["trend", n1, n2, "--markdown", str(md), "--html", str(md)], "both name")
    copy = tmp_path / "copy.json"
    copy.write_text(Path(n1).read_text())
    _refused(capsys, ["trend", n1, str(copy), *outputs], "hold the same run")
    _refused(capsys, ["trend", n1, n2, "--html", str(older)], "already exists", "not replaced")
    foreign = tmp_path / "someone-elses.html"
    foreign.write_text("<!DOCTYPE html><html><body>a page that is not ours</body></html>\n")
    _refused(capsys, ["trend", n1, n2, "--html", str(foreign)], "not an HTML report of syncfuzz")
    assert foreign.read_text().endswith("not ours</body></html>\n")
    _refused(capsys, ["trend", n1, n2, "--threshold", "1.5"], "between 0 and 1")
    assert not md.exists() and not page.exists() and not list(tmp_path.glob("*.png"))
    assert json.loads(Path(n1).read_text()) == night1().to_json()


def test_trend_end_to_end_writes_markdown_and_html(tmp_path, capsys):
    n1 = _write(tmp_path / "n1.json", night1())
    n2 = _write(tmp_path / "n2.json", night2(beta="<script>alert(1)</script>"))
    md, page = tmp_path / "trend.md", tmp_path / "trend.html"
    assert main(["trend", n2, n1, "--markdown", str(md), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == [SINCE + "new failure: <script>alert(1)</script> divergence on cuda",
                                    SINCE + "not seen tonight: alpha divergence on cuda (no failure in 180 examples "
                                            "there)"]
    text = md.read_text()
    assert "- " + SINCE + "not seen tonight: alpha divergence on cuda (no failure in 180 examples there)" in text
    assert "| alpha | 200 (100/s) | 180 (90/s) |" in text
    assert "- " + SINCE + "alpha: optimized syncs per call rose against legacy: median 0 -> 2, max 1 -> 3" in text
    assert "<script>" not in text
    page_text = page.read_text()
    assert page_text.startswith("<!DOCTYPE html>") and "<style>" in page_text
    assert "<script" not in page_text.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in page_text
    assert "http://" not in page_text and "https://" not in page_text and "src=" not in page_text
    # Run again over its own outputs: they are ours, so they are replaced.
    assert main(["trend", n1, n2, "--markdown", str(md), "--html", str(page)]) == 0


def test_charts_are_drawn_through_matplotlib(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    n1, n2 = _write(tmp_path / "n1.json", night1()), _write(tmp_path / "n2.json", night2())
    md, page = tmp_path / "trend.md", tmp_path / "trend.html"
    assert main(["trend", n1, n2, "--markdown", str(md), "--html", str(page)]) == 0
    for png in ("trend-examples-per-second.png", "trend-optimized-syncs.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in md.read_text()
    assert page.read_text().count("<svg") == 2
    capsys.readouterr()
    assert main(["trend", n1, n2, "--html", str(page)]) == 0  # its own earlier page is replaced
    capsys.readouterr()
    (tmp_path / "trend-optimized-syncs.png").write_text("not a chart")
    _refused(capsys, ["trend", n1, n2, "--markdown", str(md)], "not a PNG image")


def test_the_h200_report_against_a_changed_copy(tmp_path):
    data = json.loads(H200.read_text())
    data["run"]["scope"]["run_id"] = "next-night"
    for target in data["targets"]:
        if target["name"] == "keye-process-image":
            target["by_device"]["cuda"]["syncs_per_call"]["optimized"] = {"0": 50, "2": 50}
        if target["name"] == "keep-on-cpu-ultravox-audio-lens":
            target["failures"] = []
    later = tmp_path / "next.json"
    later.write_text(json.dumps(data))
    trend = Trend.from_reports([(str(H200), read_report(str(H200))), (str(later), read_report(str(later)))])
    since = f"since {H200}: "
    assert what_changed(trend) == [since + "not seen tonight: keep-on-cpu-ultravox-audio-lens sync-regression on cuda "
                                           "(no failure in 102 examples there)",
                                   since + "keye-process-image: optimized syncs per call rose against legacy: "
                                           "median 0 -> 0, max 1 -> 2 (legacy median 3 -> 3, max 7 -> 7)"]
    assert optimized_syncs_chart(trend).series["keye-process-image"] == (1.0, 2.0)


def test_a_run_records_when_it_started_for_the_trend():
    from datetime import datetime

    from fuzz.config import RunConfig
    from fuzz.run.session import run_info

    started = run_info(RunConfig(devices=("cpu",)))["started"]
    assert datetime.fromisoformat(started).utcoffset().total_seconds() == 0
    assert Report((), run={"started": started}).to_json()["run"]["started"] == started


def test_counts_that_grow_with_the_night_s_inputs_on_both_sides_are_no_rise(tmp_path):
    """Two H200 runs of seeds 1 and 2 moved ernie-rot-pos-emb's median syncs per call from 11 -> 10 (legacy ->
    optimized) to 20 -> 19: bigger inputs on both sides, the optimized side still one sync under legacy. That is
    no rise (planted here as +9 on both sides); the optimized side syncing where it made none is."""
    data = json.loads(H200.read_text())
    data["run"]["scope"]["run_id"] = "next-night"
    for target in data["targets"]:
        histograms = target["by_device"]["cuda"]["syncs_per_call"]
        if target["name"] == "ernie-rot-pos-emb":
            histograms["legacy"] = {str(int(k) + 9): n for k, n in histograms["legacy"].items()}
            histograms["optimized"] = {str(int(k) + 9): n for k, n in histograms["optimized"].items()}
        if target["name"] == "glm4v-pos-embeds":  # legacy's count falls, the optimized side stays at none
            histograms["legacy"] = {str(max(int(k) - 2, 0)): n for k, n in histograms["legacy"].items()}
        if target["name"] == "fla-chunk-offsets":  # 1 -> 0 before; now the optimized side syncs once
            histograms["optimized"] = {"0": 99, "1": 1}
        target["failures"] = [f for f in target["failures"] if target["name"] != "keep-on-cpu-ultravox-audio-lens"]
    data["targets"] = [t for t in data["targets"] if t["name"] != "keep-on-cpu-ultravox-audio-lens"]
    later = tmp_path / "next.json"
    later.write_text(json.dumps(data))
    trend = Trend.from_reports([(str(H200), read_report(str(H200))), (str(later), read_report(str(later)))])
    lines = [line.split(": ", 1)[1] for line in what_changed(trend)]
    assert lines == ["fla-chunk-offsets: optimized syncs per call rose against legacy: median 0 -> 0, max 0 -> 1 "
                     "(legacy median 1 -> 1, max 1 -> 1)",
                     "keep-on-cpu-ultravox-audio-lens: no longer in the report"]


# --------------------------------------------------------------------------- issue 45: what a night is


def _stopped(night: str, started: str, entries: list[TargetEntry], planned: list[str]) -> Report:
    """A night cut short by SIGTERM while fuzzing: the targets whose items finished, and the plan."""
    report = _report(night, started, entries)
    return Report(report.targets, run={**report.run, "planned": planned, "interrupted_in": "fuzzing"},
                  versions=report.versions, interrupted="SIGTERM")


def test_an_interrupted_night_counts_no_missing_target_as_gone_or_new_and_no_undrawn_failure(tmp_path, capsys):
    """Night 2 was stopped after alpha: beta and gamma never ran. The trend says so, and neither calls them
    gone that night nor new the night after, nor gamma's failure "not seen"; night 3 draws alpha's failure of
    night 1 again: still failing, not new (night 2 did not draw it, as nights do)."""
    cut = _stopped("20261201", "2026-12-01T02:17:41+00:00", [_entry("alpha", 180, 2.0, {"0": 180})],
                   ["alpha", "beta", "gamma"])
    after = _report("20261202", "2026-12-02T02:17:00+00:00", [
        _entry("alpha", 200, 2.0, {"0": 200}, [_failure("divergence", "[0]['x']")]),
        _entry("beta", 100, 1.0, {"0": 100}),
        _entry("gamma", 300, 3.0, {"1": 300}, [_failure("sync-regression", "[]", known="F9: accepted")])])
    files = [_write(tmp_path / f"n{i}.json", r) for i, r in enumerate([night1(), cut, after], start=1)]
    first_two = Trend.from_reports([(name, read_report(name)) for name in files[:2]])
    assert what_changed(first_two) == [
        SINCE + "this night is partial (interrupted by SIGTERM in fuzzing); never ran: beta, gamma",
        # alpha ran its 180 examples tonight without its divergence: said as what it is, never "fixed"
        SINCE + "not seen tonight: alpha divergence on cuda (no failure in 180 examples there)"]
    assert first_two.nights[-1].label == "2026-12-01 02:17 (partial)"
    since_cut = "since 2026-12-01 02:17 (partial): "
    three = Trend.from_reports([(name, read_report(name)) for name in files])
    assert what_changed(three) == [since_cut + "the night before is partial (interrupted by SIGTERM in fuzzing)",
                                   since_cut + "alpha: verdict agree -> divergence"]  # true: it agreed in night 2
    assert {(f.target, f.status) for f in three.nights[-1].failures} == {("alpha", "still failing"),
                                                                        ("gamma", KNOWN)}
    assert main(["trend", *files]) == 0
    out = capsys.readouterr().out
    assert "new target" not in out and "no longer in the report" not in out and "new failure" not in out
    assert "fixed" not in out
    assert "interrupted by SIGTERM in fuzzing" in out  # the nights table's partial column

    # Without the plan (a report from before run.planned) the trend cannot tell what is missing: it says so,
    # and still calls nothing gone.
    unplanned = Report(cut.targets, run={k: v for k, v in cut.run.items() if k != "planned"},
                       versions=cut.versions, interrupted="SIGTERM")
    lines = what_changed(Trend.from_reports([("a", night1()), ("b", unplanned)]))
    assert lines[0] == SINCE + "this night is partial (interrupted by SIGTERM in fuzzing); never ran: not recorded"
    assert not any("no longer in the report" in line for line in lines)


def test_a_target_still_failing_otherwise_is_not_seen_tonight_never_fixed():
    """keye-encoder-rope failed with two signatures; tonight drew only one of them. The other is "not seen
    tonight", with the target still failing there: no night calls it fixed."""
    two = [_failure("divergence", "[0]['cos']"), _failure("divergence", "[0]['sin']")]
    before = _report("20261130", "2026-11-30T02:17:03+00:00", [_entry("keye-encoder-rope", 100, 1.0, {"0": 100}, two)])
    now = _report("20261201", "2026-12-01T02:17:41+00:00", [_entry("keye-encoder-rope", 100, 1.0, {"0": 100},
                                                                    two[1:])])
    assert what_changed(Trend.from_reports([("a", before), ("b", now)])) == [
        SINCE + "not seen tonight: keye-encoder-rope divergence on cuda (it still fails there: divergence)"]


def test_shards_are_refused_as_nights_and_a_merge_missing_one_is_a_partial_night(tmp_path, capsys):
    n1 = _write(tmp_path / "n1.json", night1())
    shard = night2()
    shard = Report(shard.targets, run={**shard.run, "scope": {"run_id": "run-x", "shard": [1, 2]}},
                   versions=shard.versions)
    other = Report(shard.targets, run={**shard.run, "scope": {"run_id": "run-x", "shard": [2, 2]}},
                   versions=shard.versions)
    s1, s2 = _write(tmp_path / "s1.json", shard), _write(tmp_path / "s2.json", other)
    _refused(capsys, ["trend", n1, s1], "is shard 1/2 of a run, not a night", "merge-reports")
    _refused(capsys, ["trend", s2, s1], "is shard 2/2 of a run, not a night")  # two shards are not two nights
    merged = [{"run_id": "run-x", "shard": [1, 2]}, {"run_id": "run-x", "shard": [2, 2]}]
    halves = [Report(shard.targets, run={**shard.run, "scope": {"covers": [part], "shard_count": 2,
                                                                 "complete": False, "missing": [3 - i],
                                                                 "covered": [i]}}, versions=shard.versions)
              for i, part in enumerate(merged, start=1)]
    m1, m2 = (_write(tmp_path / f"m{i}.json", half) for i, half in enumerate(halves, start=1))
    _refused(capsys, ["trend", n1, m1, m2], "hold parts of one run (run id run-x)", "merge them first")
    trend = Trend.from_reports([(n1, read_report(n1)), (m1, read_report(m1))])
    assert trend.nights[-1].partial == "the merge covers 1 of the run's 2 shards (missing 2/2)"
    lines = what_changed(trend)
    assert lines[0] == SINCE + ("this night is partial (the merge covers 1 of the run's 2 shards (missing 2/2)); "
                                "never ran: none; the missing shards' targets are not named")
    assert not any("examples fell" in line or "no longer" in line for line in lines)


def _cpu_night(night: str, started: str) -> Report:
    tally = DeviceTally(examples=100, verdicts={"agree": 100})  # no syncs counted: syncs are a CUDA oracle
    return _report(night, started, [TargetEntry(name="alpha", devices=("cpu",), by_device={"cpu": tally},
                                                seconds=2.0)])


def test_a_cpu_only_trend_says_why_it_has_no_sync_chart_instead_of_drawing_an_empty_one(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    n1 = _write(tmp_path / "n1.json", _cpu_night("20261130", "2026-11-30T02:17:03+00:00"))
    n2 = _write(tmp_path / "n2.json", _cpu_night("20261201", "2026-12-01T02:17:03+00:00"))
    md, page = tmp_path / "trend.md", tmp_path / "trend.html"
    assert main(["trend", n1, n2, "--markdown", str(md), "--html", str(page)]) == 0
    text, html_text = md.read_text(), page.read_text()
    assert not (tmp_path / "trend-optimized-syncs.png").exists() and "trend-optimized-syncs.png" not in text
    why = "no night counted an optimized call's syncs (they are counted on CUDA devices only"
    assert "optimized syncs per call (max over calls, CUDA): no chart, " + why in text
    assert escape(why) in html_text and html_text.count("<svg") == 1  # the examples/s chart alone
    assert "](trend-examples-per-second.png)" in text and (tmp_path / "trend-examples-per-second.png").is_file()
    assert "trend-optimized-syncs.png" not in capsys.readouterr().out


def test_the_trend_charts_start_at_zero():
    pytest.importorskip("matplotlib")
    from fuzz.reports.trend import ChartData, plot_chart

    figure = plot_chart(ChartData("examples per second per target", "examples / s", ("a", "b"),
                                  {"alpha": (950.0, 1000.0)}))
    assert figure.axes[0].get_ylim()[0] == 0
