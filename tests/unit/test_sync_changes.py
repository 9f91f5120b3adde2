"""The sync-relevant part of a change (docs/reach.md, issue #41 item 5): the rule over a definition's diff
(fuzz/code/syncdiff.py), the changed code a fuzzed definition left untaken, the footer and every format's
"changed N; sync-relevant S (fuzzed F); other ...", and ``--require-changes-covered=all|sync``."""

from __future__ import annotations

import json
import textwrap
import uuid
from xml.etree import ElementTree as ET

import pytest

from fuzz.code.syncdiff import SYNC_NAMES, definition_diff, own_lines, sync_reasons
from fuzz.config import ConfigError, RunConfig
from fuzz.errors import UsageError
from fuzz.records.model import DeviceTally, Report, TargetEntry
from fuzz.records.reachdata import change_line, merged_changes, require_mode, uncovered, untaken_text

# --------------------------------------------------------------------------- the rule


def fn(*body: str) -> str:
    return "def f(x, d):\n" + "".join(f"    {row}\n" for row in body)


@pytest.mark.parametrize("word", SYNC_NAMES)
def test_each_name_on_an_added_or_removed_line_is_a_reason(word):
    line = f"y = {word}(x)" if word[0].isupper() else f"y = x.{word}()" if word in ("synchronize", "record_stream",
                                                                                   "copy_to_gpu") \
        else f"y = g(x, {word}=True)"
    assert sync_reasons(fn("y = g(x)"), fn(line)) == [word]  # added
    assert sync_reasons(fn(line), fn("y = g(x)")) == [word]  # removed


def test_a_name_holding_the_word_between_underscores_counts_and_a_longer_word_does_not():
    assert sync_reasons(fn("p = False"), fn("p = is_pin_memory_available()")) == ["pin_memory"]
    assert sync_reasons(fn("p = 1"), fn("p = unpin_memoryish")) == []


def test_output_size_as_a_keyword_argument_and_the_uva_buffers():
    assert sync_reasons(fn("y = g(x)"), fn("y = g(x, output_size=n)")) == ["output_size="]
    assert sync_reasons(fn("y = 1"), fn("output_size = n")) == []  # a variable of that name: not the argument
    for name in ("UvaBufferPool()", "get_uva_view(x)", "UVA_ENABLED"):
        assert sync_reasons(fn("y = x"), fn(f"y = {name}")) == ["uva"], name
    assert sync_reasons(fn("y = x"), fn("y = ultraviolet")) == []


@pytest.mark.parametrize("call", ["item", "tolist", "cpu", "numpy"])
def test_an_added_or_removed_call_counts_not_its_presence(call):
    assert sync_reasons(fn("n = x"), fn(f"n = x.{call}()")) == [f"+.{call}()"]
    assert sync_reasons(fn(f"n = x.{call}()"), fn("n = x")) == [f"-.{call}()"]
    # The line changes, the call stays: one on each side, not a reason.
    assert sync_reasons(fn(f"n = x.{call}() + 1"), fn(f"n = x.{call}() + 2")) == []
    # A line that kept its call, next to an unrelated change: not a reason either.
    assert sync_reasons(fn(f"n = x.{call}()", "m = 1"), fn(f"n = x.{call}()", "m = 2")) == []


def test_comments_strings_and_layout_are_not_sync_work():
    assert sync_reasons(fn("y = x  # non_blocking"), fn("y = x  # non_blocking=True, .item()")) == []
    assert sync_reasons(fn('s = "a"'), fn('s = "x.item() non_blocking"')) == []
    assert sync_reasons(fn("y = g(x,  d)"), fn("y = g(x, d)")) == []


def test_an_unrelated_change_is_not_relevant_and_reasons_keep_the_rule_order():
    assert sync_reasons(fn("w = load(x)"), fn("w = load(x, strict=True)")) == []
    both = sync_reasons(fn("y = x"), fn("y = x.to(d, non_blocking=True)", "n = y.sum().item()", "pin_memory"))
    assert both == ["non_blocking", "pin_memory", "+.item()"]


MODULE_OLD = textwrap.dedent('''\
    class A:
        limit = 1  # comment

        def f(self, t):
            return t.cpu()

        def g(self):
            pass

    def h(t):
        """non_blocking in a docstring"""
        return t
''')
MODULE_NEW = textwrap.dedent('''\
    class A:
        limit = 2  # comment

        def f(self, t):
            return t

        def g(self):
            torch.cuda.synchronize()

    def h(t):
        """non_blocking, still in a docstring"""
        return t
''')


def test_the_diff_of_a_definition_is_its_own_lines_on_each_side():
    assert own_lines(MODULE_OLD, "A") == [1, 2, 3, 6]  # a class without its methods
    a = definition_diff(MODULE_OLD, MODULE_NEW, "A")
    assert (a.removed, a.added, a.sync_relevant) == ((2,), (2,), False)
    f = definition_diff(MODULE_OLD, MODULE_NEW, "A.f")
    assert (f.removed, f.added, f.reasons) == ((5,), (5,), ("-.cpu()",))
    assert definition_diff(MODULE_OLD, MODULE_NEW, "A.g").reasons == ("synchronize",)
    h = definition_diff(MODULE_OLD, MODULE_NEW, "h")  # a docstring-only change
    assert h.sync_relevant is False
    added = definition_diff(None, MODULE_NEW, "A.g")  # a definition only the new side has: every line added
    assert added.removed == () and added.added == (7, 8) and added.reasons == ("synchronize",)
    removed = definition_diff(MODULE_OLD, "x = 1\n", "A.f")
    assert removed.removed == (4, 5) and removed.reasons == ("-.cpu()",)


# --------------------------------------------------------------------------- records, footer, formats

SYNC_REF, OTHER_REF, GONE_REF, QUIET_REF = ("vllm/a.py::sync_fn", "vllm/a.py::other", "vllm/a.py::gone_sync",
                                            "vllm/a.py::gone_other")


def change(ref, sync, targets, untaken=None):
    item = {"path": "vllm/a.py", "qualname": ref.partition("::")[2], "change": "changed", "line": 3, "ref": ref,
            "targets": targets, "lines": 10 if targets else 0, "reached": 8 if targets else 0,
            "sync_relevant": bool(sync), "sync": list(sync), "changed_lines": {"legacy": 2, "optimized": 3}}
    if targets:
        item["untaken"] = untaken or {}
    return item


def record(require=None, branch_untaken=True, sync_covered=True):
    changed = [
        change(SYNC_REF, ["non_blocking", "+.item()"], ["t"],
               {"legacy": {"statements": 2, "lines": [], "branches": 2, "arcs": []},
                "optimized": {"statements": 4, "lines": [812], "branches": 2,
                              "arcs": [[809, 812]] if branch_untaken else []}}),
        change(OTHER_REF, [], ["t"], {"optimized": {"statements": 1, "lines": [40], "branches": 2,
                                                    "arcs": [[39, -37]]}}),
        change(GONE_REF, ["pin_memory"], ["t"] if sync_covered else []),
        change(QUIET_REF, [], [])]
    fuzzed = [c for c in changed if c["targets"]]
    return {"legacy": "vllm==0.28.0", "optimized": "vllm==0.34.0", "required": require is not None,
            "require": require, "measured": True, "changed": changed, "fuzzed": len(fuzzed),
            "sync_relevant": 2, "sync_fuzzed": sum(c["sync_relevant"] for c in fuzzed),
            "lines_reached": 16, "lines": 20, "not_covered": [c["ref"] for c in changed if not c["targets"]]}


def report(changes) -> Report:
    ran = TargetEntry(name="t", upstream=("vllm/a.py::sync_fn",), devices=("cpu",),
                      by_device={"cpu": DeviceTally(examples=5, verdicts={"agree": 5})})
    return Report((ran,), run={"changes": changes})


def test_the_footer_says_changed_sync_relevant_and_other_with_the_untaken_changed_code():
    line = change_line(record(sync_covered=False))
    assert line.startswith("changed: 4 definitions between vllm==0.28.0 and vllm==0.34.0; sync-relevant 2 "
                           "(fuzzed 1); other 2 (fuzzed 1); lines reached 80%; not covered 2 (sync-relevant 1): "
                           f"{GONE_REF}, {QUIET_REF}"), line
    assert ("changed code no example took in 2 fuzzed (sync-relevant 1: vllm/a.py::sync_fn): legacy 0 lines and "
            "0 branches, optimized 2 lines and 2 branches (python -m fuzz coverage REPORT --changes lists them)") \
        in line
    assert untaken_text(record()["changed"][0]) == "optimized lines 812, branches 809->812"
    assert untaken_text(record()["changed"][1]) == "optimized lines 40, branches 39->exit"
    assert untaken_text(record()["changed"][0], 1) == "optimized lines 812 +1 more"


def record_before_the_sync_mark() -> dict:
    """``record()`` as a report from before the sync-relevant mark and the untaken lines wrote it."""
    old = record()
    for item in old["changed"]:
        for key in ("sync_relevant", "sync", "changed_lines", "untaken"):
            item.pop(key, None)
    for key in ("sync_relevant", "sync_fuzzed", "require"):
        old.pop(key)
    return old


def test_an_old_report_keeps_the_old_footer_and_loads():
    old = record_before_the_sync_mark()
    assert change_line(old) == ("changed: 4 definitions between vllm==0.28.0 and vllm==0.34.0; fuzzed 3 "
                                f"(lines reached 80%); not covered 1: {QUIET_REF}")
    loaded = Report.from_json(json.loads(json.dumps(report({**old, "required": True}).to_json())), "old")
    assert loaded.changes_not_covered() == [QUIET_REF] and loaded.exit_code() == 3  # the flag alone, as before
    two = Report(loaded.targets, run={"merged_from": [{"changes": old}, {"changes": old}]})
    merged = merged_changes(two)
    assert "sync_relevant" not in merged and change_line(merged).startswith("changed: 4 definitions")


def test_every_format_carries_the_split():
    from fuzz.reports.formats import junit_xml, markdown
    from fuzz.reports.html import html_report
    from fuzz.reports.report import report_notes

    found = report(record())
    head = "sync-relevant 2 (fuzzed 2); other 2 (fuzzed 1)"
    assert any(head in note for note in report_notes(found))
    md = markdown(found)
    assert head in md
    assert (f"| `{SYNC_REF}` | changed | yes: non_blocking, +.item() | t | 8/10 | "
            "optimized lines 812, branches 809->812 |") in md
    assert f"| `{QUIET_REF}` | changed | no | **not covered** | - | - |" in md
    assert md.index(GONE_REF) < md.index(OTHER_REF)  # sync-relevant first
    case = next(c for c in ET.fromstring(junit_xml(found)).iter("testcase")
                if c.get("classname") == "syncfuzz.changes")
    out = case.find("system-out").text
    assert head in out and case.find("failure") is None
    assert (f"{SYNC_REF} (changed; sync-relevant: non_blocking, +.item()): t; not taken: optimized lines 812, "
            "branches 809->812") in out
    page = html_report(found)
    assert head in page and "809-&gt;812" in page and "yes: non_blocking, +.item()" in page


# --------------------------------------------------------------------------- --require-changes-covered=MODE

def test_the_modes_count_what_they_say():
    assert uncovered(record(None)) == ([], [])
    # The flag alone: as before, the definitions no target reached, branches aside.
    assert uncovered(record("reached")) == ([QUIET_REF], [])
    assert uncovered(record("all")) == ([QUIET_REF], [SYNC_REF, OTHER_REF])
    # sync: only the sync-relevant ones; an uncovered other one does not count.
    assert uncovered(record("sync")) == ([], [SYNC_REF])
    assert uncovered(record("sync", branch_untaken=False)) == ([], [])
    assert uncovered(record("sync", branch_untaken=False, sync_covered=False)) == ([GONE_REF], [])


def test_sync_exits_3_only_for_an_uncovered_sync_relevant_definition_or_an_untaken_changed_branch():
    from fuzz.reports.report import closing_line

    clean = report(record("sync", branch_untaken=False))
    assert clean.exit_code() == 0 and clean.changes_not_covered() == []  # an other one not covered: fine
    branch = report(record("sync"))
    assert branch.exit_code() == 3 and branch.changes_not_covered() == [SYNC_REF]
    assert "(1 sync-relevant changed definitions with a changed branch no example took)" in closing_line(branch)
    gone = report(record("sync", branch_untaken=False, sync_covered=False))
    assert gone.exit_code() == 3 and gone.changes_not_covered() == [GONE_REF]
    assert "(1 sync-relevant changed definitions no target reached)" in closing_line(gone)
    from fuzz.reports.formats import junit_xml

    case = next(c for c in ET.fromstring(junit_xml(branch)).iter("testcase")
                if c.get("classname") == "syncfuzz.changes")
    assert case.find("failure").get("message") == "1 with a changed branch no example took"


def test_shards_merge_the_untaken_changed_code():
    a, b = record("sync"), record("sync", branch_untaken=False)
    b["changed"][0]["untaken"]["optimized"]["lines"] = []
    merged = merged_changes(Report((), run={"merged_from": [{"changes": a}, {"changes": b}]}))
    assert merged["require"] == "sync" and merged["sync_relevant"] == 2 and merged["sync_fuzzed"] == 2
    first = next(c for c in merged["changed"] if c["ref"] == SYNC_REF)
    assert first["untaken"]["optimized"]["lines"] == [] and first["untaken"]["optimized"]["arcs"] == []
    assert uncovered(merged) == ([], [])  # what one shard took is taken


def test_the_flag_parses_and_travels_in_the_config():
    from fuzz.cli import build_parser

    def parsed(*extra):
        return build_parser().parse_args(["run", *extra]).require_changes_covered

    assert parsed() is False and parsed("--require-changes-covered") is True
    assert parsed("--require-changes-covered=reached") is True
    assert parsed("--require-changes-covered=sync") == "sync" and parsed("--require-changes-covered=all") == "all"
    with pytest.raises(UsageError, match="'some' is not one of reached, all, sync"):
        parsed("--require-changes-covered=some")
    for value in (False, True, "all", "sync"):
        config = RunConfig(require_changes_covered=value, run_id=uuid.uuid4().hex)
        assert RunConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    with pytest.raises(ConfigError, match="require_changes_covered 'most'"):
        RunConfig.from_json({"require_changes_covered": "most"})
    assert [require_mode(v) for v in (False, True, "all", "sync")] == [None, "reached", "all", "sync"]


def test_old_and_new_reports_load_in_merge_reports_and_trend(tmp_path, capsys):
    """A report from before the sync-relevant mark (no sync fields, ``require_changes_covered: true``) and one
    with them (``"sync"``) both merge and both feed ``trend``."""
    from fuzz.cli import main
    from fuzz.reports.scope import run_scope

    sides = {role: {"kind": "release", "version": v, "code_sha256": v}
             for role, v in (("legacy", "0.28.0"), ("optimized", "0.34.0"))}
    old = record_before_the_sync_mark()
    paths = []
    for name, flag, changes in (("old", True, {**old, "required": True}), ("new", "sync", record("sync"))):
        config = RunConfig(targets=("t",), legacy="vllm==0.28.0", optimized="vllm==0.34.0", coverage=True,
                           require_changes_covered=flag, run_id=uuid.uuid4().hex)
        run = {**config.to_json(), "scope": run_scope(config, sides, None), "changes": changes,
               "started": f"2026-12-0{len(paths) + 1}T00:00:00+00:00"}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(Report(report(changes).targets, run=run).to_json()))
        out = tmp_path / f"{name}-merged.json"
        assert main(["merge-reports", str(out), str(path)]) == 3  # each is incomplete under its flag
        merged = Report.from_json(json.loads(out.read_text()), name)
        assert merged.changes_not_covered() == ([QUIET_REF] if name == "old" else [SYNC_REF])
        paths.append(str(path))
    capsys.readouterr()
    assert main(["trend", *paths]) == 0
