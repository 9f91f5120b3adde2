"""What a run tells its user: the summary table and the failure lines.

Renderers of the report model (fuzz/records/model.py): every verdict, count and
label comes from it, so the table, the ``[fuzz]`` lines, Markdown
(fuzz/reports/formats.py), JUnit and the JSON report cannot disagree. A failure's
lines render its view (fuzz/reports/view.py), as Markdown's and the HTML's do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Callable, TextIO

from fuzz.records.model import EXIT_FAILURE, EXIT_FUZZER_BUG, EXIT_INCOMPLETE, EXIT_OK, Report, TargetEntry
from fuzz.records.reachdata import line_counts, merged_changes, percent, uncovered, unreached, unreached_side
from fuzz.records.verdicts import TargetVerdict
from fuzz.reports.machine import machine_lines, report_machines
from fuzz.reports.view import FailureView, failure_views


def _sync_range(histogram: Mapping[str, int]) -> str:
    if not histogram:
        return "-"
    counts = sorted(int(k) for k in histogram)
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}..{counts[-1]}"


def sync_column(entry: TargetEntry, device: str, kind: str = "syncs_per_call") -> str:
    """Syncs per call, legacy -> optimized: the function's own (``syncs_per_call``)
    or those its consumer's reads of the output made (``consumer_syncs_per_call``)."""
    tally = entry.by_device.get(device)
    histograms = getattr(tally, kind, None) if tally is not None else None
    if not histograms or not any(histograms.get(side) for side in ("legacy", "optimized")):
        return "-"
    return f"{_sync_range(histograms.get('legacy', {}))} -> {_sync_range(histograms.get('optimized', {}))}"


def consumer_column(entry: TargetEntry, device: str) -> str:
    return sync_column(entry, device, "consumer_syncs_per_call")


def rows(entries: Iterable[TargetEntry]) -> list[tuple[TargetEntry, str | None]]:
    """(entry, device) per table row; a skipped target is one row without a device."""
    out: list[tuple[TargetEntry, str | None]] = []
    for entry in entries:
        if entry.verdict == TargetVerdict.SKIPPED:
            out.append((entry, None))
        else:
            out.extend((entry, device) for device in entry.devices)
    return out


# "shrink steps": Hypothesis' runs to shrink a failure, counted apart from the examples (DeviceTally.shrink_steps).
SUMMARY_HEADER = ("target", "device", "examples", "shrink steps", "agree", "both-raised", "verdict",
                  "syncs legacy->optimized", "consumer syncs", "reached legacy/optimized")
NUMERIC_COLUMNS = (2, 3, 4, 5)  # examples, shrink steps, agree, both-raised


def reach_column(entry: TargetEntry, device: str) -> str:
    """The share of the claimed definitions' upstream lines each side ran (docs/reach.md): "93%/88%";
    "-" where not measured."""
    sides = entry.reach.get(device)
    if not sides:
        return "-"
    return "/".join(percent(*line_counts(sides[side])) if side in sides else "-" for side in ("legacy", "optimized"))


def summary_table(entries: Iterable[TargetEntry]) -> str:
    table = summary_rows(entries)
    header = table[0]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_rows(entries: Iterable[TargetEntry]) -> list[tuple[str, ...]]:
    """The summary table's cells, its header first (the terminal table and the HTML report show these)."""
    table: list[tuple[str, ...]] = [SUMMARY_HEADER]
    for entry, device in rows(entries):
        if device is None:
            table.append((entry.name, "-", "0", "0", "-", "-", TargetVerdict.SKIPPED, entry.skipped or "", "", ""))
            continue
        tally = entry.by_device.get(device)
        examples = tally.examples if tally else 0
        agree = tally.verdicts.get("agree", 0) if tally else 0
        table.append((entry.name, device, str(examples), str(tally.shrink_steps if tally else 0), str(agree),
                      str(tally.both_raised if tally else 0),
                      entry.label_on(device), sync_column(entry, device), consumer_column(entry, device),
                      reach_column(entry, device)))
    return table


def failure_lines(entries: Iterable[TargetEntry]) -> list[str]:
    """What the terminal says under the table, target by target: its notices (``target_notices``), then
    each of its failures (``failure_text``)."""
    lines = []
    for entry in entries:
        lines += target_notices(entry)
        for view in failure_views([entry]):
            lines += failure_text(view)
    return lines


def target_notices(entry: TargetEntry) -> list[str]:
    """A target's lines that are no failure of an example: the upstream comparison, a fuzzer bug, a retired,
    cannot-build, same-code, unreached or untested target (the terminal and the HTML notes say these)."""
    lines = []
    if entry.upstream_check:
        lines.append(f"upstream: {entry.name}: {entry.upstream_check}")
    if entry.fuzzer_error:
        lines.append(f"FUZZER BUG in {entry.name}: {entry.fuzzer_error}")
    if entry.retired:
        lines.append(f"{entry.retired_label} {entry.name}: {retired_reason(entry.retired)}")
    if entry.cannot_build:
        lines.append(f"cannot-build {entry.name}: {entry.cannot_build}")
    if entry.same_code or any(entry.verdict_on(d) == TargetVerdict.SAME_CODE for d in entry.devices):
        lines.append(f"same-code {entry.name}: {entry.same_code or 'both sides executed the same definitions'}"
                     "; its agreement is no evidence (docs/reach.md)")
    for device in entry.unreached_devices():
        sides = entry.reach.get(device, {})
        missed = "; ".join(f"{side} entered none of {', '.join(unreached(record)) or 'its claims (none found)'}"
                           for side, record in sides.items() if unreached_side(record))
        lines.append(f"UNREACHED: {entry.name} on {device}: {missed}; the examples compared other code "
                     "(python -m fuzz coverage REPORT shows what ran)")
    for device in entry.untested_devices():
        lines.append(f"UNTESTED: {entry.name} on {device} ran no example before its share of "
                     "--budget ran out; give the run a larger --budget or fewer --target")
    return lines


def failure_text(view: FailureView) -> list[str]:
    """One failure on the terminal (fuzz.reports.view): its headline, example, mismatches, oracles, repro."""
    lines = [f"{view.verdict.upper()} in {view.target} on {view.device}"
             + (" (flaky)" if view.flaky else "")
             + (f" (reproduced {view.confirmed} in fresh processes)" if view.confirmed else "")
             + (f" (not confirmed: {view.unconfirmed})" if view.unconfirmed else "")
             + (f" (known: {view.known})" if view.known else ""),
             f"  {view.example_label}: {json.dumps(dict(view.example))}"]
    lines += [f"  at {m.path} ({m.what}): {m.detail}" for m in view.mismatches]
    if len(view.oracles) > 1:  # one oracle is the verdict's own: the headline names it
        lines.append(f"  flagged by: {', '.join(view.oracles)}")
    if view.repro:
        lines.append(f"  saved: {view.repro}  (replay: {view.replay_command})")
    return lines


def retired_reason(record: Mapping[str, Any]) -> str:
    """Why a target is retired, in one line: the side, the files its release removed, where that is known from."""
    files = ", ".join(record.get("files", []))
    return f"{record.get('side')} has no {files}; {record.get('known_from')}; nothing to compare (docs/sides.md)"


# What each exit code tells the user, for the closing line (the same rule as --help's epilog).
EXIT_MEANINGS = {
    EXIT_OK: "no failure",
    EXIT_FAILURE: "a failing verdict was found",
    EXIT_FUZZER_BUG: "a fuzzer error (FUZZER BUG above)",
    EXIT_INCOMPLETE: "incomplete: no failure found, but the run did not show all it was asked to",
}


def target_outcome(entry: TargetEntry) -> str:
    """The one bucket a target falls in, for the closing line's counts."""
    if entry.fuzzer_error:
        return "fuzzer-error"
    if any(not f.known for f in entry.failures):
        return "new"
    if entry.retired:
        return "retired"
    if entry.cannot_build:
        return "cannot-build"
    if entry.verdict == TargetVerdict.UNTESTED or entry.untested_devices():
        return "untested"
    if entry.failures:
        return "known"
    if entry.verdict in (TargetVerdict.UNREACHED, TargetVerdict.SAME_CODE):
        return entry.verdict
    return TargetVerdict.SKIPPED if entry.verdict == TargetVerdict.SKIPPED else "agree"


def closing_line(report: Report) -> str:
    """The run in one line: how many targets agree, new and known failures,
    untested and cannot-build targets, and what the exit code means."""
    buckets = [target_outcome(e) for e in report.targets]
    new = len(report.new_failures())
    parts = [f"{buckets.count('agree')}/{len(buckets)} targets agree",
             f"{buckets.count('new')} with new failures ({new} new)",
             f"{buckets.count('known')} with known failures only", f"{buckets.count('untested')} untested",
             f"{buckets.count('cannot-build')} cannot-build"]
    parts += [f"{buckets.count(b)} {b}" for b in ("retired", "same-code", "unreached", "skipped", "fuzzer-error")
              if b in buckets]
    never = report.never_ran()
    if never:
        parts.append(f"{len(never)} never ran")
    code = report.exit_code()
    if report.interrupted and not report.is_merge:
        meaning = f"interrupted by {report.interrupted}: the report holds what finished"
    elif code == EXIT_INCOMPLETE and report.partial():
        meaning = f"{EXIT_MEANINGS[code]} (a partial merge: {report.partial()})"
    else:
        meaning = EXIT_MEANINGS.get(code, "")
        if code == EXIT_INCOMPLETE and report.upstream_not_compared():
            meaning += " (--upstream compared no target with the real vllm)"
        if code == EXIT_INCOMPLETE and report.changes_not_covered():
            changes = merged_changes(report)
            missing, branches = uncovered(changes)
            sync = " sync-relevant" if (changes or {}).get("require") == "sync" else ""
            parts_ = [f"{len(missing)}{sync} changed definitions no target reached"] if missing else []
            parts_ += [f"{len(branches)}{sync} changed definitions with a changed branch no example took"] \
                if branches else []
            meaning += f" ({'; '.join(parts_)})"
    return f"result: {', '.join(parts)}; exit {code}: {meaning}"


def partial_lines(report: Report) -> list[str]:
    """What a partial report lacks, for the top of every output (none for a whole one): why it is
    partial, and the targets it was to hold that never ran."""
    why = report.partial()
    if why is None:
        return []
    scope = report.run.get("scope")
    lacks_shards = isinstance(scope, Mapping) and scope.get("complete") is False
    held = {(False, True): "the shards it merged", (True, True): "what finished in the shards it merged"}.get(
        (bool(report.interrupted), lacks_shards), "the targets whose items finished")
    lines = [f"{why}: a partial report; it holds only {held}"]
    never = report.never_ran()
    unnamed = "; the missing shards' targets are not named here" if lacks_shards else ""
    if never is None:
        lines.append("never ran: not recorded (a report from before run.planned, or stopped before its targets "
                     "were looked up)")
    elif never:
        lines.append(f"never ran: {', '.join(never)} ({len(never)} of the {len(report.planned() or ())} "
                     f"targets planned{unnamed})")
    else:
        lines.append(f"never ran: none; every planned target has an entry{unnamed}")
    return lines


PROGRESS_MARK = "[fuzz] progress "  # a live status line: redrawn on a terminal, dropped from logs


def progress_line(outcome: Any) -> str:
    """A running target's status: examples per device, rate, time of its share."""
    import time

    elapsed = max(time.monotonic() - outcome.started, 1e-9)
    devices = " ".join(f"{d} {t.examples}" for d, t in outcome.tallies.items())
    share = "" if outcome.deadline is None else f" of a {outcome.deadline - outcome.started:.0f} s share"
    state = outcome.failures[0].verdict.value if outcome.failures else "no failure yet"
    return (f"{PROGRESS_MARK}{outcome.target.name}: {outcome.examples} examples ({devices}), "
            f"{outcome.examples / elapsed:.0f}/s, {elapsed:.0f} s{share}, {state}")


def progress_printer(stream: TextIO) -> Callable[[Any], None]:
    """A progress hook (fuzz.config.Hooks) writing status lines; an isolated
    worker's go through its parent (``show_worker_line``)."""

    def show(outcome: Any) -> None:
        stream.write(progress_line(outcome) + "\n")
        stream.flush()

    return show


def show_worker_line(line: str, stream: TextIO, live: bool) -> None:
    """Echo one line a worker wrote: a status line is redrawn in place on a
    terminal (``live``) and dropped otherwise, so logs get one line per item."""
    is_status = line.startswith(PROGRESS_MARK)
    if not live:
        if not is_status:
            stream.write(line if line.endswith("\n") else line + "\n")
        return
    stream.write("\r\x1b[K" + line.rstrip("\n") + ("" if is_status else "\n"))
    stream.flush()


def item_line(key: str, entry: TargetEntry) -> str:
    """One line per finished item, on every stream."""
    rate = entry.examples / entry.seconds if entry.seconds else 0.0
    devices = " ".join(f"{d} {t.examples}" for d, t in entry.by_device.items()) or "none"
    return (f"[fuzz] {key}: {entry.examples} examples ({devices}) in {entry.seconds:.1f} s "
            f"({rate:.0f}/s), {entry.verdict}")


def report_notes(report: Report) -> list[str]:
    """The lines under the table that speak for the whole run: what was reached, the change's coverage,
    which rule judged syncs where it is not the copies' budget, and the machine's use (fuzz/reports/machine.py)."""
    from fuzz.records.reachdata import change_line

    notes = []
    measured = [e for e in report.targets if e.reach]
    if measured:
        totals = {side: [0, 0] for side in ("legacy", "optimized")}
        for entry in measured:
            for sides in entry.reach.values():
                for side, record in sides.items():
                    reached, total = line_counts(record)
                    totals[side][0] += reached
                    totals[side][1] += total
        notes.append("reach: lines of the claimed definitions run, legacy " + percent(*totals["legacy"])
                     + ", optimized " + percent(*totals["optimized"])
                     + " (summed over targets and devices; python -m fuzz coverage REPORT lists the lines no "
                       "example ran)")
    line = change_line(merged_changes(report))
    if line:
        notes.append(line)
    rules: dict[str, list[str]] = {}
    for entry in report.targets:
        if entry.sync_rule and entry.sync_rule != "budget":
            # Which parts descended, where more than the entry point decides (docs/verdicts.md#which-sync-rule).
            parts = f" ({descent_note(dict(entry.sync_descent))})" if len(entry.sync_descent) > 1 else ""
            rules.setdefault(entry.sync_rule, []).append(entry.name + parts)
    for rule, names in rules.items():
        notes.append(f"syncs judged {SYNC_RULES.get(rule, rule)}: {', '.join(names)}")
    for machine in report_machines(report.run):  # absent in reports from before; one per input of a merge
        notes += machine_lines(machine)
    return notes


def descent_note(parts: dict[str, bool]) -> str:
    """The parts that descended and those that did not, in words: ``entry point; not:
    InternS1MultiModalProcessor._get_mm_fields_config``."""
    kept = [name for name, descends in parts.items() if descends]
    not_kept = [name for name, descends in parts.items() if not descends]
    said = []
    if kept:
        said.append("descended: " + ", ".join(kept))
    if not_kept:
        said.append("not: " + ", ".join(not_kept))
    return "; ".join(said)


SYNC_RULES = {
    "budget": "by the budget declared for the copy",
    "relative": "relative to legacy on the same input (the declared budget does not apply)",
    "relative+budget": "relative to legacy, and by the declared budget (the code descends from its release)",
}
