"""The fuzzer's power: planted bugs are reported, benign refactors are not."""

from __future__ import annotations

import pytest

import tests.planted as planted
from fuzz.records.verdicts import Verdict
from tests.support import fuzz

# Every planted bug must be caught within this many examples (seed 0, CPU).
DETECTION_LIMIT = 200

BUGS = {p.name: p for p in planted.BUGS}
BENIGN = {p.name: p for p in planted.BENIGN}


def _first_per(plants, key) -> list:
    """The plants' names, sorted; all but the first name of each ``key`` are
    marked slow: the default run keeps one per key, `pytest -m slow` runs the rest."""
    seen, names = set(), []
    for plant in sorted(plants, key=lambda plant: plant.name):
        slow = key(plant) in seen
        names.append(pytest.param(plant.name, marks=pytest.mark.slow) if slow else plant.name)
        seen.add(key(plant))
    return names


# By default one planted bug and one benign refactor per copied module (every
# target is fuzzed by default in tests/unit/test_targets.py); `-m slow` runs them all.
@pytest.mark.parametrize("name", _first_per(planted.BUGS, lambda plant: plant.module))
def test_planted_bug_is_reported(name):
    outcome = fuzz(BUGS[name].target(), max_examples=DETECTION_LIMIT)
    assert outcome.failures, f"{name} ({BUGS[name].why}) survived {outcome.examples} examples"
    assert outcome.first_failure_at is not None and outcome.first_failure_at <= DETECTION_LIMIT
    assert outcome.verdict in (Verdict.DIVERGENCE, Verdict.ERROR_MISMATCH)


@pytest.mark.parametrize("name", _first_per(planted.BENIGN, lambda plant: plant.module))
def test_benign_refactor_passes(name):
    outcome = fuzz(BENIGN[name].target(), max_examples=DETECTION_LIMIT)
    assert not outcome.failures, [f.mismatches for f in outcome.failures]
    assert outcome.examples == DETECTION_LIMIT


def test_shrunk_dropped_dtype_names_the_dtype():
    outcome = fuzz(BUGS["planted-indices-dropped-dtype"].target())
    (failure,) = outcome.failures
    assert failure.spec["dtype"] == "int32"
    assert [m.what for m in failure.mismatches] == ["dtype"]


def test_shrunk_swapped_hw_has_h_different_from_w():
    outcome = fuzz(BUGS["planted-glm4-swapped-hw"].target())
    failure = outcome.failures[0]
    assert any(h != w for _, h, w in failure.spec["image_shapes"])


STRESS_BUGS = {p.name: p for p in planted.STRESS_BUGS}


@pytest.mark.parametrize("name", sorted(STRESS_BUGS))
def test_aliasing_bug_needs_stress_mode(name):
    target = STRESS_BUGS[name].target()
    assert not fuzz(target, max_examples=100).failures  # invisible to a plain run
    stressed = fuzz(target, max_examples=DETECTION_LIMIT, stress=True)
    assert stressed.failures and stressed.verdict is Verdict.DIVERGENCE


@pytest.mark.parametrize("name", ["glm4v-embeddings", "glm4v-pos-embeds", "fla-chunk-indices", "fla-chunk-offsets"])
def test_real_copies_pass_under_stress(name):
    from fuzz.targets import catalog_targets
    TARGETS = catalog_targets()

    target = {t.name: t for t in TARGETS}[name]
    assert not fuzz(target, max_examples=100, stress=True).failures


def test_stress_poisoning_never_reaches_the_saved_spec():
    plant = {p.name: p for p in planted.BUGS}["planted-glm4-reused-staging-buffer"]
    outcome = fuzz(plant.target(), max_examples=DETECTION_LIMIT, stress=True)
    assert outcome.failures
    for failure in outcome.failures:
        assert "-7777" not in str(failure.spec)


def test_stress_poisons_every_integer_dtype_without_raising():
    """-7777 does not fit int8/uint8: the poisoning itself raised, read as "only optimized raised"."""
    import numpy as np
    import torch

    from fuzz.oracles.stress import poison

    inputs = [torch.full((2,), 5, dtype=torch.uint8), torch.full((2,), 5, dtype=torch.int8),
              torch.full((2,), 5, dtype=torch.int64), np.full(2, 5, np.uint8), np.full(2, 5, np.int32)]
    poison(inputs)
    assert [int(x[0]) for x in inputs] == [255, -128, -7777, 255, -7777]


@pytest.mark.parametrize("name", sorted(p.name for p in [*planted.RACE_BUGS, *planted.RACE_BENIGN,
                                                         *planted.POLICY_BUGS]))
def test_races_and_rejected_copies_need_a_gpu_to_show(name):
    """On CPU no copy is asynchronous and none reaches a GPU: a planted race or a copy vLLM's CI check rejects
    is silent there, with --race too (tests/gpu/test_races.py reports each on CUDA; the twins stay silent)."""
    plant = {p.name: p for p in [*planted.RACE_BUGS, *planted.RACE_BENIGN, *planted.POLICY_BUGS]}[name]
    outcome = fuzz(plant.target(), max_examples=60, race=True)
    assert outcome.examples >= 60 and not outcome.failures, outcome.failures
