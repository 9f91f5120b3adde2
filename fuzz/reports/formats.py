"""Report formats beyond JSON: a Markdown summary (people) and JUnit XML (CI).

Renderers of the report model: verdicts and labels come from
``TargetEntry.verdict_on`` / ``label_on`` (fuzz/records/model.py), as in the table;
a failure's lines from its view (fuzz/reports/view.py), as on the terminal and in the HTML.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from xml.etree import ElementTree as ET

from fuzz.records.model import Report
from fuzz.records.reachdata import change_line, merged_changes, uncovered, untaken_text
from fuzz.records.verdicts import TargetVerdict
from fuzz.reports.machine import gpu_clauses, report_machines, sharing_clause
from fuzz.reports.report import (
    closing_line,
    consumer_column,
    partial_lines,
    reach_column,
    report_notes,
    retired_reason,
    rows,
    sync_column,
)
from fuzz.reports.view import FailureView, failure_view, failure_views

_UNTESTED_WHY = "no example ran within its share of the budget"


def failure_label(view: FailureView) -> str:
    """A failure's verdict with its flakiness and confirmation, as Markdown's list and JUnit's message say it."""
    label = view.verdict
    if view.flaky:
        label += f" (flaky, reproduced {view.confirmed or '?'})"
    if view.unconfirmed:
        label += f" (not confirmed: {view.unconfirmed})"
    return label


def failure_markdown(view: FailureView) -> list[str]:
    """One failure as a Markdown list item (fuzz.reports.view): long details and inputs cut, so a CI job
    summary stays readable (the HTML and the repro file hold them whole)."""
    state = f"known: {view.known}" if view.known else "**new**"
    lines = [f"- `{view.target}` on {view.device}: {failure_label(view)} — {state}"]
    lines += [f"  - at `{m.path}` ({m.what}): {m.detail[:300]}" for m in view.mismatches]
    lines.append(f"  - input: `{json.dumps(dict(view.example))[:400]}`")
    if view.replay_command:
        lines.append(f"  - replay: `{view.replay_command}`")
    return lines


def _number(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.0f}{unit}"


def _machine_markdown(machine: Mapping[str, Any]) -> list[str]:
    """One machine's use: examples per device, each GPU's readings, how the GPU was shared."""
    examples, rates = machine.get("examples") or {}, machine.get("examples_per_s") or {}
    seconds = machine.get("seconds")
    lines = [f"fuzzing phase: {seconds:,.0f} s" if seconds else "fuzzing phase: duration not recorded", "",
             "| device | examples | examples/s |", "|---|---|---|"]
    lines += [f"| {device} | {n:,} | {rates[device]:,.1f} |" if device in rates else f"| {device} | {n:,} | - |"
              for device, n in examples.items()]
    gpu = machine.get("gpu") or {}
    if gpu.get("gpus"):
        lines += ["", "| GPU | name | busy mean | busy max | memory max (MiB) | memory total (MiB) |",
                  "|---|---|---|---|---|---|"]
        for card in gpu["gpus"]:
            busy, memory = card.get("busy_pct") or {}, card.get("memory_used_mib") or {}
            lines.append(f"| {card.get('index')} | {card.get('name')} | {_number(busy.get('mean'), '%')} | "
                         f"{_number(busy.get('max'), '%')} | {_number(memory.get('max'))} | "
                         f"{_number(card.get('memory_total_mib'))} |")
        lines += ["", f"sampled {gpu.get('samples')} times, every {gpu.get('every_s')} s"]
    elif gpu:
        lines += [""] + gpu_clauses(gpu)
    sharing = sharing_clause(machine.get("gpu_share") or {})
    return lines + (["", sharing] if sharing else [])


def _machine_section(run: Mapping[str, Any]) -> list[str]:
    """``### Machine`` (or one ``#### input`` per input of a merged report); nothing for reports from before."""
    machines = report_machines(run)
    if not machines:
        return []
    if "machines" not in run:
        return ["", "### Machine", ""] + _machine_markdown(machines[0])
    lines = ["", "### Machines", ""]
    for machine in machines:
        lines += [f"#### {machine.get('name') or '?'}", ""] + _machine_markdown(machine) + [""]
    return lines[:-1]


def _partial_markdown(report: Report) -> list[str]:
    """A partial report's first lines: why (the signal and phase; a merge's interrupted part or missing
    shards), and the targets that never ran."""
    said = partial_lines(report)
    if not said:
        return []
    if report.interrupted and not report.is_merge:
        phase = report.run.get("interrupted_in")
        head = (f"**Interrupted by {report.interrupted}**" + (f" in {phase}" if phase else "")
                + ": a partial report; it holds only the targets whose items finished.")
    else:
        head = f"**Partial**: {said[0]}."
    return ["", head, "", said[1].replace("never ran:", "**Never ran**:", 1), ""]


def markdown(report: Report, images: Mapping[str, str] | None = None, notes: Sequence[str] = ()) -> str:
    """The report in Markdown; ``images`` {chart title: PNG file name beside the Markdown file} are linked
    under "## Charts", with ``notes`` (why a chart is missing) after them."""
    run = report.run
    lines = ["# syncfuzz report", ""]
    if "seed" in run:
        devices = ",".join(run.get("devices", []))
        lines.append(f"seed `{run['seed']}` · contract `{run.get('contract')}` · devices `{devices}`"
                     + (f" · profile `{run['profile']}`" if run.get("profile") else ""))
    lines += _partial_markdown(report)  # a job summary must not read as a whole run
    versions = report.versions
    lines += [f"torch {versions.get('torch')} · {versions.get('gpu') or 'no GPU'} · legacy {versions.get('legacy')} · "
              f"optimized {versions.get('optimized')}", ""]
    lines += ["| target | device | examples | shrink steps | verdict | syncs legacy→optimized | consumer syncs "
              "| reached legacy/optimized | new failures | known |", "|---|---|---|---|---|---|---|---|---|---|"]
    for entry, device in rows(report.targets):
        if device is None:
            lines.append(f"| {entry.name} | - | 0 | 0 | skipped: {entry.skipped} | - | - | - | - | - |")
            continue
        failures = [f for f in entry.failures if f.device == device]
        new = [f for f in failures if not f.known]
        verdict = entry.label_on(device)
        if verdict == TargetVerdict.UNTESTED:
            verdict = f"untested ({_UNTESTED_WHY})"
        elif verdict == TargetVerdict.CANNOT_BUILD:
            verdict = f"cannot-build: {entry.cannot_build}"
        elif entry.verdict_on(device) == TargetVerdict.RETIRED and entry.retired:
            verdict = f"{verdict}: {retired_reason(entry.retired)}"
        tally = entry.by_device.get(device)
        lines.append(f"| {entry.name} | {device} | {tally.examples if tally else 0} | "
                     f"{tally.shrink_steps if tally else 0} | {verdict} | "
                     f"{sync_column(entry, device).replace('->', '→')} | "
                     f"{consumer_column(entry, device).replace('->', '→')} | {reach_column(entry, device)} | "
                     f"{len(new)} | {len(failures) - len(new)} |")
    notes_ = report_notes(report)
    if notes_:
        lines += [""] + [f"- {note}" for note in notes_]
    lines += _machine_section(report.run)
    changes = merged_changes(report)
    if changes and changes.get("changed"):
        # The sync-relevant ones first (fuzz/code/syncdiff.py); the changed code a fuzzed one left untaken, the first
        # few a side (python -m fuzz coverage REPORT --changes and the HTML list all).
        lines += ["", "## Changed definitions", "",
                  "| definition | change | sync-relevant | targets that ran it | lines reached "
                  "| changed code not taken |",
                  "|---|---|---|---|---|---|"]
        for change in sorted(changes["changed"], key=lambda c: not c.get("sync_relevant")):
            ran = ", ".join(change["targets"]) or "**not covered**"
            reached = f"{change['reached']}/{change['lines']}" if change["targets"] else "-"
            sync = ("yes: " + ", ".join(change.get("sync", []))) if change.get("sync_relevant") else \
                ("no" if "sync_relevant" in change else "-")
            gap = untaken_text(change, SHOWN_UNTAKEN) or "-"
            lines.append(f"| `{change['ref']}` | {change['change']} | {sync} | {ran} | {reached} | {gap} |")
    if images or notes:
        lines += ["", "## Charts", ""]
        for title, file in (images or {}).items():
            lines += [f"![{title}]({file})", ""]
        lines += [f"_{note}_" for note in notes]
    views = failure_views(report.targets)
    if views:
        lines += ["", "## Failures", ""]
    for view in views:
        lines += failure_markdown(view)
    lines += ["", closing_line(report), "", f"exit code {report.exit_code()}"]
    return "\n".join(lines) + "\n"


SHOWN_UNTAKEN = 4  # changed lines and branches not taken a side in the Markdown table (the HTML lists all)


def _partial_cases(report: Report, suite: ET.Element) -> int:
    """A partial report's gaps as JUnit errors, so CI shows red, not a green run with fewer tests: one
    case per planned target that never ran, one per shard missing from a merge, one where the plan is
    not recorded; and the reason as suite properties. Returns how many cases it added."""
    why = report.partial()
    if why is None:
        return 0
    properties = ET.Element("properties")
    suite.insert(0, properties)  # JUnit readers expect the properties before the cases
    ET.SubElement(properties, "property", name="partial", value=why)
    if report.interrupted:
        ET.SubElement(properties, "property", name="interrupted", value=report.interrupted)
    added = 0
    never = report.never_ran()
    for name in never or ():
        case = ET.SubElement(suite, "testcase", classname=f"syncfuzz.{name}", name="never ran", time="0")
        ET.SubElement(case, "error", message=f"never ran: {why}").text = \
            f"{name} was planned for this run, but the report holds none of its results ({why})"
        added += 1
    if never is None:
        case = ET.SubElement(suite, "testcase", classname="syncfuzz.run", name="never ran", time="0")
        ET.SubElement(case, "error", message=f"partial: {why}").text = \
            "which targets never ran is not recorded (a report from before run.planned)"
        added += 1
    scope = report.run.get("scope") if isinstance(report.run.get("scope"), Mapping) else {}
    if scope.get("complete") is False:
        for index in scope.get("missing") or []:
            shard = f"{index}/{scope.get('shard_count')}"
            case = ET.SubElement(suite, "testcase", classname="syncfuzz.shards", name=f"shard {shard}", time="0")
            ET.SubElement(case, "error", message=f"shard {shard} is not in this merge").text = \
                f"the targets of shard {shard} never ran here; merge it in (python -m fuzz merge-reports)"
            added += 1
    return added


def junit_xml(report: Report) -> str:
    suite = ET.Element("testsuite", name="syncfuzz")
    tests = failures = skipped = errors = 0
    for entry, device in rows(report.targets):
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=f"syncfuzz.{entry.name}", name=device or "-",
                             time=f"{entry.seconds:.3f}")
        verdict = entry.verdict if device is None else entry.verdict_on(device)
        if device is None:
            skipped += 1
            ET.SubElement(case, "skipped", message=entry.skipped or "skipped")
            continue
        if verdict == TargetVerdict.FUZZER_ERROR:
            errors += 1
            ET.SubElement(case, "error", message="fuzzer bug").text = entry.fuzzer_error
            continue
        if verdict == TargetVerdict.RETIRED:
            skipped += 1  # nothing to compare: the side's release removed the code (not a pass, not a failure)
            ET.SubElement(case, "skipped", message=f"{entry.retired_label}: {retired_reason(entry.retired or {})}")
            continue
        if verdict == TargetVerdict.CANNOT_BUILD:
            skipped += 1  # nothing ran: CI must not count it as a pass
            ET.SubElement(case, "skipped", message=f"cannot-build: {entry.cannot_build}")
            continue
        if verdict == TargetVerdict.UNTESTED:
            skipped += 1  # nothing ran: CI must not count it as a pass
            ET.SubElement(case, "skipped", message=f"untested: {_UNTESTED_WHY}")
            continue
        if verdict in (TargetVerdict.UNREACHED, TargetVerdict.SAME_CODE):
            skipped += 1  # examples ran, but compared nothing a pass could stand on (docs/reach.md)
            why = entry.same_code or "both sides executed the same definitions" if verdict == TargetVerdict.SAME_CODE \
                else "a side never entered the definitions the target claims"
            ET.SubElement(case, "skipped", message=f"{verdict}: {why}")
            continue
        new = [f for f in entry.failures if f.device == device and not f.known]
        known = [f for f in entry.failures if f.device == device and f.known]
        if new:
            failures += 1
            labels = (failure_label(failure_view(entry, f)) for f in new)
            element = ET.SubElement(case, "failure", message=", ".join(labels))
            element.text = "\n".join(json.dumps({"verdict": f.verdict, "input": dict(f.input),
                                                 "mismatches": [dict(m) for m in f.mismatches],
                                                 "repro": f.repro}) for f in new)
        if known:
            ET.SubElement(case, "system-out").text = "\n".join(f"known {f.verdict}: {f.known}" for f in known)
    changes = merged_changes(report)
    if changes and changes.get("changed"):
        tests += 1
        case = ET.SubElement(suite, "testcase", classname="syncfuzz.changes", name="changed definitions reached",
                             time="0")
        missing, branches = uncovered(changes)  # under --require-changes-covered[=MODE] only
        if missing or branches:
            failures += 1
            what = [f"{len(missing)} changed definitions no target reached"] if missing else []
            what += [f"{len(branches)} with a changed branch no example took"] if branches else []
            ET.SubElement(case, "failure", message="; ".join(what)).text = "\n".join([*missing, *branches])

        def about(c: Mapping[str, Any]) -> str:
            text = f"{c['ref']} ({c['change']}"
            text += f"; sync-relevant: {', '.join(c.get('sync', []))})" if c.get("sync_relevant") else ")"
            text += ": " + (", ".join(c["targets"]) or "not covered")
            gap = untaken_text(c)
            return text + (f"; not taken: {gap}" if gap else "")

        ET.SubElement(case, "system-out").text = "\n".join(
            [change_line(changes) or "", *(about(c) for c in changes["changed"])])
    gaps = _partial_cases(report, suite)
    tests += gaps
    errors += gaps
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode")
