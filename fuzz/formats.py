"""Report formats beyond JSON: a Markdown summary (people) and JUnit XML (CI)."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from fuzz.report import sync_column, untested, worst


def _failure_label(failure: dict) -> str:
    label = failure["verdict"]
    if failure.get("flaky"):
        label += f" (flaky, reproduced {failure.get('confirmed', '?')})"
    return label


def markdown(report: dict) -> str:
    run = report["run"]
    lines = ["# syncfuzz report", ""]
    if "seed" in run:
        lines.append(f"seed `{run['seed']}` · contract `{run.get('contract')}` · devices `{','.join(run.get('devices', []))}`"
                     + (f" · profile `{run['profile']}`" if run.get("profile") else ""))
    versions = report.get("versions", {})
    lines += [f"torch {versions.get('torch')} · {versions.get('gpu') or 'no GPU'} · legacy {versions.get('legacy')} · "
              f"optimized {versions.get('optimized')}", ""]
    lines += ["| target | device | examples | verdict | syncs legacy→optimized | new failures | known |",
              "|---|---|---|---|---|---|---|"]
    for entry in report["targets"]:
        if entry["skipped"] and not entry["examples"]:
            lines.append(f"| {entry['name']} | - | 0 | skipped: {entry['skipped']} | - | - | - |")
            continue
        for device, tally in entry["by_device"].items():
            failures = [f for f in entry["failures"] if f["device"] == device]
            new = [f for f in failures if not f.get("known")]
            verdict = "fuzzer-error" if entry["fuzzer_error"] else worst(f["verdict"] for f in failures)
            if untested(entry, device):
                verdict = "untested (no example within its budget share)"
            lines.append(f"| {entry['name']} | {device} | {tally['examples']} | {verdict} | "
                         f"{sync_column(tally).replace('->', '→')} | {len(new)} | {len(failures) - len(new)} |")
    details = [(e, f) for e in report["targets"] for f in e["failures"]]
    if details:
        lines += ["", "## Failures", ""]
    for entry, failure in details:
        state = f"known: {failure['known']}" if failure.get("known") else "**new**"
        lines.append(f"- `{entry['name']}` on {failure['device']}: {_failure_label(failure)} — {state}")
        for mismatch in failure["mismatches"]:
            lines.append(f"  - at `{mismatch['path']}` ({mismatch['what']}): {mismatch['detail'][:300]}")
        lines.append(f"  - input: `{json.dumps(failure['input'])[:400]}`")
        if failure.get("repro"):
            lines.append(f"  - replay: `python -m fuzz replay {failure['repro']}`")
    return "\n".join(lines) + "\n"


def junit_xml(report: dict) -> str:
    suite = ET.Element("testsuite", name="syncfuzz")
    tests = failures = skipped = 0
    for entry in report["targets"]:
        devices = entry["by_device"] or {"-": None}
        for device in devices:
            tests += 1
            case = ET.SubElement(suite, "testcase", classname=f"syncfuzz.{entry['name']}", name=device,
                                 time=f"{entry['seconds']:.3f}")
            if entry["skipped"] and not entry["examples"]:
                skipped += 1
                ET.SubElement(case, "skipped", message=entry["skipped"])
                continue
            if entry["fuzzer_error"]:
                failures += 1
                ET.SubElement(case, "error", message="fuzzer bug").text = entry["fuzzer_error"]
                continue
            if devices[device] is not None and untested(entry, device):
                skipped += 1  # nothing ran: CI must not count it as a pass
                ET.SubElement(case, "skipped", message="no example ran within its share of the budget")
                continue
            new = [f for f in entry["failures"] if f["device"] == device and not f.get("known")]
            known = [f for f in entry["failures"] if f["device"] == device and f.get("known")]
            if new:
                failures += 1
                element = ET.SubElement(case, "failure", message=", ".join(_failure_label(f) for f in new))
                element.text = "\n".join(json.dumps({k: f[k] for k in ("verdict", "input", "mismatches", "repro")})
                                         for f in new)
            if known:
                ET.SubElement(case, "system-out").text = "\n".join(f"known {f['verdict']}: {f['known']}" for f in known)
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode")
