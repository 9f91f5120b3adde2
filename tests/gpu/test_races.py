"""GPU-only: the race oracle and the copy policy on CUDA (skipped without CUDA; tests/unit/test_races.py holds
what needs no GPU). Each planted race is reported, each safe twin is silent, each class of race is seen by
the held run itself, and a copy vLLM's CI check would reject is flagged where the check would, and only there."""

from __future__ import annotations

import re

import pytest
import torch

import tests.planted as planted
from fuzz.oracles.copypolicy import judge_call
from fuzz.oracles.races import run_held
from fuzz.oracles.syncs import counting_syncs
from fuzz.records.verdicts import Verdict
from tests.conftest import requires_cuda
from tests.support import fuzz

pytestmark = requires_cuda

_BY_NAME = {p.name: p for p in [*planted.RACE_BUGS, *planted.RACE_BENIGN, *planted.POLICY_BUGS]}


@pytest.mark.parametrize("name", sorted(p.name for p in planted.RACE_BUGS))
def test_a_planted_race_is_reported_on_cuda_and_silent_on_cpu(name):
    plant = _BY_NAME[name]
    outcome = fuzz(plant.target(), devices=("cuda",), max_examples=60, race=True)
    verdicts = {f.verdict for f in outcome.failures}
    assert Verdict.RACE in verdicts, (name, [(f.verdict, f.mismatches) for f in outcome.failures])
    race = next(f for f in outcome.failures if f.verdict is Verdict.RACE)
    # The copy's site is named, with its direction: "H2D at" for a caller buffer rewritten under a pending
    # H2D copy, "D2H at" for a pinned D2H result read before its event (strategies/outputs/planted.py).
    assert re.search(r"\b(H2D|D2H) at ", race.mismatches[0].detail), race.mismatches[0].detail
    assert not fuzz(plant.target(), devices=("cpu",), max_examples=60, race=True).failures


@pytest.mark.parametrize("name", sorted(p.name for p in planted.RACE_BENIGN))
def test_a_safe_twin_is_silent_under_the_race_oracle(name):
    plant = _BY_NAME[name]
    outcome = fuzz(plant.target(), devices=("cuda", "cpu"), max_examples=60, race=True)
    assert not outcome.failures, [(f.verdict, f.mismatches) for f in outcome.failures]


@pytest.mark.parametrize("name", sorted(p.name for p in planted.POLICY_BUGS))
def test_a_copy_vllms_ci_rejects_is_a_copy_policy_failure_on_cuda_only(name):
    plant = _BY_NAME[name]
    outcome = fuzz(plant.target(), devices=("cuda",), max_examples=60)
    assert {f.verdict for f in outcome.failures} == {Verdict.COPY_POLICY}, outcome.failures
    assert "vLLM's CI copy check rejects" in outcome.failures[0].mismatches[0].detail
    assert not fuzz(plant.target(), devices=("cpu",), max_examples=60).failures


# ---- each class of race, seen by a held run of a hand-written function (no target needed)

def _copy_of_caller_rows(rows: torch.Tensor) -> torch.Tensor:
    return rows.to("cuda", non_blocking=True)  # straight from the caller's pinned rows


def test_a_caller_buffer_rewritten_after_the_call_is_seen_and_a_snapshot_is_not():
    def make(snapshot: bool):  # noqa: ANN202
        def build():  # noqa: ANN202
            rows = torch.arange(1 << 16, dtype=torch.int64).pin_memory()
            call = (lambda: rows.clone().pin_memory().to("cuda", non_blocking=True)) if snapshot \
                else (lambda: _copy_of_caller_rows(rows))
            return call
        return build

    racy, safe = run_held(make(False)), run_held(make(True))
    assert racy.conclusive and racy.poisoned == 1
    assert not torch.equal(racy.value.cpu(), torch.arange(1 << 16))
    assert safe.conclusive and safe.poisoned == 0 and torch.equal(safe.value.cpu(), torch.arange(1 << 16))


_SCRATCH: dict[str, torch.Tensor] = {}


def test_a_staging_buffer_the_next_call_rewrites_is_seen_and_a_fresh_one_is_not():
    def stage(values: list[int], reuse: bool) -> torch.Tensor:
        n = len(values)
        if reuse:
            buffer = _SCRATCH.setdefault("b", torch.empty(1 << 16, dtype=torch.int64).pin_memory())[:n]
            buffer.copy_(torch.tensor(values))
        else:
            buffer = torch.tensor(values, dtype=torch.int64).pin_memory()
        return buffer.to("cuda", non_blocking=True)

    def make(reuse: bool):  # noqa: ANN202
        def build():  # noqa: ANN202
            values = list(range(1000))
            return lambda: stage(values, reuse)
        return build

    racy, safe = run_held(make(True)), run_held(make(False))
    assert not torch.equal(racy.value.cpu(), torch.arange(1000))
    assert torch.equal(safe.value.cpu(), torch.arange(1000))


def test_a_copied_to_host_result_read_before_its_event_is_seen_and_after_it_is_not():
    def read(device_values: torch.Tensor, wait: bool) -> list[int]:
        host = device_values.to("cpu", non_blocking=True)
        if wait:
            event = torch.cuda.Event()
            event.record()
            event.synchronize()
        return host.tolist()  # pinned host memory: tolist() does not wait for the copy (vLLM #36013)

    def make(wait: bool):  # noqa: ANN202
        def build():  # noqa: ANN202
            values = torch.arange(4096, device="cuda")
            return lambda: read(values, wait)
        return build

    early, waited = run_held(make(False)), run_held(make(True))
    assert early.conclusive and early.value != list(range(4096))
    assert waited.value == list(range(4096))
    assert "D2H at" in early.sites[0]


def test_the_policy_flags_what_vllms_check_flags_on_the_same_copies():
    pageable, pinned = torch.arange(8), torch.arange(8).pin_memory()
    gapped = torch.arange(16).pin_memory()[::2]
    device = torch.zeros(8, dtype=torch.int64, device="cuda")
    calls = {
        "pinned H2D": ("to", (pinned, "cuda"), {"non_blocking": True}, False),
        "pageable H2D": ("to", (pageable, "cuda"), {"non_blocking": True}, True),
        "gapped pinned H2D": ("copy_", (device, gapped, True), {}, True),
        "blocking pageable": ("to", (pageable, "cuda"), {}, False),
        "pageable D2H copy_": ("copy_", (torch.empty(8, dtype=torch.int64), device, True), {}, True),
        "D2H .to (allocates pinned)": ("to", (device, "cpu"), {"non_blocking": True}, False),
    }
    for name, (method, args, kwargs, flagged) in calls.items():
        assert (judge_call(method, args, kwargs) is not None) is flagged, name
    with counting_syncs(True) as tally:
        pageable.to("cuda", non_blocking=True)
        pinned.to("cuda", non_blocking=True)
        device.copy_(gapped, non_blocking=True)
    torch.cuda.synchronize()
    assert len(tally.policy) == 2 and all("test_races.py:" in line for line in tally.policy), tally.policy
