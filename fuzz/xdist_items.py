"""Run items as pytest tests, so pytest-xdist schedules them across workers.

``fuzz run --workers N`` writes a run file (options + the planned items),
then runs ``pytest -n N --pyargs fuzz.xdist_items`` with ``SYNCFUZZ_RUN_FILE``
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
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported lazily below: collecting this module must stay cheap
    from fuzz.isolation import Isolation

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


def _worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


def _share_of_what_is_left(run: dict, index: int) -> float:
    """This item's seconds: the time left until the run's end, split over the
    waves of items not yet started (all workers run one wave in parallel).
    Time an item leaves unused, and time lost to start-up, roll over to the
    items after it; the last wave gets all that is left. (Splitting by items
    rather than waves starved a short last wave: 32 workers, 40 items, 3
    targets with no example -- H200 host, 2026-11-29.)"""
    started = Path(run["results"]).parent / "started"
    started.mkdir(exist_ok=True)
    (started / str(index)).touch()
    not_started = len(run["items"]) - sum(1 for _ in started.iterdir()) + 1
    waves = math.ceil(max(not_started, 1) / run["workers"])
    return max(run["ends_at"] - time.time(), 0.0) / waves


def test_fuzz_item(fuzz_item: dict) -> None:
    from fuzz.isolation import Isolation
    from fuzz.plan import Item
    from fuzz.runner import RunOptions, run_item
    from fuzz.targets import lookup

    run = _run()
    assert run is not None
    extra = [run["target_module"]] if run.get("target_module") else []
    (target,) = lookup([fuzz_item["target"]], extra)
    worker = _worker_index()
    gpu = worker % run["gpus"] if run["gpus"] else None
    env = {"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {}
    options = RunOptions(
        devices=tuple(run["devices"]), seed=run["seed"], contract=run["contract"],
        max_examples=run["max_examples"], budget=run["budget"], stress=run["stress"],
        corpus=Path(run["corpus"]), target_module=lambda t: run.get("target_module"),
    )
    isolation = None
    if run["isolation"]:
        # One Isolation per xdist worker: its fuzz process outlives the item,
        # so start-up (torch import, CUDA context) is paid once per worker.
        isolation = _ISOLATIONS.get(worker)
        if isolation is None:
            isolation = _ISOLATIONS[worker] = Isolation(
                example_timeout=run["example_timeout"], max_restarts=run["max_restarts"],
                workdir=Path(run["corpus"]) / "journal" / f"gw{worker}", env=env)
    elif gpu is not None:
        import torch

        torch.cuda.set_device(gpu)
    item = Item(target, fuzz_item["piece"], fuzz_item["pieces"], fuzz_item["seed"], fuzz_item["max_examples"])
    deadline = None
    if run["ends_at"] is not None:
        deadline = time.monotonic() + _share_of_what_is_left(run, fuzz_item["index"])
    entry = run_item(item, options, isolation, deadline)
    # Per item: where it ran and how much it did, so a report shows each
    # worker's (and GPU's) share and the steady-state rate without start-up.
    entry["placement"] = [{"item": item.key, "worker": f"gw{worker}", "gpu": gpu, "pid": os.getpid(),
                           "examples": entry["examples"], "seconds": entry["seconds"]}]
    out = Path(run["results"]) / f"{fuzz_item['index']:05d}.json"
    out.write_text(json.dumps(entry))
    failures = [f for f in entry["failures"] if not f.get("known")]
    assert not failures and not entry["fuzzer_error"], f"{item.key}: {[f['verdict'] for f in failures]}"
