"""One view of a failure (fuzz/reports/view.py), three renderers: the terminal, Markdown and HTML show what
the view holds and nothing they read from the records on their own."""

from __future__ import annotations

import html

from fuzz.records.model import DeviceTally, Failure, Report, TargetEntry
from fuzz.reports.formats import failure_label, failure_markdown, markdown
from fuzz.reports.html import failure_html, html_report
from fuzz.reports.report import failure_lines, failure_text
from fuzz.reports.view import FailureView, MismatchView, failure_view, failure_views

# Built by hand, not from a record: every renderer must take all it shows from here.
VIEW = FailureView(
    target="t-<x>", device="cuda", verdict="divergence", example={"device": "cuda", "n": 3, "s": "a&b"},
    mismatches=(MismatchView("['out']", "values", "legacy 1, optimized 2 <i>"),
                MismatchView("<output>", "dtype", "int32 vs int64")),
    flaky=True, confirmed="2/3", known=None, oracles=("differential", "invariant"),
    raised=(("optimized", "ValueError: <bad>"),), repro="corpus/failures/t-divergence-0123.json")


def test_the_three_renderers_show_the_same_mismatches_and_replay_from_one_view():
    terminal = "\n".join(failure_text(VIEW))
    md = "\n".join(failure_markdown(VIEW))
    page = failure_html(VIEW, 0)
    replay = "python -m fuzz replay corpus/failures/t-divergence-0123.json"
    for mismatch in VIEW.mismatches:
        assert f"at {mismatch.path} ({mismatch.what}): {mismatch.detail}" in terminal
        assert f"at `{mismatch.path}` ({mismatch.what}): {mismatch.detail}" in md
        assert (f"<tr><td>{html.escape(mismatch.path)}</td><td>{mismatch.what}</td>"
                f"<td>{html.escape(mismatch.detail)}</td></tr>") in page
    for text in (terminal, md, page):
        assert replay in text and "t-" in text and "cuda" in text and "flaky" in text
    assert terminal.splitlines()[0] == "DIVERGENCE in t-<x> on cuda (flaky) (reproduced 2/3 in fresh processes)"
    assert md.splitlines()[0] == "- `t-<x>` on cuda: divergence (flaky, reproduced 2/3) — **new**"
    assert "<h3>divergence (flaky) in <code>t-&lt;x&gt;</code> on cuda — <span class=\"new\">new</span></h3>" in page
    # The facts a format adds beyond the others come from the view too: oracles, the side that raised.
    assert "  flagged by: differential, invariant" in terminal.splitlines()
    assert "<li>optimized raised: <code>ValueError: &lt;bad&gt;</code></li>" in page
    assert "<bad>" not in page and "<i>" not in page  # every string of the view is escaped


def test_a_known_crash_keeps_its_label_and_its_reason_in_every_format():
    crash = FailureView(target="t", device="cpu", verdict="crash", example={"device": "cpu"}, shrunk=False,
                        mismatches=(MismatchView("<worker>", "crash", "killed by SIGABRT"),), known="F9: accepted")
    assert crash.example_label == "input" and crash.replay_command is None and not crash.is_new
    terminal = failure_text(crash)
    assert terminal[0] == "CRASH in t on cpu (known: F9: accepted)"
    assert terminal[1] == '  input: {"device": "cpu"}'  # journaled, not shrunk: no "minimal"
    assert not any("saved:" in line for line in terminal)
    assert failure_markdown(crash)[0] == "- `t` on cpu: crash — known: F9: accepted"
    page = failure_html(crash, 3)
    assert 'class="failure is-known" id="failure-3"' in page and "<li>known issue: F9: accepted</li>" in page
    assert "<p>input:</p>" in page and "replay:" not in page


def test_the_reports_render_the_views_built_from_their_records():
    failure = Failure(device="cpu", verdict="error-mismatch", input={"device": "cpu", "k": [1]},
                      mismatches=({"path": "<output>", "what": "exception", "detail": "legacy raised A"},),
                      exceptions={"legacy": "A", "optimized": None}, repro="r.json", confirmed="3/3",
                      oracles=("differential",))
    # The target flaked under Hypothesis: each of its failures is shown flaky, as its table row says.
    entry = TargetEntry(name="t", devices=("cpu",), by_device={"cpu": DeviceTally(examples=4)},
                        failures=(failure,), flaky=True)
    view = failure_view(entry, failure)
    assert view == FailureView(target="t", device="cpu", verdict="error-mismatch", example={"device": "cpu", "k": [1]},
                               mismatches=(MismatchView("<output>", "exception", "legacy raised A"),), flaky=True,
                               confirmed="3/3", oracles=("differential",), raised=(("legacy", "A"),), repro="r.json")
    report = Report((entry,))
    assert failure_views(report.targets) == [view]
    assert failure_lines(report.targets) == failure_text(view)
    assert "\n".join(failure_markdown(view)) in markdown(report)
    assert failure_html(view, 0) in html_report(report)
    assert failure_label(view) == "error-mismatch (flaky, reproduced 3/3)"
