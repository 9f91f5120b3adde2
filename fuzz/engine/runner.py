"""Drive Hypothesis over each target: draw, run both sides, judge, shrink, save.

One Hypothesis test per (target, run). A failing verdict raises a
verdict-specific exception, so Hypothesis shrinks towards the smallest input
with *that* verdict; the shrunk example is saved as a repro file. Hypothesis'
example database lives in the corpus, so a known failure is replayed first on
the next run. Under ``--budget`` a target runs in chunks of examples with
seeds derived from the run seed until its share of the time is spent; past the
share, remaining calls return at once so Hypothesis winds down quickly.

This module fuzzes one target in this process and freezes what it saw into a
``fuzz.records.model.TargetEntry``; which target runs next, where and for how long is
``fuzz.run.orchestrate``'s (and ``fuzz.run.isolation``'s, ``fuzz.run.workers``').
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky

from fuzz.config import NO_HOOKS, Hooks, RunConfig
from fuzz.engine.devices import devices_for, on_devices
from fuzz.engine.execute import CudaContextLost, ExampleResult, fatal_cuda_error, run_example
from fuzz.engine.journals import start_database
from fuzz.engine.prepare import prepare
from fuzz.engine.repro import repro_payload, save_repro
from fuzz.errors import HarnessError
from fuzz.oracles.outcome import Raised, SideResult
from fuzz.reach.collect import Measure, measure_for, static_same_code
from fuzz.records.model import DeviceTally, Failure, TargetEntry
from fuzz.records.verdicts import Mismatch, Verdict, worst
from fuzz.releases import CannotBuild, Retired
from fuzz.targets import Target

try:  # The engine call that runs each test case; its runner knows the phase (not public API, see below).
    from hypothesis.internal.conjecture.engine import ConjectureRunner

    _ENGINE_CALL = ConjectureRunner.test_function.__code__
except (ImportError, AttributeError):  # another Hypothesis: is_shrink_step falls back
    _ENGINE_CALL = None
SHRINK_PHASES = ("shrink", "explain")  # explain runs nested in shrink, on the shrunk failure

BUDGET_CHUNK = 100  # examples per Hypothesis call under --budget
SPECS_PER_CASE = 8
"""At most this many specs per Hypothesis test case (a list of 1..8, 4.5 on average).
Each spec is one counted, judged, replayable example per device it runs on (fuzz.engine.devices.on_devices);
a failure raises for its own spec, so the shrinker deletes the others and shrinks that one. Measured
(bench part s, CPU, 22 targets): Hypothesis' own cost per spec is 0.23-0.66x of
one spec per case (median ~0.5) -- it was 33-76% of an example's time."""
MIN_SPECS_PER_CASE = 1
"""Not more: with 8 (cases of 8..24 specs, 13 on average) Hypothesis' first case is eight
copies of the simplest spec and shrinking runs every padding spec, so on ten planted
bugs (CPU, seed 0) the first failure came 2-17x later and the runs took 4.8x longer."""
MEAN_SPECS_PER_CASE = 4  # a chunk of N examples on D devices asks Hypothesis for N / (4 D) cases (rounded up)
PROGRESS_EVERY = 1.0  # seconds between progress updates of a running target


class VerdictFound(Exception):
    """Raised inside the Hypothesis test for a failing verdict."""

    def __init__(self, result: ExampleResult) -> None:
        super().__init__(f"{result.verdict.value}: {[m.as_json() for m in result.mismatches]}")
        self.result = result


# One class per verdict: Hypothesis keeps shrinking within the same failure.
class DivergenceFound(VerdictFound): ...
class ErrorMismatchFound(VerdictFound): ...
class SyncRegressionFound(VerdictFound): ...
class InvariantViolationFound(VerdictFound): ...
class ReferenceDivergenceFound(VerdictFound): ...
class RaceFound(VerdictFound): ...
class CopyPolicyFound(VerdictFound): ...


_RAISE_FOR = {
    Verdict.DIVERGENCE: DivergenceFound,
    Verdict.ERROR_MISMATCH: ErrorMismatchFound,
    Verdict.SYNC_REGRESSION: SyncRegressionFound,
    Verdict.UPSTREAM_DIVERGENCE: DivergenceFound,
    Verdict.INVARIANT_VIOLATION: InvariantViolationFound,
    Verdict.REFERENCE_DIVERGENCE: ReferenceDivergenceFound,
    Verdict.RACE: RaceFound,
    Verdict.COPY_POLICY: CopyPolicyFound,
}
_BY_SIGNATURE: dict[str, type[VerdictFound]] = {}


def failure_type(result: ExampleResult) -> type[VerdictFound]:
    """One exception class per failure signature.

    Hypothesis tells bugs apart by exception type and origin; a class per
    signature makes it shrink each distinct failure on its own and report
    them all (``report_multiple_bugs``) instead of the first one only.
    """
    cls = _BY_SIGNATURE.get(result.signature)
    if cls is None:
        base = _RAISE_FOR[result.verdict]
        cls = type(f"{base.__name__}_{len(_BY_SIGNATURE)}", (base,), {"__module__": __name__})
        _BY_SIGNATURE[result.signature] = cls
    return cls


def _engine_phase() -> str | None:
    """The phase of the Hypothesis engine running the current test case ("reuse", "generate", "target",
    "shrink", "explain"), None outside the engine or where it cannot be read."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _ENGINE_CALL:
            phase = getattr(frame.f_locals.get("self"), "_current_phase", None)
            return phase if isinstance(phase, str) else None
        frame = frame.f_back
    return None


def is_shrink_step(failed_here: bool) -> bool:
    """Whether the test case now starting is Hypothesis shrinking a failure, not drawing an example. Only once
    a failure was found in this Hypothesis call (``failed_here``): then a case of the engine's shrink (or
    explain) phase is one, and so is a case outside the engine (its final replay of the smallest failing
    input); one of the generate phase (Hypothesis searches on a little for other failures) is an example.
    Where the phase cannot be read (another Hypothesis), every case after the failure counts as a shrink step."""
    if not failed_here:
        return False
    phase = _engine_phase()
    return phase is None or phase in SHRINK_PHASES


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@dataclass
class TallyCounter:
    """One device's running tally while a target is fuzzed (model.DeviceTally once done)."""

    examples: int = 0
    verdicts: Counter = field(default_factory=Counter)
    both_raised: int = 0
    legacy_syncs: Counter = field(default_factory=Counter)
    optimized_syncs: Counter = field(default_factory=Counter)
    legacy_hidden: Counter = field(default_factory=Counter)  # of which: pageable non-blocking H2D
    optimized_hidden: Counter = field(default_factory=Counter)
    legacy_consumer: Counter = field(default_factory=Counter)  # the consumer stand-in's reads (fuzz/oracles/)
    optimized_consumer: Counter = field(default_factory=Counter)
    # CUDA, both sides returned: optimized made fewer / the same / more syncs than legacy on the input.
    sync_pairs: Counter = field(default_factory=Counter)
    shrink_steps: int = 0  # runs to shrink a failure: counted apart, in nothing above (DeviceTally.shrink_steps)

    def add(self, result: ExampleResult) -> None:
        self.examples += 1
        self.verdicts[result.verdict.value] += 1
        if result.legacy.raised and result.optimized.raised:
            self.both_raised += 1
        # Sync counts are only meaningful for calls that returned.
        if result.legacy.syncs is not None and result.legacy.ok:
            self.legacy_syncs[result.legacy.syncs] += 1
            self.legacy_hidden[result.legacy.hidden_syncs or 0] += 1
            if result.legacy.consumer_syncs is not None:
                self.legacy_consumer[result.legacy.consumer_syncs] += 1
        if result.optimized.syncs is not None and result.optimized.ok:
            self.optimized_syncs[result.optimized.syncs] += 1
            self.optimized_hidden[result.optimized.hidden_syncs or 0] += 1
            if result.optimized.consumer_syncs is not None:
                self.optimized_consumer[result.optimized.consumer_syncs] += 1
        legacy, optimized = result.legacy, result.optimized
        if legacy.ok and optimized.ok and legacy.syncs is not None and optimized.syncs is not None:
            pair = "fewer" if optimized.syncs < legacy.syncs else "more" if optimized.syncs > legacy.syncs else "same"
            self.sync_pairs[pair] += 1

    def frozen(self) -> DeviceTally:
        def histogram(counter: Counter) -> dict[str, int]:
            return {str(k): v for k, v in sorted(counter.items())}

        return DeviceTally(
            examples=self.examples, verdicts=dict(self.verdicts), both_raised=self.both_raised,
            syncs_per_call={"legacy": histogram(self.legacy_syncs), "optimized": histogram(self.optimized_syncs)},
            hidden_syncs_per_call={"legacy": histogram(self.legacy_hidden),
                                   "optimized": histogram(self.optimized_hidden)},
            consumer_syncs_per_call={"legacy": histogram(self.legacy_consumer),
                                     "optimized": histogram(self.optimized_consumer)},
            sync_pairs={pair: self.sync_pairs[pair] for pair in ("fewer", "same", "more")} if self.sync_pairs else {},
            shrink_steps=self.shrink_steps)


def failure_of(result: ExampleResult, repro: Path | str | None = None) -> Failure:
    """An example's failure as the report model records it."""
    return Failure(
        device=result.device, verdict=result.verdict.value, input=result.spec,
        mismatches=tuple(m.as_json() for m in result.mismatches),
        exceptions={"legacy": result.legacy.raised.type_name if result.legacy.raised else None,
                    "optimized": result.optimized.raised.type_name if result.optimized.raised else None},
        repro=str(repro) if repro else None, oracles=result.oracles)


@dataclass
class TargetOutcome:
    """One target's run while it is fuzzed; ``entry()`` freezes it for the report."""

    target: Target
    devices: tuple[str, ...]
    tallies: dict[str, TallyCounter] = field(default_factory=dict)
    failures: list[ExampleResult] = field(default_factory=list)
    flaky: bool = False
    repro_paths: list[Path | None] = field(default_factory=list)  # parallel to failures
    skipped: str | None = None
    cannot_build: str | None = None  # a side's source cannot be built into this target (fuzz/releases/sides.py)
    retired: dict[str, Any] | None = None  # a side's release removed the target's definitions (releases/retired.py)
    harness_error: str | None = None
    first_failure_at: int | None = None  # examples run when the first failure was seen
    upstream: str | None = None  # under --upstream: compared, or why not
    sync_rule: str | None = None  # which rule judges the syncs (fuzz/oracles/syncrule.py); None: the target did not run
    sync_descent: dict[str, bool] = field(default_factory=dict)  # fuzz.oracles.syncrule.descent_parts; {}: the copies
    seconds: float = 0.0
    started: float = 0.0  # time.monotonic() when fuzzing began
    deadline: float | None = None  # end of its budget share, if any
    measure: Measure | None = None  # --coverage: what each side ran (fuzz/reach/collect.py)
    same_code: str | None = None  # both sides' code reachable from the entry is the same text

    @property
    def examples(self) -> int:
        return sum(t.examples for t in self.tallies.values())

    @property
    def verdict(self) -> Verdict:
        """The worst example verdict found so far (the target's, per device and
        with untested / skipped, is the frozen entry's: ``entry().verdict_on``)."""
        return Verdict(worst(f.verdict.value for f in self.failures))

    def entry(self) -> TargetEntry:
        saved = self.repro_paths + [None] * (len(self.failures) - len(self.repro_paths))
        failures = sorted(zip(self.failures, saved), key=lambda pair: -pair[0].verdict.severity)
        return TargetEntry(
            name=self.target.name, upstream=tuple(self.target.upstream), devices=self.devices,
            expected_optimized_syncs=self.target.expected_optimized_syncs,
            by_device={device: tally.frozen() for device, tally in self.tallies.items()},
            failures=tuple(failure_of(f, p) for f, p in failures), first_failure_at=self.first_failure_at,
            seconds=round(self.seconds, 3), flaky=self.flaky, skipped=self.skipped,
            fuzzer_error=self.harness_error, upstream_check=self.upstream, cannot_build=self.cannot_build,
            reach=self.measure.result([d for d, t in self.tallies.items() if t.examples]) if self.measure else {},
            same_code=self.same_code, retired=self.retired,
            sync_rule=self.sync_rule, sync_descent=dict(self.sync_descent))


class _StopTarget(BaseException):
    """Leaves Hypothesis at once (no shrinking): this process's CUDA context
    is gone, so no further example can run in it."""


def _database_key(target: Target, config: RunConfig) -> bytes:
    """The corpus database's key for a target under a run's contract and sides.

    ":cases": the saved choices draw a list of specs (SPECS_PER_CASE), not one, so entries of
    the one-spec format (a key without it) are not replayed as something else. The sides are
    named by stable names (``copy``, ``vllm==X``, a checkout's resolved path; never a commit or
    a file hash): a failure a branch run saved is replayed first by tomorrow's run of that
    branch, and a run of other sides never replays it -- where it would pass and be deleted.
    Copy/copy keys are the ones saved before sides existed, so existing corpora stay warm."""
    key = f"syncfuzz:{target.name}:{config.contract}:cases"
    if (config.legacy, config.optimized) != ("copy", "copy"):
        key += f":legacy={config.legacy}:optimized={config.optimized}"
    return hashlib.sha256(key.encode()).digest()


class _SaveOnlyDatabase(ExampleDatabase):
    """The corpus database as seen by continuation chunks of a run.

    A continuation chunk no longer raises for failures already found, so
    Hypothesis would see their saved examples "pass" and delete them. This view
    only adds: new failures are saved, nothing is replayed or deleted.
    """

    def __init__(self, inner: ExampleDatabase) -> None:
        super().__init__()
        self.inner = inner

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(key, value)

    def fetch(self, key: bytes) -> Iterator[bytes]:
        return iter(())

    def delete(self, key: bytes, value: bytes) -> None:
        pass

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.save(dest, value)


class _StartDatabase(ExampleDatabase):
    """The corpus database as the first chunk of each item sees it: read as it was when the run started
    (fuzz.engine.journals.keep_start_database), written live.

    So an item never replays what another item of the run saved meanwhile: what it draws does not depend
    on which items ran before it, on this host or another (--shard), nor on which worker finished first
    (--workers). Its saves, deletions and moves still go to the corpus the next run starts from.
    """

    def __init__(self, start: ExampleDatabase, live: ExampleDatabase) -> None:
        super().__init__()
        self.start = start
        self.live = live

    def save(self, key: bytes, value: bytes) -> None:
        self.live.save(key, value)

    def fetch(self, key: bytes) -> Iterator[bytes]:
        return iter(self.start.fetch(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self.live.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.live.move(src, dest, value)


def _database(corpus: Path | None, reuse: bool, run_id: str) -> ExampleDatabase | None:
    """The corpus database as one chunk of run ``run_id`` sees it (none without a corpus)."""
    if corpus is None:
        return None
    live = DirectoryBasedExampleDatabase(str(corpus / "hypothesis"))
    if not reuse:
        return _SaveOnlyDatabase(live)
    start = start_database(corpus, run_id)
    # No start copy: the runner called outside a ``fuzz run`` session (fuzz_target itself), which reads live.
    return live if start is None else _StartDatabase(DirectoryBasedExampleDatabase(str(start)), live)


def hypothesis_settings(max_examples: int, database: ExampleDatabase | None) -> settings:
    """The fuzzer's Hypothesis settings (bench part s measures Hypothesis alone under them)."""
    return settings(
        max_examples=max_examples,
        database=database,
        # No deadline: the first CUDA call of a process pays for context set-up
        # and lazy kernel loading, and a slow example is not a divergence.
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much, HealthCheck.large_base_example],
        report_multiple_bugs=True,
        print_blob=False,
        verbosity=Verbosity.quiet,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )


@contextmanager
def no_local_constants() -> Iterator[None]:
    """Hypothesis without its pool of "local constants" while the block runs.

    Hypothesis (6.131+) draws, at 5% of its integer, float, string and bytes choices, a literal found in
    the source of every non-library module in ``sys.modules`` at that moment. Which modules those are
    depends on how the fuzzer runs (in-process, a worker process, bench, pytest), on what the run has
    imported so far, and on where packages are installed (a ``pip install --target`` folder on the
    PYTHONPATH counts as local): the same seed drew other examples in a worker process than in-process
    (fla-chunk-indices, seed 0, 100 examples: 7 and 19 inputs where both sides raise), and on the H200
    in one call than in another. With the pool empty, the examples follow from the seed, the input
    models and Hypothesis' version alone; Hypothesis' global constants (0, -1, powers of two, ...) stay.
    Private API (hypothesis<7 is pinned): tests/unit/test_seed_determinism.py checks it still holds."""
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import Constants

    empty = Constants()
    saved = providers._get_local_constants
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()  # built from the pool: keyed by choice type, not by pool
    try:
        yield
    finally:
        providers._get_local_constants = saved
        providers.CONSTANTS_CACHE.cache.clear()


def _chunk_seed(run_seed: int, target: Target, chunk: int) -> int:
    digest = hashlib.sha256(f"{run_seed}:{target.name}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def single_threaded() -> None:
    """Fuzz inputs are tiny: torch's intra-op threads only contend (measured
    ~1000x slower LayerNorm on a loaded 2-core host). SYNCFUZZ_THREADS overrides."""
    import os

    import torch

    torch.set_num_threads(int(os.environ.get("SYNCFUZZ_THREADS", "1")))


def fuzz_target(target: Target, config: RunConfig, deadline: float | None = None, hooks: Hooks = NO_HOOKS,
                first_chunk: int = 0) -> TargetOutcome:
    """Fuzz one target until ``config.max_examples``, its deadline, or a failure.
    ``first_chunk`` > 0: a restarted worker continues on fresh seeds."""
    single_threaded()
    outcome = TargetOutcome(target, devices_for(target.devices, config.devices))
    try:
        prepared = prepare(target, config)  # the sides, --upstream and the sync rule (fuzz/engine/prepare.py)
    except Retired as exc:
        outcome.retired = exc.retirement.to_json()
        return outcome
    except CannotBuild as exc:
        outcome.cannot_build = str(exc)
        return outcome
    target, outcome.upstream = prepared.target, prepared.upstream
    if not outcome.devices:
        outcome.skipped = f"runs on {', '.join(target.devices)}; this run has {', '.join(config.devices)}"
        return outcome
    outcome.sync_rule = prepared.sync_rule
    outcome.sync_descent = prepared.sync_descent  # {} for the copies; else which parts descend from the budget's
    outcome.same_code = static_same_code(target, config)
    if config.coverage:
        outcome.measure = measure_for(target, config)
        if not outcome.measure.start():
            outcome.measure = None
    try:
        with no_local_constants():
            return _fuzz(target, config, deadline, hooks, first_chunk, outcome, prepared.sync_rule)
    finally:
        if outcome.measure:
            outcome.measure.stop()


def model_for_sides(target: Target) -> Any:
    """The target's input model, told the code of both sides where it asks: an optional
    ``for_sides({"legacy": impl, "optimized": impl}) -> InputModel`` returns the model whose draws fit what
    both sides support (fuzz.interface.InputModel; strategies/buffer_utils/inputs.py: a side rebuilt from a
    release without the NonUvaBuffer fallback is never asked for it). Without the hook, the model as it is."""
    model = target.input_model()
    hook = getattr(model, "for_sides", None)
    return hook({side: target.impl(side) for side in ("legacy", "optimized")}) if hook else model


def _fuzz(target: Target, config: RunConfig, deadline: float | None, hooks: Hooks, first_chunk: int,
          outcome: TargetOutcome, rule: str) -> TargetOutcome:
    started = outcome.started = time.monotonic()
    outcome.deadline = deadline
    for device in outcome.devices:
        outcome.tallies[device] = TallyCounter()
    model = model_for_sides(target)
    strategy = st.lists(model.specs(outcome.devices, config.contract),
                        min_size=MIN_SPECS_PER_CASE, max_size=SPECS_PER_CASE)
    # One draw, every device (fuzz.engine.devices.on_devices): each drawn spec runs on every device of the run the
    # model allows, so a case holds about MEAN_SPECS_PER_CASE examples per device.
    per_case = MEAN_SPECS_PER_CASE * len(outcome.devices)
    last_failure: list[ExampleResult] = []
    cases = [0]  # Hypothesis test cases run in the current chunk
    failed_here = [False]  # a new failure was raised in the current chunk: what follows may be shrinking it
    shrinking = [False]  # the current test case shrinks it (is_shrink_step): counted apart from the examples
    # Failures already found and shrunk in this run: counted, not raised, so
    # the next chunk keeps searching for *other* bugs instead of re-finding them.
    known: set[str] = set()
    last_shown = [time.monotonic()]

    def check_all(specs: list[dict]) -> None:
        cases[0] += 1
        shrinking[0] = is_shrink_step(failed_here[0])
        for drawn in specs:
            for spec in on_devices(model, drawn, outcome.devices):
                check(spec)

    def check(spec: dict) -> None:
        if deadline is not None and not last_failure and time.monotonic() >= deadline:
            # Share of the budget spent: let Hypothesis wind down. Never once a
            # failure is being shrunk, or its final re-run would look flaky.
            return
        if config.budget is None and not last_failure and outcome.examples >= (config.max_examples or 1):
            return  # the last case's specs past --max-examples are not run (not counted, not judged)
        if hooks.before_example:
            hooks.before_example(spec, outcome)
        try:
            try:
                result = run_example(target, spec, config=config, sync_rule=rule)
            except Exception as exc:
                # A fatal CUDA error anywhere in the example (an oracle's comparison, the consumer) means the
                # context is gone as surely as one in a side: the process must go, not report a fuzzer bug.
                fatal = None if isinstance(exc, CudaContextLost) else fatal_cuda_error(exc)
                if fatal is None:
                    raise
                raise CudaContextLost("harness", Raised.of(fatal).message) from exc
        except CudaContextLost as lost:
            if hooks.on_context_lost:
                hooks.on_context_lost(spec, lost)  # ends the process
            outcome.failures.append(crash_result(spec, f"CUDA context lost: {lost}"))
            raise _StopTarget from lost
        if shrinking[0]:
            outcome.tallies[result.device].shrink_steps += 1
        else:
            outcome.tallies[result.device].add(result)
        if hooks.progress and time.monotonic() - last_shown[0] > PROGRESS_EVERY:
            last_shown[0] = time.monotonic()
            hooks.progress(outcome)
        if result.verdict.failed and result.signature not in known:
            if outcome.first_failure_at is None:
                outcome.first_failure_at = outcome.examples
            last_failure[:] = [result]
            failed_here[0] = True
            raise failure_type(result)(result)

    corpus = Path(config.corpus) if config.corpus else None
    chunk = first_chunk
    while True:
        if config.budget is None:
            size = -(-max((config.max_examples or 1) - outcome.examples, 1) // per_case)
        else:
            size = -(-BUDGET_CHUNK // per_case)
        cases[0] = 0
        failed_here[0] = False
        test = given(strategy)(check_all)
        test = hypothesis_seed(_chunk_seed(config.seed, target, chunk) if chunk else config.seed)(test)
        # Only an item's first chunk replays the corpus, as the run found it (_StartDatabase); continuations
        # and restarted workers must not see known failures "pass" and delete them.
        test = hypothesis_settings(size, _database(corpus, reuse=chunk == 0, run_id=config.run_id))(test)
        test._hypothesis_internal_database_key = _database_key(target, config)
        before = len(outcome.failures)
        stop = False
        try:
            test()
        except _StopTarget:
            stop = True
        except BaseException as raised:  # noqa: BLE001 -- sorted below, the rest re-raised
            _collect(raised, outcome, last_failure)
        new = outcome.failures[before:]
        known.update(f.signature for f in new)
        _save(new, target, config, outcome)
        if hooks.after_chunk:
            hooks.after_chunk(outcome)
        chunk += 1
        if outcome.harness_error or stop:
            break
        # --max-examples counts examples: the shrink steps a failure costs come on top, never out of them.
        if config.budget is None and outcome.examples >= (config.max_examples or 1):
            break
        if not new and cases[0] < size:
            break  # Hypothesis stopped short of the cases asked for: it has tried every input there is
        if deadline is not None and time.monotonic() >= deadline:
            break
    outcome.seconds = time.monotonic() - started
    return outcome


def crash_result(spec: dict, detail: str, verdict: Verdict = Verdict.CRASH) -> ExampleResult:
    """A failure no comparison produced: the example killed or hung its process."""
    return ExampleResult(spec, verdict, [Mismatch("", verdict.value, detail)], SideResult(), SideResult())


def _save(failures: list[ExampleResult], target: Target, config: RunConfig, outcome: TargetOutcome) -> None:
    """Save repro files as soon as failures are known: a later crash must not lose them."""
    for failure in failures:
        path = None
        if config.corpus is not None:
            payload = repro_payload(target, failure, config, flaky=outcome.flaky)
            path = save_repro(Path(config.corpus) / "failures", payload)
        outcome.repro_paths.append(path)


def _collect(raised: BaseException, outcome: TargetOutcome, last_failure: list[ExampleResult]) -> None:
    """Sort what Hypothesis raised into failures, flakiness and fuzzer bugs."""
    unexpected = []
    for leaf in _leaves(raised):
        if isinstance(leaf, VerdictFound):
            # Hypothesis may report one signature more than once (e.g. found
            # again while shrinking another); keep the first, smallest one.
            if leaf.result.signature not in {f.signature for f in outcome.failures}:
                outcome.failures.append(leaf.result)
        elif isinstance(leaf, Flaky):
            # The failure did not reproduce when Hypothesis re-ran it: keep the
            # last failing example and say it is flaky rather than lose it.
            outcome.flaky = True
            if last_failure and not outcome.failures:
                outcome.failures.append(last_failure[0])
        elif isinstance(leaf, HarnessError):
            outcome.harness_error = str(leaf)
        else:
            unexpected.append(leaf)
    if unexpected:
        raise raised
