"""Run items as pytest tests, so pytest-xdist schedules them across workers.

``fuzz run --workers N`` writes a run file (the whole RunConfig + the planned items),
then runs ``pytest -n N --pyargs fuzz.run.xdist_items`` with ``SYNCFUZZ_RUN_FILE``
pointing at it; each test fuzzes one item and writes its entry next to the
run file, and the parent merges the entries. Each xdist worker owns one GPU,
round-robin over the visible GPUs: its isolated fuzz processes get
``CUDA_VISIBLE_DEVICES`` set to that GPU (one CUDA context per GPU and
worker, since contexts sharing a GPU time-slice it).

Without ``SYNCFUZZ_RUN_FILE`` (e.g. when pytest collects the whole package)
this module collects nothing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fuzz.config import RunConfig
from fuzz.run.budget import Board
from fuzz.run.child import send_back

if TYPE_CHECKING:  # imported lazily below: collecting this module must stay cheap
    from fuzz.run.isolation import Isolation

RUN_FILE_ENV = "SYNCFUZZ_RUN_FILE"
_ISOLATIONS: dict[int, "Isolation"] = {}  # xdist worker index -> its Isolation (and fuzz process)


def _run() -> dict | None:
    path = os.environ.get(RUN_FILE_ENV)
    return json.loads(Path(path).read_text()) if path else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fuzz_item" in metafunc.fixturenames:
        run = _run()
        items = run["items"] if run else []
        metafunc.parametrize("fuzz_item", items, ids=[f"{i['target']}[{i['piece'] + 1}/{i['pieces']}]" for i in items])
        if run and items and os.environ.get("PYTEST_XDIST_WORKER"):
            _warm_start(run)


def _warm_start(run: dict) -> None:
    """Start this xdist worker's fuzz process while the worker is still collecting, so its torch import and
    CUDA context overlap the wait for the slowest worker's collection and the first item's scheduling instead
    of coming out of the first item's budget share (#25: on the H200, 16 workers under MPS fuzzed 8.9 workers'
    worth of a 30 s budget; docs/gpu-sharing.md "Start-up")."""
    config = item_config(run)
    if config.isolated:
        _isolation(run, config, _worker_index()).worker()


def _isolation(run: dict, config: RunConfig, worker: int) -> "Isolation":
    """This xdist worker's Isolation: one per worker, so its fuzz process outlives the item and start-up
    (torch import, CUDA context) is paid once per worker."""
    from fuzz.run.isolation import WARM_CUDA_ENV, Isolation

    isolation = _ISOLATIONS.get(worker)
    if isolation is None:
        env = _gpu_env(run, worker)
        if "cuda" in config.devices and run["gpus"]:
            env[WARM_CUDA_ENV] = "1"  # fuzz.run.isolation._serve makes the context before the first job
        isolation = _ISOLATIONS[worker] = Isolation(workdir=Path(run["journal"]) / f"gw{worker}", env=env)
    return isolation


def _gpu_env(run: dict, worker: int) -> dict[str, str | None]:
    """The GPU this worker's fuzz processes see (round-robin over the visible ones), if the run has any."""
    gpu = _gpu(run, worker)
    return {"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {}


def _gpu(run: dict, worker: int) -> int | None:
    return worker % run["gpus"] if run["gpus"] else None


def _worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


def item_config(run: dict) -> RunConfig:
    """The run config exactly as the parent wrote it."""
    return RunConfig.from_json(run["config"], "xdist run file")


def test_fuzz_item(fuzz_item: dict, request: pytest.FixtureRequest) -> None:
    from fuzz.run.orchestrate import run_item
    from fuzz.run.plan import Item
    from fuzz.run.xdist_last import LAST_ON_WORKER
    from fuzz.targets import lookup

    run = _run()
    assert run is not None
    config = item_config(run)
    (target,) = lookup([fuzz_item["target"]], config.target_modules)
    worker = _worker_index()
    gpu = _gpu(run, worker)
    isolation = None
    if config.isolated:
        isolation = _isolation(run, config, worker)
    elif gpu is not None:
        import torch

        torch.cuda.set_device(gpu)
    item = Item(target, fuzz_item["piece"], fuzz_item["pieces"], fuzz_item["seed"], fuzz_item["max_examples"])
    deadline = share = None
    last = request.node.stash.get(LAST_ON_WORKER, False)
    board = Board(Path(run["results"]).parent / "board")
    if run["ends_at"] is not None:
        share = board.start(fuzz_item["index"], total=len(run["items"]), workers=config.workers,
                            ends_at=run["ends_at"], last=last)
        deadline = time.monotonic() + share
    victims_before = isolation.victims_replayed if isolation is not None else 0
    try:
        entry = run_item(item, config, isolation, deadline)
    finally:
        board.finish(fuzz_item["index"])
    # Per item: where it ran and how much it did, so a report shows each
    # worker's (and GPU's) share and the steady-state rate without start-up;
    # under MPS, the examples another client's fault ended (re-run outside MPS).
    placed = {"item": item.key, "worker": f"gw{worker}", "gpu": gpu, "pid": os.getpid(),
              "examples": entry.examples, "seconds": entry.seconds}
    if share is not None:  # the budget's share it was given; the worker's last item runs to the run's end
        placed.update(share=round(share, 3), last_on_worker=last)
    if isolation is not None and isolation.victims_replayed > victims_before:
        placed["mps_victims_replayed"] = isolation.victims_replayed - victims_before
    if isolation is not None and isolation.left_mps:
        placed["left_mps"] = isolation.left_mps
    entry = replace(entry, placement=(placed,))
    out = Path(run["results"]) / f"{fuzz_item['index']:05d}.json"
    send_back(out, config, entry=entry.to_json())  # atomic: the parent polls for it
    failures = [f for f in entry.failures if not f.known]
    assert not failures and not entry.fuzzer_error, f"{item.key}: {[f.verdict for f in failures]}"
