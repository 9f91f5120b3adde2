"""The HTML report: one offline page holding what the table, the failure lines and the run say, every
report string escaped; `run --html` / `merge-reports --html`, and the PNGs beside --markdown."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fuzz.cli import main
from fuzz.records.model import Failure, Report
from fuzz.reports.html import HTML_MARK, html_report
from fuzz.reports.merge import read_report
from fuzz.reports.report import closing_line, summary_rows

H200 = Path(__file__).parents[1] / "data" / "h200-cuda.json"
PLANTED = "<script>alert('planted')</script>"


class Tables(HTMLParser):
    """The text of each cell of each row of the table with id ``summary``, and every script / link tag."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: list[tuple[str, dict]] = []
        self._in_summary = self._cell = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "table" and attributes.get("id") == "summary":
            self._in_summary = True
        elif self._in_summary and tag == "tr":
            self.rows.append([])
        elif self._in_summary and tag in ("td", "th"):
            self._cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_summary = False
        if tag in ("td", "th"):
            self._cell = False

    def handle_data(self, data: str) -> None:
        if self._in_summary and self._cell:
            self.rows[-1][-1] += data


def parsed(page: str) -> Tables:
    parser = Tables()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def h200() -> Report:
    return read_report(str(H200))


def planted_report(base: Report) -> Report:
    """The H200 report with a new failure whose input, mismatch and exception carry markup."""
    entry = base.targets[0]
    failure = Failure(device="cuda", verdict="divergence", input={"names": [PLANTED], "n": 3},
                      mismatches=({"path": "['out'] <b>", "what": "value", "detail": "1 & 2 <i>differ</i>"},),
                      exceptions={"legacy": None, "optimized": "ValueError: <bad>"},
                      repro="fuzz-corpus/failures/glm4v-divergence-0123abcd.json", confirmed="2/2",
                      oracles=("differential", "invariant"))
    return replace(base, targets=(entry.with_failures((failure,)), *base.targets[1:]))


def external_references(page: str) -> list[str]:
    found = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", page, flags=re.I)
    found += re.findall(r"<script[^>]*\bsrc\b", page, flags=re.I)
    found += re.findall(r"<link\b[^>]*>", page, flags=re.I)
    found += re.findall(r"@import|url\(\s*['\"]?(?:https?:)?//", page, flags=re.I)
    return found


def test_every_summary_row_is_in_the_page(h200):
    page = html_report(h200)
    assert parsed(page).rows == [list(row) for row in summary_rows(h200.targets)]
    assert "sync-regression (known)" in page
    assert closing_line(h200) in page  # nothing in it needs escaping


def test_each_failure_with_its_replay_command_input_and_mismatches(h200):
    report = planted_report(h200)
    page = html_report(report)
    for entry in report.targets:
        for failure in entry.failures:
            assert f"python -m fuzz replay {failure.repro}" in page
    known = next(f for e in h200.targets for f in e.failures if f.known)
    assert known.known[:60].replace("'", "&#x27;") in page
    assert "reproduced 2/2 in fresh processes" in page and "differential, invariant" in page
    assert "&quot;n&quot;: 3" in page  # the minimal input, as JSON


def test_planted_markup_is_escaped(h200):
    page = html_report(planted_report(h200))
    assert PLANTED not in page and "<b>" not in page and "<i>differ" not in page and "<bad>" not in page
    assert "&lt;script&gt;alert(&#x27;planted&#x27;)&lt;/script&gt;" in page
    assert "1 &amp; 2 &lt;i&gt;differ&lt;/i&gt;" in page
    scripts = [tag for tag, _ in parsed(page).tags if tag == "script"]
    assert len(scripts) == 1  # only the page's own sort script


def test_the_page_references_nothing_outside_it(h200):
    page = html_report(planted_report(h200))
    assert external_references(page) == []
    assert "http://" not in page and "https://" not in page
    assert page.startswith("<!DOCTYPE html>") and HTML_MARK in page[:300]


def test_the_page_shows_run_config_versions_and_machine(h200):
    page = html_report(h200)
    for text in ("NVIDIA H200", "2.11.0+cu130", "vllm 0.27.1", "vllm 0.28.0", h200.run["run_id"], "max_examples"):
        assert text in page, text


def test_the_charts_are_inline_svg_naming_every_target(h200):
    pytest.importorskip("matplotlib")
    page = html_report(h200)
    syncs = page[page.index('id="chart-syncs"'):page.index('id="chart-consumer-syncs"')]
    assert "<svg" in syncs
    for entry in h200.targets:
        assert f">{entry.name}<" in syncs


def test_without_matplotlib_the_page_says_why_there_are_no_charts(h200, monkeypatch):
    from fuzz.reports import charts

    monkeypatch.setattr(charts, "have_matplotlib", lambda: False)
    page = html_report(h200)
    assert "<svg" not in page and "charts need matplotlib" in page
    assert parsed(page).rows == [list(row) for row in summary_rows(h200.targets)]


def test_a_merged_report_shows_each_run(h200):
    runs = [{**h200.run, "shard": "1/2", "seed": 11}, {**h200.run, "shard": "2/2", "seed": 12}]
    page = html_report(replace(h200, run={"merged_from": runs}))
    assert "merged from 2 reports" in page and "1/2" in page and "2/2" in page


# --------------------------------------------------------------------------- the command line


def test_run_html_end_to_end_on_cpu(tmp_path, capsys):
    page_path, md = tmp_path / "run.html", tmp_path / "run.md"
    code = main(["run", "--target", "fla-chunk-offsets", "--device", "cpu", "--max-examples", "3", "--in-process",
                 "--quiet", "--confirm", "0", "--seed", "0", "--corpus", str(tmp_path / "corpus"),
                 "--report", str(tmp_path / "run.json"), "--html", str(page_path), "--markdown", str(md)])
    assert code == 0
    assert f"html: {page_path}" in capsys.readouterr().out
    page = page_path.read_text()
    report = read_report(str(tmp_path / "run.json"))
    assert parsed(page).rows == [list(row) for row in summary_rows(report.targets)]
    assert closing_line(report) in page
    assert "only on CUDA" in page  # a CPU-only run draws no sync chart and says so
    if _has_matplotlib():
        assert (tmp_path / "run-examples.png").read_bytes().startswith(b"\x89PNG")
        assert not (tmp_path / "run-syncs.png").exists()
        assert "![Examples per target](run-examples.png)" in md.read_text()


def _has_matplotlib() -> bool:
    from fuzz.reports.charts import have_matplotlib

    return have_matplotlib()


def test_merge_reports_html_and_markdown_images(tmp_path, capsys, h200):
    out, page_path, md = tmp_path / "merged.json", tmp_path / "merged.html", tmp_path / "merged.md"
    assert main(["merge-reports", str(out), str(H200), "--html", str(page_path), "--markdown", str(md)]) == 0
    page = page_path.read_text()
    assert parsed(page).rows == [list(row) for row in summary_rows(h200.targets)]
    assert closing_line(read_report(str(out))) in page
    if _has_matplotlib():
        text = md.read_text()
        for key in ("syncs", "consumer-syncs", "examples", "failures"):
            assert (tmp_path / f"merged-{key}.png").read_bytes().startswith(b"\x89PNG")
            assert f"(merged-{key}.png)" in text
    # Run again: our own HTML report and PNGs are replaced.
    assert main(["merge-reports", str(out), str(H200), "--html", str(page_path), "--markdown", str(md)]) == 0


def test_html_replaces_only_an_html_report_of_ours(tmp_path, capsys):
    other = tmp_path / "index.html"
    other.write_text("<!DOCTYPE html><html><body>someone's page</body></html>")
    assert main(["merge-reports", str(tmp_path / "m.json"), str(H200), "--html", str(other)]) == 2
    assert "not an HTML report of syncfuzz" in capsys.readouterr().err
    assert other.read_text().endswith("someone's page</body></html>")
    report_copy = tmp_path / "copy.json"
    report_copy.write_text(json.dumps({"format": "syncfuzz-report/2"}))
    assert main(["merge-reports", str(tmp_path / "m.json"), str(H200), "--html", str(report_copy)]) == 2
    assert json.loads(report_copy.read_text()) == {"format": "syncfuzz-report/2"}


def test_markdown_images_are_checked_like_outputs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    md = tmp_path / "sum.md"
    # --html named where a chart of --markdown goes: one would replace the other.
    assert main(["merge-reports", str(tmp_path / "m.json"), str(H200), "--markdown", str(md),
                 "--html", str(tmp_path / "sum-syncs.png")]) == 2
    assert "both name" in capsys.readouterr().err
    # A file that is not a PNG where a chart goes is not replaced.
    notes = tmp_path / "sum-examples.png"
    notes.write_text("my notes")
    assert main(["merge-reports", str(tmp_path / "m.json"), str(H200), "--markdown", str(md)]) == 2
    assert "not a PNG image" in capsys.readouterr().err
    assert notes.read_text() == "my notes" and not md.exists()
    # Nor is an input of the merge (a report named like a chart).
    source = tmp_path / "in-syncs.png"
    source.write_bytes(H200.read_bytes())
    assert main(["merge-reports", str(tmp_path / "m.json"), str(source), "--markdown", str(tmp_path / "in.md")]) == 2
    assert source.read_bytes() == H200.read_bytes() and not (tmp_path / "in.md").exists()


@pytest.mark.slow
def test_the_page_renders_in_headless_chromium(tmp_path, h200):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no chromium on this host")
    page_path = tmp_path / "report.html"
    report = planted_report(h200)
    page_path.write_text(html_report(report))
    done = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
                           "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page_path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'id="summary"' in dom and "glm4v-embeddings" in dom
    assert parsed(dom).rows == [list(row) for row in summary_rows(report.targets)]
    assert PLANTED not in dom and "&lt;script&gt;alert('planted')&lt;/script&gt;" in dom  # text, not a script
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console


def test_the_change_coverage_and_the_run_notes_are_on_the_page(h200):
    changes = {"legacy": "vllm==0.28.0", "optimized": "vllm==0.33.0", "required": True, "measured": True,
               "changed": [{"path": "vllm/a.py", "qualname": "f", "change": "changed", "line": 3,
                            "ref": "vllm/a.py::f", "targets": ["fla-chunk-offsets"], "lines": 10, "reached": 9},
                           {"path": "vllm/a.py", "qualname": "g<script>", "change": "added", "line": 9,
                            "ref": "vllm/a.py::g<script>", "targets": [], "lines": 0, "reached": 0}],
               "fuzzed": 1, "lines_reached": 9, "lines": 10, "not_covered": ["vllm/a.py::g<script>"]}
    page = html_report(replace(h200, run={**h200.run, "changes": changes}))
    assert "<h2>Changed definitions (2)</h2>" in page
    assert "9/10" in page and "not covered" in page and "g&lt;script&gt;" in page and "g<script>" not in page
    assert "changed: 2 definitions between vllm==0.28.0 and vllm==0.33.0; fuzzed 1 (lines reached 90%)" in page
    assert "Changed definitions" not in html_report(h200)  # copies only: nothing compared
