"""Crash isolation: each target runs in a worker process the parent watches.

Before each example the worker journals its input spec to disk. If the worker
dies (device-side assert that killed its CUDA context, segfault, abort) or an
example outruns the watchdog, the parent reads the journal, records a
``crash``/``hang`` failure with that input as a repro file, starts a fresh
worker on fresh seeds and carries on with the remaining examples and targets.
A worker whose CUDA context is lost journals why and exits with
``EXIT_CONTEXT_LOST``; any other death is read from its exit status.

The worker is persistent: one process runs target after target (jobs sent on
its stdin, answered on its stdout), so a run pays for importing torch and
creating a CUDA context once per worker, not once per target -- on the H200
that start-up (~6 s) ate whole budget shares (a 120 s nightly run of 20
targets did 129 examples). Only a death or a hang costs a fresh process.

Crashing inputs are not shrunk (each shrink step would cost a process); the
journaled input is the one that crashed.

A replay (fuzz/run/replay.py: ``replay``, ``--confirm``, an MPS victim's re-run) is a job of the same
worker process, answered the same way: its one saved example journaled before it runs, its answer a result
file with the config it ran under (fuzz/run/child.py, the one channel and watchdog of both).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fuzz.config import Hooks, RunConfig
from fuzz.errors import FuzzError
from fuzz.records.model import DeviceTally, TargetEntry
from fuzz.records.verdicts import Verdict
from fuzz.reports.outputs import write_json
from fuzz.reports.report import progress_printer
from fuzz.run.child import (  # noqa: F401
    REPLAY_JOB,
    STARTUP_ALLOWANCE,
    WorkerProcess,
    apply_env,
    child_env,
    config_payload,
    death,
    read_back,
    read_journal,
    send_back,
    watch,
)
from fuzz.run.gpushare import READY_WAIT_S, outside_mps, outside_mps_changes, under_mps, wait_until_ready
from fuzz.run.interrupts import die_with_parent
from fuzz.targets import Target, lookup

if TYPE_CHECKING:
    from fuzz.engine.runner import TargetOutcome

# fuzz.engine.runner (and torch with it) is imported where a function needs it, not here: an xdist worker imports
# this module to start and watch its fuzz process and, unless a crash has to be written up, never needs torch.
# Not importing it saves each of 16 workers ~2 s of a core at the run's start, when all 32 processes want one
# (#25, docs/gpu-sharing.md "Start-up").

EXIT_CONTEXT_LOST = 86
WARM_CUDA_ENV = "SYNCFUZZ_WARM_CUDA"  # "1": the worker makes its CUDA context at start (fuzz.run.xdist_items)
SNAPSHOT_EVERY = 2.0  # seconds between outcome snapshots in the journal


@dataclass
class Isolation:
    """Where a run's worker processes keep their files, and the live worker.
    The watchdog and restart limits are the run's (RunConfig.example_timeout,
    .max_restarts). Under CUDA MPS (fuzz/run/gpushare.py) a fresh worker first
    waits for the server to take clients, and goes on without MPS if it does not."""

    workdir: Path | None = None  # journals and results; a temporary folder if None
    env: dict[str, str | None] | None = None  # environment changes for workers (None: removed)
    progress: bool = True  # echo the workers' status lines (redrawn on a terminal); False: --quiet
    victims_replayed: int = 0  # examples ended by another MPS client's fault, re-run outside MPS
    left_mps: str | None = None  # why this isolation's workers stopped using MPS, if they did
    _process: "WorkerProcess | None" = field(default=None, init=False, repr=False, compare=False)
    _started: int = field(default=0, init=False, repr=False, compare=False)

    def full_env(self) -> dict[str, str]:
        """This process' environment with the workers' changes: what MPS is judged by and an MPS victim's
        replay starts from (the worker's own adds the repo root and thread pools, ``worker_env``)."""
        return apply_env(dict(os.environ), self.env or {})

    def under_mps(self) -> bool:
        return under_mps(self.full_env())

    def worker(self) -> "WorkerProcess":
        """The live worker process, started if there is none."""
        if self._process is None or not self._process.alive:
            if self._started and self.under_mps():
                self._wait_for_mps()
            self._process = WorkerProcess(worker_env(self.env), progress=self.progress)
            self._started += 1
        return self._process

    def _wait_for_mps(self) -> None:
        """After a worker's death the MPS server may refuse new clients until every client a fault ended has
        exited (NVIDIA's MPS guide); wait for it, else this isolation's workers go on time-sliced."""
        problem = wait_until_ready(self.full_env())
        if problem is not None:
            self.left_mps = f"the MPS server took no new client for {READY_WAIT_S:g} s ({problem})"
            self.env = {**(self.env or {}), **outside_mps_changes()}
            sys.stderr.write(f"[fuzz] {self.left_mps}: this worker goes on without MPS\n")

    def discard_worker(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process = None


# ---------------------------------------------------------------- worker side

def _serve() -> int:
    """Run jobs until stdin closes: each stdin line names an args file; each
    finished job is answered with a line on the control channel."""
    die_with_parent()
    # The control channel is the original stdout; fd 1 now points at stderr,
    # so nothing the code under test prints can garble the protocol.
    control = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if os.environ.get(WARM_CUDA_ENV) == "1":
        _warm_cuda()
    for line in sys.stdin:
        if line.strip():
            _run_job(line.strip())
            control.write(f"done {line.strip()}\n")
    return 0


def _warm_cuda() -> None:
    """Make this process' CUDA context before its first job arrives (fuzz.run.xdist_items starts the process while
    its xdist worker still collects). Nothing is raised: a context that cannot be made fails again in the
    job's first CUDA call, where the engine sorts it (a lost context, a refusing MPS server)."""
    try:
        import torch

        from fuzz.engine.runner import single_threaded

        single_threaded()  # the thread pools first, as fuzz_target sets them

        torch.empty(1, device="cuda")
    except Exception as exc:  # noqa: BLE001 -- reported by the job that meets it
        sys.stderr.write(f"[fuzz] warm-up: no CUDA context yet ({str(exc).splitlines()[0] if str(exc) else exc!r})\n")


def job_args(target: str, config: RunConfig, *, first_chunk: int, ends_at: float | None, journal: Path,
             result: Path) -> dict:
    """One job for the worker: the whole run config plus this job's own facts."""
    return {"target": target, "config": config_payload(config), "first_chunk": first_chunk, "ends_at": ends_at,
            "journal": str(journal), "result": str(result)}


def job_config(args: dict) -> tuple[Target, RunConfig]:
    """The worker's reading of a job: the config exactly as sent."""
    config = RunConfig.from_json(args["config"], "worker job")
    (target,) = lookup([args["target"]], config.target_modules)
    return target, config


def _run_job(args_path: str) -> None:
    from fuzz.engine.runner import fuzz_target

    args = json.loads(Path(args_path).read_text())
    if args.get("kind") == REPLAY_JOB:
        _replay_job(args)
        return
    target, config = job_config(args)
    journal = Path(args["journal"])
    last_snapshot = [0.0]

    def snapshot(outcome: TargetOutcome, force: bool = False) -> None:
        # At the first example, then every few seconds: a crash loses at most
        # that much of the tally (the crashing input itself is in the journal).
        # Snapshotting every young example cost ~30% of a cheap target's time
        # in budgeted runs, whose short items are always young.
        if force or time.monotonic() - last_snapshot[0] > SNAPSHOT_EVERY:
            last_snapshot[0] = time.monotonic()
            write_json(journal.with_suffix(".snapshot.json"), outcome.entry().to_json())

    journal_fd = os.open(journal, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def record(payload: dict) -> None:
        # Rewritten in place, once per example: ~8 us, where write-then-rename
        # cost ~120 us (ext4), a fifth of a cheap target's example. A reader
        # racing the rewrite sees an empty or partial record, which
        # fuzz.run.child.read_journal treats as unreadable and the watchdog keeps its
        # last good reading; once the worker is dead the last record is whole
        # (it dies inside an example, not while writing). No fsync: a dying
        # process keeps what it wrote, only a host crash loses it.
        data = json.dumps(payload).encode()
        os.ftruncate(journal_fd, 0)
        os.pwrite(journal_fd, data, 0)

    def before_example(spec: dict, outcome: TargetOutcome) -> None:
        record({"spec": spec, "started": time.time()})
        snapshot(outcome)

    def on_context_lost(spec: dict, lost: Exception) -> None:
        record({"spec": spec, "started": time.time(), "fatal": f"CUDA context lost: {lost}"})
        sys.stderr.flush()
        os._exit(EXIT_CONTEXT_LOST)

    # The deadline travels as wall-clock time: the worker's own start-up (a
    # fresh one's torch import and CUDA context) is inside the budget, not added to it.
    deadline = None if args.get("ends_at") is None else time.monotonic() + (args["ends_at"] - time.time())
    hooks = Hooks(progress=progress_printer(sys.stderr), before_example=before_example,
                  after_chunk=lambda o: snapshot(o, force=True), on_context_lost=on_context_lost)
    try:
        outcome = fuzz_target(target, config, deadline, hooks, first_chunk=args["first_chunk"])
    finally:
        os.close(journal_fd)
    # The config as the worker read it goes back with the result: the parent
    # checks that nothing was lost on the way (fuzz/run/child.py).
    send_back(Path(args["result"]), config, entry=outcome.entry().to_json())


def _replay_job(args: dict) -> None:
    """Replay one saved failure (fuzz/run/replay.py): its input rebuilt from the saved spec, both sides run
    once under the run config saved with it (contract, stress, ``--upstream``: the judgement of the run that
    found it). The answer, beside the config it ran under: ``invalid_input`` (the spec cannot be built),
    ``fuzzer_error``, ``crash`` (this process' CUDA context is lost) or the example's verdict. Any other
    exception ends the process: the parent reports the death."""
    from fuzz.engine.execute import CudaContextLost, fatal_cuda_error, run_example
    from fuzz.engine.prepare import prepare
    from fuzz.engine.repro import load_repro, trusted_modules, unbuildable
    from fuzz.engine.runner import single_threaded
    from fuzz.errors import HarnessError
    from fuzz.releases import CannotBuild
    from fuzz.targets import lookup

    single_threaded()
    path, result = args["repro"], Path(args["result"])
    payload = load_repro(path)
    config = RunConfig.from_json(args["config"], "replay job")  # the one the parent read from the file, as sent
    (target,) = lookup([payload["target"]], trusted_modules(payload, config, path))
    try:
        prepared = prepare(target, config)
    except CannotBuild as exc:
        send_back(result, config, replay={"fuzzer_error": f"cannot build a side: {exc}"})
        return
    target = prepared.target
    spec = dict(payload["input"], device=args["device"])
    problem = unbuildable(target, spec)
    if problem:
        send_back(result, config, replay={"invalid_input": problem})
        return
    Path(args["journal"]).write_text(json.dumps({"spec": spec, "started": time.time()}))  # the watchdog's clock
    try:
        found = run_example(target, spec, config=config, sync_rule=prepared.sync_rule)
    except CudaContextLost as lost:
        send_back(result, config, replay={"crash": f"CUDA context lost: {lost}"})
        return
    except Exception as exc:
        fatal = fatal_cuda_error(exc)  # as the fuzz worker judges it (fuzz.engine.runner): the context is gone
        if fatal is None:
            if isinstance(exc, HarnessError):
                send_back(result, config, replay={"fuzzer_error": str(exc)})
                return
            raise
        send_back(result, config, replay={"crash": f"CUDA context lost: harness: {str(fatal).splitlines()[0]}"})
        return
    send_back(result, config, replay={
        "verdict": found.verdict.value, "mismatches": [m.as_json() for m in found.mismatches],
        "exceptions": {side: raised.type_name if raised else None
                       for side, raised in (("legacy", found.legacy.raised), ("optimized", found.optimized.raised))},
        "oracles": list(found.oracles)})


# ---------------------------------------------------------------- parent side

def fuzz_isolated(target: Target, config: RunConfig, deadline: float | None, isolation: Isolation) -> TargetEntry:
    """Fuzz ``target`` in worker processes; return its entry."""
    workdir = isolation.workdir or Path(tempfile.mkdtemp(prefix="syncfuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    journal = workdir / f"{target.name}.journal.json"
    result = workdir / f"{target.name}.result.json"
    total: TargetEntry | None = None
    starts = own_crashes = victims = early_deaths = 0
    while True:
        done = total.examples if total else 0  # the examples: shrink steps come on top (fuzz/engine/runner.py)
        if config.max_examples is not None and total and done >= config.max_examples:
            break
        if deadline is not None and total and time.monotonic() >= deadline:
            break
        for stale in (journal, journal.with_suffix(".snapshot.json"), result):
            stale.unlink(missing_ok=True)
        job_config = config if config.max_examples is None else config.replace(max_examples=config.max_examples - done)
        # Each fresh worker continues on fresh seeds (its own chunk numbers).
        args = job_args(target.name, job_config, first_chunk=starts * 1_000_000, journal=journal, result=result,
                        ends_at=None if deadline is None else time.time() + (deadline - time.monotonic()))
        starts += 1
        args_path = workdir / f"{target.name}.args.json"
        args_path.write_text(json.dumps(args))
        part, crash = _run_worker(args_path, target, job_config, journal, result, isolation)
        if (crash is None and part.fuzzer_error and part.fuzzer_error.startswith(DIED_BEFORE_FIRST)
                and isolation.under_mps() and early_deaths < MAX_EARLY_DEATHS_UNDER_MPS):
            # Under MPS a fault of another client can end a worker that is still starting (its CUDA
            # context, or the server, refused): a fresh worker waits for the server and tries again.
            early_deaths += 1
            sys.stderr.write(f"[fuzz] {target.name}: {part.fuzzer_error} under MPS; starting a fresh worker\n")
            continue
        total = part if total is None else total + part
        if crash is None:
            break
        spec, verdict, detail = crash
        if verdict is Verdict.CRASH and victims < MAX_VICTIMS_PER_TARGET and _may_be_victim(spec, isolation):
            replayed = _replay_outside_mps(target, config, spec, detail, workdir, isolation)
            if replayed is not None and replayed.crashed is None:
                # Another client's fault ended this context: the example is what its replay says, and the
                # target keeps its restarts (docs/gpu-sharing.md#faults).
                victims += 1
                isolation.victims_replayed += 1
                sys.stderr.write(f"[fuzz] {target.name}: its CUDA context was ended under MPS ({detail[:120]}); "
                                 f"re-run outside MPS in a fresh process: {replayed.verdict}\n")
                total = total + _replayed_entry(target, config, total, spec, replayed)
                continue
        more = own_crashes < config.max_restarts
        own_crashes += 1
        sys.stderr.write(f"[fuzz] {target.name}: {verdict.value} ({detail})"
                         + ("; starting a fresh worker\n" if more else "; no restarts left for this target\n"))
        total = total + _crash_entry(target, config, total, spec, detail, verdict)
        if not more:
            break
    assert total is not None
    return total


DIED_BEFORE_FIRST = "worker died before its first example"
MAX_EARLY_DEATHS_UNDER_MPS = 3  # fresh starts per target after a death before any example, under MPS

# A target whose CUDA examples keep dying under MPS, and keep passing when re-run outside it, is not
# re-run forever: past this many, a death counts as the target's own crash.
MAX_VICTIMS_PER_TARGET = 20


def _may_be_victim(spec: dict, isolation: Isolation) -> bool:
    """A CUDA example whose worker died while it was an MPS client: another client's fatal fault ends
    every context on the GPU (NVIDIA's MPS guide), so the death may not be this example's."""
    return str(spec.get("device", "")).startswith("cuda") and isolation.under_mps()


def _replay_outside_mps(target: Target, config: RunConfig, spec: dict, detail: str, workdir: Path,
                        isolation: Isolation) -> Any:
    """The example re-run in a fresh process that is no MPS client (fuzz/run/replay.py); None if it cannot be."""
    from fuzz.engine.repro import repro_payload
    from fuzz.engine.runner import crash_result  # with torch: only once a worker has died
    from fuzz.run.replay import replay_file

    path = workdir / f"{target.name}.mps-victim.json"
    write_json(path, repro_payload(target, crash_result(spec, detail), config))
    try:
        return replay_file(str(path), env=outside_mps(isolation.full_env()), device_known=True)
    except FuzzError as exc:
        sys.stderr.write(f"[fuzz] {target.name}: the example could not be re-run outside MPS ({exc})\n")
        return None


def _replayed_entry(target: Target, config: RunConfig, total: TargetEntry, spec: dict, replayed: Any) -> TargetEntry:
    """A victim's example as its replay judged it: agree counts as agree; a failure is the target's own."""
    if replayed.verdict == Verdict.AGREE.value:
        device = spec["device"]
        return TargetEntry(name=target.name, upstream=tuple(target.upstream), devices=(device,),
                           expected_optimized_syncs=target.expected_optimized_syncs,
                           by_device={device: DeviceTally(examples=1, verdicts={Verdict.AGREE.value: 1})})
    found = "; ".join(str(m.get("detail", m))[:120] for m in replayed.mismatches[:2]) or replayed.verdict
    return _crash_entry(target, config, total, spec, f"re-run outside MPS after its context was ended: {found}",
                        Verdict(replayed.verdict))


def _crash_entry(target: Target, config: RunConfig, total: TargetEntry, spec: dict, detail: str,
                 verdict: Verdict) -> TargetEntry:
    """A dead worker's example as an entry: counted, and saved the first time it is seen."""
    from fuzz.engine.repro import repro_payload, save_repro
    from fuzz.engine.runner import crash_result, failure_of  # with torch: only once a worker has died

    crash = crash_result(spec, detail, verdict)
    failure = failure_of(crash)
    if failure.signature not in {f.signature for f in total.failures} and config.corpus is not None:
        path = save_repro(Path(config.corpus) / "failures", repro_payload(target, crash, config))
        failure = failure_of(crash, path)
    tally = DeviceTally(examples=1, verdicts={crash.verdict.value: 1})
    return TargetEntry(name=target.name, upstream=tuple(target.upstream), devices=(crash.device,),
                       expected_optimized_syncs=target.expected_optimized_syncs,
                       by_device={crash.device: tally}, failures=(failure,),
                       first_failure_at=total.examples + 1)


def worker_env(env: dict[str, str | None] | None) -> dict[str, str]:
    """A worker process' environment: the child protocol's (fuzz/run/child.py) with the isolation's changes."""
    return child_env(env)


def _run_worker(args_path: Path, target: Target, config: RunConfig, journal: Path, result: Path,
                isolation: Isolation) -> tuple[TargetEntry, tuple[dict, Verdict, str] | None]:
    worker = isolation.worker()
    try:
        worker.submit(args_path)
    except (BrokenPipeError, OSError):  # died between jobs: one fresh start
        isolation.discard_worker()
        worker = isolation.worker()
        worker.submit(args_path)
    answer, hung = watch(worker, args_path, journal, config.example_timeout)
    if hung:
        isolation.discard_worker()
    elif answer is not None and result.exists():
        return _read_result(result, config), None
    else:
        worker.process.wait()
        worker.drain()
        isolation.discard_worker()
    returncode = worker.process.returncode
    tail = worker.tail
    snapshot = journal.with_suffix(".snapshot.json")
    part = (TargetEntry.from_json(json.loads(snapshot.read_text()), "worker snapshot") if snapshot.exists()
            else _empty_entry(target, config))
    record = read_journal(journal)
    if "spec" not in record:
        # Nothing ran: an import or set-up failure is the fuzzer's, not a verdict.
        return replace(part, fuzzer_error=f"{DIED_BEFORE_FIRST} ({death(returncode)}): "
                                          f"{tail[-1] if tail else '(no output)'}"), None
    if hung:
        return part, (record["spec"], Verdict.HANG, f"example ran past the {config.example_timeout:g} s watchdog")
    if returncode == EXIT_CONTEXT_LOST and "fatal" in record:
        return part, (record["spec"], Verdict.CRASH, record["fatal"])
    last = next((line for line in reversed(tail) if line.strip()), "(no output)")
    return part, (record["spec"], Verdict.CRASH, f"{death(returncode)}; last output: {last[:300]}")


def _empty_entry(target: Target, config: RunConfig) -> TargetEntry:
    """The entry of a target that ran no example in this worker."""
    from fuzz.engine.runner import TargetOutcome

    return TargetOutcome(target, tuple(d for d in config.devices if d in target.devices)).entry()


def _read_result(path: Path, sent: RunConfig) -> TargetEntry:
    return TargetEntry.from_json(read_back(path, sent, "the worker")["entry"], "worker result")


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m fuzz.run.isolation --serve  (started by fuzz run; reads job files on stdin)")
    sys.exit(_serve())
