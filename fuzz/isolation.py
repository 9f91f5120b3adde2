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
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from fuzz.compare import Verdict
from fuzz.merge import merge_entry
from fuzz.report import failure_entry, outcome_entry, worst, write_json
from fuzz.repro import repro_payload, save_repro
from fuzz.runner import RunOptions, TargetOutcome, crash_result, fuzz_target
from fuzz.targets import Target, lookup

EXIT_CONTEXT_LOST = 86
STARTUP_ALLOWANCE = 120.0  # seconds for a worker to import torch and reach its first example
SNAPSHOT_EVERY = 2.0  # seconds between outcome snapshots in the journal


@dataclass
class Isolation:
    example_timeout: float = 120.0
    max_restarts: int = 3  # per target: one that keeps crashing must not eat the run
    workdir: Path | None = None  # journals and results; a temporary folder if None
    env: dict[str, str] | None = None  # extra environment for workers (e.g. CUDA_VISIBLE_DEVICES)
    _process: "WorkerProcess | None" = field(default=None, init=False, repr=False, compare=False)

    def worker(self) -> "WorkerProcess":
        """The live worker process, started if there is none."""
        if self._process is None or not self._process.alive:
            self._process = WorkerProcess(self.env)
        return self._process

    def discard_worker(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process = None


# ---------------------------------------------------------------- worker side

def _serve() -> int:
    """Run jobs until stdin closes: each stdin line names an args file; each
    finished job is answered with a line on the control channel."""
    # The control channel is the original stdout; fd 1 now points at stderr,
    # so nothing the code under test prints can garble the protocol.
    control = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if line.strip():
            _run_job(line.strip())
            control.write(f"done {line.strip()}\n")
    return 0


def _run_job(args_path: str) -> None:
    args = json.loads(Path(args_path).read_text())
    extra = [args["target_module"]] if args.get("target_module") else []
    (target,) = lookup([args["target"]], extra)
    journal = Path(args["journal"])
    last_snapshot = [0.0]

    def snapshot(outcome: TargetOutcome, force: bool = False) -> None:
        # At the first example, then every few seconds: a crash loses at most
        # that much of the tally (the crashing input itself is in the journal).
        # Snapshotting every young example cost ~30% of a cheap target's time
        # in budgeted runs, whose short items are always young.
        if force or time.monotonic() - last_snapshot[0] > SNAPSHOT_EVERY:
            last_snapshot[0] = time.monotonic()
            write_json(journal.with_suffix(".snapshot.json"), outcome_entry(outcome))

    journal_fd = os.open(journal, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def record(payload: dict) -> None:
        # Rewritten in place, once per example: ~8 us, where write-then-rename
        # cost ~120 us (ext4), a fifth of a cheap target's example. A reader
        # racing the rewrite sees an empty or partial record, which
        # fuzz.isolation._journal treats as unreadable and the watchdog keeps its
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
    options = RunOptions(
        devices=tuple(args["devices"]), seed=args["seed"], contract=args["contract"],
        max_examples=args.get("max_examples"), budget=args.get("budget"),
        corpus=Path(args["corpus"]) if args.get("corpus") else None,
        target_module=lambda t: args.get("target_module"), first_chunk=args["first_chunk"],
        stress=args.get("stress", False), upstream=args.get("upstream", False),
        before_example=before_example, after_chunk=lambda o: snapshot(o, force=True),
        on_context_lost=on_context_lost,
        progress=_progress_to_stderr(),
    )
    try:
        outcome = fuzz_target(target, options, deadline)
    finally:
        os.close(journal_fd)
    write_json(Path(args["result"]), outcome_entry(outcome))


def _progress_to_stderr():
    from fuzz.report import progress_printer

    return progress_printer(sys.stderr)


# ---------------------------------------------------------------- parent side

def _death(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"worker killed by {name}"
    return f"worker exited with status {returncode}"


def _pump(stream, keep: deque) -> None:
    """Echo a worker's stderr (progress lines) and keep its tail for crash reports."""
    for line in iter(stream.readline, ""):
        keep.append(line.rstrip())
        sys.stderr.write(line)
    stream.close()


def fuzz_isolated(target: Target, options: RunOptions, deadline: float | None, isolation: Isolation) -> dict:
    """Fuzz ``target`` in worker processes; return its report entry."""
    workdir = isolation.workdir or Path(tempfile.mkdtemp(prefix="syncfuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    journal = workdir / f"{target.name}.journal.json"
    total: dict | None = None
    seen_crashes: set[tuple[str, str]] = set()
    for attempt in range(isolation.max_restarts + 1):
        done = total["examples"] if total else 0
        if options.max_examples is not None and total and done >= options.max_examples:
            break
        if deadline is not None and total and time.monotonic() >= deadline:
            break
        for stale in (journal, journal.with_suffix(".snapshot.json"), workdir / f"{target.name}.result.json"):
            stale.unlink(missing_ok=True)
        args = {
            "target": target.name, "target_module": options.target_module(target),
            "devices": list(options.devices), "seed": options.seed, "contract": options.contract,
            "max_examples": None if options.max_examples is None else options.max_examples - done,
            "budget": options.budget, "ends_at": None if deadline is None else time.time() + (deadline - time.monotonic()),
            "corpus": str(options.corpus) if options.corpus else None,
            "journal": str(journal), "result": str(workdir / f"{target.name}.result.json"),
            "first_chunk": attempt * 1_000_000, "stress": options.stress, "upstream": options.upstream,
        }
        args_path = workdir / f"{target.name}.args.json"
        args_path.write_text(json.dumps(args))
        part, crash = _run_worker(args_path, journal, workdir / f"{target.name}.result.json", isolation)
        total = merge_entry(total, part)
        if crash is None:
            break
        spec, verdict, detail = crash
        more = attempt < isolation.max_restarts
        sys.stderr.write(f"[fuzz] {target.name}: {verdict.value} ({detail})"
                         + ("; starting a fresh worker\n" if more else "; no restarts left for this target\n"))
        signature = (verdict.value, detail.split(";")[0])
        if signature in seen_crashes:
            _count_crash(total, spec, verdict)  # the same crash again: counted, saved once
            continue
        seen_crashes.add(signature)
        failure = crash_result(spec, detail, verdict)
        path = None
        if options.corpus is not None:
            payload = repro_payload(target, failure, seed=options.seed, contract=options.contract,
                                    target_module=options.target_module(target), stress=options.stress)
            payload["example_timeout"] = isolation.example_timeout
            path = save_repro(options.corpus / "failures", payload)
        total["failures"].append(failure_entry(failure, path))
        _count_crash(total, spec, verdict)
    assert total is not None
    total["verdict"] = "skipped" if total["skipped"] else (
        "fuzzer-error" if total["fuzzer_error"] else worst(f["verdict"] for f in total["failures"]))
    return total


def _count_crash(total: dict, spec: dict, verdict: Verdict) -> None:
    total["examples"] += 1
    empty = {"legacy": {}, "optimized": {}}
    tally = total["by_device"].setdefault(spec["device"], {"examples": 0, "verdicts": {}, "both_raised": 0,
                                                            "syncs_per_call": dict(empty),
                                                            "hidden_syncs_per_call": dict(empty)})
    tally["examples"] += 1
    tally["verdicts"][verdict.value] = tally["verdicts"].get(verdict.value, 0) + 1
    if total["first_failure_at"] is None:
        total["first_failure_at"] = total["examples"]


class WorkerProcess:
    """One persistent worker: jobs go in on stdin, "done" lines come back on
    stdout, stderr is echoed (progress) and its tail kept for crash reports."""

    def __init__(self, env: dict[str, str] | None) -> None:
        full_env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, full_env.get("PYTHONPATH")]))
        full_env.update(env or {})
        # Its own session: a hang is killed with its whole process group. When
        # the parent dies, stdin closes and the worker ends by itself.
        self.process = subprocess.Popen([sys.executable, "-m", "fuzz.isolation", "--serve"], env=full_env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, bufsize=1, start_new_session=True)
        self.tail: deque = deque(maxlen=20)
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(self.process.stderr, self.tail), daemon=True).start()
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        for line in iter(self.process.stdout.readline, ""):
            self.answers.put(line.strip())
        self.answers.put(None)  # closed: the process ended

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def submit(self, args_path: Path) -> None:
        self.process.stdin.write(f"{args_path}\n")
        self.process.stdin.flush()

    def answer(self, timeout: float) -> str | None:
        """The next answer line, "" if none came within ``timeout``, None once the process ended."""
        try:
            return self.answers.get(timeout=timeout)
        except queue.Empty:
            return ""

    def kill(self) -> None:
        if self.alive:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


def _run_worker(args_path: Path, journal: Path, result: Path,
                isolation: Isolation) -> tuple[dict, tuple[dict, Verdict, str] | None]:
    worker = isolation.worker()
    try:
        worker.submit(args_path)
    except (BrokenPipeError, OSError):  # died between jobs: one fresh start
        isolation.discard_worker()
        worker = isolation.worker()
        worker.submit(args_path)
    submitted = time.time()
    hung = False
    started = None
    while True:
        answer = worker.answer(timeout=0.1)
        if answer is None or answer == f"done {args_path}":
            break
        started = _journal(journal).get("started") or started  # keep the last good reading
        limit = isolation.example_timeout if started else STARTUP_ALLOWANCE
        if time.time() - (started or submitted) > limit:
            hung = True
            break
    if hung:
        isolation.discard_worker()
    elif answer is not None and result.exists():
        return json.loads(result.read_text()), None
    else:
        worker.process.wait()
        _drain(worker)
        isolation.discard_worker()
    returncode = worker.process.returncode
    tail = worker.tail
    snapshot = journal.with_suffix(".snapshot.json")
    part = json.loads(snapshot.read_text()) if snapshot.exists() else _empty_entry(args_path)
    record = _journal(journal)
    if "spec" not in record:
        # Nothing ran: an import or set-up failure is the fuzzer's, not a verdict.
        part["fuzzer_error"] = (f"worker died before its first example ({_death(returncode)}): "
                                f"{tail[-1] if tail else '(no output)'}")
        return part, None
    if hung:
        return part, (record["spec"], Verdict.HANG, f"example ran past the {isolation.example_timeout:g} s watchdog")
    if returncode == EXIT_CONTEXT_LOST and "fatal" in record:
        return part, (record["spec"], Verdict.CRASH, record["fatal"])
    last = next((line for line in reversed(tail) if line.strip()), "(no output)")
    return part, (record["spec"], Verdict.CRASH, f"{_death(returncode)}; last output: {last[:300]}")


def _drain(worker: WorkerProcess) -> None:
    """Give the stderr pump a moment to keep the dead worker's last lines."""
    deadline = time.monotonic() + 2.0
    while worker.process.stderr and not worker.process.stderr.closed and time.monotonic() < deadline:
        time.sleep(0.02)


def _journal(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _empty_entry(args_path: Path) -> dict:
    args = json.loads(args_path.read_text())
    extra = [args["target_module"]] if args.get("target_module") else []
    (target,) = lookup([args["target"]], extra)
    return outcome_entry(TargetOutcome(target, tuple(args["devices"])))


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m fuzz.isolation --serve  (started by fuzz run; reads job files on stdin)")
    sys.exit(_serve())
