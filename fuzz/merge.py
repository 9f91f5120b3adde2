"""Combine target entries: restarted workers, xdist items, shards, hosts.

Entries of the same target add up: examples, verdict counts and sync
histograms are summed per device; failures are kept once per signature.
``merge-reports`` applies the same to whole JSON reports, so two shards merge
into the totals one run would have produced.
"""

from __future__ import annotations

import json
from typing import Iterable

from fuzz.errors import UsageError
from fuzz.report import REPORT_FORMAT, worst


def failure_signature(failure: dict) -> str:
    """What makes two saved failures the same bug (verdict, where, exception types)."""
    where = [(m["path"], m["what"]) for m in failure["mismatches"][:1]]
    if failure["verdict"] in ("crash", "hang"):
        # Crash details carry the death ("killed by SIGABRT"), not a path.
        where = [(m["what"], m["detail"].split(";")[0]) for m in failure["mismatches"]]
    return json.dumps([failure["verdict"], where, failure.get("exceptions")], sort_keys=True)


def merge_entry(total: dict | None, part: dict) -> dict:
    """Add ``part`` (one worker's, shard's or host's entry for a target) to ``total``."""
    if total is None:
        return part
    total["examples"] += part["examples"]
    total.setdefault("placement", []).extend(part.get("placement", []))
    total["devices"] = sorted(set(total["devices"]) | set(part["devices"]))
    total["seconds"] = round(total["seconds"] + part["seconds"], 3)
    total["flaky"] = total["flaky"] or part["flaky"]
    total["fuzzer_error"] = total["fuzzer_error"] or part["fuzzer_error"]
    total["upstream_check"] = total.get("upstream_check") or part.get("upstream_check")
    if total["first_failure_at"] is None and part["first_failure_at"] is not None:
        total["first_failure_at"] = part["first_failure_at"]
    for device, tally in part["by_device"].items():
        into = total["by_device"].setdefault(device, tally)
        if into is tally:
            continue
        into["examples"] += tally["examples"]
        into["both_raised"] += tally["both_raised"]
        for verdict, count in tally["verdicts"].items():
            into["verdicts"][verdict] = into["verdicts"].get(verdict, 0) + count
        for histogram in ("syncs_per_call", "hidden_syncs_per_call"):
            for side in ("legacy", "optimized"):
                into_side = into.setdefault(histogram, {}).setdefault(side, {})
                for syncs, count in tally.get(histogram, {}).get(side, {}).items():
                    into_side[syncs] = into_side.get(syncs, 0) + count
    signatures = {failure_signature(f) for f in total["failures"]}
    for failure in part["failures"]:
        if failure_signature(failure) not in signatures:
            signatures.add(failure_signature(failure))
            total["failures"].append(failure)
    return total


def finish_entry(entry: dict) -> dict:
    """Recompute the entry's verdict from its failures after merging."""
    if entry["skipped"] and not entry["examples"]:
        entry["verdict"] = "skipped"
    elif entry["fuzzer_error"]:
        entry["verdict"] = "fuzzer-error"
    else:
        entry["skipped"] = None
        entry["verdict"] = worst(f["verdict"] for f in entry["failures"])
    return entry


def merge_reports(reports: Iterable[dict]) -> dict:
    """One report from several (shards, hosts, nights)."""
    reports = list(reports)
    if not reports:
        raise UsageError("merge-reports needs at least one report file")
    entries: dict[str, dict] = {}
    for report in reports:
        if report.get("format") != REPORT_FORMAT:
            raise UsageError(f"not a syncfuzz report (format {report.get('format')!r}, expected {REPORT_FORMAT!r})")
        for entry in report["targets"]:
            entries[entry["name"]] = merge_entry(entries.get(entry["name"]), json.loads(json.dumps(entry)))
    merged = [finish_entry(e) for e in entries.values()]
    exit_code = 1 if any(f for e in merged for f in e["failures"] if not f.get("known")) else 0
    return {
        "format": REPORT_FORMAT,
        "run": {"merged_from": [r["run"] for r in reports]},
        "versions": reports[0]["versions"],
        "exit_code": exit_code,
        "failures_by_verdict": _count_verdicts(merged),
        "targets": merged,
    }


def _count_verdicts(entries: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in entries:
        for failure in entry["failures"]:
            counts[failure["verdict"]] = counts.get(failure["verdict"], 0) + 1
    return counts
