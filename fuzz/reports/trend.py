"""``trend``: nightly reports side by side, oldest first, and what changed since the night before.

``python -m fuzz trend REPORT... [--markdown FILE] [--html FILE] [--threshold R]`` reads two or more JSON
reports (``read_report``: one of another format version is refused with the model's own line) and builds a
``Trend``: per night and per target the examples, examples/s (examples / seconds), the verdict, the syncs per
call (legacy and optimized, median and max, from the CUDA histograms) and the failures by
``Failure.signature``, each classified against the nights before:

* ``new``: seen on no earlier night of the trend (on that target and device), not accepted as known;
* ``still failing``: seen on an earlier night too (each night draws other inputs: a failure not drawn one
  night and drawn the next is the same bug, not a new one);
* ``known``: accepted in known-issues (``Failure.known``), whatever the nights before showed;
* ``not seen tonight``: drawn the last night the target ran on that device, not drawn tonight, on a device
  where the target ran examples tonight (a target that ran nothing tonight proved nothing, so it gets no
  line). Never "fixed": a night that did not draw a failure's input says nothing of the bug; only a replay
  of its repro does (``python -m fuzz replay``). The line says whether the target still failed there
  otherwise tonight, or ran its examples without a failure.

A night is a whole run: a shard's own report (``--shard I/N``) is refused (merge the night's shards first
with ``merge-reports``), and so are two reports holding parts of one run. A partial night (an interrupted
run, a merge holding an interrupted part or missing shards: ``Report.partial``) is marked ``(partial)`` in
its label and said in the first what-changed line; the targets it may lack are neither "new" the night
after nor "no longer in the report", and its examples are not compared.

``what_changed(trend, threshold)`` says in plain lines what the last night changed (see its docstring for
the exact wording). Nights are ordered by the run's start time (``run.started``, UTC, recorded by
``fuzz run``); when a report has none (written before it was recorded), the order given on the command
line is kept and the output says so. The command reports, it does not judge: exit 0, or 2 when refused
(one line, before anything is written). Charts are drawn with matplotlib only (fuzz.reports.charts); their data
come from ``examples_per_second_chart`` / ``optimized_syncs_chart``, plain rows the tests check.

No torch here: a trend must not need a GPU stack.
"""

from __future__ import annotations

import html
import math
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.errors import UsageError
from fuzz.records.model import EXIT_OK, SIDES, Report, TargetEntry
from fuzz.records.verdicts import TargetVerdict

DEFAULT_THRESHOLD = 0.3  # examples falling by more than 30% of the night before is news
NEW, STILL, KNOWN, NOT_SEEN = "new", "still failing", "known", "not seen tonight"
BY_START, BY_COMMAND_LINE = "run start time", "command line"


@dataclass(frozen=True)
class SyncStats:
    """One side's syncs per call on CUDA: the middle call's count (the lower middle for an even number of
    calls) and the most one call made."""

    median: int
    max: int


@dataclass(frozen=True)
class FailureRow:
    target: str
    device: str
    verdict: str
    signature: str
    status: str  # NEW, STILL, KNOWN or NOT_SEEN
    known: str | None = None
    # NOT_SEEN: what the target did on that device tonight instead, e.g. "no failure in 180 examples there"
    tonight: str | None = None


@dataclass(frozen=True)
class TargetNight:
    name: str
    examples: int
    seconds: float
    verdict: str
    syncs: Mapping[str, SyncStats | None]  # side -> stats (None: no CUDA calls counted)
    untested: tuple[str, ...] = ()  # devices that ran no example ("" for a target without devices)
    cannot_build: str | None = None
    retired: str | None = None  # "retired in 0.34.0": a side's release removed the target's code
    tested_on: frozenset[str] = frozenset()  # devices where examples ran and the target's state is sound
    examples_on: Mapping[str, int] = field(default_factory=dict)  # device -> examples run there

    @property
    def per_second(self) -> float | None:
        return self.examples / self.seconds if self.seconds > 0 else None


@dataclass(frozen=True)
class Night:
    name: str  # the file name as given
    label: str  # the start time (UTC, to the minute) or, without one, the file name
    started: str | None
    seed: Any
    targets: Mapping[str, TargetNight]
    failures: tuple[FailureRow, ...] = ()  # this night's, classified against the nights before, then the not seen
    partial: str | None = None  # why the night holds less than its run planned (Report.partial); None: whole
    never_ran: tuple[str, ...] | None = ()  # the planned targets it lacks; None: not known (Report.never_ran)
    lacks_shards: bool = False  # a merge missing shards: their targets are not named in never_ran

    def may_lack(self, name: str) -> bool:
        """Whether a target absent from this night may be missing only because the night is partial."""
        return bool(self.partial) and (self.never_ran is None or self.lacks_shards or name in self.never_ran)


@dataclass(frozen=True)
class Trend:
    nights: tuple[Night, ...]
    ordered_by: str = BY_COMMAND_LINE

    @property
    def labels(self) -> list[str]:
        return [night.label for night in self.nights]

    def target_names(self) -> list[str]:
        """Every target of any night: the last night's order first, then those gone from it."""
        names: list[str] = []
        for night in (self.nights[-1], *self.nights[:-1]):
            names.extend(name for name in night.targets if name not in names)
        return names

    @classmethod
    def from_reports(cls, named: Sequence[tuple[str, Report]]) -> Trend:
        ordered, by = order_reports(named)
        labels = _labels(ordered)
        nights: list[Night] = []
        history = _History()
        for (name, report), label in zip(ordered, labels):
            targets = {entry.name: _target_night(entry) for entry in report.targets}
            failures = history.classify(report, targets)
            partial = report.partial()
            scope = report.run.get("scope")
            never = report.never_ran()
            nights.append(Night(name=name, label=label + (" (partial)" if partial else ""),
                                started=report_started(report), seed=report.run.get("seed"), targets=targets,
                                failures=failures, partial=partial, never_ran=None if never is None else tuple(never),
                                lacks_shards=isinstance(scope, Mapping) and scope.get("complete") is False))
        return cls(tuple(nights), by)


# --------------------------------------------------------------------------- building a trend


def report_started(report: Report) -> str | None:
    """When the run started (UTC ISO time): ``run.started``; a merged report's earliest part's."""
    parts = report.run.get("merged_from")
    if isinstance(parts, list) and parts:
        times = [part.get("started") if isinstance(part, Mapping) else None for part in parts]
        return min(times) if all(isinstance(t, str) for t in times) else None  # type: ignore[type-var]
    started = report.run.get("started")
    return started if isinstance(started, str) else None


def order_reports(named: Sequence[tuple[str, Report]]) -> tuple[list[tuple[str, Report]], str]:
    """Oldest first by run start time when every report records one; else the order given."""
    starts = [report_started(report) for _, report in named]
    if all(starts):
        order = sorted(range(len(named)), key=lambda i: starts[i])  # type: ignore[arg-type, return-value]
        return [named[i] for i in order], BY_START
    return list(named), BY_COMMAND_LINE


def _labels(named: Sequence[tuple[str, Report]]) -> list[str]:
    """Each night's start time to the minute (UTC) when every report has one and no two share it; else the
    file names as given."""
    starts = [report_started(report) for _, report in named]
    labels = [started[:16].replace("T", " ") for started in starts if started]
    if len(labels) == len(named) and len(set(labels)) == len(labels):
        return labels
    return [name for name, _ in named]


def cuda_histogram(entry: TargetEntry, side: str) -> dict[int, int]:
    """{syncs per call: calls} of one side over the target's CUDA devices."""
    merged: dict[int, int] = {}
    for device, tally in entry.by_device.items():
        if device.startswith("cuda"):
            for count, calls in tally.syncs_per_call.get(side, {}).items():
                merged[int(count)] = merged.get(int(count), 0) + calls
    return merged


def sync_stats(histogram: Mapping[int, int]) -> SyncStats | None:
    calls = [count for count, n in sorted(histogram.items()) for _ in range(n)]
    if not calls:
        return None
    return SyncStats(median=statistics.median_low(calls), max=calls[-1])


def _target_night(entry: TargetEntry) -> TargetNight:
    untested = tuple(entry.untested_devices())
    if not entry.devices and entry.verdict == TargetVerdict.UNTESTED:
        untested = ("",)
    sound = not (entry.fuzzer_error or entry.cannot_build or entry.retired)
    tested = frozenset(d for d, t in entry.by_device.items() if t.examples > 0 and sound)
    return TargetNight(name=entry.name, examples=entry.examples, seconds=entry.seconds, verdict=entry.verdict,
                       syncs={side: sync_stats(cuda_histogram(entry, side)) for side in SIDES},
                       untested=untested, cannot_build=entry.cannot_build, retired=entry.retired_label,
                       tested_on=tested, examples_on={d: t.examples for d, t in entry.by_device.items()})


class _History:
    """What the nights so far showed, for classifying the next one: every failure seen on a target and
    device, and the failures drawn the last night each target ran on each device."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str, str]] = set()  # (target, device, signature)
        self.last: dict[tuple[str, str], dict[str, FailureRow]] = {}  # (target, device) -> signature -> row

    def classify(self, report: Report, targets: Mapping[str, TargetNight]) -> tuple[FailureRow, ...]:
        rows: list[FailureRow] = []
        tonight: dict[tuple[str, str], dict[str, FailureRow]] = {}
        for entry in report.targets:
            for failure in entry.failures:
                drawn = tonight.setdefault((entry.name, failure.device), {})
                if failure.signature in drawn:
                    continue
                key = (entry.name, failure.device, failure.signature)
                status = KNOWN if failure.known else STILL if key in self.seen else NEW
                drawn[failure.signature] = FailureRow(entry.name, failure.device, failure.verdict,
                                                      failure.signature, status, failure.known)
                rows.append(drawn[failure.signature])
        for (name, device), before in self.last.items():
            target = targets.get(name)
            if target is None or device not in target.tested_on:
                continue  # ran nothing there tonight (or is missing from a partial night): nothing to say
            drawn = tonight.get((name, device), {})
            for signature, old in before.items():
                if signature not in drawn:
                    rows.append(FailureRow(old.target, old.device, old.verdict, old.signature, NOT_SEEN, old.known,
                                           _instead(target, device, list(drawn.values()))))
        for name, target in targets.items():  # tonight is now the last night these ran
            for device in target.tested_on:
                self.last[(name, device)] = tonight.get((name, device), {})
        for key, drawn in tonight.items():
            self.last.setdefault(key, drawn)
            self.seen.update((key[0], key[1], signature) for signature in drawn)
        return tuple(rows)


def _instead(target: TargetNight, device: str, drawn: list[FailureRow]) -> str:
    """What a target did tonight on a device where a failure of before was not drawn."""
    if drawn:
        return "it still fails there: " + ", ".join(sorted({row.verdict for row in drawn}))
    examples = target.examples_on.get(device, 0)
    return f"no failure in {examples} examples there"


# --------------------------------------------------------------------------- what changed


def _device(device: str) -> str:
    return f" on {device}" if device else ""


def _syncs_rose(before: Mapping[str, SyncStats | None], now: Mapping[str, SyncStats | None]) -> str | None:
    """Whether the optimized side's syncs rose, said as a line (None: they did not).

    Each night draws other inputs (the nightly seed is the date), and most counts grow with the input (one
    sync per image, per layer): both sides' counts move together from night to night. So a rise is judged
    against the legacy side on the same night: a count (median or max) that rose *and* rose by more than
    legacy's -- or the optimized side made syncs where it made none. Measured on the H200, 2026-12-01: two
    all-target runs of seeds 1 and 2 moved ernie-rot-pos-emb's optimized median 10 -> 19 with legacy's
    11 -> 20, and glm4v-pos-embeds' legacy median 30 -> 28 with optimized at 0 both nights: neither is a
    rise (each was called one by a simpler rule: absolute counts, and the excess over legacy alone)."""
    a, b = before.get("optimized"), now.get("optimized")
    if a is None or b is None:
        return None
    la, lb = before.get("legacy"), now.get("legacy")
    if a.max == 0 < b.max:
        rose = True
    elif la is None or lb is None:
        rose = b.median > a.median or b.max > a.max
    else:  # a count that rose, and rose by more than legacy's
        rose = any(getattr(b, stat) > getattr(a, stat)
                   and getattr(b, stat) - getattr(lb, stat) > getattr(a, stat) - getattr(la, stat)
                   for stat in ("median", "max"))
    if not rose:
        return None
    legacy = f" (legacy median {la.median} -> {lb.median}, max {la.max} -> {lb.max})" if la and lb else ""
    return f"optimized syncs per call rose against legacy: median {a.median} -> {b.median}, max {a.max} -> {b.max}" \
        + legacy


def _partial_lines(before: Night, now: Night) -> list[str]:
    """The first what-changed lines where a night is partial: why, and (tonight) what it lacks."""
    lines = []
    if now.partial:
        never = "not recorded" if now.never_ran is None else ", ".join(now.never_ran) or "none"
        lines.append(f"this night is partial ({now.partial}); never ran: {never}"
                     + ("; the missing shards' targets are not named" if now.lacks_shards else ""))
    if before.partial:
        lines.append(f"the night before is partial ({before.partial})")
    return lines


def what_changed(trend: Trend, threshold: float = DEFAULT_THRESHOLD) -> list[str]:
    """The last night against the one before, one line each, every line starting "since <previous>: ":

    * ``this night is partial (WHY); never ran: T, U`` and ``the night before is partial (WHY)`` first, where
      one is (``Report.partial``; the targets it may lack are then neither new nor gone, and examples are not
      compared);
    * ``new failure: T VERDICT on DEVICE`` (not known, seen on no earlier night);
    * ``not seen tonight: T VERDICT on DEVICE (it still fails there: V)`` or ``(no failure in N examples
      there)`` (drawn the last night T ran there, not drawn tonight where T ran: not a fix, which only a
      replay can tell);
    * ``T: newly cannot-build (WHY)``; ``T: newly retired in X (...)``; ``T: newly untested on DEVICE``;
    * ``T: verdict A -> B`` (a changed verdict none of the lines above explains: a known failure, skipped,
      fuzzer-error, tested again);
    * ``T: optimized syncs per call rose against legacy: median A -> B, max C -> D (legacy median E -> F, max
      G -> H)`` (CUDA: the optimized side's excess over legacy grew, or it synced where it made none;
      ``_syncs_rose``);
    * ``T: examples fell by P% (A -> B)`` (by more than ``threshold`` of the night before; not for a target
      newly untested or cannot-build, nor when either night is partial);
    * ``T: new target`` (not when the night before is partial and may lack it); ``T: no longer in the report``
      (not when tonight is partial and may lack it).

    Grouped in that order, targets in the last night's order; ``since <previous>: nothing changed`` when none."""
    if len(trend.nights) < 2:
        raise ValueError("what_changed needs two nights")
    before, now = trend.nights[-2], trend.nights[-1]
    order = {name: i for i, name in enumerate(trend.target_names())}
    news = [f for f in now.failures if f.status == NEW]
    unseen = sorted((f for f in now.failures if f.status == NOT_SEEN), key=lambda f: order[f.target])
    lines = _partial_lines(before, now)
    lines += [f"new failure: {f.target} {f.verdict}{_device(f.device)}" for f in news]
    lines += [f"not seen tonight: {f.target} {f.verdict}{_device(f.device)} ({f.tonight})" for f in unseen]
    explained = {f.target for f in news + unseen}
    broken: set[str] = set()
    for name, target in now.targets.items():
        old = before.targets.get(name)
        if old is not None and target.cannot_build and not old.cannot_build:
            lines.append(f"{name}: newly cannot-build ({target.cannot_build})")
            broken.add(name)
        if old is not None and target.retired and not old.retired:
            lines.append(f"{name}: newly {target.retired} (a side's release removed its code)")
            broken.add(name)
    for name, target in now.targets.items():
        old = before.targets.get(name)
        if old is None or name in broken:
            continue
        for device in target.untested:
            if device not in old.untested:
                lines.append(f"{name}: newly untested{_device(device)}")
                broken.add(name)
    for name, target in now.targets.items():
        old = before.targets.get(name)
        if old is not None and old.verdict != target.verdict and name not in explained | broken:
            lines.append(f"{name}: verdict {old.verdict} -> {target.verdict}")
    for name, target in now.targets.items():
        old = before.targets.get(name)
        line = _syncs_rose(old.syncs, target.syncs) if old else None
        if line:
            lines.append(f"{name}: {line}")
    for name, target in now.targets.items():
        old = before.targets.get(name)
        if old is None or name in broken or old.examples <= 0 or before.partial or now.partial:
            continue
        fall = (old.examples - target.examples) / old.examples
        if fall > threshold:
            lines.append(f"{name}: examples fell by {fall:.0%} ({old.examples} -> {target.examples})")
    lines += [f"{name}: new target" for name in now.targets
              if name not in before.targets and not before.may_lack(name)]
    lines += [f"{name}: no longer in the report" for name in before.targets
              if name not in now.targets and not now.may_lack(name)]
    return [f"since {before.label}: {line}" for line in (lines or ["nothing changed"])]


# --------------------------------------------------------------------------- tables and chart data


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}/s" if value >= 10 else f"{value:.2g}/s"


def _stats(stats: SyncStats | None) -> str:
    return "-" if stats is None else f"{stats.median}/{stats.max}"


def night_rows(trend: Trend) -> list[list[str]]:
    header = ["night", "report", "seed", "started (UTC)", "targets", "examples", "new", "still failing", "known",
              "not seen tonight", "partial"]
    rows = [header]
    for night in trend.nights:
        counts = {status: sum(f.status == status for f in night.failures) for status in (NEW, STILL, KNOWN, NOT_SEEN)}
        rows.append([night.label, night.name, str(night.seed), night.started or "-", str(len(night.targets)),
                     str(sum(t.examples for t in night.targets.values())), *(str(counts[s]) for s in counts),
                     night.partial or "-"])
    return rows


TABLES = {
    "examples (examples/s)": lambda t: f"{t.examples} ({_rate(t.per_second)})",
    "verdict": lambda t: t.verdict,
    "syncs per call on CUDA, median/max: legacy -> optimized":
        lambda t: "-" if t.syncs.get("optimized") is None and t.syncs.get("legacy") is None
        else f"{_stats(t.syncs.get('legacy'))} -> {_stats(t.syncs.get('optimized'))}",
}


def target_rows(trend: Trend, title: str) -> list[list[str]]:
    """One table over nights: a row per target, a column per night ("" where a night lacks the target)."""
    cell = TABLES[title]
    rows = [["target", *trend.labels]]
    for name in trend.target_names():
        rows.append([name, *(cell(n.targets[name]) if name in n.targets else "" for n in trend.nights)])
    return rows


def failure_rows(trend: Trend) -> list[list[str]]:
    rows = [["night", "target", "device", "verdict", "status"]]
    for night in trend.nights:
        for f in night.failures:
            # The finding's id ("F17"), not its whole reason (the run's own report has that).
            status = f"{f.status}: {f.known.split(':')[0][:24]}" if f.status == KNOWN and f.known else f.status
            rows.append([night.label, f.target, f.device, f.verdict, status])
    return rows


@dataclass(frozen=True)
class ChartData:
    title: str
    ylabel: str
    nights: tuple[str, ...]
    series: Mapping[str, tuple[float | None, ...]]  # target -> one value per night (None: not run / no data)


def examples_per_second_chart(trend: Trend) -> ChartData:
    series = {name: tuple(n.targets[name].per_second if name in n.targets else None for n in trend.nights)
              for name in trend.target_names()}
    return ChartData("examples per second per target", "examples / s", tuple(trend.labels), series)


def optimized_syncs_chart(trend: Trend) -> ChartData:
    """The most syncs one optimized call made, per target and night (CUDA); targets never counted left out."""
    series = {}
    for name in trend.target_names():
        values = []
        for night in trend.nights:
            stats = night.targets[name].syncs.get("optimized") if name in night.targets else None
            values.append(None if stats is None else float(stats.max))
        if any(v is not None for v in values):
            series[name] = tuple(values)
    return ChartData("optimized syncs per call (max over calls, CUDA)", "syncs per call", tuple(trend.labels),
                     series)


CHARTS = {"examples-per-second": examples_per_second_chart, "optimized-syncs": optimized_syncs_chart}
# Why a chart has nothing to draw, said in its place: an empty chart would look like a chart of zeros.
NO_DATA = {"examples-per-second": "no night recorded a target's examples and seconds",
           "optimized-syncs": "no night counted an optimized call's syncs (they are counted on CUDA devices "
                              "only; these nights ran without one)"}


def no_chart_reason(key: str, data: ChartData) -> str | None:
    """Why the chart ``key`` of ``data`` is not drawn, or None when it has a value to draw."""
    if any(value is not None for values in data.series.values() for value in values):
        return None
    return NO_DATA[key]


def draw_chart(data: ChartData, fmt: str) -> bytes:
    """A line chart of ``data`` (one line per target) as SVG or PNG bytes, through matplotlib only."""
    from fuzz.reports.charts import figure_bytes

    return figure_bytes(plot_chart(data), fmt)


def plot_chart(data: ChartData) -> Any:
    """The matplotlib figure of ``data``: one line per target, its y axis from zero (a rate or a count
    whose axis started elsewhere would make a small change look large)."""
    from fuzz.reports.charts import pyplot

    plt = pyplot()
    figure, axes = plt.subplots(figsize=(9, 4.8))
    colors = plt.get_cmap("tab20").colors
    styles = ("-", "--", ":", "-.")
    x = list(range(len(data.nights)))
    for i, (name, values) in enumerate(data.series.items()):
        ys = [math.nan if v is None else v for v in values]
        axes.plot(x, ys, marker="o", markersize=3, linewidth=1.2, color=colors[i % len(colors)],
                  linestyle=styles[(i // len(colors)) % len(styles)], label=name)
    axes.set_xticks(x)
    axes.set_xticklabels(list(data.nights), rotation=20, ha="right", fontsize=8)
    axes.set_title(data.title)
    axes.set_ylabel(data.ylabel)
    axes.grid(True, alpha=0.3)
    axes.set_ylim(bottom=0)
    if data.series:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return figure


# --------------------------------------------------------------------------- rendering


def _plain_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _order_note(trend: Trend) -> str:
    if trend.ordered_by == BY_START:
        return "oldest first, by each run's start time"
    return "in the order given on the command line (not every report records its run start time)"


def terminal(trend: Trend, changes: list[str]) -> str:
    parts = ["\n".join(changes), "",
             f"trend over {len(trend.nights)} nights, {_order_note(trend)}:", _plain_table(night_rows(trend))]
    for title in TABLES:
        parts += ["", f"{title}:", _plain_table(target_rows(trend, title))]
    if len(failure_rows(trend)) > 1:
        parts += ["", "failures:", _plain_table(failure_rows(trend))]
    return "\n".join(parts)


def _md_cell(text: str) -> str:
    """Text in a Markdown cell or bullet: a ``|`` cannot end the cell, a ``<`` cannot open an HTML tag."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _md_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def markdown_text(trend: Trend, changes: list[str], images: Mapping[str, str] | None = None,
             no_charts: Mapping[str, str] | None = None) -> str:
    """The trend in Markdown; ``images`` {chart title: file name beside it} are linked when given, and each
    chart of ``no_charts`` {title: why} is said not drawn, and why."""
    parts = [f"## syncfuzz trend: {len(trend.nights)} nights", "", f"Nights {_order_note(trend)}.", "",
             "### What changed", "", *(f"- {_md_cell(line)}" for line in changes), "", "### Nights", "",
             _md_table(night_rows(trend))]
    for title in TABLES:
        parts += ["", f"### {title[:1].upper()}{title[1:]}", "", _md_table(target_rows(trend, title))]
    if len(failure_rows(trend)) > 1:
        parts += ["", "### Failures", "", _md_table(failure_rows(trend))]
    for title, file in (images or {}).items():
        parts += ["", f"![{_md_cell(title)}]({file})"]
    for title, why in (no_charts or {}).items():
        parts += ["", f"*{_md_cell(title)}: no chart, {_md_cell(why)}.*"]
    return "\n".join(parts) + "\n"


# The report page's style (fuzz/reports/html.py), plus the trend's chart boxes.
CSS_EXTRA = ".chart svg{max-width:100%;height:auto}"


def _html_table(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(trend: Trend, changes: list[str], charts: Mapping[str, str] | None,
              no_charts: Mapping[str, str] | None = None) -> str:
    """One self-contained page: inline CSS, inline SVG charts (``charts``: {title: svg}; None: no
    matplotlib; ``no_charts``: {title: why it is not drawn}), every text escaped, no script and no external
    URL."""
    parts = [f"<h1>syncfuzz trend: {len(trend.nights)} nights</h1>",
             f"<p>Nights {html.escape(_order_note(trend))}.</p>",
             "<h2>What changed</h2>", "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in changes) + "</ul>",
             "<h2>Nights</h2>", _html_table(night_rows(trend))]
    for title in TABLES:
        parts += [f"<h2>{html.escape(title[:1].upper() + title[1:])}</h2>", _html_table(target_rows(trend, title))]
    if len(failure_rows(trend)) > 1:
        parts += ["<h2>Failures</h2>", _html_table(failure_rows(trend))]
    if charts is None:
        parts.append("<p>No charts: matplotlib is not installed (pip install matplotlib).</p>")
    for title, svg in (charts or {}).items():
        parts += [f"<h2>{html.escape(title)}</h2>", f'<div class="chart">{svg}</div>']
    for title, why in (no_charts or {}).items():
        parts += [f"<h2>{html.escape(title)}</h2>", f'<p class="note">No chart: {html.escape(why)}.</p>']
    from fuzz.reports.html import CSS, HEAD

    return (HEAD + f"<title>syncfuzz trend</title>\n<style>{CSS}{CSS_EXTRA}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


# --------------------------------------------------------------------------- the command


def image_paths(markdown_path: Path) -> dict[str, Path]:
    """The PNG charts written beside ``--markdown FILE``: FILE-<chart>.png (charts.markdown_images' rule)."""
    from fuzz.reports.charts import markdown_images

    return markdown_images(markdown_path, CHARTS)


def _check_image(flag: str, path: Path) -> None:
    """A chart's path: writable, and an existing file there replaced only if it is a PNG (an earlier trend's)."""
    from fuzz.reports.preflight import check_output, check_overwrite

    check_output(flag, str(path))
    check_overwrite(flag, path, "png")


def _same(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_inputs(names: Sequence[str]) -> None:
    if len(names) < 2:
        raise UsageError(f"a trend needs two nights: give at least two reports (got {len(names)}), oldest first")
    for i, name in enumerate(names):
        for other in names[:i]:
            if _same(name, other):
                raise UsageError(f"report {name!r} is given twice (as {other!r}); a trend compares different "
                                 "nights: pass each night's report once")


def _check_runs(named: Sequence[tuple[str, Report]]) -> None:
    """A night is one whole run: a shard's own report is refused (merge the night's shards first), a copy
    of one report under two names is one night, not two, and neither are two reports holding parts of one
    run (two shards, or two merges of its shards)."""
    seen: dict[str, tuple[str, str]] = {}  # run id -> (file, shard)
    for name, report in named:
        scope = report.run.get("scope")
        if not isinstance(scope, Mapping):
            continue  # written before scopes were recorded: nothing to tell a night by
        shard = scope.get("shard")
        if "covers" not in scope and isinstance(shard, list) and len(shard) == 2 and shard[1] != 1:
            raise UsageError(f"report {name!r} is shard {shard[0]}/{shard[1]} of a run, not a night; merge the "
                             "night's shards first (python -m fuzz merge-reports NIGHT.json SHARD.json...) and "
                             "give the trend the merge")
        for part in _parts_of(scope):
            run_id, held = part
            if run_id in seen:
                other, other_shard = seen[run_id]
                if other_shard == held:
                    raise UsageError(f"reports {other!r} and {name!r} hold the same run (run id {run_id}); a "
                                     "trend compares different nights: pass each night's report once")
                raise UsageError(f"reports {other!r} and {name!r} hold parts of one run (run id {run_id}): one "
                                 "night, not two; merge them first (python -m fuzz merge-reports) and give the "
                                 "trend the merge")
        for run_id, held in _parts_of(scope):
            seen[run_id] = (name, held)


def _parts_of(scope: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(run id, shard) of each part a report's scope holds: one for a run's own report, several for a merge."""
    covers = scope.get("covers")
    parts = covers if isinstance(covers, list) else [scope]
    return [(part["run_id"], str(part.get("shard"))) for part in parts
            if isinstance(part, Mapping) and isinstance(part.get("run_id"), str) and part["run_id"]]


def trend(reports: Sequence[str], *, markdown: str | None = None, html: str | None = None,
          threshold: float = DEFAULT_THRESHOLD) -> int:
    """``trend REPORT...``: nightly reports side by side, oldest first, and what the last night changed;
    written as Markdown (with PNG charts) and/or one HTML page where asked. Exit 0, or UsageError."""
    from fuzz.reports.charts import have_matplotlib, svg_for_html
    from fuzz.reports.merge import read_report
    from fuzz.reports.outputs import write_bytes, write_text
    from fuzz.reports.preflight import check_no_collisions, check_output, check_overwrite

    # Every refusal comes before anything is written: an output over an input is said as such, before
    # the overwrite rule (which would refuse it too, less clearly).
    _check_inputs(reports)
    outputs = {name: check_output(f"--{name}", value)
               for name, value in (("markdown", markdown), ("html", html)) if value is not None}
    images = image_paths(outputs["markdown"]) if "markdown" in outputs and have_matplotlib() else {}
    check_no_collisions({**{f"--{name}": path for name, path in outputs.items()},
                         **{f"--markdown's {key} chart": path for key, path in images.items()}},
                        {"REPORT": [Path(name) for name in reports]})
    for name, path in outputs.items():
        check_overwrite(f"--{name}", path, name if name == "html" else "text")  # --html: only our own pages
    for key, path in images.items():
        _check_image(f"--markdown's {key} chart", path)
    named = [(name, read_report(name)) for name in reports]
    _check_runs(named)
    trend = Trend.from_reports(named)
    changes = what_changed(trend, threshold)
    print(terminal(trend, changes))
    # Each chart with a value to draw; the others are said not drawn, and why, in their place.
    drawn = {key: CHARTS[key](trend) for key in CHARTS}
    no_charts = {data.title: why for key, data in drawn.items() if (why := no_chart_reason(key, data))}
    drawn = {key: data for key, data in drawn.items() if data.title not in no_charts}
    if "markdown" in outputs:
        titles, written = {}, []
        for key, path in images.items():
            if key in drawn:
                write_bytes(path, draw_chart(drawn[key], "png"))
                titles[drawn[key].title] = path.name
                written.append(path)
        if not have_matplotlib():
            print("note: no charts beside the Markdown: matplotlib is not installed (pip install matplotlib)",
                  file=sys.stderr)
        write_text(outputs["markdown"], markdown_text(trend, changes, titles, no_charts if images else None))
        print(f"markdown: {outputs['markdown']}" + "".join(f", {p}" for p in written))
    if "html" in outputs:
        charts = None
        if have_matplotlib():
            charts = {data.title: svg_for_html(draw_chart(data, "svg"), f"trend-{key}") for key, data in drawn.items()}
        write_text(outputs["html"], html_page(trend, changes, charts, no_charts if charts is not None else None))
        print(f"html: {outputs['html']}")
    if trend.ordered_by == BY_COMMAND_LINE:
        print("note: not every report records its run start time (run.started): the nights are in the order given",
              file=sys.stderr)
    return EXIT_OK
