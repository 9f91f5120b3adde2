"""The report as one self-contained HTML page (``--html FILE``): opens offline, from a CI artifact or a mail.

A renderer of the report model like the table and Markdown: the summary rows are fuzz.reports.report.summary_rows,
the closing line is fuzz.reports.report.closing_line, each failure is its view (fuzz/reports/view.py), the charts
are fuzz.reports.charts' (inline SVG). Inline CSS and a few lines of inline script (click a column header to
sort); no external URL, no CDN. Every string of the report -- inputs, messages, names -- is data and is escaped.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from fuzz.records.model import Report
from fuzz.records.reachdata import change_line, merged_changes, untaken_text
from fuzz.records.verdicts import TargetVerdict
from fuzz.reports.charts import report_charts, svg_for_html
from fuzz.reports.machine import machine_lines, report_machines
from fuzz.reports.report import (
    NUMERIC_COLUMNS,
    SUMMARY_HEADER,
    closing_line,
    partial_lines,
    report_notes,
    summary_rows,
    target_notices,
)
from fuzz.reports.view import FailureView, failure_views

# The page's first lines: what an existing file must start with for --html to replace it (fuzz/reports/preflight.py).
HTML_MARK = '<meta name="generator" content="syncfuzz html report">'
HEAD = f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n{HTML_MARK}\n'

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;
padding:0 1em;color:#1a202c}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #e2e8f0}
h3{font-size:1.02em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #e2e8f0;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f7fafc}table.sortable th{cursor:pointer}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.result{font-weight:600;padding:.5em .8em;border-radius:4px;background:#f0fff4;border:1px solid #9ae6b4}
.result.bad{background:#fff5f5;border-color:#feb2b2}.result.incomplete{background:#fffff0;border-color:#faf089}
.new{color:#c53030;font-weight:600}.known{color:#718096}.agree{color:#276749}
.verdict-incomplete{color:#975a16;font-weight:600}.verdict-no-evidence{color:#4a5568;font-style:italic}
pre,code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f7fafc}
pre{padding:.6em;overflow-x:auto;border:1px solid #e2e8f0;white-space:pre-wrap;word-break:break-all}
.failure{border-left:4px solid #c53030;padding-left:.8em;margin:1em 0}.failure.is-known{border-color:#a0aec0}
figure{margin:1em 0}figcaption{font-weight:600}figure svg{max-width:100%;height:auto}
.note{color:#718096;font-style:italic}
"""

# Click a header to sort its table by that column (numbers as numbers); a second click reverses.
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, _) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
    var up = th.getAttribute("data-dir") !== "up";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("data-dir"); });
    th.setAttribute("data-dir", up ? "up" : "down");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].textContent, y = b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _table(header: tuple[str, ...] | list[str], rows: list, sortable: bool = False,
           numeric: tuple[int, ...] = ()) -> str:
    cls = ' class="sortable"' if sortable else ""
    out = [f"<table{cls}><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cells.append(f'<td class="num">{_e(cell)}</td>' if i in numeric else f"<td>{_e(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _text(value: Any) -> str:
    """A config or version value as one line of text (nested values as JSON)."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return "" if value is None else str(value)


def _key_values(mapping: Mapping[str, Any]) -> str:
    return _table(("setting", "value"), [(k, _text(v)) for k, v in mapping.items()])


def _result_class(report: Report) -> str:
    code = report.exit_code()
    return "" if code == 0 else ("incomplete" if code == 3 else "bad")


# The target states that are no failure (docs/verdicts.md): those that make a run incomplete (exit 3), and
# those that are no evidence either way (exit 0). Neither is styled as a failure is.
INCOMPLETE_STATES = frozenset(state.value for state in (TargetVerdict.UNTESTED, TargetVerdict.UNREACHED,
                                                        TargetVerdict.CANNOT_BUILD))
NO_EVIDENCE_STATES = frozenset(state.value for state in (TargetVerdict.SAME_CODE, TargetVerdict.SKIPPED,
                                                         TargetVerdict.RETIRED))


def verdict_class(label: str) -> str:
    """The CSS class of a verdict cell (fuzz.records.model.TargetEntry.label_on): agree green, a new failure red, a
    known one grey, an incomplete state amber, a state that is no evidence muted ("retired in 0.34.0" is
    retired)."""
    if label == "agree":
        return "agree"
    if label.endswith("(known)"):
        return "known"
    state = label.split(" ", 1)[0]
    if state in INCOMPLETE_STATES:
        return "verdict-incomplete"
    if state in NO_EVIDENCE_STATES:
        return "verdict-no-evidence"
    return "new"


def _summary(report: Report) -> str:
    table = summary_rows(report.targets)
    out = ['<table class="sortable" id="summary"><thead><tr>'
           + "".join(f"<th>{_e(h)}</th>" for h in SUMMARY_HEADER) + "</tr></thead><tbody>"]
    verdict_at = SUMMARY_HEADER.index("verdict")
    for row in table[1:]:
        cells = []
        for i, cell in enumerate(row):
            cls = "num" if i in NUMERIC_COLUMNS else ""
            if i == verdict_at:
                cls = verdict_class(cell)
            cells.append(f'<td class="{cls}">{_e(cell)}</td>' if cls else f"<td>{_e(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _notes(report: Report) -> str:
    """The run's notes (reach, the change's coverage, sync rules) and the upstream, fuzzer-error,
    cannot-build, same-code, unreached and untested lines, as the terminal says them, without failures."""
    lines = report_notes(report) + [line for entry in report.targets for line in target_notices(entry)]
    if not lines:
        return ""
    return "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>"


def _changes(report: Report) -> str:
    """The change's coverage (docs/reach.md): every changed definition, the targets that ran it."""
    changes = merged_changes(report)
    if not changes or not changes.get("changed"):
        return ""
    out = [f"<h2>Changed definitions ({len(changes['changed'])})</h2>",
           f"<p>{_e(change_line(changes) or '')}</p>",
           "<table><thead><tr><th>definition</th><th>change</th><th>sync-relevant</th><th>targets that ran it</th>"
           "<th>lines reached</th><th>changed code not taken (each side's source lines)</th></tr></thead><tbody>"]
    for change in sorted(changes["changed"], key=lambda c: not c.get("sync_relevant")):
        ran = ", ".join(change["targets"])
        reached = f"{change['reached']}/{change['lines']}" if change["targets"] else "-"
        mark = "" if ran else ' class="new"'  # not covered: as a new failure is marked
        sync = ("yes: " + ", ".join(change.get("sync", []))) if change.get("sync_relevant") else \
            ("no" if "sync_relevant" in change else "-")
        out.append(f"<tr><td>{_e(change['ref'])}</td><td>{_e(change['change'])}</td><td>{_e(sync)}</td>"
                   f"<td{mark}>{_e(ran or 'not covered')}</td><td>{_e(reached)}</td>"
                   f"<td>{_e(untaken_text(change) or '-')}</td></tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _charts(report: Report) -> str:
    out = []
    for chart in report_charts(report, "svg"):
        if chart.image is None:
            out.append(f'<figure id="chart-{chart.key}"><figcaption>{_e(chart.title)}</figcaption>'
                       f'<p class="note">{_e(chart.note)}</p></figure>')
        else:
            out.append(f'<figure id="chart-{chart.key}"><figcaption>{_e(chart.title)}</figcaption>\n'
                       f"{svg_for_html(chart.image, chart.key)}\n</figure>")
    return "\n".join(out)


def failure_html(view: FailureView, index: int) -> str:
    """One failure as a section of the page (fuzz.reports.view): every fact of its view, each string escaped;
    its example whole, as indented JSON."""
    status = '<span class="new">new</span>' if view.is_new else '<span class="known">known</span>'
    flaky = " (flaky)" if view.flaky else ""
    out = [f'<section class="failure{"" if view.is_new else " is-known"}" id="failure-{index}">',
           f"<h3>{_e(view.verdict)}{_e(flaky)} in <code>{_e(view.target)}</code> on {_e(view.device)}"
           f" — {status}</h3>", "<ul>"]
    if view.known:
        out.append(f"<li>known issue: {_e(view.known)}</li>")
    if view.confirmed:
        out.append(f"<li>reproduced {_e(view.confirmed)} in fresh processes</li>")
    if view.unconfirmed:
        out.append(f"<li>not confirmed: {_e(view.unconfirmed)}</li>")
    if view.oracles:
        out.append(f"<li>flagged by: {_e(', '.join(view.oracles))}</li>")
    out += [f"<li>{side} raised: <code>{_e(exception)}</code></li>" for side, exception in view.raised]
    if view.replay_command:
        out.append(f"<li>replay: <code>{_e(view.replay_command)}</code></li>")
    out.append("</ul>")
    if view.mismatches:
        out.append("<p>where the outputs differ:</p>")
        out.append(_table(("path", "what", "detail"), [(m.path, m.what, m.detail) for m in view.mismatches]))
    out.append(f"<p>{view.example_label}:</p><pre>{_e(json.dumps(dict(view.example), indent=2, default=str))}</pre>")
    out.append("</section>")
    return "\n".join(out)


def _number(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.0f}{unit}"


def _machine_use(report: Report) -> str:
    """The machine's use during the run (fuzz/reports/machine.py): its line, examples/s per device, each sampled
    GPU; one block per input of a merged report; nothing for reports from before."""
    out = []
    for machine in report_machines(report.run):
        out.append(f"<h3>Use during the run{' (' + _e(machine['name']) + ')' if machine.get('name') else ''}</h3>")
        out += [f'<p class="machine-use">{_e(line)}</p>' for line in machine_lines(machine)]
        examples, rates = machine.get("examples") or {}, machine.get("examples_per_s") or {}
        if examples:
            out.append(_table(("device", "examples", "examples/s"),
                              [(d, f"{n:,}", f"{rates[d]:,.1f}" if d in rates else "-") for d, n in examples.items()],
                              numeric=(1, 2)))
        cards = (machine.get("gpu") or {}).get("gpus") or []
        if cards:
            out.append(_table(("GPU", "name", "busy mean", "busy max", "memory max (MiB)", "memory total (MiB)"),
                              [(c.get("index"), c.get("name"), _number((c.get("busy_pct") or {}).get("mean"), "%"),
                                _number((c.get("busy_pct") or {}).get("max"), "%"),
                                _number((c.get("memory_used_mib") or {}).get("max")),
                                _number(c.get("memory_total_mib"))) for c in cards], numeric=(2, 3, 4, 5)))
    return "\n".join(out)


def _run(report: Report) -> str:
    run = report.run
    runs = run.get("merged_from") if isinstance(run.get("merged_from"), list) else None
    if runs is None:
        return _key_values(run)
    out = [f"<p>merged from {len(runs)} reports:</p>"]
    for i, part in enumerate(runs, 1):
        out.append(f"<h3>report {i}</h3>")
        out.append(_key_values(part) if isinstance(part, Mapping) else f"<pre>{_e(_text(part))}</pre>")
    return "\n".join(out)


def _subtitle(report: Report) -> str:
    run, versions = report.run, report.versions
    parts = []
    if "seed" in run:
        devices = ",".join(run.get("devices", []))
        parts.append(f"seed {run['seed']} · contract {run.get('contract')} · devices {devices}")
    parts.append(f"legacy {versions.get('legacy')} · optimized {versions.get('optimized')} · torch "
                 f"{versions.get('torch')} · {versions.get('gpu') or 'no GPU'}")
    return "<br>".join(_e(p) for p in parts)


def html_report(report: Report) -> str:
    """The whole report as one HTML page: no external resource, every report string escaped."""
    failures = failure_views(report.targets)
    machine = {k: report.versions[k] for k in ("gpu", "torch", "torch_cuda", "python", "platform", "numpy",
                                                "triton", "hypothesis") if k in report.versions}
    sides = {k: report.versions[k] for k in ("legacy", "optimized") if k in report.versions}
    if isinstance(report.run.get("sides"), Mapping):
        sides.update({f"{side} source": _text(v) for side, v in report.run["sides"].items()})
    body = [HEAD + "<title>syncfuzz report</title>\n<style>" + CSS + "</style>\n</head>\n<body>",
            "<h1>syncfuzz report</h1>", f"<p>{_subtitle(report)}</p>",
            f'<p class="result {_result_class(report)}" id="result">{_e(closing_line(report))}</p>']
    body += [f'<p class="new partial">{_e(line)}</p>' for line in partial_lines(report)]
    body += ["<h2>Summary</h2>", _summary(report), _notes(report), "<h2>Charts</h2>", _charts(report)]
    body.append(_changes(report))
    body.append(f"<h2>Failures ({len(failures)})</h2>")
    if failures:
        body += [failure_html(view, i) for i, view in enumerate(failures)]
    else:
        body.append('<p class="note">no failure</p>')
    body += ["<h2>Run</h2>", _run(report), "<h2>Sides</h2>", _key_values(sides),
             "<h2>Machine</h2>", _key_values(machine), _machine_use(report),
             "<h2>Versions</h2>", _key_values(report.versions),
             f"<script>{SCRIPT}</script>", "</body>\n</html>\n"]
    return "\n".join(b for b in body if b)
