"""Workers sharing a GPU through CUDA MPS (``--gpu-share auto|mps|off``, docs/gpu-sharing.md).

Without MPS the CUDA contexts of the workers on one GPU are time-sliced: on the
H200 host the CUDA examples stopped growing past 2 workers (8 -> 16 workers:
+0%). With NVIDIA's MPS control daemon the workers' kernels share the GPU as
one context's would; 16 workers ran 12-16x one worker (issue #25). The daemon
ships with the Linux driver and needs no GPU setting changed.

This module decides whether a run shares through MPS, starts a private control
daemon (pipe and log folders in the run's journal folder) and stops it when the
run ends -- also on a signal, when the run fails to start, and, through a small
guardian process that waits on a pipe from the run, when the run's own process
dies. A daemon already running is used and left running. When MPS cannot start,
one line says why and the run goes on time-sliced; the report says so.

What the workers see: ``CUDA_MPS_PIPE_DIRECTORY`` (and the log folder) in
their environment, and ``SYNCFUZZ_GPU_SHARE`` naming the mode, which crash
isolation reads (fuzz/run/isolation.py: under MPS a crashed CUDA example is re-run
outside MPS before it counts, since another client's fatal fault may have ended
this worker's context; and a fresh worker waits for the server to take clients).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from fuzz.run.child import apply_env, child_env

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
SHARE_ENV = "SYNCFUZZ_GPU_SHARE"  # the workers' mode: "mps" while they are MPS clients
DEFAULT_PIPE = "/tmp/nvidia-mps"  # where CUDA clients look when PIPE_ENV is unset
# A unix socket's path is at most 107 bytes; the daemon puts "control" and "mps_<n>" files in the pipe folder.
MAX_PIPE_PATH = 80
# A client probe that waits longer than this for the server is "not taking clients".
PROBE_TIMEOUT_S = 60.0
# After a fault ended clients, the server refuses new ones until all of them have exited (NVIDIA's MPS
# guide). A fresh worker waits this long for it, then goes on without MPS.
READY_WAIT_S = 60.0
STOP_WAIT_S = 15.0

# cuInit, then the primary context made current and a small allocation: under MPS that is the moment the
# client connects to the server (a refused client gets CUDA_ERROR_MPS_SERVER_NOT_READY, 807, here).
# ctypes, not torch: about 0.2 s, where importing torch takes seconds.
_PROBE = r"""
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print(f"no CUDA driver library ({exc})"); sys.exit(1)
def check(rc, what):
    if rc:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        print(f"{what}: {name.value.decode() if name.value else rc}"); sys.exit(1)
check(cuda.cuInit(0), "cuInit")
device, context, memory = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
check(cuda.cuMemAlloc_v2(ctypes.byref(memory), 256), "cuMemAlloc")
cuda.cuMemFree_v2(memory)
print("ok")
"""


@dataclass
class Sharing:
    """How this run's workers share the GPU, as the report records it."""

    asked: str  # --gpu-share
    mode: str  # "mps", "time-sliced" (workers share a GPU without MPS), "own-gpu" (one worker per GPU), "none"
    daemon: str | None = None  # "started" (by this run) or "existing" (found running, left running)
    pipe_dir: str | None = None
    log_dir: str | None = None
    note: str | None = None  # why the mode differs from what was asked, or what else a reader must know
    workers: int = 1
    gpus: int = 0

    def env(self) -> dict[str, str | None]:
        """The workers' environment changes (None: removed)."""
        if self.mode != "mps":
            return {SHARE_ENV: self.mode}
        changes: dict[str, str | None] = {SHARE_ENV: "mps", PIPE_ENV: self.pipe_dir}
        if self.log_dir:
            changes[LOG_ENV] = self.log_dir
        return changes

    def to_json(self) -> dict[str, Any]:
        return {"asked": self.asked, "mode": self.mode, "daemon": self.daemon, "pipe_dir": self.pipe_dir,
                "note": self.note, "workers": self.workers, "gpus": self.gpus}


def wanted_mode(asked: str, workers: int, gpus: int, devices: tuple[str, ...]) -> str:
    """The mode ``asked`` means for this run, before anything is started: auto shares through MPS when at
    least two workers land on one GPU (workers go round-robin over the GPUs, fuzz/run/xdist_items.py)."""
    if "cuda" not in devices or gpus == 0:
        return "none"
    shared = workers > gpus
    if asked == "mps" or (asked == "auto" and shared and workers >= 2):
        return "mps"
    return "time-sliced" if shared else "own-gpu"


def outside_mps_changes() -> dict[str, str | None]:
    """The changes that keep a process' CUDA clients out of this run's MPS server."""
    return {PIPE_ENV: None, LOG_ENV: None, SHARE_ENV: "time-sliced"}


def outside_mps(env: Mapping[str, str]) -> dict[str, str]:
    """An environment whose CUDA clients do not join this run's MPS server (a fresh replay's)."""
    return apply_env(dict(env), outside_mps_changes())


def under_mps(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(SHARE_ENV) == "mps"


# ---------------------------------------------------------------- the daemon

def _control(pipe_dir: str, command: str, timeout: float = 10.0) -> subprocess.CompletedProcess | None:
    """One command to the control daemon at ``pipe_dir``; None if the tool is missing or did not answer."""
    binary = shutil.which(CONTROL)
    if binary is None:
        return None
    env = apply_env(dict(os.environ), {PIPE_ENV: pipe_dir})
    try:
        return subprocess.run([binary], input=command + "\n", env=env, capture_output=True, text=True,
                              timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None


def running_daemon() -> str | None:
    """The pipe folder of a control daemon already running where this process' CUDA clients would look."""
    pipe_dir = os.environ.get(PIPE_ENV) or DEFAULT_PIPE
    if not (Path(pipe_dir) / "control").exists():
        return None
    answer = _control(pipe_dir, "get_server_list", timeout=5.0)
    return pipe_dir if answer is not None and answer.returncode == 0 else None


def daemon_pids(pipe_dir: str) -> list[int]:
    """Live MPS processes (control daemon, server) serving ``pipe_dir``, read from /proc (Linux)."""
    found = []
    marker = f"{PIPE_ENV}={pipe_dir}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if not (proc / "comm").read_text().startswith("nvidia-cuda-mps"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie has exited; its parent has not reaped it
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


def client_probe(env: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if a CUDA client with ``env`` gets a context and memory; else what went wrong, in a line."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=dict(env), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"a CUDA client waited {timeout:g} s for the MPS server"
    said = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode == 0:
        return None
    return said[-1] if said else f"the client probe exited with status {done.returncode}"


def wait_until_ready(env: Mapping[str, str], seconds: float = READY_WAIT_S) -> str | None:
    """Probe until the server takes a client (None) or ``seconds`` pass (the last answer)."""
    deadline = time.monotonic() + seconds
    while True:
        problem = client_probe(env, timeout=max(min(deadline - time.monotonic(), PROBE_TIMEOUT_S), 1.0))
        if problem is None or time.monotonic() >= deadline:
            return problem
        time.sleep(1.0)


def _folders(journal: Path) -> tuple[Path, Path]:
    """The daemon's pipe and log folders: in the run's journal folder, unless its path is too long for a
    unix socket (then a short temporary folder; the report's pipe_dir says where)."""
    pipe, log = journal / "mps" / "pipe", journal / "mps" / "log"
    if len(str(pipe.resolve())) > MAX_PIPE_PATH:
        pipe = Path(tempfile.mkdtemp(prefix="syncfuzz-mps-"))
    for folder in (pipe, log):
        folder.mkdir(parents=True, exist_ok=True)
    return pipe.resolve(), log.resolve()


class Daemon:
    """A control daemon this run started, with the guardian that stops it if the run's process dies."""

    def __init__(self, pipe_dir: Path, log_dir: Path) -> None:
        self.pipe_dir, self.log_dir = str(pipe_dir), str(log_dir)
        self.guardian: subprocess.Popen | None = None

    def start(self) -> str | None:
        """Start the daemon and its guardian; None, or why it could not start."""
        binary = shutil.which(CONTROL)
        if binary is None:
            return f"{CONTROL} is not on PATH (it ships with NVIDIA's Linux driver)"
        env = apply_env(dict(os.environ), {PIPE_ENV: self.pipe_dir, LOG_ENV: self.log_dir})
        # Its output goes to a file, not a pipe: a daemon that forks keeps a pipe open, and reading it to
        # the end would wait for the daemon's exit.
        said_file = Path(self.log_dir) / "start.out"
        try:
            with open(said_file, "w") as said_to:
                done = subprocess.run([binary, "-d"], env=env, stdin=subprocess.DEVNULL, stdout=said_to,
                                      stderr=subprocess.STDOUT, timeout=30)
        except (subprocess.TimeoutExpired, OSError) as exc:
            return f"{CONTROL} -d did not start: {exc}"
        if done.returncode != 0:
            said = said_file.read_text(errors="replace").strip().splitlines()
            return f"{CONTROL} -d exited with status {done.returncode}" + (f": {said[-1]}" if said else "")
        # Its own session: a Ctrl-C at the terminal reaches the run, which stops the daemon itself; the
        # guardian only acts when its stdin closes without a word, i.e. when the run's process is gone.
        self.guardian = subprocess.Popen([sys.executable, "-m", "fuzz.run.gpushare", "--guard", self.pipe_dir],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True,
                                         env=child_env(threads=False))
        return None

    def stop(self) -> str | None:
        """Quit the daemon (its server goes with it) and the guardian; None, or what was left running."""
        left = stop_daemon(self.pipe_dir)
        if self.guardian is not None:
            try:
                self.guardian.stdin.write(b"stopped\n")  # the daemon is gone: the guardian just exits
                self.guardian.stdin.close()
            except OSError:
                pass
            try:
                self.guardian.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.guardian.kill()
                self.guardian.wait()
        return left


def stop_daemon(pipe_dir: str) -> str | None:
    """``quit`` to the daemon at ``pipe_dir``, then whatever of it still runs is killed; None when nothing
    is left, else a line naming what was."""
    _control(pipe_dir, "quit")
    deadline = time.monotonic() + STOP_WAIT_S
    while daemon_pids(pipe_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = daemon_pids(pipe_dir)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(1.0)
    left = daemon_pids(pipe_dir)
    return f"MPS processes {left} still run after quit, SIGTERM and SIGKILL" if left else None


def _guard(pipe_dir: str) -> int:
    """The guardian: wait until the run closes our stdin; unless it said it stopped the daemon itself,
    stop it (the run's process died: SIGKILL, a crash of the interpreter, the OOM killer)."""
    said = sys.stdin.read()
    if "stopped" not in said:
        stop_daemon(pipe_dir)
    return 0


# ---------------------------------------------------------------- for a run

@dataclass
class SharingState:
    """The run's sharing and, when it started one, its daemon."""

    sharing: Sharing
    daemon: Daemon | None = field(default=None, repr=False)


def open_sharing(asked: str, workers: int, gpus: int, devices: tuple[str, ...], journal: Path,
                 say: Any = None) -> SharingState:
    """Decide the mode and, for MPS, find or start a daemon; never raises for MPS' own problems."""
    say = say or (lambda line: print(line, file=sys.stderr))
    mode = wanted_mode(asked, workers, gpus, devices)
    sharing = Sharing(asked=asked, mode=mode, workers=workers, gpus=gpus)
    existing = running_daemon() if mode != "none" else None
    if mode != "mps":
        if existing:  # every CUDA client of this user joins it, whatever was asked
            sharing.note = f"an MPS daemon runs at {existing}: CUDA clients use it whatever --gpu-share says"
            sharing.daemon, sharing.pipe_dir = "existing", existing
        return SharingState(sharing)
    if existing:
        sharing.daemon, sharing.pipe_dir = "existing", existing
        return SharingState(sharing)
    pipe_dir, log_dir = _folders(journal)
    daemon = Daemon(pipe_dir, log_dir)
    problem = daemon.start()
    if problem is None:
        probe_env = apply_env(dict(os.environ), {PIPE_ENV: daemon.pipe_dir, LOG_ENV: daemon.log_dir})
        problem = client_probe(probe_env)
        if problem is not None:
            problem = f"the MPS server took no client ({problem})"
            daemon.stop()
    if problem is not None:
        sharing.mode = "time-sliced" if workers > gpus else "own-gpu"
        sharing.note = f"MPS could not start: {problem}"
        say(f"[fuzz] --gpu-share {asked}: {sharing.note}; the workers share the GPU time-sliced")
        return SharingState(sharing)
    sharing.daemon, sharing.pipe_dir, sharing.log_dir = "started", daemon.pipe_dir, daemon.log_dir
    return SharingState(sharing, daemon)


def close_sharing(state: SharingState, say: Any = None) -> None:
    """Stop the daemon this run started (a daemon found running is left alone)."""
    if state.daemon is None:
        return
    left = state.daemon.stop()
    state.daemon = None
    if left:
        state.sharing.note = "; ".join(filter(None, [state.sharing.note, left]))
        (say or (lambda line: print(line, file=sys.stderr)))(f"[fuzz] {left}")


@contextmanager
def gpu_sharing(asked: str, workers: int, gpus: int, devices: tuple[str, ...], journal: Path,
                say: Any = None) -> Iterator[Sharing]:
    """``open_sharing`` for the length of a ``with`` block, closed however the block ends."""
    state = open_sharing(asked, workers, gpus, devices, journal, say)
    try:
        yield state.sharing
    finally:
        close_sharing(state, say)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--guard":
        sys.exit("usage: python -m fuzz.run.gpushare --guard PIPE_DIR  (started by fuzz run)")
    sys.exit(_guard(sys.argv[2]))
