"""Helpers the tests share: run the engine in-process, or the CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fuzz.config import RunConfig
from fuzz.engine.runner import TargetOutcome, fuzz_target
from fuzz.targets import Target

ROOT = Path(__file__).resolve().parents[1]


def fuzz(target: Target, *, max_examples: int = 200, seed: int = 0, devices: tuple[str, ...] = ("cpu",),
         contract: str = "caller", corpus: Path | None = None, stress: bool = False,
         race: bool = False) -> TargetOutcome:
    config = RunConfig(devices=devices, seed=seed, contract=contract, max_examples=max_examples,
                       corpus=str(corpus) if corpus else None, target_modules=("tests.planted",), stress=stress,
                       race=race)
    return fuzz_target(target, config)


def cli(*args: str, extra_env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m fuzz ARGS`` in a fresh process, from the source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "fuzz", *args], capture_output=True, text=True, env=env,
                          cwd=cwd or ROOT, timeout=600)
