"""Replay a saved failure in a fresh process.

The parent validates the file and picks the device; a child process
(``python -m fuzz.run.replay``) rebuilds the inputs from the saved spec, runs both
sides once under the run config saved with the failure (contract, stress,
``--upstream``: the same judgement as the run that found it) and prints the
result as JSON. A child that dies (device-side
assert, segfault) is reported as such instead of taking the caller down.
"""

from __future__ import annotations

import copy
import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from fuzz.config import RunConfig
from fuzz.engine.devices import cuda_available
from fuzz.engine.repro import load_repro, repro_config
from fuzz.errors import HarnessError, ReproFileError, UsageError
from fuzz.records.verdicts import Verdict
from fuzz.run.child import child_env
from fuzz.targets import TARGET_MODULES_ENV
from fuzz.targets import plugin_modules as extra_modules

if TYPE_CHECKING:
    from fuzz.releases import SideChange

STARTUP_ALLOWANCE = 120.0  # seconds for the child to import torch and build a CUDA context

_RESULT_MARK = "SYNCFUZZ-REPLAY-RESULT "
_STARTED_MARK = "SYNCFUZZ-REPLAY-STARTED"


@dataclass
class ReplayResult:
    verdict: str
    device: str
    mismatches: list[dict]
    crashed: str | None = None
    # What a known-issues entry matches on besides the verdict and mismatches (fuzz/run/triage.py).
    exceptions: dict[str, str | None] = field(default_factory=lambda: {"legacy": None, "optimized": None})
    oracles: tuple[str, ...] = ()

    @property
    def still_fails(self) -> bool:
        return self.crashed is not None or self.verdict != Verdict.AGREE.value


def choose_device(payload: dict, override: str | None) -> str:
    saved = payload["input"]["device"]
    device = override or saved
    if device not in ("cpu", "cuda"):
        raise UsageError(f"replay --device {device!r} must be cpu or cuda")
    if device.startswith("cuda") and not cuda_available():
        if override:
            raise UsageError("replay --device cuda: this torch sees no CUDA device; use --device cpu")
        raise UsageError(
            f"this failure was saved on {saved} and needs a GPU to replay as saved; "
            "run it on a CUDA host, or pass --device cpu to try it on the CPU"
        )
    return device


@dataclass(frozen=True)
class Replayable:
    """A validated repro file: its content, the run config that saved it, and each side from a source whose
    files changed since (replayed as it is now unless strict)."""

    payload: dict
    config: RunConfig
    changed: tuple[SideChange, ...] = ()


def replayable(path: str, strict: bool = True) -> Replayable:
    """The repro file validated: its fields, its config, the target it names and the module that registers it
    (trusted or refused), and its sides (still here, still buildable). ``strict``: a side whose files changed
    since the failure was saved is refused (a UsageError naming the first file), else named in ``changed``."""
    from fuzz.releases import CannotBuild, bind_sides, side_changes
    from fuzz.targets import lookup

    payload = load_repro(path)
    config = repro_config(payload, str(path))
    (target,) = lookup([payload["target"]], trusted_modules(payload, config, str(path)))  # unknown: UsageError
    where = f"repro file {str(path)!r}"
    changed = side_changes(payload, config, where)
    if strict and changed:
        raise UsageError(changed[0].refusal(where))
    try:
        bind_sides(target, config)
    except CannotBuild as exc:
        raise UsageError(f"{where}: {exc}") from exc
    return Replayable(payload, config, tuple(changed))


def replay_file(path: str, device_override: str | None = None, timeout: float | None = None,
                env: Mapping[str, str] | None = None, device_known: bool = False,
                strict: bool = True) -> ReplayResult:
    """Validate ``path`` here, run it in a child process, return what happened.

    Two clocks: the child has ``STARTUP_ALLOWANCE`` to import torch and build
    its inputs (it says when it starts the example), then ``timeout`` for the
    example itself -- twice the saved watchdog for a hang, else 10 minutes --
    so a loaded host's slow start-up never replays a crash as a hang. ``env``: the child's environment
    (default this process'; e.g. one outside the run's MPS server, fuzz/run/gpushare.py). ``device_known``: the
    saved device is known to be here (the example just ran on it), so this process does not ask CUDA --
    under MPS, a process that is no CUDA client must not become one, and a server busy with another
    client's fault may not answer. ``strict`` (the default: ``--confirm`` checks the code that found the
    failure): a side from a source whose files changed since the failure was saved is refused; else it is
    replayed as it is now (``replay`` without ``--strict``: the fix-and-recheck loop)."""
    checked = replayable(path, strict)
    payload, config = checked.payload, checked.config
    if timeout is None:
        timeout = 2 * config.example_timeout if payload["verdict"] == Verdict.HANG.value else 600.0
    device = payload["input"]["device"] if device_known else choose_device(payload, device_override)
    child = subprocess.Popen([sys.executable, "-m", "fuzz.run.replay", str(path), device], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=replay_env(env))
    lines: queue.Queue = queue.Queue()
    stderr: list[str] = []
    threading.Thread(target=lambda: [lines.put(line) for line in child.stdout] + [lines.put(None)],
                     daemon=True).start()
    threading.Thread(target=lambda: stderr.extend(child.stderr), daemon=True).start()
    try:
        result_line = _wait_for_result(lines, timeout)
    except BaseException:  # an interrupt (fuzz/run/interrupts.py): the replay goes with the run
        child.kill()
        child.wait()
        raise
    if result_line is _TIMED_OUT:
        child.kill()
        child.wait()
        return ReplayResult(verdict="hang", device=device, mismatches=[],
                            crashed=f"no result within {timeout:g} s of starting the example")
    child.wait()
    if result_line is not None:
        data = json.loads(result_line[len(_RESULT_MARK):])
        if "invalid_input" in data:
            raise ReproFileError(f"repro file {str(path)!r} is invalid: its input cannot be built for "
                                 f"{payload['target']}: {data['invalid_input']}")
        if "fuzzer_error" in data:
            raise HarnessError(data["fuzzer_error"])
        if "crash" in data:
            return ReplayResult(verdict="crash", device=device, mismatches=[], crashed=data["crash"])
        return ReplayResult(verdict=data["verdict"], device=device, mismatches=data["mismatches"],
                            exceptions=data.get("exceptions") or {"legacy": None, "optimized": None},
                            oracles=tuple(data.get("oracles") or ()))
    time.sleep(0.05)  # let the stderr reader keep the dead child's last line
    tail = ("".join(stderr).strip().splitlines() or ["(no output)"])[-1]
    how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit code {child.returncode}"
    return ReplayResult(verdict="crash", device=device, mismatches=[], crashed=f"child process died with {how}: {tail}")


def replay_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A replay child's environment: the child protocol's (fuzz/run/child.py) on ``env`` (default this process').
    No thread pools set: a replay child never had them (it sets torch's itself, fuzz.engine.runner.single_threaded)."""
    return child_env(base=env, threads=False)


_TIMED_OUT = object()


def _wait_for_result(lines: queue.Queue, timeout: float) -> object:
    """The child's result line, None if it ended without one, or _TIMED_OUT."""
    deadline = time.monotonic() + STARTUP_ALLOWANCE
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            return _TIMED_OUT
        if line is None:
            return None
        if line.startswith(_STARTED_MARK):
            deadline = time.monotonic() + timeout
        elif line.startswith(_RESULT_MARK):
            return line.rstrip("\n")


def trusted_modules(payload: dict, config: RunConfig, source: str) -> list[str]:
    """The plug-in modules a replay may import: those the file names, if this
    environment trusts them (``SYNCFUZZ_TARGET_MODULES``). A repro file is
    data: a module it names is never imported on its word alone."""
    named = list(config.target_modules)
    if payload.get("target_module") and payload["target_module"] not in named:
        named.append(payload["target_module"])
    trusted = set(extra_modules())
    needed = payload.get("target_module")
    if needed and needed not in trusted:
        raise ReproFileError(f"repro file {source!r} needs target module {needed!r}, which this environment does not "
                             f"trust; if it is yours, run with {TARGET_MODULES_ENV}={needed}")
    return [m for m in named if m in trusted]


def _child(path: str, device: str) -> int:
    from fuzz.engine.execute import CudaContextLost, fatal_cuda_error, run_example
    from fuzz.engine.runner import single_threaded
    from fuzz.engine.upstream import with_upstream
    from fuzz.releases import CannotBuild, bind_sides
    from fuzz.run.interrupts import die_with_parent
    from fuzz.targets import lookup

    die_with_parent()  # a run killed while confirming leaves no replay behind
    single_threaded()
    payload = load_repro(path)
    config = repro_config(payload, path)
    (target,) = lookup([payload["target"]], trusted_modules(payload, config, path))
    try:
        target = bind_sides(target, config)
    except CannotBuild as exc:
        print(_RESULT_MARK + json.dumps({"fuzzer_error": f"cannot build a side: {exc}"}), flush=True)
        return 3
    target, _ = with_upstream(target, config)
    spec = dict(payload["input"], device=device)
    problem = unbuildable(target, spec)
    if problem:
        print(_RESULT_MARK + json.dumps({"invalid_input": problem}), flush=True)
        return 0
    print(_STARTED_MARK, flush=True)
    try:
        result = run_example(target, spec, config=config)
    except CudaContextLost as lost:
        print(_RESULT_MARK + json.dumps({"crash": f"CUDA context lost: {lost}"}), flush=True)
        return 0
    except Exception as exc:
        fatal = fatal_cuda_error(exc)  # as the fuzz worker judges it (fuzz.engine.runner): the context is gone
        if fatal is None:
            if isinstance(exc, HarnessError):
                print(_RESULT_MARK + json.dumps({"fuzzer_error": str(exc)}), flush=True)
                return 3
            raise
        print(_RESULT_MARK + json.dumps({"crash": f"CUDA context lost: harness: {str(fatal).splitlines()[0]}"}),
              flush=True)
        return 0
    data = {"verdict": result.verdict.value, "mismatches": [m.as_json() for m in result.mismatches],
            "exceptions": {side: raised.type_name if raised else None
                           for side, raised in (("legacy", result.legacy.raised),
                                                ("optimized", result.optimized.raised))},
            "oracles": list(result.oracles)}
    print(_RESULT_MARK + json.dumps(data), flush=True)
    return 0


def unbuildable(target: object, spec: dict) -> str | None:
    """Why the target's input model cannot build inputs from ``spec`` (None: it can).

    A saved spec was drawn by the input model, so one that it cannot build was
    edited or written by another version: the file's problem, not a fuzzer bug.
    """
    model = target.input_model()  # type: ignore[attr-defined]
    for side in ("legacy", "optimized"):
        try:
            model.materialize(copy.deepcopy(spec), target.impl(side), side)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 -- any failure to build is the reason
            return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return None


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
