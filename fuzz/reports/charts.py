"""Pictures of the report model: the data of each chart first, the drawing second.

Every chart is two functions: ``*_data(report)`` returns plain rows read from
the report model (fuzz/records/model.py) -- what the tests check against the report's
own counts -- and a renderer draws those rows with matplotlib into SVG (for the
HTML report) or PNG (for Markdown). matplotlib is imported only when a chart is
drawn, with the non-interactive Agg backend: no display, no network, no
JavaScript. Without it, ``draw`` raises one UsageError line saying what to install.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.errors import UsageError
from fuzz.records.model import SIDES, Report
from fuzz.reports.report import rows

FORMATS = ("svg", "png")
MISSING = ("charts need matplotlib, which is not installed: pip install matplotlib "
           "(or pip install -e '.[charts]'), or leave out --html / the trend's images")


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (a file renderer: nothing opens a window)."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError(MISSING) from None
    matplotlib.use("Agg", force=True)
    # The same report draws the same bytes (fixed element ids), and SVG text stays text.
    matplotlib.rcParams["svg.hashsalt"] = "syncfuzz"
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def figure_bytes(figure: Any, fmt: str) -> bytes:
    """The figure as SVG or PNG bytes; the figure is closed (matplotlib keeps every open one)."""
    if fmt not in FORMATS:
        raise ValueError(f"chart format {fmt!r} is not one of {FORMATS}")
    buffer = io.BytesIO()
    # SVG text stays text (searchable, smaller); the date stamp is left out so the same report
    # draws the same bytes.
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    figure.savefig(buffer, format=fmt, bbox_inches="tight", metadata=metadata, dpi=110)
    pyplot().close(figure)
    return buffer.getvalue()


# --------------------------------------------------------------------------- the data (no matplotlib)

SYNC_KINDS = ("syncs_per_call", "consumer_syncs_per_call")
# A range wider than this (max over the smallest non-zero count) is drawn on a symlog axis: 0 occurs.
LOG_SPAN = 20


@dataclass(frozen=True)
class SyncSpan:
    """One side's syncs per call on one target × device: the middle call's count (the lower middle for an
    even number of calls, as fuzz/reports/trend.py's SyncStats), the fewest and the most, and how many calls."""

    median: int
    min: int
    max: int
    calls: int


@dataclass(frozen=True)
class SyncRow:
    target: str
    device: str
    legacy: SyncSpan | None  # None: that side has no counted call
    optimized: SyncSpan | None


@dataclass(frozen=True)
class ExamplesRow:
    target: str
    device: str
    examples: int
    agree: int
    label: str  # the verdict as the summary table says it (TargetEntry.label_on)
    shrink_steps: int = 0  # runs to shrink a failure: said beside the bar, not drawn in it


@dataclass(frozen=True)
class VerdictRow:
    verdict: str
    new: int
    known: int

    @property
    def total(self) -> int:
        return self.new + self.known


def sync_span(histogram: Mapping[str, int]) -> SyncSpan | None:
    """Median, min, max and calls of a {syncs-as-text: calls} histogram; None when it counts no call."""
    counts = sorted((int(k), n) for k, n in histogram.items() if n > 0)
    calls = sum(n for _, n in counts)
    if not calls:
        return None
    middle, seen, median = (calls - 1) // 2, 0, counts[0][0]
    for count, n in counts:
        if seen + n > middle:
            median = count
            break
        seen += n
    return SyncSpan(median=median, min=counts[0][0], max=counts[-1][0], calls=calls)


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def sync_chart_data(report: Report, kind: str = "syncs_per_call") -> list[SyncRow]:
    """Per target × CUDA device (the summary table's order): legacy and optimized syncs per call. Only CUDA
    counts syncs; a target × device with no counted call on either side is left out (a CPU-only report: [])."""
    if kind not in SYNC_KINDS:
        raise ValueError(f"sync kind {kind!r} is not one of {SYNC_KINDS}")
    out = []
    for entry, device in rows(report.targets):
        tally = entry.by_device.get(device) if device is not None and is_cuda(device) else None
        if tally is None:
            continue
        histograms = getattr(tally, kind)
        spans = {side: sync_span(histograms.get(side, {})) for side in SIDES}
        if any(spans.values()):
            out.append(SyncRow(entry.name, device, spans["legacy"], spans["optimized"]))
    return out


def consumer_sync_chart_data(report: Report) -> list[SyncRow]:
    """As sync_chart_data, for the syncs the target's consumer stand-in's reads of the outputs made."""
    return sync_chart_data(report, "consumer_syncs_per_call")


def examples_chart_data(report: Report) -> list[ExamplesRow]:
    """Examples (and how many agreed) per target × device, every device, with the shrink steps apart;
    skipped targets left out."""
    out = []
    for entry, device in rows(report.targets):
        if device is None:
            continue
        tally = entry.by_device.get(device)
        out.append(ExamplesRow(entry.name, device, tally.examples if tally else 0,
                               tally.verdicts.get("agree", 0) if tally else 0, entry.label_on(device),
                               tally.shrink_steps if tally else 0))
    return out


def failures_chart_data(report: Report) -> list[VerdictRow]:
    """Distinct failures per verdict, new (not in the known-issues file) and known; the totals are
    Report.failures_by_verdict. Most first, then by name."""
    new: dict[str, int] = {}
    known: dict[str, int] = {}
    for entry in report.targets:
        for failure in entry.failures:
            bucket = known if failure.known else new
            bucket[failure.verdict] = bucket.get(failure.verdict, 0) + 1
    verdicts = sorted(set(new) | set(known), key=lambda v: (-(new.get(v, 0) + known.get(v, 0)), v))
    return [VerdictRow(v, new.get(v, 0), known.get(v, 0)) for v in verdicts]


def uses_log_scale(rows_: Sequence[SyncRow]) -> bool:
    """True when the counts span more than LOG_SPAN times the smallest non-zero one (symlog: 0 occurs)."""
    values = [v for row in rows_ for span in (row.legacy, row.optimized) if span for v in (span.min, span.max)]
    if not values:
        return False
    positive = [v for v in values if v > 0]
    return bool(positive) and max(values) > LOG_SPAN * min(positive)


def row_label(target: str, device: str, devices: set[str]) -> str:
    """The y-axis label: the target's name, with its device when the chart has several."""
    return target if len(devices) <= 1 else f"{target} [{device}]"


# --------------------------------------------------------------------------- the drawing

SIDE_COLORS = {"legacy": "#d9822b", "optimized": "#2b6cb0"}
NEW_COLOR, KNOWN_COLOR, AGREE_COLOR, OTHER_COLOR = "#c53030", "#a0aec0", "#38a169", "#cbd5e0"


def _height(n_rows: int) -> float:
    return max(2.2, 0.34 * n_rows + 1.3)


def draw_syncs(data: Sequence[SyncRow], fmt: str, title: str = "GPU<->CPU syncs per call (CUDA)") -> bytes:
    """Per target × device two horizontal range bars (legacy above, optimized below): min..max, a dot at the
    median. Symlog x axis when the counts span more than LOG_SPAN times."""
    plt = pyplot()
    devices = {row.device for row in data}
    figure, axes = plt.subplots(figsize=(9, _height(len(data))))
    n = len(data)
    labelled: set[str] = set()

    def label(text: str) -> str | None:  # each legend entry once
        if text in labelled:
            return None
        labelled.add(text)
        return text

    for i, row in enumerate(data):
        y = n - 1 - i  # the first row at the top
        for side, offset in (("legacy", 0.18), ("optimized", -0.18)):
            span = getattr(row, side)
            if span is None:
                continue
            color = SIDE_COLORS[side]
            axes.plot([span.min, span.max], [y + offset] * 2, color=color, linewidth=5, alpha=0.45,
                      solid_capstyle="butt", label=label(f"{side} min..max"))
            axes.plot([span.median], [y + offset], marker="o", markersize=5, color=color, linestyle="none",
                      label=label(f"{side} median"))
    axes.set_yticks(range(n))
    axes.set_yticklabels([row_label(r.target, r.device, devices) for r in reversed(data)], fontsize=8)
    axes.set_ylim(-0.7, n - 0.3)
    if uses_log_scale(data):
        axes.set_xscale("symlog", linthresh=1)
        axes.set_xlabel("syncs per call (symlog scale: linear below 1)")
        axes.set_xlim(left=-0.3)
        top = max(span.max for row in data for span in (row.legacy, row.optimized) if span)
        ticks = [t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000) if t <= top * 1.5]
        axes.set_xticks(ticks)
        axes.set_xticklabels([str(t) for t in ticks])
    else:
        axes.set_xlabel("syncs per call")
        axes.set_xlim(left=-0.5)
    axes.set_title(title, fontsize=10)
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return figure_bytes(figure, fmt)


def draw_examples(data: Sequence[ExamplesRow], fmt: str) -> bytes:
    """Examples per target × device, horizontal bars: the part that agreed, then the rest. A failure's
    shrink steps are no examples: said beside the bar, never drawn (thousands of them would squash the
    other bars)."""
    plt = pyplot()
    devices = {row.device for row in data}
    figure, axes = plt.subplots(figsize=(9, _height(len(data))))
    ys = list(range(len(data)))[::-1]
    agree = [row.agree for row in data]
    rest = [row.examples - row.agree for row in data]
    axes.barh(ys, agree, color=AGREE_COLOR, height=0.6, label="agree")
    axes.barh(ys, rest, left=agree, color=OTHER_COLOR, height=0.6, label="other verdicts / both raised")
    for y, row in zip(ys, data):
        shrunk = f" (+{row.shrink_steps:,} shrink steps)" if row.shrink_steps else ""
        axes.text(row.examples, y, f" {row.examples:,}{shrunk}", va="center", fontsize=7)
    axes.set_yticks(ys)
    axes.set_yticklabels([row_label(r.target, r.device, devices) for r in data], fontsize=8)
    axes.set_xlabel("examples")
    axes.set_title("examples per target", fontsize=10)
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return figure_bytes(figure, fmt)


def draw_failures(data: Sequence[VerdictRow], fmt: str) -> bytes:
    """Distinct failures per verdict, horizontal stacked bars: new, then known."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, _height(len(data))))
    ys = list(range(len(data)))[::-1]
    new = [row.new for row in data]
    axes.barh(ys, new, color=NEW_COLOR, height=0.6, label="new")
    axes.barh(ys, [row.known for row in data], left=new, color=KNOWN_COLOR, height=0.6, label="known")
    axes.set_yticks(ys)
    axes.set_yticklabels([row.verdict for row in data], fontsize=8)
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set_xlabel("distinct failures")
    axes.set_title("failures by verdict", fontsize=10)
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return figure_bytes(figure, fmt)


@dataclass(frozen=True)
class Chart:
    """One chart of a report, drawn or not: ``image`` None with ``note`` saying why (no data, no matplotlib)."""

    key: str  # the file-name part: <md-stem>-<key>.png
    title: str
    image: bytes | None
    note: str | None = None


CHART_KEYS = ("syncs", "consumer-syncs", "examples", "failures")
NO_SYNCS = "no CUDA row in this report: GPU<->CPU syncs are counted only on CUDA, so there is no sync chart"
NO_CONSUMER = "no target counted consumer syncs (only targets with a consumer stand-in do, on CUDA)"


def report_charts(report: Report, fmt: str) -> list[Chart]:
    """Every chart of the report in ``fmt``; a chart without data, or every chart without matplotlib,
    comes back with ``image`` None and a note saying so."""
    syncs, consumer = sync_chart_data(report), consumer_sync_chart_data(report)
    examples, failures = examples_chart_data(report), failures_chart_data(report)
    plans: list[tuple[str, str, Any, str]] = [
        ("syncs", "Syncs per call, legacy -> optimized (CUDA)",
         (lambda: draw_syncs(syncs, fmt)) if syncs else None, NO_SYNCS),
        ("consumer-syncs", "Consumer syncs per call, legacy -> optimized (CUDA)",
         (lambda: draw_syncs(consumer, fmt, "consumer syncs per call (CUDA)")) if consumer else None, NO_CONSUMER),
        ("examples", "Examples per target", (lambda: draw_examples(examples, fmt)) if examples else None,
         "no target ran on a device"),
        ("failures", "Failures by verdict", (lambda: draw_failures(failures, fmt)) if failures else None,
         "no failure"),
    ]
    drawable = have_matplotlib()
    out = []
    for key, title, draw, why in plans:
        if draw is None:
            out.append(Chart(key, title, None, why))
        elif not drawable:
            out.append(Chart(key, title, None, MISSING_SHORT))
        else:
            out.append(Chart(key, title, draw()))
    return out


MISSING_SHORT = "not drawn: charts need matplotlib (pip install matplotlib)"


def markdown_images(markdown_path: Path, keys: Iterable[str] = ()) -> dict[str, Path]:
    """The PNG charts written beside ``--markdown FILE``: FILE's stem + ``-<key>.png`` (report-syncs.png),
    for the report's charts or the given ``keys`` (the trend's)."""
    return {key: markdown_path.with_name(f"{markdown_path.stem}-{key}.png") for key in (keys or CHART_KEYS)}


def svg_for_html(svg: bytes, prefix: str) -> str:
    """An SVG for inlining in an HTML page: no XML prolog, doctype, metadata or namespace URLs (HTML5 needs
    none), and every element id prefixed so that several charts on one page never share an id."""
    text = svg.decode("utf-8")
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->\s*", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    for ident in set(re.findall(r'\bid="([^"]+)"', text)):
        new = f"{prefix}-{ident}"
        text = text.replace(f'id="{ident}"', f'id="{new}"').replace(f'"#{ident}"', f'"#{new}"')
        text = text.replace(f"url(#{ident})", f"url(#{new})")
    return text
