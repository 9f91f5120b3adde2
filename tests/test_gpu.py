"""GPU-only: the sync oracle and the targets on CUDA (skipped without CUDA)."""

from __future__ import annotations

import pytest

import tests.planted as planted
from fuzz.catalog import TARGETS
from fuzz.compare import Verdict
from tests.conftest import requires_cuda
from tests.support import fuzz

pytestmark = requires_cuda
BY_NAME = {t.name: t for t in TARGETS}


def test_optimized_offsets_make_no_sync_while_legacy_does():
    outcome = fuzz(BY_NAME["fla-chunk-offsets"], devices=("cuda",), max_examples=30)
    tally = outcome.tallies["cuda"]
    assert not outcome.failures
    assert set(tally.optimized_syncs) == {0}
    assert min(tally.legacy_syncs) >= 1


def test_planted_sync_regression_is_reported_on_cuda():
    (plant,) = planted.SYNC_BUGS
    outcome = fuzz(plant.target(), devices=("cuda",), max_examples=50)
    assert outcome.verdict is Verdict.SYNC_REGRESSION
    assert "syncs per call" in outcome.failures[0].mismatches[0].detail


@pytest.mark.parametrize("name", sorted(p.name for p in planted.BUGS))
def test_planted_bug_is_reported_on_cuda(name):
    plant = {p.name: p for p in planted.BUGS}[name]
    outcome = fuzz(plant.target(), devices=("cuda",), max_examples=200)
    assert outcome.failures, f"{name} survived on cuda"


@pytest.mark.parametrize("name", sorted(t.name for t in TARGETS))
def test_every_target_agrees_on_cuda_under_the_caller_contract(name):
    outcome = fuzz(BY_NAME[name], devices=("cuda",), max_examples=100)
    assert not outcome.failures, [(f.verdict, f.spec, f.mismatches) for f in outcome.failures]
