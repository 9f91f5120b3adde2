"""Replay a saved failure in a fresh process.

The parent validates the file and picks the device; a child process
(``python -m fuzz.replay``) rebuilds the inputs from the saved spec, runs both
sides once and prints the result as JSON. A child that dies (device-side
assert, segfault) is reported as such instead of taking the caller down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fuzz.compare import Verdict
from fuzz.devices import cuda_available
from fuzz.errors import HarnessError, UsageError
from fuzz.repro import load_repro

_RESULT_MARK = "SYNCFUZZ-REPLAY-RESULT "


@dataclass
class ReplayResult:
    verdict: str
    device: str
    mismatches: list[dict]
    crashed: str | None = None

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


def replay_file(path: str, device_override: str | None = None, timeout: float | None = None) -> ReplayResult:
    """Validate ``path`` here, run it in a child process, return what happened."""
    payload = load_repro(path)
    if timeout is None:
        # A saved hang waits twice its watchdog; everything else up to 10 min.
        saved = payload.get("example_timeout")
        timeout = 2 * float(saved) if isinstance(saved, (int, float)) and saved > 0 else 600.0
    from fuzz.targets import lookup

    extra = [payload["target_module"]] if payload.get("target_module") else []
    lookup([payload["target"]], extra)  # unknown target: UsageError before spawning
    device = choose_device(payload, device_override)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
    try:
        child = subprocess.run(
            [sys.executable, "-m", "fuzz.replay", str(path), device],
            capture_output=True, text=True, env=env, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return ReplayResult(verdict="hang", device=device, mismatches=[], crashed=f"no result within {timeout:g} s")
    for line in child.stdout.splitlines():
        if line.startswith(_RESULT_MARK):
            data = json.loads(line[len(_RESULT_MARK):])
            if "fuzzer_error" in data:
                raise HarnessError(data["fuzzer_error"])
            if "crash" in data:
                return ReplayResult(verdict="crash", device=device, mismatches=[], crashed=data["crash"])
            return ReplayResult(verdict=data["verdict"], device=device, mismatches=data["mismatches"])
    tail = (child.stderr.strip().splitlines() or ["(no output)"])[-1]
    how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit code {child.returncode}"
    return ReplayResult(verdict="crash", device=device, mismatches=[], crashed=f"child process died with {how}: {tail}")


def _child(path: str, device: str) -> int:
    from fuzz.execute import CudaContextLost, run_example
    from fuzz.targets import lookup

    from fuzz.runner import single_threaded

    single_threaded()
    payload = load_repro(path)
    extra = [payload["target_module"]] if payload.get("target_module") else []
    (target,) = lookup([payload["target"]], extra)
    spec = dict(payload["input"], device=device)
    try:
        result = run_example(target, spec, stress=bool(payload.get("stress")), contract=payload["contract"])
    except CudaContextLost as lost:
        print(_RESULT_MARK + json.dumps({"crash": f"CUDA context lost: {lost}"}), flush=True)
        return 0
    except HarnessError as exc:
        print(_RESULT_MARK + json.dumps({"fuzzer_error": str(exc)}), flush=True)
        return 3
    data = {"verdict": result.verdict.value, "mismatches": [m.as_json() for m in result.mismatches]}
    print(_RESULT_MARK + json.dumps(data), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
