"""The one protocol for the fuzzer's child processes.

The fuzzer starts Python children of its own: the worker process (fuzz/run/isolation.py), which runs the
isolated fuzz jobs and the replay and ``--confirm`` jobs (fuzz/run/replay.py), the pytest-xdist controller
whose workers fuzz the items (fuzz/run/workers.py, fuzz/run/xdist_items.py) and the MPS guardian
(fuzz/run/gpushare.py). Each of them

- gets its environment from ``child_env``: this process' (or the caller's) with the repository root
  first on ``PYTHONPATH`` (the children import ``fuzz`` from this source tree, installed or not), the
  libraries' thread pools set (``worker_threads_env``) and the caller's changes applied last;
- is sent the run config whole (``config_payload``) and sends back the config as it read it with its
  answer (``send_back``); the parent refuses an answer run with other settings (``read_back``,
  ``check_config_came_back``): a setting must not be lost on the way to a child. That is the worker's
  job and result files (a replay job's config is the one its repro file saved, fuzz/engine/repro.py) and
  the xdist run and item files; the guardian needs none.

A worker process has one channel (``WorkerProcess``): a job file's path in on its stdin, ``done PATH`` back
on its stdout once the job's answer is written, its stderr kept (and echoed for a fuzz job); and one
watchdog (``watch``): the job's journal names the example it started and when, so a job that starts no
example within ``STARTUP_ALLOWANCE`` or whose example outruns its limit is a hang, and a process that
ends without answering died.

It imports nothing of the engine but its error type, its atomic writer, the worker's status-line printer
and ``REPO_ROOT`` (the source tree, defined in the ground, fuzz/versions.py).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Mapping, Protocol, TextIO

from fuzz.errors import HarnessError
from fuzz.reports.outputs import write_json
from fuzz.reports.report import PROGRESS_MARK, show_worker_line
from fuzz.versions import REPO_ROOT  # the source tree, defined once (fuzz.versions); re-exported

STARTUP_ALLOWANCE = 120.0  # seconds for a worker to import torch (a CUDA context) and reach its job's first example
WORKER_COMMAND = ("-m", "fuzz.run.isolation", "--serve")  # the worker process (fuzz/run/isolation.py _serve)

# The thread pools a worker's libraries start for themselves. torch's intra-op threads are set in the fuzz
# process (fuzz.engine.runner.single_threaded, SYNCFUZZ_THREADS); these are read from the environment when each
# library loads, so they must be set before the process starts. Measured on the H200 host (16 cores,
# 2026-12-02, lab/gpu-runs/2026-12-02-mps-h200.md): a CPU-only 16-worker run of two targets did 1.53x
# the examples with them at 1 (72,953 vs 47,806 in 20 s); on the 2-core host no difference.
THREAD_POOL_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def worker_threads_env(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Each library's threads for a worker process: SYNCFUZZ_THREADS (default 1, as torch's), unless the
    caller's environment sets the variable itself."""
    environ = os.environ if environ is None else environ
    threads = environ.get("SYNCFUZZ_THREADS", "1")
    return {name: threads for name in THREAD_POOL_ENV if name not in environ}


def apply_env(env: dict[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """``env`` with ``changes`` applied (a None value removes the variable)."""
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def child_env(extra: Mapping[str, str | None] | None = None, *, base: Mapping[str, str] | None = None,
              threads: bool = True) -> dict[str, str]:
    """The environment of a child process: ``base`` (default this process') with the repository root first
    on PYTHONPATH, then the thread pools (``threads``; the replay and guardian children never had them),
    then ``extra`` (a None value removes the variable; MPS' variables come this way, fuzz/run/gpushare.py)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return apply_env(env, {**(worker_threads_env(env) if threads else {}), **(extra or {})})


class Config(Protocol):
    """What the protocol needs of a run config (fuzz.config.RunConfig, not imported: this is a leaf)."""

    def to_json(self) -> dict[str, Any]: ...


def config_payload(config: Config) -> dict[str, Any]:
    """The config as it travels to a child and back: all of it (tests/unit/test_config.py sets every field)."""
    return config.to_json()


REPLAY_JOB = "replay"  # a job file's "kind" for a replay (fuzz/run/replay.py); a fuzz job has none


def replay_job_args(repro: str, device: str, config: Config, *, journal: Path, result: Path) -> dict[str, Any]:
    """One replay job for a worker: the repro file, the device to replay it on, and the config the file saved
    (sent, and read back with the answer)."""
    return {"kind": REPLAY_JOB, "repro": repro, "device": device, "config": config_payload(config),
            "journal": str(journal), "result": str(result)}


def check_config_came_back(sent: Config, received: Any, where: str) -> None:
    """Refuse an answer whose config is not the one sent: a setting lost or changed on the way is a fuzzer
    bug, and the answer is not the run's. ``where`` names the child, e.g. "the worker"."""
    expected = config_payload(sent)
    if received == expected:
        return
    received = received if isinstance(received, dict) else {}
    lost = sorted(k for k in expected.keys() | received.keys() if received.get(k) != expected.get(k))
    raise HarnessError(f"{where} ran with other settings than it was sent ({', '.join(lost)})")


def send_back(path: Path, config: Config, **answer: Any) -> None:
    """The child's answer, written atomically (the parent may poll for it), with the config as it read it."""
    write_json(path, {"config": config_payload(config), **answer})


def read_back(path: Path, sent: Config, where: str) -> dict[str, Any]:
    """A child's answer, once its config is checked against the one it was sent."""
    data = json.loads(Path(path).read_text())
    check_config_came_back(sent, data.get("config"), where)
    return data


# ---------------------------------------------------------------- the worker channel and its watchdog

def death(returncode: int) -> str:
    """How a worker process ended, in words."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"worker killed by {name}"
    return f"worker exited with status {returncode}"


def _pump(stream: TextIO, keep: deque, echo: bool, progress: bool) -> None:
    """Keep the tail of a worker's stderr for crash reports; with ``echo``, show it too (status lines, what
    the code under test prints; the live progress lines only with ``progress``)."""
    live = sys.stderr.isatty()
    for line in iter(stream.readline, ""):
        keep.append(line.rstrip())
        if echo and (progress or not line.startswith(PROGRESS_MARK)):
            show_worker_line(line, sys.stderr, live)
    stream.close()


class WorkerProcess:
    """One persistent worker process (fuzz/run/isolation.py): jobs go in on stdin, "done" lines come back on
    stdout, stderr is kept (its tail, for crash reports) and, with ``echo``, shown. ``env`` is its whole
    environment (``child_env``'s)."""

    def __init__(self, env: Mapping[str, str], *, progress: bool = True, echo: bool = True) -> None:
        # Its own session: a hang is killed with its whole process group. When
        # the parent dies, stdin closes and the worker ends by itself.
        self.process = subprocess.Popen([sys.executable, *WORKER_COMMAND], env=dict(env),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, bufsize=1, start_new_session=True)
        self.tail: deque = deque(maxlen=20)
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(self.process.stderr, self.tail, echo, progress), daemon=True).start()
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

    def drain(self) -> None:
        """Give the stderr pump a moment to keep the dead worker's last lines."""
        deadline = time.monotonic() + 2.0
        while self.process.stderr and not self.process.stderr.closed and time.monotonic() < deadline:
            time.sleep(0.02)

    def last_line(self) -> str:
        """The last line the worker wrote to stderr that is not blank."""
        return next((line for line in reversed(self.tail) if line.strip()), "(no output)")


def read_journal(path: Path) -> dict:
    """A job's journal (the example it started, when; a lost CUDA context's reason): {} while unreadable
    (the worker rewrites it in place, fuzz/run/isolation.py)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def watch(worker: WorkerProcess, args_path: Path, journal: Path, example_timeout: float,
          startup: float = STARTUP_ALLOWANCE) -> tuple[str | None, bool]:
    """The watchdog of a job submitted to ``worker``: (its answer, False) once it is answered, (None, False)
    when the process ended without answering, (the last answer read, True) when it hung -- no example
    started within ``startup`` of now, or the example the journal names ran past ``example_timeout``. Two
    clocks, so a loaded host's slow start-up (torch, a CUDA context) is never judged a hang."""
    submitted = time.time()
    started = None
    while True:
        answer = worker.answer(timeout=0.1)
        if answer is None or answer == f"done {args_path}":
            return answer, False
        started = read_journal(journal).get("started") or started  # keep the last good reading
        limit = example_timeout if started else startup
        if time.time() - (started or submitted) > limit:
            return answer, True
