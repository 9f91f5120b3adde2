"""Reach (docs/reach.md): the JSON model of what each side ran, the verdicts it decides (``unreached``,
``same-code``), and the measurement with coverage.py in-process on CPU."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from fuzz.config import RunConfig
from fuzz.records.model import EXIT_INCOMPLETE, EXIT_OK, DeviceTally, Failure, Report, TargetEntry
from fuzz.records.verdicts import TargetVerdict

# The JSON model lives in fuzz/records/reachdata.py (torch-free); earlier it was part of fuzz/reach/collect.py.
try:
    from fuzz.records import reachdata as data
except ImportError:  # pragma: no cover -- the layout before the split
    from fuzz.reach.collect import collect as data

ReachError = data.ReachError
ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- records

def unit(lines=(10, 11, 12), reached=(10, 11), digest="d1", arcs=((11, 12), (11, -1)), reached_arcs=((11, 12),),
         **extra) -> dict:
    return {"upstream": "vllm/x.py::f", "first_line": 9, "digest": digest, "kind": "function",
            "lines": list(lines), "adapted": [], "reached": list(reached), "arcs": [list(a) for a in arcs],
            "reached_arcs": [list(a) for a in reached_arcs], **extra}


def record(definitions=None, executed=None) -> dict:
    return {"file": "legacy/x.py", "path": "/nowhere/legacy/x.py",
            "definitions": {"f": unit()} if definitions is None else definitions,
            "executed": {"f": {"digest": "d1", "lines": 3, "reached": [10, 11]}} if executed is None else executed}


def reach(legacy=None, optimized=None, device="cpu") -> dict:
    return {device: {"legacy": legacy or record(), "optimized": optimized or record()}}


def entry(reach_data=None, examples=5, failures=(), same_code=None, devices=("cpu",)) -> TargetEntry:
    return TargetEntry(name="t", upstream=("vllm/x.py::f",), devices=devices,
                       by_device={d: DeviceTally(examples=examples, verdicts={"agree": examples}) for d in devices},
                       failures=tuple(failures), reach=reach_data or {}, same_code=same_code)


def differing() -> dict:
    """Two sides that executed different code (the usual case: the PR changed the function)."""
    return reach(optimized=record(definitions={"f": unit(digest="d2")},
                                  executed={"f": {"digest": "d2", "lines": 3, "reached": [10]}}))


# --------------------------------------------------------------------------- read_reach

def test_read_reach_accepts_a_well_formed_record():
    good = reach()
    assert data.read_reach(good, "w") == good
    assert data.read_reach({}, "w") == {}


def damaged(path: str, value) -> dict:
    """reach() with one field replaced ("cpu/legacy/definitions/f/reached")."""
    out = copy.deepcopy(reach())
    node = out
    keys = path.split("/")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return out


@pytest.mark.parametrize("path, value, named", [
    ("cpu", [1, 2], "must be an object of sides"),
    ("cpu/legacy", [], "no definitions object"),
    ("cpu/legacy/definitions", [], "no definitions object"),
    ("cpu/legacy/definitions/f/lines", "10-12", "f lines must be a list"),
    ("cpu/legacy/definitions/f/lines", [10, "11"], "f lines must be a list"),
    ("cpu/legacy/definitions/f/reached", [True], "f reached must be a list"),
    ("cpu/legacy/definitions/f/adapted", {"a": 1}, "f adapted must be a list"),
    ("cpu/legacy/definitions/f/arcs", [[1, 2, 3]], "f arcs must be a list of [from, to]"),
    ("cpu/legacy/definitions/f/reached_arcs", [5], "f reached_arcs must be a list of [from, to]"),
    ("cpu/legacy/definitions/f/reached", [10, 99], "reached lines that are not its lines"),
    ("cpu/optimized/executed", [], "executed must be an object"),
    ("cpu/optimized/executed/f", {"lines": 3, "reached": [10]}, "executed must be an object"),
    ("cpu/optimized/executed/f", {"digest": 7, "lines": 3}, "executed must be an object"),
])
def test_read_reach_refuses_damaged_data_naming_the_field(path, value, named):
    with pytest.raises(ReachError) as caught:
        data.read_reach(damaged(path, value), "report 'r.json': target 0 't'")
    message = str(caught.value)
    assert named in message and "report 'r.json': target 0 't'" in message
    assert "reach on cpu" in message
    if path.count("/") >= 1:
        assert path.split("/")[1] in message  # the side


def test_a_reached_adapted_line_is_not_damage():
    ok = damaged("cpu/legacy/definitions/f/adapted", [13])
    ok["cpu"]["legacy"]["definitions"]["f"]["reached"] = [10, 13]
    assert data.read_reach(ok, "w")["cpu"]["legacy"]["definitions"]["f"]["reached"] == [10, 13]


def test_a_damaged_reach_is_refused_when_a_report_is_read():
    report = Report((entry(reach()),), run={"seed": 1}).to_json()
    report["targets"][0]["reach"]["cpu"]["legacy"]["definitions"]["f"]["reached"] = [99]
    with pytest.raises(ReachError, match="reached lines that are not its lines"):
        Report.from_json(report, "r.json")


def test_read_reach_refuses_a_definition_that_is_not_an_object():
    with pytest.raises(ReachError, match="f"):
        data.read_reach(damaged("cpu/legacy/definitions/f", [10, 11]), "w")


# --------------------------------------------------------------------------- add_reach

def test_add_reach_unites_reached_lines_arcs_and_executed():
    a = reach(legacy=record(definitions={"f": unit(reached=[10], reached_arcs=[])},
                            executed={"f": {"digest": "d1", "lines": 3, "reached": [10]}}))
    b = reach(legacy=record(definitions={"f": unit(reached=[11, 12], reached_arcs=[(11, -1)])},
                            executed={"f": {"digest": "d1", "lines": 3, "reached": [11, 12]},
                                      "g": {"digest": "g1", "lines": 2, "reached": [20]}}))
    total = data.add_reach(a, b, "t")
    legacy = total["cpu"]["legacy"]
    assert legacy["definitions"]["f"]["reached"] == [10, 11, 12]
    assert legacy["definitions"]["f"]["reached_arcs"] == [[11, -1]]
    assert legacy["definitions"]["f"]["lines"] == [10, 11, 12]
    assert legacy["executed"] == {"f": {"digest": "d1", "lines": 3, "reached": [10, 11, 12]},
                                  "g": {"digest": "g1", "lines": 2, "reached": [20]}}
    assert data.line_counts(legacy) == (3, 3) and data.arc_counts(legacy) == (1, 2)
    # The parts are not changed.
    assert a["cpu"]["legacy"]["definitions"]["f"]["reached"] == [10]
    # Adding is symmetric in what it reached.
    other = data.add_reach(b, a, "t")["cpu"]["legacy"]
    assert other["definitions"]["f"]["reached"] == legacy["definitions"]["f"]["reached"]
    assert other["executed"] == legacy["executed"]


def test_add_reach_keeps_devices_and_sides_only_one_part_has():
    a = reach()
    b = {"cuda": {"legacy": record()}}
    total = data.add_reach(a, b)
    assert set(total) == {"cpu", "cuda"} and set(total["cuda"]) == {"legacy"}
    assert data.add_reach({}, a) == a and data.add_reach(a, {}) == a


@pytest.mark.parametrize("where", ["definitions", "executed"])
def test_add_reach_refuses_parts_that_ran_different_code(where):
    a = reach()
    b = reach(legacy=record(definitions={"f": unit(digest="other")} if where == "definitions" else None,
                            executed={"f": {"digest": "other", "lines": 3, "reached": [10]}}
                            if where == "executed" else None))
    with pytest.raises(ReachError, match="different code") as caught:
        data.add_reach(a, b, "fla-chunk-offsets")
    assert "fla-chunk-offsets on cpu legacy" in str(caught.value) and "f" in str(caught.value)


def test_add_reach_unites_a_class_entered_in_either_part():
    cls = {"upstream": "vllm/x.py::C", "first_line": 1, "digest": "c1", "kind": "class", "lines": [],
           "adapted": [], "arcs": []}
    a = reach(legacy=record(definitions={"C": {**cls, "entered": False, "reached": [], "reached_arcs": []}}))
    b = reach(legacy=record(definitions={"C": {**cls, "entered": True, "reached": [], "reached_arcs": []}}))
    total = data.add_reach(a, b, "t")["cpu"]["legacy"]
    assert data.entered(total["definitions"]["C"])


def test_a_class_entered_in_the_first_part_stays_entered():
    cls = {"upstream": "vllm/x.py::C", "first_line": 1, "digest": "c1", "kind": "class", "lines": [],
           "adapted": [], "arcs": [], "reached": [], "reached_arcs": []}
    a = reach(legacy=record(definitions={"C": {**cls, "entered": True}}))
    b = reach(legacy=record(definitions={"C": {**cls, "entered": False}}))
    assert data.entered(data.add_reach(a, b)["cpu"]["legacy"]["definitions"]["C"])


# --------------------------------------------------------------------------- TargetEntry keeps reach

def test_target_entries_add_up_their_reach():
    a = entry(reach(legacy=record(definitions={"f": unit(reached=[10])})))
    b = entry(reach(legacy=record(definitions={"f": unit(reached=[12])})))
    total = a + b
    assert total.examples == 10
    assert total.reach["cpu"]["legacy"]["definitions"]["f"]["reached"] == [10, 12]
    assert (entry() + a).reach == a.reach and (a + entry()).reach == a.reach
    with pytest.raises(ReachError):
        _ = a + entry(reach(legacy=record(definitions={"f": unit(digest="zz")})))


def test_to_json_and_from_json_round_trip_keeps_reach_and_same_code():
    original = entry(differing(), same_code=None)
    back = TargetEntry.from_json(json.loads(json.dumps(original.to_json())))
    assert back.reach == original.reach and back == original
    marked = entry(reach(), same_code="both sides run the same code: 1 definition")
    again = TargetEntry.from_json(json.loads(json.dumps(marked.to_json())))
    assert again.same_code == marked.same_code and again.reach == marked.reach
    assert again.to_json()["verdict_by_device"] == {"cpu": TargetVerdict.SAME_CODE}
    # An entry of a report from before reach reads as not measured.
    old = original.to_json()
    del old["reach"], old["same_code"]
    assert TargetEntry.from_json(old).reach == {} and TargetEntry.from_json(old).same_code is None


def test_a_report_round_trip_keeps_reach():
    report = Report((entry(differing()),), run={"seed": 1})
    back = Report.from_json(json.loads(json.dumps(report.to_json())), "r.json")
    assert back.targets[0].reach == report.targets[0].reach


# --------------------------------------------------------------------------- same_code, unreached_side

def test_same_code_only_when_both_sides_executed_identical_digests():
    assert data.same_code(reach()["cpu"])
    assert not data.same_code(differing()["cpu"])
    # One more definition executed on one side is other code.
    more = reach(optimized=record(executed={"f": {"digest": "d1", "lines": 3, "reached": [10]},
                                            "g": {"digest": "g1", "lines": 1, "reached": [1]}}))
    assert not data.same_code(more["cpu"])
    # The lines reached do not matter, only the code.
    fewer = reach(optimized=record(executed={"f": {"digest": "d1", "lines": 3, "reached": [12]}}))
    assert data.same_code(fewer["cpu"])
    assert not data.same_code({"legacy": record()})  # a side missing
    assert not data.same_code(reach(legacy=record(executed={}), optimized=record(executed={}))["cpu"])  # ran nothing


def test_unreached_side_and_its_stand_ins():
    assert not data.unreached_side(record())
    never = record(definitions={"f": unit(reached=[])})
    assert data.unreached_side(never) and data.unreached(never) == ["f"]
    assert data.unreached_side(record(definitions={}))  # claims nothing of this file
    # A stand-in kept from the copy does not count as the side's own code.
    stand_in = record(definitions={"f": unit(reached=[]), "g": unit(reached=[10], stand_in=True)})
    assert data.unreached_side(stand_in)
    own = record(definitions={"f": unit(reached=[10]), "g": unit(reached=[], stand_in=True)})
    assert not data.unreached_side(own)
    # One claim entered of two: the side reached the target's code.
    assert not data.unreached_side(record(definitions={"f": unit(reached=[]), "g": unit(reached=[11])}))
    # A class: entered when a method ran.
    cls = {"kind": "class", "lines": [], "reached": [], "entered": True}
    assert not data.unreached_side(record(definitions={"C": cls}))
    assert data.unreached_side(record(definitions={"C": {**cls, "entered": False}}))


def test_line_and_arc_counts_and_percent():
    rec = record(definitions={"f": unit(), "g": unit(lines=[20, 21], reached=[], arcs=[], reached_arcs=[],
                                                      adapted=[22])})
    assert data.line_counts(rec) == (2, 5) and data.arc_counts(rec) == (1, 2)
    assert data.percent(2, 5) == "40%" and data.percent(2, 3) == "66%" and data.percent(0, 0) == "-"


# --------------------------------------------------------------------------- verdicts

def test_verdict_on_unreached_same_code_and_agree():
    assert entry(differing()).verdict_on("cpu") == "agree"
    assert entry().verdict_on("cpu") == "agree"  # not measured: agree, as before reach
    assert entry(reach()).verdict_on("cpu") == TargetVerdict.SAME_CODE  # the sides executed the same code
    assert entry(differing(), same_code="static: same text").verdict_on("cpu") == TargetVerdict.SAME_CODE
    unreached = entry(reach(optimized=record(definitions={"f": unit(reached=[])},
                                             executed={"f": {"digest": "d2", "lines": 3, "reached": []}})))
    assert unreached.verdict_on("cpu") == TargetVerdict.UNREACHED and unreached.verdict == TargetVerdict.UNREACHED
    assert unreached.unreached_devices() == ["cpu"]
    # Unreached outranks same-code: a side that ran none of the claims says nothing either way.
    both = entry(reach(legacy=record(definitions={"f": unit(reached=[])})), same_code="same text")
    assert both.verdict_on("cpu") == TargetVerdict.UNREACHED


def test_a_failure_or_no_example_outranks_reach():
    never = reach(legacy=record(definitions={"f": unit(reached=[])}))
    failure = Failure(device="cpu", verdict="divergence", input={"x": 1},
                      mismatches=({"path": "out", "what": "values", "detail": "1 != 2"},))
    assert entry(never, failures=(failure,)).verdict_on("cpu") == "divergence"
    assert entry(reach(), failures=(failure,)).verdict_on("cpu") == "divergence"
    assert entry(never, examples=0).verdict_on("cpu") == TargetVerdict.UNTESTED


def test_reach_is_per_device():
    two = {"cpu": differing()["cpu"], "cuda": reach(legacy=record(definitions={"f": unit(reached=[])}))["cpu"]}
    e = entry(two, devices=("cpu", "cuda"))
    assert e.verdict_on("cpu") == "agree" and e.verdict_on("cuda") == TargetVerdict.UNREACHED
    assert e.verdict == TargetVerdict.UNREACHED and e.unreached_devices() == ["cuda"]


def test_exit_codes_unreached_3_same_code_0():
    unreached = entry(reach(legacy=record(definitions={"f": unit(reached=[])})))
    assert Report((unreached,)).exit_code() == EXIT_INCOMPLETE == 3
    assert Report((unreached,)).unreached() == [("t", "cpu")]
    same = Report((entry(reach()),))
    assert same.exit_code() == EXIT_OK and same.unreached() == []
    assert Report((entry(differing()),)).exit_code() == EXIT_OK
    assert Report((entry(differing()), unreached)).exit_code() == 3


def test_changes_not_covered_only_when_required():
    changes = {"changed": [{"ref": "vllm/x.py::f"}], "not_covered": ["vllm/x.py::f"], "required": False}
    assert Report((entry(differing()),), run={"changes": changes}).exit_code() == 0
    required = Report((entry(differing()),), run={"changes": {**changes, "required": True}})
    assert required.changes_not_covered() == ["vllm/x.py::f"] and required.exit_code() == 3
    # Shards: a definition one shard reached is covered. (Each shard lists every changed definition, with
    # the targets of its own that ran it: the merge reads the lists, not the not_covered summaries.)
    f, g = {"ref": "vllm/x.py::f", "targets": []}, {"ref": "vllm/x.py::g", "targets": []}
    merged = Report((entry(differing()),), run={"merged_from": [
        {"changes": {"changed": [f, g], "required": True, "not_covered": ["vllm/x.py::f", "vllm/x.py::g"]}},
        {"changes": {"changed": [{**f, "targets": ["t"]}, g], "required": True,
                     "not_covered": ["vllm/x.py::g"]}}]})
    assert merged.changes_not_covered() == ["vllm/x.py::g"]


def test_the_report_renders_same_code_and_unreached():
    from fuzz.reports.formats import junit_xml, markdown
    from fuzz.reports.report import closing_line, failure_lines, reach_column, summary_rows, target_outcome

    same, unreached = entry(reach()), dataclasses.replace(
        entry(reach(legacy=record(definitions={"f": unit(reached=[])}))), name="u")
    assert target_outcome(same) == TargetVerdict.SAME_CODE and target_outcome(unreached) == TargetVerdict.UNREACHED
    assert reach_column(unreached, "cpu") == "0%/66%" and reach_column(entry(), "cpu") == "-"
    assert summary_rows([same])[1][-1] == "66%/66%"
    line = closing_line(Report((same, unreached)))
    assert "0/2 targets agree" in line and "1 same-code" in line and "1 unreached" in line and "exit 3" in line
    lines = failure_lines([same, unreached])
    assert any(x.startswith("same-code t:") for x in lines)
    assert any(x.startswith("UNREACHED: u on cpu: legacy entered none of f") for x in lines)
    xml = junit_xml(Report((same, unreached)))
    assert xml.count("<skipped") == 2 and 'skipped="2"' in xml and "<failure" not in xml
    assert "| reached legacy/optimized |" in markdown(Report((same,)))


# --------------------------------------------------------------------------- measurement (in-process, CPU)

def config(**extra) -> RunConfig:
    return RunConfig(coverage=True, max_examples=20, devices=("cpu",), seed=1, isolated=False, **extra)


@pytest.fixture(scope="module")
def no_other_tracer():
    import coverage

    if coverage.Coverage.current() is not None:
        pytest.skip("this process is measured by coverage already (pytest-cov): a run does not measure then")


def fuzzed(name: str, **replaced) -> TargetEntry:
    from fuzz.engine.runner import fuzz_target
    from fuzz.targets import lookup

    target = lookup([name])[0]
    if replaced:
        target = dataclasses.replace(target, **replaced)
    return fuzz_target(target, config()).entry()


@pytest.fixture(scope="module")
def measured(no_other_tracer):
    return {name: fuzzed(name) for name in ("fla-chunk-offsets", "paddleocr-encoder", "async-tensor-h2d")}


RELEASES = {"legacy": "0.27.1", "optimized": "0.28.0"}


@pytest.mark.parametrize("name, claimed, entry_function", [
    ("fla-chunk-offsets", "prepare_chunk_offsets", "prepare_chunk_offsets"),
    ("paddleocr-encoder", "SiglipEncoder.forward", "SiglipEncoder.forward"),
])
def test_a_measured_run_records_what_each_side_ran(measured, name, claimed, entry_function):
    from fuzz.releases import normalize
    from fuzz.targets import lookup

    got = measured[name]
    target = lookup([name])[0]
    assert got.examples == 20 and set(got.reach) == {"cpu"}
    sides = got.reach["cpu"]
    assert set(sides) == {"legacy", "optimized"}
    upstream_ref = target.upstream[0]
    up_path = upstream_ref.partition("::")[0]
    for side, rec in sides.items():
        assert rec["file"] == f"{side}/{Path(rec['path']).name}"
        assert Path(rec["path"]).is_file()
        assert set(rec["definitions"]) == {claimed}
        u = rec["definitions"][claimed]
        assert u["upstream"] == upstream_ref and u["kind"] == "function"
        assert data.entered(u), f"{side} never entered {claimed}"
        assert set(u["reached"]) <= set(u["lines"]) | set(u["adapted"])
        assert u["lines"] == sorted(u["lines"]) and u["lines"]
        assert {tuple(a) for a in u["reached_arcs"]} <= {tuple(a) for a in u["arcs"]}
        # The line map points into the release the copy was taken from.
        assert len(u["upstream_lines"]) == len(u["lines"])
        theirs = (ROOT / "sources" / f"vllm-{RELEASES[side]}" / up_path).read_text(encoding="utf-8").splitlines()
        mine = Path(rec["path"]).read_text(encoding="utf-8").splitlines()
        name_only = claimed.rpartition(".")[2]
        # The upstream span starts at the definition (its decorators, where it has them: @tensor_cache).
        head = [row.lstrip() for row in theirs[u["upstream_first_line"] - 1:u["upstream_first_line"] + 3]]
        assert any(row.startswith(f"def {name_only}(") for row in head), head
        assert all(row.startswith("@") for row in head[:[r.startswith("def ") for r in head].index(True)])
        assert mine[u["first_line"] - 1].lstrip().startswith(f"def {name_only}(")
        mapped = [(line, up) for line, up in zip(u["lines"], u["upstream_lines"]) if up is not None]
        assert mapped and all(up > u["upstream_first_line"] for _, up in mapped)
        same = sum(normalize(mine[line - 1]) == normalize(theirs[up - 1]) for line, up in mapped)
        assert same >= 0.8 * len(mapped), (side, same, len(mapped))
        # The digest is the copy's code, as fuzz/code/codediff.py cuts it.
        from fuzz.code.codediff import definitions

        assert u["digest"] == definitions("\n".join(mine))[claimed].digest
        assert entry_function in rec["executed"]
        ran = rec["executed"][entry_function]
        assert ran["digest"] == u["digest"] and ran["reached"] and ran["lines"] >= len(ran["reached"])
    # The PR changed the function: the sides ran other code, so the agreement counts.
    assert not data.same_code(sides) and got.same_code is None
    assert got.verdict_on("cpu") == "agree"


def test_the_measured_entry_survives_json(measured):
    got = measured["paddleocr-encoder"]
    assert TargetEntry.from_json(json.loads(json.dumps(got.to_json()))).reach == got.reach


def test_static_same_code_only_where_the_copies_are_identical(measured):
    same = measured["async-tensor-h2d"]
    assert same.same_code and "same code" in same.same_code and "async_tensor_h2d" in same.same_code
    assert same.verdict_on("cpu") == TargetVerdict.SAME_CODE and Report((same,)).exit_code() == 0
    assert data.same_code(same.reach["cpu"])  # the measurement agrees: both ran the same digests
    assert measured["fla-chunk-offsets"].same_code is None and measured["paddleocr-encoder"].same_code is None


def test_static_same_code_directly():
    from fuzz.reach.collect import static_same_code
    from fuzz.releases import bind_sides
    from fuzz.targets import lookup

    cfg = config()
    for name, expected in (("async-tensor-h2d", True), ("fla-chunk-offsets", False), ("paddleocr-encoder", False)):
        target = bind_sides(lookup([name])[0], cfg)
        assert bool(static_same_code(target, cfg)) is expected, name


def test_without_coverage_reach_is_empty(no_other_tracer):
    from fuzz.engine.runner import fuzz_target
    from fuzz.targets import lookup

    got = fuzz_target(lookup(["fla-chunk-offsets"])[0],
                      RunConfig(coverage=False, max_examples=5, devices=("cpu",), seed=1, isolated=False)).entry()
    assert got.examples == 5 and got.reach == {} and got.verdict_on("cpu") == "agree"
    assert got.to_json()["reach"] == {}


def test_a_planted_claim_never_called_is_not_entered(no_other_tracer):
    """The target claims prepare_chunk_indices, which the copies have but prepare_chunk_offsets never calls."""
    ref = "vllm/third_party/flash_linear_attention/ops/index.py::prepare_chunk_indices"
    got = fuzzed("fla-chunk-offsets", upstream=(ref,))
    assert got.examples == 20
    for side, rec in got.reach["cpu"].items():
        assert set(rec["definitions"]) == {"prepare_chunk_indices"}, side
        u = rec["definitions"]["prepare_chunk_indices"]
        assert u["upstream"] == ref and u["lines"] and u["reached"] == [] and not data.entered(u)
        assert "prepare_chunk_indices" not in rec["executed"]
        assert "prepare_chunk_offsets" in rec["executed"]  # what did run
        assert data.unreached(rec) == ["prepare_chunk_indices"]
    assert got.verdict_on("cpu") == TargetVerdict.UNREACHED and Report((got,)).exit_code() == 3


def test_a_planted_class_claim_is_entered_through_its_methods(no_other_tracer):
    forward = "vllm/model_executor/models/paddleocr_vl.py::SiglipEncoder.forward"
    got = fuzzed("paddleocr-encoder", upstream=("vllm/model_executor/models/paddleocr_vl.py::SiglipEncoder",
                                                forward))
    for rec in got.reach["cpu"].values():
        cls = rec["definitions"]["SiglipEncoder"]
        assert cls["kind"] == "class" and cls["entered"] is True and cls["lines"] == []
        assert data.entered(rec["definitions"]["SiglipEncoder.forward"])
    assert got.verdict_on("cpu") == "agree"
