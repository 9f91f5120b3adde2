"""What a run tells its user: progress lines, the summary table, JSON report."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from fuzz.runner import DeviceTally, TargetOutcome
from fuzz.versions import versions

REPORT_FORMAT = "syncfuzz-report/1"


def _syncs(counter: Any) -> str:
    if not counter:
        return "-"
    return str(max(counter)) if len(counter) == 1 else f"{min(counter)}..{max(counter)}"


def sync_column(tally: DeviceTally) -> str:
    if not tally.legacy_syncs and not tally.optimized_syncs:
        return "-"
    return f"{_syncs(tally.legacy_syncs)} -> {_syncs(tally.optimized_syncs)}"


def progress_printer(stream: TextIO = sys.stderr):
    """A callback printing one line per target (and per budget chunk)."""

    def show(outcome: TargetOutcome, done: bool) -> None:
        state = outcome.verdict.value if done or outcome.failures else "running"
        if outcome.skipped and done:
            stream.write(f"[fuzz] {outcome.target.name}: skipped ({outcome.skipped})\n")
            return
        stream.write(f"[fuzz] {outcome.target.name}: {outcome.examples} examples, {state}\n")
        stream.flush()

    return show


def summary_table(outcomes: list[TargetOutcome]) -> str:
    header = ("target", "device", "examples", "agree", "both-raised", "verdict", "syncs legacy->optimized")
    rows = [header]
    for outcome in outcomes:
        if outcome.skipped:
            rows.append((outcome.target.name, "-", "0", "-", "-", "skipped", outcome.skipped))
            continue
        for device, tally in outcome.tallies.items():
            verdict = "agree"
            if outcome.harness_error:
                verdict = "fuzzer-error"
            elif outcome.verdict_on(device).failed:
                verdict = outcome.verdict_on(device).value + (" (flaky)" if outcome.flaky else "")
            rows.append((outcome.target.name, device, str(tally.examples), str(tally.verdicts.get("agree", 0)),
                         str(tally.both_raised), verdict, sync_column(tally)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def failure_lines(outcomes: list[TargetOutcome]) -> list[str]:
    lines = []
    for outcome in outcomes:
        if outcome.harness_error:
            lines.append(f"FUZZER BUG in {outcome.target.name}: {outcome.harness_error}")
        saved = outcome.repro_paths or [None] * len(outcome.failures)
        for result, path in zip(outcome.failures, saved):
            lines.append(f"{result.verdict.value.upper()} in {outcome.target.name} on {result.device}"
                         + (" (flaky)" if outcome.flaky else ""))
            lines.append(f"  minimal input: {json.dumps(result.spec)}")
            for mismatch in result.mismatches:
                lines.append(f"  at {mismatch.path or '<output>'} ({mismatch.what}): {mismatch.detail}")
            if path:
                lines.append(f"  saved: {path}  (replay: python -m fuzz replay {path})")
    return lines


def tally_json(tally: DeviceTally) -> dict:
    return {
        "examples": tally.examples,
        "verdicts": dict(tally.verdicts),
        "both_raised": tally.both_raised,
        "syncs_per_call": {
            "legacy": {str(k): v for k, v in sorted(tally.legacy_syncs.items())},
            "optimized": {str(k): v for k, v in sorted(tally.optimized_syncs.items())},
        },
    }


def report_json(outcomes: list[TargetOutcome], *, run: dict, exit_code: int) -> dict:
    targets = []
    for outcome in outcomes:
        entry: dict[str, Any] = {
            "name": outcome.target.name,
            "upstream": list(outcome.target.upstream),
            "devices": list(outcome.devices),
            "expected_optimized_syncs": outcome.target.expected_optimized_syncs,
            "examples": outcome.examples,
            "first_failure_at": outcome.first_failure_at,
            "seconds": round(outcome.seconds, 3),
            "verdict": "skipped" if outcome.skipped else ("fuzzer-error" if outcome.harness_error else outcome.verdict.value),
            "flaky": outcome.flaky,
            "skipped": outcome.skipped,
            "fuzzer_error": outcome.harness_error,
            "by_device": {device: tally_json(t) for device, t in outcome.tallies.items()},
            "failures": [],
        }
        saved = outcome.repro_paths or [None] * len(outcome.failures)
        for failure, path in zip(outcome.failures, saved):
            entry["failures"].append({
                "device": failure.device,
                "verdict": failure.verdict.value,
                "input": failure.spec,
                "mismatches": [m.as_json() for m in failure.mismatches],
                "exceptions": {"legacy": failure.legacy.raised.type_name if failure.legacy.raised else None,
                               "optimized": failure.optimized.raised.type_name if failure.optimized.raised else None},
                "repro": str(path) if path else None,
            })
        targets.append(entry)
    return {"format": REPORT_FORMAT, "run": run, "versions": versions(), "exit_code": exit_code, "targets": targets}


def write_json(path: Path, payload: dict) -> None:
    """Atomic write: an interrupted run never leaves half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)
