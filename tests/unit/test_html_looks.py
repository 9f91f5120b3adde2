"""How the HTML page shows each verdict: a state that is no failure never looks like one (issue #45)."""

from __future__ import annotations

import re

from fuzz.records.model import DeviceTally, Report, TargetEntry
from fuzz.reports.html import html_report, verdict_class


def _ran(name: str, **fields) -> TargetEntry:
    return TargetEntry(name=name, devices=("cpu",), by_device={"cpu": DeviceTally(examples=5, verdicts={"agree": 5})},
                       **fields)


def _verdict_cells(page: str) -> dict[str, str]:
    """{target: the class of its verdict cell} from the summary table."""
    rows = re.findall(r'<tr><td>([\w-]+)</td><td>cpu</td>(?:<td class="num">\d+</td>){4}<td class="([\w-]+)">', page)
    return dict(rows)


def test_same_code_on_an_exit_0_page_is_not_styled_as_a_failure():
    report = Report((_ran("copied-twice", same_code="both sides read vllm/x.py::f"), _ran("fine")))
    assert report.exit_code() == 0
    page = html_report(report)
    assert _verdict_cells(page) == {"copied-twice": "verdict-no-evidence", "fine": "agree"}
    assert 'class="new"' not in page  # nothing on the page wears the failure style


def test_each_state_has_the_look_of_what_it_is():
    no_evidence = ("same-code", "skipped", "retired in 0.34.0")
    assert [verdict_class(label) for label in no_evidence] == ["verdict-no-evidence"] * 3
    assert [verdict_class(label) for label in ("untested", "unreached", "cannot-build")] == ["verdict-incomplete"] * 3
    assert [verdict_class(label) for label in ("divergence", "crash (flaky)", "fuzzer-error")] == ["new"] * 3
    assert (verdict_class("agree"), verdict_class("divergence (known)")) == ("agree", "known")
