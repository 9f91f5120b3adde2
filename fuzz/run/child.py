"""The one protocol for the fuzzer's child processes.

The fuzzer starts Python children of its own: the isolated worker (fuzz/run/isolation.py), the pytest-xdist
controller whose workers fuzz the items (fuzz/run/workers.py, fuzz/run/xdist_items.py), the replay and
``--confirm`` children (fuzz/run/replay.py) and the MPS guardian (fuzz/run/gpushare.py). Each of them

- gets its environment from ``child_env``: this process' (or the caller's) with the repository root
  first on ``PYTHONPATH`` (the children import ``fuzz`` from this source tree, installed or not), the
  libraries' thread pools set (``worker_threads_env``) and the caller's changes applied last;
- is sent the run config whole (``config_payload``) and sends back the config as it read it with its
  answer (``send_back``); the parent refuses an answer run with other settings (``read_back``,
  ``check_config_came_back``): a setting must not be lost on the way to a child. That is the isolated
  worker's job and result files and the xdist run and item files; a replay child reads its config from
  the repro file itself (fuzz/engine/repro.py), and the guardian needs none.

It imports nothing of the engine but its error type, its atomic writer and ``REPO_ROOT`` (the source
tree, defined in the ground, fuzz/versions.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Protocol

from fuzz.errors import HarnessError
from fuzz.reports.outputs import write_json
from fuzz.versions import REPO_ROOT  # the source tree, defined once (fuzz.versions); re-exported

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
