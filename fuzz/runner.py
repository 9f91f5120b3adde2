"""Drive Hypothesis over each target: draw, run both sides, judge, shrink, save.

One Hypothesis test per (target, run). A failing verdict raises a
verdict-specific exception, so Hypothesis shrinks towards the smallest input
with *that* verdict; the shrunk example is saved as a repro file. Hypothesis'
example database lives in the corpus, so a known failure is replayed first on
the next run. Under ``--budget`` a target runs in chunks of examples with
seeds derived from the run seed until its share of the time is spent; past the
share, remaining calls return at once so Hypothesis winds down quickly.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hypothesis_seed, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky

from fuzz.compare import Verdict
from fuzz.devices import devices_for
from fuzz.errors import HarnessError
from fuzz.compare import Mismatch
from fuzz.execute import CudaContextLost, ExampleResult, run_example
from fuzz.outcome import SideResult
from fuzz.repro import repro_payload, save_repro
from fuzz.targets import Target

if TYPE_CHECKING:  # fuzz.isolation and fuzz.plan import this module
    from fuzz.isolation import Isolation
    from fuzz.plan import Item

BUDGET_CHUNK = 100  # examples per Hypothesis call under --budget
PROGRESS_EVERY = 5.0  # seconds between progress lines of a long-running target


class VerdictFound(Exception):
    """Raised inside the Hypothesis test for a failing verdict."""

    def __init__(self, result: ExampleResult) -> None:
        super().__init__(f"{result.verdict.value}: {[m.as_json() for m in result.mismatches]}")
        self.result = result


# One class per verdict: Hypothesis keeps shrinking within the same failure.
class DivergenceFound(VerdictFound): ...
class ErrorMismatchFound(VerdictFound): ...
class SyncRegressionFound(VerdictFound): ...


_RAISE_FOR = {
    Verdict.DIVERGENCE: DivergenceFound,
    Verdict.ERROR_MISMATCH: ErrorMismatchFound,
    Verdict.SYNC_REGRESSION: SyncRegressionFound,
    Verdict.UPSTREAM_DIVERGENCE: DivergenceFound,
}
_BY_SIGNATURE: dict[tuple, type[VerdictFound]] = {}


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


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@dataclass
class DeviceTally:
    examples: int = 0
    verdicts: Counter = field(default_factory=Counter)
    both_raised: int = 0
    legacy_syncs: Counter = field(default_factory=Counter)
    optimized_syncs: Counter = field(default_factory=Counter)
    legacy_hidden: Counter = field(default_factory=Counter)  # of which: pageable non-blocking H2D
    optimized_hidden: Counter = field(default_factory=Counter)

    def add(self, result: ExampleResult) -> None:
        self.examples += 1
        self.verdicts[result.verdict.value] += 1
        if result.legacy.raised and result.optimized.raised:
            self.both_raised += 1
        # Sync counts are only meaningful for calls that returned.
        if result.legacy.syncs is not None and result.legacy.ok:
            self.legacy_syncs[result.legacy.syncs] += 1
            self.legacy_hidden[result.legacy.hidden_syncs or 0] += 1
        if result.optimized.syncs is not None and result.optimized.ok:
            self.optimized_syncs[result.optimized.syncs] += 1
            self.optimized_hidden[result.optimized.hidden_syncs or 0] += 1


@dataclass
class TargetOutcome:
    target: Target
    devices: tuple[str, ...]
    tallies: dict[str, DeviceTally] = field(default_factory=dict)
    failures: list[ExampleResult] = field(default_factory=list)
    flaky: bool = False
    repro_paths: list[Path | None] = field(default_factory=list)  # parallel to failures
    skipped: str | None = None
    harness_error: str | None = None
    first_failure_at: int | None = None  # examples run when the first failure was seen
    upstream: str | None = None  # under --upstream: compared, or why not
    seconds: float = 0.0

    @property
    def examples(self) -> int:
        return sum(t.examples for t in self.tallies.values())

    @property
    def verdict(self) -> Verdict:
        """The most severe verdict among the failures found."""
        return max((f.verdict for f in self.failures), key=lambda v: v.severity, default=Verdict.AGREE)

    def verdict_on(self, device: str) -> Verdict:
        verdicts = [f.verdict for f in self.failures if f.device == device]
        return max(verdicts, key=lambda v: v.severity, default=Verdict.AGREE)


@dataclass
class RunOptions:
    devices: tuple[str, ...]
    seed: int
    contract: str = "caller"
    max_examples: int | None = None
    budget: float | None = None
    corpus: Path | None = None
    target_module: Callable[[Target], str | None] = lambda target: None
    progress: Callable[[TargetOutcome, bool], None] | None = None
    first_chunk: int = 0  # a restarted worker continues with fresh seeds
    stress: bool = False  # async-hazard stress mode (fuzz/stress.py)
    upstream: bool = False  # the real vllm as a third side (fuzz/upstream.py)
    # Isolation hooks (fuzz/isolation.py): journal each example before it
    # runs, snapshot the outcome after each chunk, and end the process when
    # its CUDA context is lost.
    before_example: Callable[[dict, TargetOutcome], None] | None = None
    after_chunk: Callable[[TargetOutcome], None] | None = None
    on_context_lost: Callable[[dict, CudaContextLost], None] | None = None


class _StopTarget(BaseException):
    """Leaves Hypothesis at once (no shrinking): this process's CUDA context
    is gone, so no further example can run in it."""


def _database_key(target: Target, contract: str) -> bytes:
    return hashlib.sha256(f"syncfuzz:{target.name}:{contract}".encode()).digest()


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

    def fetch(self, key: bytes):  # noqa: ANN201
        return iter(())

    def delete(self, key: bytes, value: bytes) -> None:
        pass

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.save(dest, value)


def _database(corpus: Path | None, reuse: bool) -> ExampleDatabase | None:
    if corpus is None:
        return None
    database = DirectoryBasedExampleDatabase(str(corpus / "hypothesis"))
    return database if reuse else _SaveOnlyDatabase(database)


def _settings(max_examples: int, database: ExampleDatabase | None) -> settings:
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


def _chunk_seed(run_seed: int, target: Target, chunk: int) -> int:
    digest = hashlib.sha256(f"{run_seed}:{target.name}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def single_threaded() -> None:
    """Fuzz inputs are tiny: torch's intra-op threads only contend (measured
    ~1000x slower LayerNorm on a loaded 2-core host). SYNCFUZZ_THREADS overrides."""
    import os

    import torch

    torch.set_num_threads(int(os.environ.get("SYNCFUZZ_THREADS", "1")))


def fuzz_target(target: Target, options: RunOptions, deadline: float | None) -> TargetOutcome:
    """Fuzz one target until max_examples, its deadline, or a failure."""
    single_threaded()
    outcome = TargetOutcome(target, devices_for(target.devices, options.devices))
    if options.upstream:
        from dataclasses import replace

        from fuzz.upstream import unavailable

        why_not = unavailable(target)
        outcome.upstream = why_not or "compared with the real vllm function"
        if why_not:
            target = replace(target, upstream_impl=None)
    if not outcome.devices:
        outcome.skipped = f"runs on {', '.join(target.devices)}; this run has {', '.join(options.devices)}"
        return outcome
    started = time.monotonic()
    for device in outcome.devices:
        outcome.tallies[device] = DeviceTally()
    strategy = target.input_model().specs(outcome.devices, options.contract)
    last_failure: list[ExampleResult] = []
    # Failures already found and shrunk in this run: counted, not raised, so
    # the next chunk keeps searching for *other* bugs instead of re-finding them.
    known: set[tuple] = set()
    last_shown = [time.monotonic()]

    def check(spec: dict) -> None:
        if deadline is not None and not last_failure and time.monotonic() >= deadline:
            # Share of the budget spent: let Hypothesis wind down. Never once a
            # failure is being shrunk, or its final re-run would look flaky.
            return
        if options.before_example:
            options.before_example(spec, outcome)
        try:
            result = run_example(target, spec, stress=options.stress, contract=options.contract,
                                 upstream=options.upstream)
        except CudaContextLost as lost:
            if options.on_context_lost:
                options.on_context_lost(spec, lost)  # ends the process
            outcome.failures.append(crash_result(spec, f"CUDA context lost: {lost}"))
            raise _StopTarget from lost
        outcome.tallies[result.device].add(result)
        if options.progress and time.monotonic() - last_shown[0] > PROGRESS_EVERY:
            last_shown[0] = time.monotonic()
            options.progress(outcome, False)
        if result.verdict.failed and result.signature not in known:
            if outcome.first_failure_at is None:
                outcome.first_failure_at = outcome.examples
            last_failure[:] = [result]
            raise failure_type(result)(result)

    chunk = options.first_chunk
    while True:
        if options.budget is None:
            size = max(options.max_examples - outcome.examples, 1)
        else:
            size = BUDGET_CHUNK
        test = given(strategy)(check)
        test = hypothesis_seed(_chunk_seed(options.seed, target, chunk) if chunk else options.seed)(test)
        # Only a run's first chunk replays the corpus; continuations and
        # restarted workers must not see known failures "pass" and delete them.
        test = _settings(size, _database(options.corpus, reuse=chunk == 0))(test)
        test._hypothesis_internal_database_key = _database_key(target, options.contract)
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
        _save(new, target, options, outcome)
        if options.after_chunk:
            options.after_chunk(outcome)
        chunk += 1
        if outcome.harness_error or stop:
            break
        if options.budget is None and (not new or outcome.examples >= options.max_examples):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
    outcome.seconds = time.monotonic() - started
    return outcome


def crash_result(spec: dict, detail: str, verdict: Verdict = Verdict.CRASH) -> ExampleResult:
    """A failure no comparison produced: the example killed or hung its process."""
    return ExampleResult(spec, verdict, [Mismatch("", verdict.value, detail)], SideResult(), SideResult())


def _save(failures: list[ExampleResult], target: Target, options: RunOptions, outcome: TargetOutcome) -> None:
    """Save repro files as soon as failures are known: a later crash must not lose them."""
    for failure in failures:
        path = None
        if options.corpus is not None:
            payload = repro_payload(target, failure, seed=options.seed, contract=options.contract,
                                    target_module=options.target_module(target), flaky=outcome.flaky,
                                    stress=options.stress)
            path = save_repro(options.corpus / "failures", payload)
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


def fuzz_all(targets: list[Target], options: RunOptions, isolation: "Isolation | None" = None,
             items: "list[Item] | None" = None) -> list[dict]:
    """Fuzz every item (a target, or a piece of one), in worker processes when
    ``isolation`` is given; return one merged report entry per target. A budget
    is shared fairly by the items; time one leaves unused rolls over."""
    from fuzz.merge import finish_entry, merge_entry
    from fuzz.plan import plan

    items = items if items is not None else plan(targets, seed=options.seed, pieces=1,
                                                 max_examples=options.max_examples)
    entries: dict[str, dict] = {}
    start = time.monotonic()
    for index, item in enumerate(items):
        deadline = None
        if options.budget is not None:
            remaining = options.budget - (time.monotonic() - start)
            deadline = time.monotonic() + max(remaining, 0.0) / (len(items) - index)
        entry = run_item(item, options, isolation, deadline)
        entries[item.target.name] = merge_entry(entries.get(item.target.name), entry)
    result = [finish_entry(e) for e in entries.values()]
    if options.progress:
        for entry in result:
            _announce(entry)
    return result


def run_item(item: "Item", options: RunOptions, isolation: "Isolation | None", deadline: float | None) -> dict:
    """One item's entry: its own seed and share of the examples."""
    from dataclasses import replace

    from fuzz.isolation import fuzz_isolated
    from fuzz.report import outcome_entry

    item_options = replace(options, seed=item.seed, max_examples=item.max_examples)
    if isolation is not None and devices_for(item.target.devices, options.devices):
        return fuzz_isolated(item.target, item_options, deadline, isolation)
    return outcome_entry(fuzz_target(item.target, item_options, deadline))


def _announce(entry: dict) -> None:
    import sys

    if entry["skipped"]:
        sys.stderr.write(f"[fuzz] {entry['name']}: skipped ({entry['skipped']})\n")
    else:
        sys.stderr.write(f"[fuzz] {entry['name']}: {entry['examples']} examples, {entry['verdict']}\n")
