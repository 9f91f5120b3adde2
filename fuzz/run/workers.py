"""``fuzz run --workers N``: hand the planned items to pytest-xdist."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping

from fuzz.config import RunConfig
from fuzz.errors import FuzzError
from fuzz.records.model import Interrupted, TargetEntry, add_entries
from fuzz.run.child import child_env, config_payload, read_back
from fuzz.run.plan import Item


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_file_content(items: list[Item], config: RunConfig, results: Path, seconds: float | None = None,
                     journal: Path | None = None) -> dict:
    """What every xdist worker reads: the whole run config, the items, and the
    run's end (``seconds`` from now, default the config's budget)."""
    # Items start when a worker is free; none may run past the run's end.
    seconds = config.budget if seconds is None else seconds
    ends_at = None if seconds is None else time.time() + seconds
    return {
        "config": config_payload(config),
        "items": [{"index": i, "target": item.target.name, "piece": item.piece, "pieces": item.pieces,
                   "seed": item.seed, "max_examples": item.max_examples}
                  for i, item in enumerate(items)],
        "ends_at": ends_at, "results": str(results),
        "journal": str(journal or results.parent / "journal"),  # each xdist worker's folder goes in it
        "gpus": visible_gpus() if "cuda" in config.devices else 0,
    }


def run_with_xdist(items: list[Item], config: RunConfig, seconds: float | None = None,
                   journal: Path | None = None, show_items: bool = False,
                   env_changes: Mapping[str, str | None] | None = None) -> list[TargetEntry]:
    """Run ``items`` on ``config.workers`` xdist workers; ``env_changes`` reach every worker and its fuzz
    processes (GPU sharing: fuzz/run/gpushare.py)."""
    workdir = Path(tempfile.mkdtemp(prefix="syncfuzz-xdist-"))
    results = workdir / "results"
    results.mkdir()
    run = run_file_content(items, config, results, seconds, journal)
    workers = config.workers
    run_file = workdir / "run.json"
    run_file.write_text(json.dumps(run))
    env = xdist_env(run_file, env_changes)
    command = [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-p", "fuzz.run.xdist_last", "-n", str(workers),
               "--dist", "load", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(workdir),
               "--pyargs", "fuzz.run.xdist_items"]
    try:
        done = _run_showing_items(command, env, workdir, results, items, show_items)
    except KeyboardInterrupt:  # pytest is killed; keep what finished
        from fuzz.run.interrupts import interrupted_by

        signal_name = interrupted_by()  # first: the signal is handled, not raised again while results are read
        entries = _entries(sorted(results.glob("*.json")), config)
        shutil.rmtree(workdir, ignore_errors=True)
        raise Interrupted(entries, signal_name) from None
    paths = sorted(results.glob("*.json"))
    if len(paths) != len(items):  # the run's folder stays, for whoever looks into it
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise FuzzError(f"pytest-xdist finished {len(paths)} of {len(items)} items "
                        f"(exit {done.returncode}; its files: {workdir}):\n{tail}")
    entries = _entries(paths, config)
    # The run file, the items' results and the budget board are read: a nightly a day must not leave a folder
    # in the temporary directory each time (the journals, which a crash report names, live in the corpus).
    shutil.rmtree(workdir, ignore_errors=True)
    return entries


def xdist_env(run_file: Path, env_changes: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The pytest-xdist controller's environment (its workers and their fuzz processes inherit it): the
    child protocol's (fuzz/run/child.py) with the run file, xdist alone and the caller's changes."""
    return child_env({
        "SYNCFUZZ_RUN_FILE": str(run_file),
        # Only xdist is needed: loading every installed plugin (hypothesis',
        # pytest-benchmark's, ...) in the controller and in each worker cost
        # 1.5 of 2.0 s of a 2-worker start on the CI host, paid again per worker.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        # A caller's pytest set-up is not this one's.
        "PYTEST_ADDOPTS": None, "PYTEST_PLUGINS": None,
        **(env_changes or {})})


def _run_showing_items(command: list[str], env: dict, workdir: Path, results: Path, items: list[Item],
                       show: bool) -> subprocess.CompletedProcess:
    """Run pytest; meanwhile print a line for each item whose result appears
    (the xdist workers' own output is captured by pytest)."""
    from fuzz.reports.report import item_line, show_worker_line

    # Its own process group: on an interrupt, pytest and its xdist workers go together.
    process = subprocess.Popen(command, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    shown: set[str] = set()
    try:
        while True:
            finished = process.poll() is not None
            for path in sorted(results.glob("*.json")):
                if show and path.name not in shown:
                    shown.add(path.name)
                    entry = TargetEntry.from_json(json.loads(path.read_text())["entry"], "xdist item")
                    key = items[int(path.stem)].key
                    show_worker_line(item_line(f"{key} ({len(shown)}/{len(items)})", entry), sys.stderr,
                                     sys.stderr.isatty())
            if finished:
                break
            time.sleep(0.5)
    except BaseException:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        raise
    reader.join(timeout=5)
    return subprocess.CompletedProcess(command, process.returncode, "".join(output))


def _entries(paths: list[Path], config: RunConfig) -> list[TargetEntry]:
    entries = []
    for path in paths:
        # Each item sends back the config it ran with: a setting lost on the way is a fuzzer bug.
        data = read_back(path, config, f"xdist item {path.stem}")
        entries.append(TargetEntry.from_json(data["entry"], f"xdist item {path.stem}"))
    return add_entries(entries)
