"""An xdist worker starts its fuzz process while it collects, and needs no torch itself (#25: start-up came
out of the first item's budget share on every worker; docs/gpu-sharing.md "Start-up")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fuzz.config import RunConfig
from fuzz.run.plan import plan
from fuzz.run.workers import run_file_content
from fuzz.targets import lookup


def _run(tmp_path, devices=("cpu",), gpus=0) -> dict:
    config = RunConfig(devices=devices, max_examples=10)
    items = plan(lookup(["fla-chunk-offsets"]), seed=1, pieces=2, max_examples=10)
    run = json.loads(json.dumps(run_file_content(items, config, tmp_path / "results", journal=tmp_path / "j")))
    run["gpus"] = gpus  # as the parent counted them: the test decides, not this machine
    return run


def test_the_parent_side_of_an_xdist_worker_imports_no_torch():
    """torch's import is ~2 s of a core; 16 xdist workers paid it at the start, when 32 processes want a core."""
    code = ("import sys, fuzz.run.xdist_items, fuzz.run.isolation, fuzz.run.orchestrate, fuzz.run.budget, "
            "fuzz.run.child; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.fixture
def isolations(monkeypatch):
    import fuzz.run.xdist_items as xdist_items

    made: dict = {}
    monkeypatch.setattr(xdist_items, "_ISOLATIONS", made)
    yield made
    for isolation in made.values():
        isolation.discard_worker()


def test_collecting_in_an_xdist_worker_starts_its_fuzz_process(tmp_path, monkeypatch, isolations):
    from fuzz.run.xdist_items import _warm_start

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    _warm_start(_run(tmp_path))
    (isolation,) = isolations.values()
    assert list(isolations) == [3]
    assert isolation._process is not None and isolation._process.alive
    assert isolation.workdir == tmp_path / "j" / "gw3"
    assert isolation.env == {}  # a cpu run: no GPU to pick, no context to make


def test_the_first_item_uses_the_process_the_warm_start_made(tmp_path, monkeypatch, isolations):
    from fuzz.run.xdist_items import _isolation, _warm_start

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    run = _run(tmp_path)
    _warm_start(run)
    started = isolations[0]._process
    isolation = _isolation(run, RunConfig.from_json(run["config"]), 0)
    assert isolation.worker() is started


def test_a_cuda_run_gives_each_worker_its_gpu_and_a_context_made_early(tmp_path, isolations):
    from fuzz.run.isolation import WARM_CUDA_ENV
    from fuzz.run.xdist_items import _isolation

    run = _run(tmp_path, devices=("cpu", "cuda"), gpus=2)
    isolation = _isolation(run, RunConfig.from_json(run["config"]), 5)
    assert isolation.env == {"CUDA_VISIBLE_DEVICES": "1", WARM_CUDA_ENV: "1"}
    assert isolation._process is None  # only the warm start (or the first item) starts it


def test_an_unisolated_run_starts_no_process(tmp_path, monkeypatch, isolations):
    from fuzz.run.xdist_items import _warm_start

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    run = _run(tmp_path)
    run["config"]["isolated"] = False
    _warm_start(run)
    assert isolations == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the line a machine without CUDA gets")
def test_a_warm_up_without_cuda_is_one_line_and_no_error(capsys):
    from fuzz.run.isolation import _warm_cuda

    _warm_cuda()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[fuzz] warm-up: no CUDA context yet (")


@pytest.mark.parametrize("warm", [True, False])
def test_a_fuzz_process_makes_its_cuda_context_before_its_first_job_only_when_asked(warm):
    # The real worker process (python -m fuzz.run.isolation --serve), its stdin closed at once: with the
    # setting it tries the context before reading any job; without it, it does not try.
    from fuzz.run.isolation import WARM_CUDA_ENV

    env = {k: v for k, v in os.environ.items() if k != WARM_CUDA_ENV}
    if warm:
        env[WARM_CUDA_ENV] = "1"
    probe = ("import sys, fuzz.run.isolation as iso\n"
             "real = iso._warm_cuda\n"
             "def traced():\n"
             "    sys.stderr.write('[probe] warm-up called\\n'); real()\n"
             "iso._warm_cuda = traced\n"
             "sys.exit(iso._serve())\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("[probe] warm-up called" in done.stderr) is warm
    if warm and not torch.cuda.is_available():
        assert "[fuzz] warm-up: no CUDA context yet (" in done.stderr
