"""The race oracle's and the copy policy's parts that need no GPU: memory ranges, what a caller owns, the copy
watch, the verdicts' precedence and the policy's rule per target (tests/gpu/test_races.py runs them on CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fuzz.config import RunConfig
from fuzz.oracles.copywatch import CopyCall, CopyWatch
from fuzz.oracles.outcome import SideResult
from fuzz.oracles.races import byte_range, caller_inputs, caller_memory, overlaps
from fuzz.oracles.syncrule import copy_policy_budget, function_copy_policy
from fuzz.records.verdicts import Mismatch, Verdict, decide_example
from fuzz.targets import Target, lookup
from tests.support import fuzz


def test_byte_range_spans_exactly_the_bytes_a_view_reads():
    base = torch.arange(20, dtype=torch.int32)
    start = base.data_ptr()
    assert byte_range(base) == (start, start + 80)
    assert byte_range(base[4:8]) == (start + 16, start + 32)
    assert byte_range(base[::5]) == (start, start + 64)  # elements 0, 5, 10, 15
    assert byte_range(base.view(4, 5).t()) == (start, start + 80)
    assert byte_range(base[:0]) is None and byte_range([1, 2]) is None
    array = np.arange(10, dtype=np.int64)
    low = array.ctypes.data
    assert byte_range(array[2:5]) == (low + 16, low + 40)
    assert byte_range(array[::-1]) == (low, low + 80)


def test_overlap_is_half_open():
    assert overlaps((0, 10), (9, 20)) and not overlaps((0, 10), (10, 20)) and overlaps((5, 6), (0, 100))


class _Buffer:  # a CpuGpuBuffer's shape: pinned rows, a numpy view of them, a device tensor
    def __init__(self) -> None:
        self.cpu = torch.arange(6)
        self.np = self.cpu.numpy()
        self.gpu = torch.zeros(6).to("meta")


def test_caller_memory_is_the_closure_and_what_caller_owned_names_never_a_list():
    data, buffer, values = torch.arange(3), _Buffer(), [1, 2, 3]

    def call():  # noqa: ANN202
        return data, buffer, values

    assert [id(x) for x in caller_memory(call)] == [id(data)]  # buffer is an object: not walked unasked
    call.caller_owned = (buffer,)  # type: ignore[attr-defined]
    found = {id(x) for x in caller_memory(call)}
    assert found == {id(data), id(buffer.cpu), id(buffer.np)}
    assert any(x is values for x in caller_inputs(call))  # the next call's lists are poisoned too


def test_the_watch_shows_each_copy_once_with_its_direction_and_restores_the_methods():
    seen: list[CopyCall] = []

    class Spy:
        def before(self, call: CopyCall) -> None:
            seen.append(call)

        def copied(self, call: CopyCall) -> None:
            seen.append(call)
            call.destination.to(torch.float64)  # an observer's own copy is not shown

    before = {name: torch.Tensor.__dict__.get(name) for name in ("to", "cuda", "copy_")}
    with CopyWatch([Spy()]):
        out = torch.arange(3).to(torch.float32, non_blocking=True)
        torch.empty(3).copy_(out)
    assert [(c.method, c.result is None) for c in seen] == [("to", True), ("to", False), ("copy_", True),
                                                           ("copy_", False)]
    assert seen[1].non_blocking and not seen[3].non_blocking
    assert [c.direction() for c in seen] == [None] * 4  # host to host
    assert {name: torch.Tensor.__dict__.get(name) for name in ("to", "cuda", "copy_")} == before


def _decide(**found: list[Mismatch]) -> Verdict:
    nothing: list[Mismatch] = []
    agree = (Verdict.AGREE, nothing)
    return decide_example(agree, True, sync=lambda: found.get("sync", nothing),
                          invariants=lambda: found.get("invariants", nothing),
                          reference=lambda: found.get("reference", nothing), consumer=lambda: nothing,
                          race=lambda: found.get("race", nothing),
                          policy=lambda: found.get("policy", nothing)).verdict


@pytest.mark.parametrize(("found", "verdict"), [
    ({"policy"}, Verdict.COPY_POLICY),
    ({"sync", "policy"}, Verdict.SYNC_REGRESSION),
    ({"race", "policy", "sync"}, Verdict.RACE),
    ({"race", "reference"}, Verdict.REFERENCE_DIVERGENCE),
    ({"race", "invariants"}, Verdict.INVARIANT_VIOLATION),
])
def test_race_and_policy_take_their_place_in_the_precedence(found, verdict):
    assert _decide(**{name: [Mismatch("", name, name)] for name in found}) is verdict


def _target(versions: tuple[str, str], budget: int | None = None) -> Target:
    return Target("t", (), "m:f", "m:g", "m:I", versions=versions, copy_policy_budget=budget)


def test_the_policy_budget_is_zero_where_the_release_ran_the_check():
    assert copy_policy_budget(_target(("0.29.0", "0.30.0"))) == 0
    assert copy_policy_budget(_target(("0.33.0", "0.34.0"))) == 0
    assert copy_policy_budget(_target(("0.27.1", "0.28.0"))) is None  # written before vLLM checked
    assert copy_policy_budget(_target(("0.27.1", "0.28.0"), budget=2)) == 2


def _sides(legacy: int, optimized: int) -> tuple[SideResult, SideResult]:
    line = "Tensor.to: non_blocking H2D copy from pageable host memory at x.py:1"
    return SideResult(value=0, policy=[line] * legacy), SideResult(value=0, policy=[line] * optimized)


@pytest.mark.parametrize(("versions", "legacy", "optimized", "contract", "flagged"), [
    (("0.29.0", "0.30.0"), 0, 1, "caller", True),  # budget 0
    (("0.29.0", "0.30.0"), 2, 1, "caller", True),  # budget 0, whatever legacy made
    (("0.29.0", "0.30.0"), 2, 1, "wide", False),  # wide: as many as legacy
    (("0.27.1", "0.28.0"), 0, 1, "caller", True),  # no budget: relative
    (("0.27.1", "0.28.0"), 1, 1, "caller", False),
    (("0.27.1", "0.28.0"), 2, 1, "caller", False),  # fewer than legacy is never a failure
])
def test_the_policy_is_judged_as_syncs_are(versions, legacy, optimized, contract, flagged):
    sides = _sides(legacy, optimized)
    found = function_copy_policy(_target(versions), {"device": "cuda"}, *sides, RunConfig(contract=contract))
    assert bool(found) is flagged
    if found:
        assert "vLLM's CI copy check rejects" in found[0].detail and "x.py:1" in found[0].detail


def test_on_cpu_there_is_no_policy_to_judge():
    found = function_copy_policy(_target(("0.29.0", "0.30.0")), {"device": "cpu"}, SideResult(value=0),
                                 SideResult(value=0), RunConfig())
    assert found == []


def test_the_engine_wait_hook_re_holds_only_inside_a_held_run():
    from fuzz.api import engine_waited
    from fuzz.interface import holding_steps

    calls: list[int] = []
    engine_waited()  # outside a held run: nothing to do, nothing raised
    with holding_steps(lambda: calls.append(1)):
        engine_waited()
        engine_waited()
    engine_waited()
    assert calls == [1, 1]


class _FakeHold:
    """The held run without a GPU: "meta" tensors stand for the device; the sleep runs until ``lose_after``
    copies were made (a sync inside the call, say), so the poisoning's soundness check can be driven."""

    gpu = "meta"

    def __init__(self, cycles: int, lose_after: int | None = None) -> None:
        self.cycles, self.lose_after, self.copies, self.sleeps = cycles, lose_after, 0, 0

    def sleep(self) -> None:
        self.sleeps += 1

    def holding(self) -> bool:
        return self.lose_after is None or self.copies < self.lose_after

    def on_held_stream(self) -> bool:
        return True

    def rearm(self) -> None:
        self.copies += 1  # rearm is asked before each non_blocking copy

    def entered(self):  # noqa: ANN201
        from contextlib import nullcontext

        return nullcontext()

    def finish(self) -> None:
        pass


def _pinned_everything(monkeypatch) -> None:  # noqa: ANN001
    """A CPU-only torch cannot pin: count every host tensor as pinned for the recorder."""
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *a: self.device.type == "cpu")


def test_the_held_run_poisons_only_caller_memory_a_pending_copy_reads(monkeypatch):
    from fuzz.oracles.races import run_held

    _pinned_everything(monkeypatch)
    made: list[dict] = []

    def make():  # noqa: ANN202
        rows, untouched = torch.arange(8), torch.arange(8)
        made.append({"rows": rows, "untouched": untouched})

        def call():  # noqa: ANN202
            untouched.sum()
            return rows[2:6].to("meta", non_blocking=True)

        return call

    run = run_held(make, hold_type=_FakeHold)
    assert run.conclusive and run.poisoned == 1 and run.sites == [f"H2D at unit/test_races.py:{_line_of('rows[2:6]')}"]
    first, following = made
    assert first["rows"][2:6].tolist() == [-7777] * 4 and first["untouched"].tolist() == list(range(8))
    assert following["rows"].tolist() == [-7777] * 8  # the next call ran on poisoned inputs


def test_a_poisoning_after_the_hold_was_lost_makes_the_run_inconclusive_not_a_race(monkeypatch):
    from fuzz.oracles.races import run_held

    _pinned_everything(monkeypatch)
    holds: list[_FakeHold] = []

    def recording(cycles: int) -> _FakeHold:
        holds.append(_FakeHold(cycles))
        return holds[-1]

    def make():  # noqa: ANN202
        rows = torch.arange(4)

        def call():  # noqa: ANN202
            out = rows.to("meta", non_blocking=True)  # held when enqueued...
            holds[-1].lose_after = 0  # ...then the sleep ran out (a host slower than it): the copy may have run
            return out

        return call

    run = run_held(make, hold_type=recording)
    assert not run.conclusive and run.poisoned == 1  # poisoned, but not provably before the copy: no verdict
    assert len(holds) == 2 and holds[1].cycles == 10 * holds[0].cycles  # repeated once with a longer sleep


def test_a_fresh_snapshot_is_not_caller_memory(monkeypatch):
    from fuzz.oracles.races import run_held

    _pinned_everything(monkeypatch)

    def make():  # noqa: ANN202
        rows = torch.arange(4)
        return lambda: rows.clone().to("meta", non_blocking=True)

    run = run_held(make, hold_type=_FakeHold)
    assert run.conclusive and run.poisoned == 0


def _line_of(text: str) -> int:
    from pathlib import Path

    return next(n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line
                and "return" in line)


def test_inputs_no_caller_rewrites_are_never_poisoned():
    """An input model that declares ``caller_never_rewrites`` (the multimodal cache's items) hands neither
    --stress nor the race oracle anything to poison: poisoning memory no caller writes reports a race no caller
    can have (before the declaration, `fuzz run --stress` flagged mm-flat-field-reduce-data on CPU)."""
    item = torch.arange(4.0)

    def call() -> torch.Tensor:
        return item[:2]  # aliases the item, as 0.30.0's zero-copy reduce_data does

    assert caller_inputs(call) == [item]
    call.caller_never_rewrites = True  # type: ignore[attr-defined]
    assert caller_inputs(call) == [] and caller_memory(call) == []


def test_stress_leaves_the_multimodal_cache_items_alone_on_cpu():
    for name in ("mm-batched-field-reduce-data", "mm-flat-field-reduce-data"):
        assert not fuzz(lookup([name])[0], devices=("cpu",), max_examples=60, stress=True).failures, name
