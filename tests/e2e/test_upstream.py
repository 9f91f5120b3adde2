"""``fuzz run --upstream``: the real vllm as a third side (docs: README)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from tests.support import ROOT, cli

FAKE = str(ROOT / "tests" / "fake_vllm")
FLA = ["--target", "fla-chunk-offsets", "--target", "fla-chunk-indices", "--target", "glm4v-embeddings",
       "--target", "keye-encoder-rope"]


def _run(tmp_path, env):
    result = cli("run", "--upstream", "--device", "cpu", "--seed", "0", "--max-examples", "20", "--in-process",
                 "--confirm", "0", *FLA, "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"),
                 extra_env=env)
    return result, {t["name"]: t for t in json.loads((tmp_path / "r.json").read_text())["targets"]}


def _with_fake(**extra):
    return {"PYTHONPATH": os.pathsep.join([FAKE, str(ROOT)]), **extra}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="real vllm installed")
def test_without_vllm_every_target_says_why_and_the_run_is_incomplete(tmp_path):
    """The run goes on without the third side, but the check asked for did not
    run at all: exit 3 (incomplete), never a silent 0."""
    result, entries = _run(tmp_path, {})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "(--upstream compared no target with the real vllm)" in result.stdout
    assert "cannot import vllm" in entries["fla-chunk-offsets"]["upstream_check"]
    assert entries["keye-encoder-rope"]["upstream_check"].startswith("no upstream callable recorded")
    assert "upstream: fla-chunk-offsets: cannot import" in result.stdout


@pytest.mark.slow
def test_upstream_that_matches_the_copy_agrees(tmp_path):
    result, entries = _run(tmp_path, _with_fake())
    assert result.returncode == 0, result.stdout + result.stderr
    assert entries["fla-chunk-offsets"]["upstream_check"] == "compared with the real vllm function"
    assert entries["fla-chunk-offsets"]["verdict"] == "agree"
    # glm4's module is not in the fake package: listed with its reason
    assert "cannot import vllm.model_executor" in entries["glm4v-embeddings"]["upstream_check"]


def test_upstream_that_drifted_is_its_own_verdict(tmp_path):
    result, entries = _run(tmp_path, _with_fake(FAKE_VLLM_DRIFT="1"))
    assert result.returncode == 1
    (failure,) = entries["fla-chunk-offsets"]["failures"]
    assert failure["verdict"] == "upstream-divergence"
    assert "optimized copy vs real vllm" in failure["mismatches"][0]["detail"]
    assert entries["fla-chunk-indices"]["verdict"] == "agree"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None
                    or "fake_vllm" in str(importlib.util.find_spec("vllm").origin),
                    reason="real vllm not installed (pip install '.[upstream]')")
def test_real_vllm_matches_the_fla_copies(tmp_path):
    result = cli("run", "--upstream", "--device", "cpu", "--seed", "0", "--max-examples", "50", "--in-process",
                 "--confirm", "0", "--target", "fla-chunk-offsets", "--target", "fla-chunk-indices",
                 "--target", "async-tensor-h2d", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"))
    entries = {t["name"]: t for t in json.loads((tmp_path / "r.json").read_text())["targets"]}
    for name, entry in entries.items():
        assert entry["upstream_check"] == "compared with the real vllm function", (name, entry["upstream_check"])
    assert result.returncode == 0, result.stdout


def test_a_drift_found_by_xdist_workers_is_confirmed_and_replays(tmp_path):
    """The --upstream setting reaches each xdist worker, --confirm's fresh
    processes and replay (it used to be dropped at each: "agree" with
    upstream_check null, "confirmed 0/2" flaky, replay "no longer fails")."""
    env = _with_fake(FAKE_VLLM_DRIFT="1")
    result = cli("run", "--upstream", "--device", "cpu", "--seed", "0", "--max-examples", "10", "--workers", "2",
                 "--confirm", "2", "--target", "fla-chunk-offsets", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"), extra_env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    (entry,) = report["targets"]
    assert report["run"]["upstream"] is True and report["run"]["workers"] == 2
    assert entry["upstream_check"] == "compared with the real vllm function"
    (failure,) = entry["failures"]
    assert failure["verdict"] == "upstream-divergence"
    assert failure["confirmed"] == "2/2" and failure["flaky"] is False
    replayed = cli("replay", failure["repro"], extra_env=env)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "UPSTREAM-DIVERGENCE reproduced on cpu" in replayed.stdout


def test_in_process_confirm_replays_with_the_upstream_side(tmp_path):
    result = cli("run", "--upstream", "--device", "cpu", "--seed", "0", "--max-examples", "10", "--in-process",
                 "--confirm", "2", "--target", "fla-chunk-offsets", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"), extra_env=_with_fake(FAKE_VLLM_DRIFT="1"))
    assert result.returncode == 1
    (failure,) = json.loads((tmp_path / "r.json").read_text())["targets"][0]["failures"]
    assert failure["confirmed"] == "2/2" and not failure["flaky"]
    assert "(flaky)" not in result.stdout
