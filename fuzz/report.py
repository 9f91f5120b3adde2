"""What a run tells its user: progress lines, the summary table, JSON report.

Everything here works on *target entries*: the JSON-able summary of one
target's run (``outcome_entry``). An isolated worker process sends exactly
that back to the parent, so in-process and isolated runs report alike.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, TextIO

from fuzz.compare import Verdict
from fuzz.execute import ExampleResult
from fuzz.runner import DeviceTally, TargetOutcome
from fuzz.versions import versions

REPORT_FORMAT = "syncfuzz-report/1"


def tally_json(tally: DeviceTally) -> dict:
    return {
        "examples": tally.examples,
        "verdicts": dict(tally.verdicts),
        "both_raised": tally.both_raised,
        "syncs_per_call": {
            "legacy": {str(k): v for k, v in sorted(tally.legacy_syncs.items())},
            "optimized": {str(k): v for k, v in sorted(tally.optimized_syncs.items())},
        },
        # The part of those syncs torch's detector cannot see (docs/verdicts.md#syncs).
        "hidden_syncs_per_call": {
            "legacy": {str(k): v for k, v in sorted(tally.legacy_hidden.items())},
            "optimized": {str(k): v for k, v in sorted(tally.optimized_hidden.items())},
        },
    }


def failure_entry(failure: ExampleResult, repro: Path | str | None) -> dict:
    return {
        "device": failure.device,
        "verdict": failure.verdict.value,
        "input": failure.spec,
        "mismatches": [m.as_json() for m in failure.mismatches],
        "exceptions": {"legacy": failure.legacy.raised.type_name if failure.legacy.raised else None,
                       "optimized": failure.optimized.raised.type_name if failure.optimized.raised else None},
        "repro": str(repro) if repro else None,
    }


def outcome_entry(outcome: TargetOutcome) -> dict:
    """One target's run as JSON: the unit of every report."""
    saved = outcome.repro_paths + [None] * (len(outcome.failures) - len(outcome.repro_paths))
    failures = sorted(zip(outcome.failures, saved), key=lambda pair: -pair[0].verdict.severity)
    verdict = "skipped" if outcome.skipped else ("fuzzer-error" if outcome.harness_error else outcome.verdict.value)
    return {
        "name": outcome.target.name,
        "upstream": list(outcome.target.upstream),
        "devices": list(outcome.devices),
        "expected_optimized_syncs": outcome.target.expected_optimized_syncs,
        "examples": outcome.examples,
        "first_failure_at": outcome.first_failure_at,
        "seconds": round(outcome.seconds, 3),
        "verdict": verdict,
        "flaky": outcome.flaky,
        "skipped": outcome.skipped,
        "fuzzer_error": outcome.harness_error,
        "upstream_check": outcome.upstream,
        "by_device": {device: tally_json(t) for device, t in outcome.tallies.items()},
        "failures": [failure_entry(f, p) for f, p in failures],
    }


def worst(verdicts: Iterable[str]) -> str:
    order = {v.value: v.severity for v in Verdict}
    return max(verdicts, key=lambda v: order.get(v, 0), default=Verdict.AGREE.value)


def _sync_range(histogram: dict[str, int]) -> str:
    if not histogram:
        return "-"
    counts = sorted(int(k) for k in histogram)
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}..{counts[-1]}"


def sync_column(device_entry: dict) -> str:
    syncs = device_entry["syncs_per_call"]
    if not syncs["legacy"] and not syncs["optimized"]:
        return "-"
    return f"{_sync_range(syncs['legacy'])} -> {_sync_range(syncs['optimized'])}"


def progress_printer(stream: TextIO = sys.stderr):
    """A callback printing one line per target (and every few seconds for long ones)."""

    def show(outcome: TargetOutcome, done: bool) -> None:
        if done:
            return  # the run announces finished targets itself
        state = outcome.verdict.value if outcome.failures else "running"
        stream.write(f"[fuzz] {outcome.target.name}: {outcome.examples} examples so far, {state}\n")
        stream.flush()

    return show


def untested(entry: dict, device: str) -> bool:
    """No example ran on this device (its budget share ran out first): the
    reports say "untested", since "agree" would claim what no run showed."""
    return not entry["by_device"][device]["examples"] and not any(f["device"] == device for f in entry["failures"])


def summary_table(entries: list[dict]) -> str:
    header = ("target", "device", "examples", "agree", "both-raised", "verdict", "syncs legacy->optimized")
    rows = [header]
    for entry in entries:
        if entry["skipped"]:
            rows.append((entry["name"], "-", "0", "-", "-", "skipped", entry["skipped"]))
            continue
        for device, tally in entry["by_device"].items():
            verdict = worst(f["verdict"] for f in entry["failures"] if f["device"] == device)
            if entry["fuzzer_error"]:
                verdict = "fuzzer-error"
            elif entry["flaky"] and verdict != "agree":
                verdict += " (flaky)"
            elif untested(entry, device):
                verdict = "untested"
            rows.append((entry["name"], device, str(tally["examples"]), str(tally["verdicts"].get("agree", 0)),
                         str(tally["both_raised"]), verdict, sync_column(tally)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def failure_lines(entries: list[dict]) -> list[str]:
    lines = []
    for entry in entries:
        if entry.get("upstream_check"):
            lines.append(f"upstream: {entry['name']}: {entry['upstream_check']}")
        if entry["fuzzer_error"]:
            lines.append(f"FUZZER BUG in {entry['name']}: {entry['fuzzer_error']}")
        for device in entry["by_device"]:
            if untested(entry, device):
                lines.append(f"UNTESTED: {entry['name']} on {device} ran no example before its share of "
                             "--budget ran out; give the run a larger --budget or fewer --target")
        for failure in entry["failures"]:
            lines.append(f"{failure['verdict'].upper()} in {entry['name']} on {failure['device']}"
                         + (" (flaky)" if entry["flaky"] else ""))
            # Crashing inputs are journaled, not shrunk.
            label = "input" if failure["verdict"] in ("crash", "hang") else "minimal input"
            lines.append(f"  {label}: {json.dumps(failure['input'])}")
            for mismatch in failure["mismatches"]:
                lines.append(f"  at {mismatch['path']} ({mismatch['what']}): {mismatch['detail']}")
            if failure["repro"]:
                lines.append(f"  saved: {failure['repro']}  (replay: python -m fuzz replay {failure['repro']})")
    return lines


def report_json(entries: list[dict], *, run: dict, exit_code: int) -> dict:
    totals = Counter(f["verdict"] for e in entries for f in e["failures"])
    return {"format": REPORT_FORMAT, "run": run, "versions": versions(), "exit_code": exit_code,
            "failures_by_verdict": dict(totals), "targets": entries}


def write_text(path: Path, text: str) -> None:
    """Atomic write of a text output (Markdown, JUnit XML)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_json(path: Path, payload: Any) -> None:
    """Atomic write: an interrupted run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)
