"""Issue #42 (one view of a failure): render the same reports with two trees and diff the outputs.

``PYTHONPATH=TREE python3 lab/scripts/failure_view_golden.py OUT [REPORT.json...]`` writes into OUT the terminal
lines (table, notes, failure lines), the Markdown, the HTML and the JUnit of a hand-built report that sets every
field a failure shows (flaky failure, flaky target, unconfirmed, known, crash without repro, two oracles, both
sides raising, markup to escape, a detail past Markdown's 300 characters and an input past its 400), and of
each REPORT.json given. Run it with main's tree and the branch's into two folders, then ``diff -r``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fuzz.records.model import DeviceTally, Failure, Report, TargetEntry
from fuzz.reports.formats import junit_xml, markdown
from fuzz.reports.html import html_report
from fuzz.reports.report import failure_lines, report_notes, summary_table

RAN = DeviceTally(examples=5, verdicts={"agree": 3, "divergence": 2})
LONG = "x<y & 'z' \"q\" " * 40


def hand_built() -> Report:
    f1 = Failure(device="cpu", verdict="divergence", input={"device": "cpu", "s": "<b>&", "big": list(range(200))},
                 mismatches=({"path": "['a']", "what": "values", "detail": LONG},
                             {"path": "<o>", "what": "dtype", "detail": "d2"}),
                 exceptions={"legacy": None, "optimized": "ValueError: <bad>"}, repro="corpus/failures/a-1.json",
                 confirmed="2/3", flaky=True, oracles=("compare", "invariant:x"))
    f2 = Failure(device="cuda", verdict="crash", input={"device": "cuda", "n": 1},
                 mismatches=({"path": "<worker>", "what": "crash", "detail": "killed by SIGABRT; core"},),
                 exceptions={"legacy": "RuntimeError: boom", "optimized": "RuntimeError: boom2"},
                 unconfirmed="the run was interrupted (SIGTERM) before its replays", oracles=("compare",))
    f3 = Failure(device="cpu", verdict="sync-regression", input={"device": "cpu"}, repro="corpus/failures/b.json",
                 confirmed="3/3", known="F9: accepted <why>")
    f4 = Failure(device="cpu", verdict="error-mismatch", input={"device": "cpu", "k": [1, 2]},
                 mismatches=({"path": "<output>", "what": "exception",
                              "detail": "legacy raised A, optimized raised B"},),
                 repro="corpus/failures/c.json", confirmed="3/3")
    entries = (
        TargetEntry(name="alpha", devices=("cpu", "cuda"), by_device={"cpu": RAN, "cuda": RAN}, failures=(f1, f2)),
        TargetEntry(name="beta", devices=("cpu",), by_device={"cpu": RAN}, failures=(f3,)),
        TargetEntry(name="gamma", devices=("cpu",), by_device={"cpu": RAN}, failures=(f4,), flaky=True),
        TargetEntry(name="delta", devices=("cpu",), by_device={"cpu": RAN}, cannot_build="no such <function>",
                    upstream_check="cannot import vllm"),
        TargetEntry(name="eps", devices=("cpu",), by_device={"cpu": DeviceTally()}),
    )
    return Report(entries, run={"seed": 0, "contract": "caller", "devices": ["cpu", "cuda"]},
                  versions={"torch": "2.13", "legacy": "0.27.1", "optimized": "0.28.0"})


def render(report: Report, out: Path, stem: str) -> None:
    terminal = [summary_table(report.targets), *report_notes(report), *failure_lines(report.targets)]
    (out / f"{stem}.terminal.txt").write_text("\n".join(terminal) + "\n")
    (out / f"{stem}.md").write_text(markdown(report))
    (out / f"{stem}.html").write_text(html_report(report))
    (out / f"{stem}.xml").write_text(junit_xml(report))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(exist_ok=True)
    render(hand_built(), out, "hand-built")
    for name in sys.argv[2:]:  # real run reports, re-rendered
        render(Report.from_json(json.loads(Path(name).read_text()), name), out, Path(name).stem)


if __name__ == "__main__":
    main()
