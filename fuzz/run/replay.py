"""Replay a saved failure in a fresh process.

The parent validates the file and picks the device; a fresh worker process (fuzz/run/isolation.py, the
one child protocol of fuzz/run/child.py) gets it as a replay job: it rebuilds the inputs from the saved
spec, runs both sides once under the run config saved with the failure (contract, stress, ``--upstream``:
the same judgement as the run that found it) and answers with a result file, beside the config it ran
under. The worker's watchdog times it; a worker that dies (device-side assert, segfault) is reported as
such instead of taking the caller down.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from fuzz.config import RunConfig
from fuzz.engine.devices import cuda_available
from fuzz.engine.repro import load_repro, repro_config
from fuzz.engine.repro import trusted_modules as trusted_modules  # re-exported: a replay's plug-in modules
from fuzz.errors import HarnessError, ReproFileError, UsageError
from fuzz.records.verdicts import Verdict
from fuzz.run.child import STARTUP_ALLOWANCE, WorkerProcess, child_env, read_back, replay_job_args, watch  # noqa: F401

if TYPE_CHECKING:
    from fuzz.releases import SideChange

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
    from fuzz.engine.prepare import prepare
    from fuzz.releases import CannotBuild, side_changes
    from fuzz.targets import lookup

    payload = load_repro(path)
    config = repro_config(payload, str(path))
    (target,) = lookup([payload["target"]], trusted_modules(payload, config, str(path)))  # unknown: UsageError
    where = f"repro file {str(path)!r}"
    changed = side_changes(payload, config, where)
    if strict and changed:
        raise UsageError(changed[0].refusal(where))
    try:
        prepare(target, config)  # the sides only: the child decides --upstream and the sync rule
    except CannotBuild as exc:
        raise UsageError(f"{where}: {exc}") from exc
    return Replayable(payload, config, tuple(changed))


def replay_file(path: str, device_override: str | None = None, timeout: float | None = None,
                env: Mapping[str, str] | None = None, device_known: bool = False,
                strict: bool = True) -> ReplayResult:
    """Validate ``path`` here, run it as a job of a fresh worker process, return what happened.

    The worker's watchdog (fuzz.run.child.watch), two clocks: the child has ``STARTUP_ALLOWANCE`` to import
    torch and build its inputs (its journal says when it starts the example), then ``timeout`` for the
    example itself -- twice the saved watchdog for a hang, else 10 minutes -- so a loaded host's slow
    start-up never replays a crash as a hang. ``env``: the child's environment
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
    workdir = Path(tempfile.mkdtemp(prefix="syncfuzz-replay-"))
    journal, result, args_path = (workdir / f"replay.{name}.json" for name in ("journal", "result", "args"))
    args_path.write_text(json.dumps(replay_job_args(str(path), device, config, journal=journal, result=result)))
    worker = WorkerProcess(replay_env(env), echo=False)  # its output is not the replay's: only a death's last line
    try:
        worker.submit(args_path)
        answer, hung = watch(worker, args_path, journal, timeout)
        if hung:
            return ReplayResult(verdict="hang", device=device, mismatches=[],
                                crashed=f"no result within {timeout:g} s of starting the example")
        if answer is not None and result.exists():
            return _replayed(read_back(result, config, "the replay")["replay"], str(path), payload, device)
        worker.process.wait()
        worker.drain()
        code = worker.process.returncode
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return ReplayResult(verdict="crash", device=device, mismatches=[],
                            crashed=f"child process died with {how}: {worker.last_line()}")
    finally:  # an interrupt too (fuzz/run/interrupts.py): the replay goes with the run
        worker.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def _replayed(data: dict, path: str, payload: dict, device: str) -> ReplayResult:
    """A replay job's answer (fuzz/run/isolation.py ``_replay_job``) as the caller's result."""
    if "invalid_input" in data:
        raise ReproFileError(f"repro file {path!r} is invalid: its input cannot be built for "
                             f"{payload['target']}: {data['invalid_input']}")
    if "fuzzer_error" in data:
        raise HarnessError(data["fuzzer_error"])
    if "crash" in data:
        return ReplayResult(verdict="crash", device=device, mismatches=[], crashed=data["crash"])
    return ReplayResult(verdict=data["verdict"], device=device, mismatches=data["mismatches"],
                        exceptions=data.get("exceptions") or {"legacy": None, "optimized": None},
                        oracles=tuple(data.get("oracles") or ()))


def replay_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A replay child's environment: the child protocol's (fuzz/run/child.py) on ``env`` (default this process').
    No thread pools set: a replay child never had them (it sets torch's itself, fuzz.engine.runner.single_threaded)."""
    return child_env(base=env, threads=False)
