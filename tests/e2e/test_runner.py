"""The runner: budgets, several distinct failures, fuzzer bugs, the corpus."""

from __future__ import annotations

import dataclasses
import json

from fuzz.config import RunConfig
from fuzz.run.orchestrate import fuzz_all
from fuzz.targets import catalog_targets, lookup
from tests.support import fuzz

TARGETS = catalog_targets()

BY_NAME = {t.name: t for t in TARGETS}


def test_wide_contract_keeps_searching_after_the_first_failure():
    """glm4's wide contract has a known error-mismatch; the run still completes
    all its examples and counts every failing one."""
    outcome = fuzz(BY_NAME["glm4v-embeddings"], contract="wide", max_examples=150, seed=1)
    assert outcome.examples >= 150
    tally = outcome.tallies["cpu"]
    assert tally.verdicts["error-mismatch"] >= 1
    assert len({f.signature for f in outcome.failures}) == len(outcome.failures)


def test_budget_run_stops_and_reports_every_target(tmp_path):
    targets = lookup(["fla-chunk-offsets", "fla-chunk-indices"])
    config = RunConfig(devices=("cpu",), seed=0, budget=2.0, corpus=str(tmp_path))
    entries = fuzz_all(targets, config)
    assert [e.name for e in entries] == ["fla-chunk-offsets", "fla-chunk-indices"]
    # Each got its share (a busy host may run few examples in it, but never none
    # without saying so: then the verdict is "untested", not "agree").
    assert all(not e.failures and e.verdict == ("agree" if e.examples else "untested") for e in entries)


def test_target_without_a_run_device_is_skipped_with_a_reason():
    gpu_only = dataclasses.replace(BY_NAME["fla-chunk-offsets"], name="gpu-only", devices=("cuda",))
    outcome = fuzz(gpu_only)
    assert outcome.skipped and "cuda" in outcome.skipped and outcome.examples == 0


def test_broken_strategy_is_a_fuzzer_bug_not_a_divergence():
    broken = dataclasses.replace(BY_NAME["fla-chunk-offsets"], name="broken",
                                 inputs="strategies.glm4_1v.inputs:Glm4EmbeddingsInputs")
    outcome = fuzz(broken, max_examples=5)
    assert outcome.harness_error and not outcome.failures


def test_corpus_database_replays_a_known_failure_first(tmp_path):
    import tests.planted as planted

    bug = {p.name: p for p in planted.BUGS}["planted-glm4-wrong-modulo"].target()
    first = fuzz(bug, corpus=tmp_path, seed=5)
    assert first.failures and first.first_failure_at > 1
    again = fuzz(bug, corpus=tmp_path, seed=6)
    # Straight from Hypothesis' example database: the saved failing case runs first. It holds at most
    # SPECS_PER_CASE specs; the shrinker usually leaves the failing one alone, but may stop a deletion
    # short (the H200's loaded run of 2026-12-02 replayed a 2-spec case: failure at example 2).
    from fuzz.engine.runner import SPECS_PER_CASE

    assert again.first_failure_at <= SPECS_PER_CASE and again.first_failure_at < first.first_failure_at
    saved = list((tmp_path / "failures").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["verdict"] == "divergence"


# -- several specs per Hypothesis test case (fuzz.engine.runner.SPECS_PER_CASE) --

class TinyInputs:
    """fla-chunk-offsets' inputs with one possible spec: Hypothesis exhausts it at once."""

    def specs(self, available, contract):  # noqa: ANN001, ANN201
        from hypothesis import strategies as st

        return st.just({"device": "cpu", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2})

    def materialize(self, spec, impl, side):  # noqa: ANN001, ANN201
        from strategies.fla_index.inputs import ChunkIndexInputs

        return ChunkIndexInputs().materialize(spec, impl, side)


def test_every_spec_of_a_case_is_one_counted_example_and_the_count_is_exact():
    (target,) = lookup(["fla-chunk-offsets"])
    for wanted in (1, 37, 101):
        outcome = fuzz(target, max_examples=wanted)
        assert outcome.examples == wanted == outcome.tallies["cpu"].verdicts["agree"]


def test_a_failure_in_a_case_of_several_specs_shrinks_to_its_own_spec():
    import tests.planted as planted

    plant = {p.name: p for p in planted.BUGS}["planted-offsets-off-by-one"]
    outcome = fuzz(plant.target(), max_examples=200)
    (failure,) = outcome.failures
    assert failure.spec["cu_seqlens"] == [0] and failure.spec["chunk_size"] == 1  # one spec, minimal


def test_an_exhausted_input_space_ends_the_target():
    (base,) = lookup(["fla-chunk-offsets"])
    target = dataclasses.replace(base, name="tiny", inputs="tests.e2e.test_runner:TinyInputs", invariants=(),
                                 no_invariants="test", reference=None)
    outcome = fuzz(target, max_examples=500)
    assert 1 <= outcome.examples < 500 and not outcome.failures  # stopped, did not loop on fresh seeds


# -- one draw, every device (fuzz.engine.devices.on_devices) --
# CI has no GPU, so two names of the CPU stand for two devices: the engine keys tallies, specs and repros
# by the name, and torch builds "cpu:0" tensors on the CPU. The targets' invariants are off: an output
# on "cpu" is not on the spec's "cpu:0" to them (tests/gpu runs the real pair, cpu and cuda).
TWO = ("cpu", "cpu:0")


def _on_two(base_name: str, **changes: object) -> object:
    (base,) = lookup([base_name])
    return dataclasses.replace(base, devices=TWO, invariants=(), no_invariants="test", reference=None,
                               **changes)


def _recording(monkeypatch) -> list[dict]:  # noqa: ANN001
    import fuzz.engine.runner as runner

    seen: list[dict] = []
    run = runner.run_example

    def recorded(target, spec, **kwargs):  # noqa: ANN001, ANN202
        seen.append(spec)
        return run(target, spec, **kwargs)

    monkeypatch.setattr(runner, "run_example", recorded)
    return seen


def test_each_drawn_spec_runs_on_every_device_of_the_run(monkeypatch):
    seen = _recording(monkeypatch)
    outcome = fuzz(_on_two("fla-chunk-offsets"), max_examples=120, devices=TWO)
    assert outcome.tallies["cpu"].examples == outcome.tallies["cpu:0"].examples == 60
    # In pairs, in the run's order: the same drawn input, only its device replaced.
    assert [s["device"] for s in seen] == ["cpu", "cpu:0"] * 60
    assert all({**a, "device": "cpu:0"} == b for a, b in zip(seen[::2], seen[1::2]))


def test_the_count_is_exact_on_two_devices():
    for wanted in (1, 37):
        outcome = fuzz(_on_two("fla-chunk-offsets"), max_examples=wanted, devices=TWO)
        assert outcome.examples == wanted
        assert (outcome.tallies["cpu"].examples, outcome.tallies["cpu:0"].examples) == (-(-wanted // 2), wanted // 2)


def test_the_same_seed_runs_the_same_examples_on_two_devices(monkeypatch):
    seen = _recording(monkeypatch)
    fuzz(_on_two("glm4v-embeddings"), max_examples=60, devices=TWO, seed=3)
    first = list(seen)
    seen.clear()
    fuzz(_on_two("glm4v-embeddings"), max_examples=60, devices=TWO, seed=3)
    assert seen == first and len(first) == 60


class OffsetsSkewedOnTheSecondDevice:
    """fla-chunk-offsets' inputs, except that the optimized side gets a doubled chunk size on "cpu:0": a bug
    only the second device shows."""

    def specs(self, available, contract):  # noqa: ANN001, ANN201
        from strategies.fla_index.inputs import ChunkIndexInputs

        return ChunkIndexInputs().specs(available, contract)

    def materialize(self, spec, impl, side):  # noqa: ANN001, ANN201
        from strategies.fla_index.inputs import ChunkIndexInputs

        if side == "optimized" and spec["device"] == "cpu:0":
            spec = {**spec, "chunk_size": spec["chunk_size"] * 2}
        return ChunkIndexInputs().materialize(spec, impl, side)


def test_a_bug_on_one_device_is_found_there_and_its_repro_names_that_device(tmp_path):
    target = _on_two("fla-chunk-offsets", name="skewed",
                     inputs="tests.e2e.test_runner:OffsetsSkewedOnTheSecondDevice")
    outcome = fuzz(target, max_examples=300, devices=TWO, corpus=tmp_path)
    (failure,) = outcome.failures
    assert failure.verdict.value == "divergence" and failure.spec["device"] == "cpu:0"
    assert outcome.tallies["cpu"].verdicts["agree"] == outcome.tallies["cpu"].examples  # the first device agrees
    (saved,) = (tmp_path / "failures").glob("*.json")
    payload = json.loads(saved.read_text())
    assert payload["device"] == payload["input"]["device"] == "cpu:0"


def test_the_engine_phase_is_read_from_this_hypothesis():
    """is_shrink_step reads Hypothesis' phase (not public API): this Hypothesis must still let it, or the shrink
    steps would fall back to "every run after the failure" without anyone noticing."""
    from collections import Counter

    from hypothesis import given, seed, settings
    from hypothesis import strategies as st

    from fuzz.engine.runner import _ENGINE_CALL, _engine_phase, hypothesis_settings, is_shrink_step

    assert _ENGINE_CALL is not None
    phases: Counter = Counter()
    shrink_steps = [0]

    @seed(0)
    @settings(hypothesis_settings(200, None))
    @given(st.lists(st.integers(), min_size=1, max_size=8))
    def sums_stay_small(xs: list[int]) -> None:
        phases[_engine_phase()] += 1
        shrink_steps[0] += is_shrink_step(failed_here=True)
        assert sum(xs) < 1000

    try:
        sums_stay_small()
    except AssertionError:
        pass
    assert phases["generate"] and phases["shrink"] and phases[None] == 1  # None: the final replay
    assert shrink_steps[0] == phases["shrink"] + phases["explain"] + phases[None]
    assert not is_shrink_step(failed_here=False)
