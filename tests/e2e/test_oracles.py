"""The oracles beyond agreement (fuzz/oracles/): the engine's side.

Per-family invariants, references and consumers are tested in
tests/test_oracles_*.py; here: every target declares its oracles, a violation
is its own verdict (found though the sides agree, shrunk, saved, replayed,
accepted as known), a bug planted in both copies is reported, consumer syncs
are counted apart from the function's, and reports show them.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import warnings

import pytest

from fuzz.engine.execute import judge_example, run_example
from fuzz.oracles import Reference, check_invariants, check_reference
from fuzz.oracles.outcome import SideResult
from fuzz.records.model import DeviceTally, Failure, TargetEntry
from fuzz.records.verdicts import Verdict
from fuzz.reports.report import summary_table
from fuzz.targets import catalog_targets, resolve_object
from tests import oracle_demo, planted
from tests.support import cli, fuzz

TARGETS = catalog_targets()

DEMO = {"SYNCFUZZ_TARGET_MODULES": "tests.oracle_demo"}
BY_NAME = {t.name: t for t in oracle_demo.TARGETS}


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_target_declares_an_invariant_or_says_why_none_applies(target):
    assert target.invariants or target.no_invariants, f"{target.name}: no invariant and no reason"
    for path in target.invariants:
        check = resolve_object(path)
        assert callable(check) and inspect.getdoc(check), f"{path}: an invariant states itself in its docstring"
        assert list(inspect.signature(check).parameters) == ["spec", "output"], path


@pytest.mark.parametrize("target", [t for t in TARGETS if t.reference or t.consumer], ids=lambda t: t.name)
def test_references_and_consumers_resolve(target):
    if target.reference:
        assert isinstance(resolve_object(target.reference), Reference)
    if target.consumer:
        consumer = resolve_object(target.consumer)
        assert callable(consumer) and "vllm/" in (inspect.getdoc(consumer) or ""), \
            f"{target.consumer}: a consumer cites the upstream reads it makes"


def test_the_issue_s_targets_have_a_reference():
    with_reference = {t.name for t in TARGETS if t.reference}
    for name in ("fla-chunk-indices", "fla-chunk-offsets", "glm4v-embeddings", "keye-vision-split",
                 "ernie-encoder-metadata"):
        assert name in with_reference
    assert with_reference & {"paddleocr-encoder", "keye-encoder-rope"}


def test_list_json_shows_the_oracles():
    result = cli("list", "--json")
    assert result.returncode == 0, result.stderr
    record = {t["name"]: t for t in json.loads(result.stdout)}["fla-chunk-indices"]
    assert record["invariants"] and record["reference"]
    assert "no_invariants" in record and "consumer" in record


# -- the verdicts, on the real copies (they agree; the demo oracle is what is wrong) --

def test_invariant_violation_is_found_although_the_sides_agree_and_shrinks():
    outcome = fuzz(BY_NAME["demo-invariant"], max_examples=200)
    (failure,) = outcome.failures
    assert failure.verdict is Verdict.INVARIANT_VIOLATION
    assert failure.mismatches[0].path == "invariant offsets_stay_below_four"
    assert failure.mismatches[0].detail == "legacy and optimized: last offset 4 >= 4"  # shrunk to the boundary
    assert failure.oracles == ("invariant offsets_stay_below_four",)


def test_an_invariant_that_cannot_read_the_output_reports_it():
    outcome = fuzz(BY_NAME["demo-unreadable"], max_examples=20)
    (failure,) = outcome.failures
    assert failure.verdict is Verdict.INVARIANT_VIOLATION
    assert "could not be checked: KeyError" in failure.mismatches[0].detail


def test_reference_divergence_names_the_leaf_and_both_sides():
    outcome = fuzz(BY_NAME["demo-reference"], max_examples=200)
    (failure,) = outcome.failures
    assert failure.verdict is Verdict.REFERENCE_DIVERGENCE
    assert failure.mismatches[0].what == "reference"
    assert failure.mismatches[0].detail.startswith("legacy and optimized vs reference: ")
    assert failure.spec["chunk_size"] > 1  # the wrong reference is right for chunk_size 1


def test_violation_is_saved_replayed_and_accepted_as_known(tmp_path):
    corpus = tmp_path / "corpus"
    run = cli("run", "--target", "demo-invariant", "--device", "cpu", "--max-examples", "100", "--confirm", "1",
              "--corpus", str(corpus), extra_env=DEMO)
    assert run.returncode == 1, run.stderr
    assert "INVARIANT-VIOLATION in demo-invariant on cpu" in run.stdout
    (repro,) = sorted((corpus / "failures").glob("*.json"))
    assert json.loads(repro.read_text())["verdict"] == "invariant-violation"
    replay = cli("replay", str(repro), extra_env=DEMO)
    assert replay.returncode == 1 and "INVARIANT-VIOLATION reproduced on cpu" in replay.stdout, replay.stdout
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"format": "syncfuzz-known-issues/1", "issues": [
        {"target": "demo-invariant", "verdict": "invariant-violation", "reason": "the demo's claim is too strict"}]}))
    accepted = cli("run", "--target", "demo-invariant", "--device", "cpu", "--max-examples", "100",
                   "--known-issues", str(known), extra_env=DEMO)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "known: the demo's claim is too strict" in accepted.stdout
    # replay --known-issues matches the oracle the replay saw, as run does (a replay child reports it).
    for oracle, code in (("invariant offsets_stay_below_four", 0), ("invariant another_claim", 1)):
        known.write_text(json.dumps({"format": "syncfuzz-known-issues/1", "issues": [
            {"target": "demo-invariant", "verdict": "invariant-violation", "oracle": oracle, "reason": "too strict"}]}))
        replayed = cli("replay", str(repro), "--known-issues", str(known), extra_env=DEMO)
        assert replayed.returncode == code, (oracle, replayed.stdout + replayed.stderr)


def test_a_divergence_stays_a_divergence_and_names_every_oracle_that_saw_it():
    target = dataclasses.replace(BY_NAME["demo-invariant"])
    legacy = SideResult(value=_tensor([0, 1, 5]))
    optimized = SideResult(value=_tensor([0, 1, 6]))
    decision = judge_example(target, {"device": "cpu", "cu_seqlens": [0, 3, 9], "chunk_size": 1}, legacy, optimized)
    assert decision.verdict is Verdict.DIVERGENCE and decision.mismatches[0].what == "values"
    assert decision.oracles == ("differential", "invariant offsets_stay_below_four")


def test_a_side_that_raised_is_not_checked():
    target = BY_NAME["demo-invariant"]
    raised = SideResult(raised=object())  # type: ignore[arg-type]
    assert check_invariants(target, {}, raised, raised) == []
    assert check_reference(BY_NAME["demo-reference"], {"cu_seqlens": [0, 5], "chunk_size": 2}, raised, raised) == []


def _tensor(values):
    import torch

    return torch.tensor(values)


# -- bugs planted in both copies: only the target's own oracles can see them --

@pytest.mark.parametrize("plant", planted.SHARED_BUGS, ids=lambda p: p.name)
def test_a_bug_in_both_copies_is_reported_by_an_invariant_or_the_reference(plant):
    outcome = fuzz(plant.target(), max_examples=300)
    assert outcome.failures, f"{plant.name} ({plant.why}) survived {outcome.examples} examples"
    verdicts = {f.verdict for f in outcome.failures}
    assert verdicts <= {Verdict.INVARIANT_VIOLATION, Verdict.REFERENCE_DIVERGENCE}, \
        f"{plant.name}: {verdicts} (the two copies share the bug: they must agree)"


def test_shared_bugs_cover_at_least_five_targets():
    assert len({plant.base_target for plant in planted.SHARED_BUGS}) >= 5


# -- consumer syncs: counted apart, regressions judged, shown in reports --

def test_syncs_inside_consumer_reads_are_the_consumer_s(monkeypatch):
    import torch

    from fuzz.oracles import syncs

    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    with syncs.counting_syncs(True) as tally:
        warnings.warn(f"x {syncs._TORCH_SYNC_WARNING} y")
        with syncs.consumer_reads():
            warnings.warn(f"x {syncs._TORCH_SYNC_WARNING} y")
            warnings.warn(f"x {syncs._TORCH_SYNC_WARNING} y")
    assert (tally.total, tally.consumer) == (1, 2)


def test_more_consumer_syncs_on_the_optimized_output_is_a_sync_regression():
    target = TARGETS[0]
    target = dataclasses.replace(target, invariants=(), no_invariants="test", reference=None)
    legacy = SideResult(value=1, syncs=0, consumer_syncs=0)
    optimized = SideResult(value=1, syncs=0, consumer_syncs=3)
    decision = judge_example(target, {"device": "cpu"}, legacy, optimized)
    assert decision.verdict is Verdict.SYNC_REGRESSION and decision.mismatches[0].path == "consumer"
    assert "made 3 GPU<->CPU syncs, of the legacy output 0" in decision.mismatches[0].detail
    assert decision.oracles == ("consumer-sync",)
    same = judge_example(target, {"device": "cpu"}, legacy, SideResult(value=1, consumer_syncs=0))
    assert same.verdict is Verdict.AGREE


def test_consumer_syncs_column_and_json_round_trip():
    tally = DeviceTally(examples=2, verdicts={"agree": 2},
                        syncs_per_call={"legacy": {"1": 2}, "optimized": {"0": 2}},
                        consumer_syncs_per_call={"legacy": {"4": 2}, "optimized": {"0": 1, "4": 1}})
    entry = TargetEntry(name="t", devices=("cuda",), by_device={"cuda": tally})
    table = summary_table([entry])
    assert "consumer syncs" in table.splitlines()[0]
    assert "1 -> 0" in table and "4 -> 0..4" in table
    again = TargetEntry.from_json(json.loads(json.dumps(entry.to_json())))
    assert again.by_device["cuda"].consumer_syncs_per_call == tally.consumer_syncs_per_call
    assert (again.by_device["cuda"] + again.by_device["cuda"]).consumer_syncs_per_call["legacy"] == {"4": 4}


def test_failure_oracles_round_trip():
    failure = Failure(device="cpu", verdict="invariant-violation", input={}, oracles=("differential", "reference"))
    assert Failure.from_json(failure.to_json(), "x").oracles == ("differential", "reference")


def test_consumer_runs_after_the_call_and_cannot_change_the_verdict_on_cpu(monkeypatch):
    import fuzz.engine.execute as execute

    target = {t.name: t for t in TARGETS}["fla-chunk-indices"]
    seen = []

    def consumer(spec, output):
        seen.append(tuple(output.shape))
        raise RuntimeError("a consumer that breaks only loses its count")

    monkeypatch.setattr(execute, "consumer_of", lambda t: consumer)
    result = run_example(target, {"device": "cpu", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2})
    assert result.verdict is Verdict.AGREE and seen == [(2, 2), (2, 2)]  # once per side, on its output
    assert result.legacy.consumer_syncs is None  # nothing is counted on the CPU
