"""The report's charts say what the report says: each chart's data against the report model's own counts
(no matplotlib needed), then the drawings (matplotlib, skipped where it is absent: the GPU host)."""

from __future__ import annotations

import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from fuzz.records.model import DeviceTally, Failure, Report, TargetEntry
from fuzz.reports import charts
from fuzz.reports.merge import read_report

H200 = Path(__file__).parents[1] / "data" / "h200-cuda.json"  # a real `fuzz run --device cuda` on an H200


@pytest.fixture(scope="module")
def h200() -> Report:
    return read_report(str(H200))


def expanded(histogram: dict[str, int]) -> list[int]:
    return sorted(int(count) for count, calls in histogram.items() for _ in range(calls))


def test_the_sync_chart_is_the_histograms_median_min_and_max_per_target(h200):
    data = charts.sync_chart_data(h200)
    assert [row.target for row in data] == [e.name for e in h200.targets]  # 22 targets, the table's order
    assert len(data) == 22
    for row in data:
        tally = next(e for e in h200.targets if e.name == row.target).by_device[row.device]
        for side in ("legacy", "optimized"):
            calls = expanded(tally.syncs_per_call[side])
            span = getattr(row, side)
            assert (span.median, span.min, span.max, span.calls) == (
                statistics.median_low(calls), calls[0], calls[-1], len(calls)), (row.target, side)


def test_known_h200_rows(h200):
    by_name = {row.target: row for row in charts.sync_chart_data(h200)}
    # glm4v-embeddings: legacy 4..20 syncs, the optimized copy none
    assert by_name["glm4v-embeddings"].legacy == charts.SyncSpan(median=8, min=4, max=20, calls=100)
    assert by_name["glm4v-embeddings"].optimized == charts.SyncSpan(median=0, min=0, max=0, calls=100)
    assert by_name["keep-on-cpu-phi4mm-image-sizes"].optimized == charts.SyncSpan(6, 3, 9, 100)
    assert charts.uses_log_scale(list(by_name.values()))  # 0 and 1 .. 58: symlog


def test_the_consumer_chart_holds_only_targets_with_consumer_syncs(h200):
    data = charts.consumer_sync_chart_data(h200)
    expected = [e.name for e in h200.targets
                if any(e.by_device["cuda"].consumer_syncs_per_call[s] for s in ("legacy", "optimized"))]
    assert [row.target for row in data] == expected and expected
    row = next(r for r in data if r.target == "keep-on-cpu-ultravox-audio-lens")
    assert (row.legacy.max, row.optimized.min, row.optimized.max) == (0, 0, 4)


def test_examples_chart_is_each_rows_examples_and_agree(h200):
    data = charts.examples_chart_data(h200)
    assert [(r.target, r.device, r.examples, r.agree) for r in data] == [
        (e.name, "cuda", e.by_device["cuda"].examples, e.by_device["cuda"].verdicts.get("agree", 0))
        for e in h200.targets]
    ultravox = next(r for r in data if r.target == "keep-on-cpu-ultravox-audio-lens")
    assert ultravox.label == "sync-regression (known)"


def failing_report(base: Report) -> Report:
    entry = base.targets[0]
    failures = (Failure(device="cuda", verdict="divergence", input={"x": 1}),
                Failure(device="cuda", verdict="divergence", input={"x": 2}, mismatches=(
                    {"path": "[0]", "what": "value", "detail": "1 != 2"},)),
                Failure(device="cuda", verdict="sync-regression", input={"x": 3}, known="accepted"))
    return replace(base, targets=(entry.with_failures(failures), *base.targets[1:]))


def test_failures_by_verdict_data_is_the_reports_count_split_new_and_known(h200):
    for report in (h200, failing_report(h200)):
        data = charts.failures_chart_data(report)
        assert {row.verdict: row.total for row in data} == report.failures_by_verdict()
        new = {}
        for entry, failure in report.new_failures():
            new[failure.verdict] = new.get(failure.verdict, 0) + 1
        assert {row.verdict: row.new for row in data if row.new} == new
    data = charts.failures_chart_data(failing_report(h200))
    # the planted two new divergences and one known sync regression, beside the H200 run's own known one
    assert [(r.verdict, r.new, r.known) for r in data] == [("divergence", 2, 0), ("sync-regression", 0, 2)]


def test_a_cpu_only_report_has_no_sync_chart_and_says_so():
    tally = DeviceTally(examples=5, verdicts={"agree": 5})
    report = Report(targets=(TargetEntry(name="t", devices=("cpu",), by_device={"cpu": tally}),))
    assert charts.sync_chart_data(report) == [] and charts.consumer_sync_chart_data(report) == []
    found = {chart.key: chart for chart in charts.report_charts(report, "svg")}
    assert found["syncs"].image is None and "only on CUDA" in found["syncs"].note
    assert [(r.target, r.device, r.examples) for r in charts.examples_chart_data(report)] == [("t", "cpu", 5)]


def test_the_median_of_an_even_number_of_calls_is_the_lower_middle():
    assert charts.sync_span({"1": 1, "3": 1}) == charts.SyncSpan(1, 1, 3, 2)
    assert charts.sync_span({}) is None and charts.sync_span({"4": 0}) is None


def test_markdown_images_sit_beside_the_markdown_file():
    paths = charts.markdown_images(Path("out/summary.md"))
    assert paths["syncs"] == Path("out/summary-syncs.png")
    assert set(paths) == set(charts.CHART_KEYS)


# --------------------------------------------------------------------------- drawing (matplotlib)


def test_the_sync_svg_names_every_cuda_target_and_is_symlog(h200):
    pytest.importorskip("matplotlib")
    svg = charts.draw_syncs(charts.sync_chart_data(h200), "svg").decode()
    for entry in h200.targets:
        assert f">{entry.name}<" in svg, entry.name
    assert "symlog" in svg
    assert charts.draw_syncs(charts.sync_chart_data(h200), "svg").decode() == svg  # the same report, same bytes


@pytest.mark.slow  # draws every chart in two formats (~3 s): CI's slow step runs it
def test_every_chart_draws_png_and_svg(h200):
    pytest.importorskip("matplotlib")
    report = failing_report(h200)
    for fmt, magic in (("png", b"\x89PNG"), ("svg", b"<?xml")):
        drawn = charts.report_charts(report, fmt)
        assert [c.key for c in drawn] == list(charts.CHART_KEYS)
        assert all(c.image is not None and c.image.startswith(magic) for c in drawn)
    failures_svg = next(c for c in charts.report_charts(report, "svg") if c.key == "failures").image.decode()
    assert ">divergence<" in failures_svg and ">sync-regression<" in failures_svg


def test_inline_svg_has_no_url_and_prefixed_ids(h200):
    pytest.importorskip("matplotlib")
    svg = charts.svg_for_html(charts.draw_syncs(charts.sync_chart_data(h200), "svg"), "syncs")
    assert "http" not in svg and "<?xml" not in svg
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert ids and all(i.startswith("syncs-") for i in ids)
    for ref in re.findall(r'url\(#([^)]+)\)|href="#([^"]+)"', svg):
        assert (ref[0] or ref[1]) in ids


def test_shrink_steps_are_counted_apart_and_never_drawn_as_examples():
    pytest.importorskip("matplotlib")
    shrunk = TargetEntry(name="shrunk", devices=("cpu",), by_device={"cpu": DeviceTally(
        examples=100, verdicts={"agree": 99, "divergence": 1}, shrink_steps=2117)})
    plain = TargetEntry(name="plain", devices=("cpu",), by_device={"cpu": DeviceTally(
        examples=100, verdicts={"agree": 100})})
    data = charts.examples_chart_data(Report((shrunk, plain)))
    assert [(r.target, r.examples, r.shrink_steps) for r in data] == [("shrunk", 100, 2117), ("plain", 100, 0)]
    svg = charts.draw_examples(data, "svg").decode()
    assert "100 (+2,117 shrink steps)" in svg
    # The axis fits the examples: no bar reaches past 100 (the shrink steps would have made it 2,217).
    ticks = [float(t.replace(",", "")) for t in re.findall(r">(\d[\d,]*)</text>", svg)]
    assert ticks and max(ticks) < 1000
