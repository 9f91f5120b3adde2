"""``fuzz run --workers N``: hand the planned items to pytest-xdist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fuzz.errors import FuzzError
from fuzz.isolation import Isolation
from fuzz.merge import finish_entry, merge_entry
from fuzz.plan import Item
from fuzz.runner import RunOptions

ROOT = Path(__file__).resolve().parents[1]


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_with_xdist(items: list[Item], options: RunOptions, isolation: Isolation | None, workers: int,
                   target_module: str | None) -> list[dict]:
    workdir = Path(tempfile.mkdtemp(prefix="syncfuzz-xdist-"))
    results = workdir / "results"
    results.mkdir()
    # Items start when a worker is free; none may run past the run's end.
    ends_at = None if options.budget is None else time.time() + options.budget
    run = {
        "items": [{"index": i, "target": item.target.name, "piece": item.piece, "pieces": item.pieces,
                   "seed": item.seed, "max_examples": item.max_examples}
                  for i, item in enumerate(items)],
        "devices": list(options.devices), "seed": options.seed, "contract": options.contract,
        "max_examples": options.max_examples, "budget": options.budget, "ends_at": ends_at, "workers": workers,
        "stress": options.stress,
        "corpus": str(options.corpus), "target_module": target_module, "results": str(results),
        "gpus": visible_gpus() if "cuda" in options.devices else 0,
        "isolation": isolation is not None,
        "example_timeout": isolation.example_timeout if isolation else None,
        "max_restarts": isolation.max_restarts if isolation else 0,
    }
    run_file = workdir / "run.json"
    run_file.write_text(json.dumps(run))
    env = dict(os.environ)
    env["SYNCFUZZ_RUN_FILE"] = str(run_file)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # Only xdist is needed: loading every installed plugin (hypothesis',
    # pytest-benchmark's, ...) in the controller and in each worker cost
    # 1.5 of 2.0 s of a 2-worker start on the CI host, paid again per worker.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for callers_own in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):  # a caller's pytest set-up is not this one's
        env.pop(callers_own, None)
    command = [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", str(workers), "--dist", "load", "-q",
               "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(workdir), "--pyargs", "fuzz.xdist_items"]
    done = subprocess.run(command, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    entries: dict[str, dict] = {}
    for path in sorted(results.glob("*.json")):
        entry = json.loads(path.read_text())
        entries[entry["name"]] = merge_entry(entries.get(entry["name"]), entry)
    if len(list(results.glob("*.json"))) != len(items):
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise FuzzError(f"pytest-xdist finished {len(list(results.glob('*.json')))} of {len(items)} items "
                        f"(exit {done.returncode}):\n{tail}")
    return [finish_entry(e) for e in entries.values()]
