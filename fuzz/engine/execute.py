"""Run one example: both sides on fresh inputs, then judge.

Each side gets its own freshly materialized inputs (a side that mutates its
arguments cannot leak into the other) and its own sync tally. Materializing is
outside the tally: only the upstream call is counted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fuzz.config import RunConfig
from fuzz.engine.stagetimes import stage
from fuzz.errors import FuzzError, HarnessError
from fuzz.oracles import check_invariants, check_reference, consumer_of
from fuzz.oracles.compare import differential, same_exactly
from fuzz.oracles.outcome import Raised, SideResult
from fuzz.oracles.races import RacedRun, run_held
from fuzz.oracles.stress import call_under_stress
from fuzz.oracles.syncrule import function_copy_policy, function_syncs
from fuzz.oracles.syncs import consumer_reads, counting_syncs
from fuzz.reach.collect import measuring
from fuzz.records.model import failure_signature
from fuzz.records.verdicts import ExampleDecision, Mismatch, Verdict, decide_example
from fuzz.targets import FORM_ATTRIBUTE, Target

DEFAULT_CONFIG = RunConfig()


@dataclass
class ExampleResult:
    spec: dict
    verdict: Verdict
    mismatches: list[Mismatch]
    legacy: SideResult
    optimized: SideResult
    # Every oracle that flagged this example, the verdict's first ("differential",
    # "sync", "consumer-sync", "invariant NAME", "reference", "upstream").
    oracles: tuple[str, ...] = ()

    @property
    def device(self) -> str:
        return self.spec["device"]

    @property
    def signature(self) -> str:
        """The same-bug rule of the report model (fuzz.records.model.failure_signature)."""
        return failure_signature(self.verdict.value, [m.as_json() for m in self.mismatches], {
            "legacy": self.legacy.raised.type_name if self.legacy.raised else None,
            "optimized": self.optimized.raised.type_name if self.optimized.raised else None})


class CudaContextLost(FuzzError):
    """A CUDA error (e.g. a device-side assert) left this process's CUDA
    context unusable: every later CUDA call fails, so the process must be
    replaced. Carries the side and the error's first line."""

    def __init__(self, side: str, message: str) -> None:
        super().__init__(f"{side} side: {message}")
        self.side = side
        self.message = message


def _is_fatal_cuda_error(exc: BaseException) -> bool:
    text = str(exc)
    accelerator_error = getattr(torch, "AcceleratorError", ())
    return ((accelerator_error and isinstance(exc, accelerator_error))
            or "CUDA error" in text or "device-side assert" in text)


def fatal_cuda_error(exc: BaseException) -> BaseException | None:
    """The fatal CUDA error in ``exc`` or the exceptions it was raised from (a harness error wrapping one,
    say), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if _is_fatal_cuda_error(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _raise_if_context_lost(side: str, exc: BaseException | None) -> None:
    """Sync once and turn a fatal CUDA error (now, or reported late by the
    sync: kernels fail asynchronously) into CudaContextLost."""
    if exc is not None and _is_fatal_cuda_error(exc):
        raise CudaContextLost(side, Raised.of(exc).message) from exc
    try:
        torch.cuda.synchronize()
    except Exception as late:  # noqa: BLE001 -- any error here is the context's
        raise CudaContextLost(side, Raised.of(late).message) from late


def _input_form(impl: Any, side: str) -> str:
    """A side rebuilt from a source takes its inputs in the form of the copy it was
    rebuilt from (fuzz/releases/sides.py): --optimized vllm==0.27.1 gets legacy's inputs."""
    return getattr(impl.module, FORM_ATTRIBUTE, side) if side in ("legacy", "optimized") else side


def run_side(target: Target, side: str, spec: dict, stress: bool = False) -> SideResult:
    impl = target.impl(side)
    # Each side gets its own copy of the spec: nothing a side (or --stress'
    # poisoning of host inputs) does may reach the spec that is saved and replayed.
    spec = copy.deepcopy(spec)
    form = _input_form(impl, side)
    on_cuda = spec["device"].startswith("cuda")
    result = SideResult()
    error: Exception | None = None
    consumer = consumer_of(target)
    # --coverage (fuzz/reach/collect.py) traces building the inputs too: an input model may call the side's own
    # upstream code there (keep-on-cpu's field configs decide where each field lives). Not the consumer's
    # reads after the call: those are the harness'.
    with measuring(spec["device"], side) as traced:
        with stage("materialize"):
            try:
                thunk = target.input_model().materialize(spec, impl, form)
            except Exception as exc:  # a strategy bug, not a verdict
                fatal = fatal_cuda_error(exc)
                if fatal is not None:
                    # The process' CUDA context is gone, whoever ended it: under MPS another client's illegal
                    # address surfaces in the next CUDA call, often here (H200, docs/gpu-sharing.md#faults).
                    raise CudaContextLost(side, Raised.of(fatal).message) from exc
                raise HarnessError(f"{target.name}: cannot build inputs for {side} from {spec!r}: {exc!r}") from exc
        # No synchronize before the call: both detectors count synchronizing
        # *calls*, not waiting, so queued work from building the inputs cannot
        # inflate the tally (the one after the call is for late CUDA errors).
        # Under --stress the harness itself syncs (the side stream), so the sync
        # oracle is off for that side: stress runs judge values only.
        # The "calls" stage (fuzz/engine/stagetimes.py, bench part s) ends outside the tally, so its sync is not
        # counted; the consumer's reads are a stage of their own, unsynced inside the tally.
        with stage("calls"), counting_syncs(on_cuda and not stress, target.allow_region()) as tally:
            try:
                result.value = call_under_stress(thunk, on_cuda) if stress else thunk()
            except Exception as exc:  # noqa: BLE001 -- exceptions are outputs: recorded and compared
                result.raised, error = Raised.of(exc), exc
            traced.stop()
            if consumer is not None and error is None:
                with stage("consumer", sync=False), consumer_reads():
                    try:
                        consumer(spec, result.value)
                    except Exception:  # noqa: BLE001 -- a consumer cannot read a broken output; the
                        pass  # other oracles judge the output itself, this one only counts syncs
    if on_cuda:
        _raise_if_context_lost(side, error)
    if tally is not None:
        result.syncs, result.allowed_syncs, result.hidden_syncs = tally.total, tally.allowed, tally.hidden
        result.policy = tally.policy
        if consumer is not None:
            result.consumer_syncs = tally.consumer
    return result


def run_example(target: Target, spec: dict, config: RunConfig = DEFAULT_CONFIG,
                sync_rule: str | None = None) -> ExampleResult:
    """Both sides on fresh inputs, as ``config`` says: under ``stress`` the
    optimized side runs behind a sleeping stream with its host inputs poisoned
    on return; under ``upstream`` (and a target that kept its ``upstream_impl``,
    see fuzz.engine.upstream.with_upstream) the real vllm function runs too and must
    match our optimized copy. ``sync_rule``: the rule fuzz.engine.prepare decided for the target (None:
    decided here, fuzz.oracles.syncrule.sync_rule)."""
    legacy = run_side(target, "legacy", spec)
    optimized = run_side(target, "optimized", spec, stress=config.stress)

    def real_vllm() -> list[Mismatch]:
        """The real vllm function against our optimized copy (asked only when nothing else failed)."""
        real = run_side(target, "upstream", spec)
        third, differences = differential(optimized, real, target.comparison, labels=("copy", "vllm"))
        return [Mismatch(m.path, m.what, "optimized copy vs real vllm: " + m.detail, m.parts)
                for m in differences] if third.failed else []

    decision = judge_example(target, spec, legacy, optimized, config,
                             real_vllm if config.upstream and target.upstream_impl else None, sync_rule,
                             race=config.race and spec["device"].startswith("cuda"))
    return ExampleResult(spec, decision.verdict, decision.mismatches, legacy, optimized, decision.oracles)


def judge_example(target: Target, spec: dict, legacy: SideResult, optimized: SideResult,
                  config: RunConfig = DEFAULT_CONFIG,
                  upstream: Callable[[], list[Mismatch]] | None = None,
                  sync_rule: str | None = None, race: bool = False) -> ExampleDecision:
    """The example's verdict from its two sides' results: each oracle asked as fuzz.records.verdicts.decide_example
    says (the one place the precedence is written), with the target's comparison, its sync rule under
    ``config`` (fuzz/oracles/syncrule.py), and its invariants, reference and consumer (fuzz/oracles/)."""
    # Outputs equal under the strictest comparison pass the target's own and give every
    # oracle the same answer, so the oracles are asked once. Most examples' outputs are:
    # one exact pass then costs less than assert_close, and less than the oracles twice.
    with stage("compare"):
        identical = legacy.ok and optimized.ok and same_exactly(legacy.value, optimized.value)
        compared = differential(legacy, optimized, target.comparison, known_equal=identical)
    return decide_example(
        compared, legacy.ok and optimized.ok,
        sync=_staged("compare", lambda: function_syncs(target, spec, legacy, optimized, config, sync_rule)),
        # A count, not a stage of its own.
        policy=lambda: function_copy_policy(target, spec, legacy, optimized, config, sync_rule),
        race=_staged("race", lambda: race_finding(target, spec, legacy, optimized)) if race else list,
        invariants=_staged("oracles", lambda: check_invariants(target, spec, legacy, optimized, identical)),
        reference=_staged("oracles", lambda: check_reference(target, spec, legacy, optimized, identical)),
        consumer=_staged("oracles", lambda: _consumer_regression(legacy, optimized)),
        upstream=upstream)


def _staged(name: str, finding: Callable[[], list[Mismatch]]) -> Callable[[], list[Mismatch]]:
    """``finding``, timed as stage ``name`` when bench part s records (fuzz/engine/stagetimes.py)."""
    def timed() -> list[Mismatch]:
        with stage(name):
            return finding()
    return timed


def _consumer_regression(legacy: SideResult, optimized: SideResult) -> list[Mismatch]:
    """More consumer syncs on the optimized side than on legacy: its output costs
    the real consumer syncs the legacy output did not."""
    if legacy.consumer_syncs is None or optimized.consumer_syncs is None \
            or optimized.consumer_syncs <= legacy.consumer_syncs:
        return []
    return [Mismatch("consumer", "syncs", (
        f"the consumer's reads of the optimized output made {optimized.consumer_syncs} GPU<->CPU syncs, "
        f"of the legacy output {legacy.consumer_syncs}"))]


def _held_side(target: Target, side: str, spec: dict) -> RacedRun:
    """``side`` run held (fuzz/oracles/races.py) on fresh inputs built from a copy of ``spec``."""
    impl = target.impl(side)
    form = _input_form(impl, side)
    model = target.input_model()
    with stage("materialize"):
        return run_held(lambda: model.materialize(copy.deepcopy(spec), impl, form))


def _raced(target: Target, quiet: SideResult, spec: dict, side: str) -> tuple[list[Mismatch], RacedRun]:
    """What changed in ``side``'s output when run held, against its quiet output; [] when nothing or when
    the held run could not be shown sound (inconclusive)."""
    held = _held_side(target, side, spec)
    if not held.conclusive:
        return [], held
    raised = Raised.of(held.raised) if held.raised is not None else None
    _, changes = differential(quiet, SideResult(value=held.value, raised=raised), target.comparison,
                              labels=("quiet", "held"))
    return changes, held


def race_finding(target: Target, spec: dict, legacy: SideResult, optimized: SideResult) -> list[Mismatch]:
    """The race oracle (``--race``, CUDA) on one example whose sides agree and both returned: the optimized
    output changes when its call is held and the host does what a caller may do next, and legacy's does not
    (fuzz/oracles/races.py). The mismatch names what changed and the copies' sites."""
    changes, held = _raced(target, optimized, spec, "optimized")
    if not changes:
        return []
    shared, _ = _raced(target, legacy, spec, "legacy")
    if shared:
        return []  # legacy races the same way: not the change's (relative, as syncs from sources are)
    first = changes[0]
    copies = "; ".join(held.sites[:6]) or "none seen (a copy from C++ or another thread?)"
    return [Mismatch.at(first.parts, "race", (
        f"held behind a sleeping stream, the optimized output changed ({first.what}: {first.detail}) once the "
        f"host rewrote {held.poisoned} caller buffer(s) a pending copy read, ran the next call and poisoned "
        f"copied-to-host results before their copies ran; legacy's did not. Copies: {copies}"))]
