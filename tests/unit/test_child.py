"""The one child-process protocol (fuzz/run/child.py): what each kind of child gets and sends back.

No child is started here: each kind's environment is built as its parent builds it, and the answers are
written as the children write them. tests/e2e/test_isolation.py, test_replay.py and test_scale.py start
the real ones.
"""

from __future__ import annotations

import json
import os

import pytest

from fuzz.config import RunConfig
from fuzz.errors import HarnessError
from fuzz.run import child
from fuzz.run.gpushare import LOG_ENV, PIPE_ENV, SHARE_ENV, outside_mps
from tests.unit.test_config import everything_set

ROOT = str(child.REPO_ROOT)
MPS = {SHARE_ENV: "mps", PIPE_ENV: "/tmp/syncfuzz-mps-test/pipe", LOG_ENV: "/tmp/syncfuzz-mps-test/log"}


@pytest.fixture
def environ(monkeypatch):
    """This process' environment as a run's would be: a PYTHONPATH of its own, no thread settings."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    for name in (*child.THREAD_POOL_ENV, "SYNCFUZZ_THREADS", SHARE_ENV, PIPE_ENV, LOG_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")


def test_the_repo_root_is_defined_once_and_is_this_source_tree():
    from fuzz import targets, versions

    assert (versions.REPO_ROOT / "fuzz" / "versions.py").is_file()
    assert targets.PROJECT_ROOT is versions.REPO_ROOT and child.REPO_ROOT is versions.REPO_ROOT


def test_child_env_puts_the_root_first_sets_threads_and_applies_the_extras(environ):
    env = child.child_env({"EXTRA": "1", "PYTEST_ADDOPTS": None})
    assert env["PYTHONPATH"] == os.pathsep.join([ROOT, "/elsewhere"])
    assert all(env[name] == "1" for name in child.THREAD_POOL_ENV)
    assert env["EXTRA"] == "1" and "PYTEST_ADDOPTS" not in env
    assert "PYTEST_ADDOPTS" in os.environ, "this process' environment is left alone"
    bare = child.child_env(base={}, threads=False)
    assert bare == {"PYTHONPATH": ROOT}


def test_the_isolated_worker_gets_root_threads_and_the_runs_mps(environ, monkeypatch):
    from fuzz.run.isolation import worker_env

    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the caller's own setting wins
    env = worker_env({**MPS, "CUDA_VISIBLE_DEVICES": "1"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == ROOT
    assert env["OMP_NUM_THREADS"] == "4" and env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "1"
    assert {k: env[k] for k in MPS} == MPS and env["CUDA_VISIBLE_DEVICES"] == "1"


def test_the_xdist_controller_gets_root_threads_mps_and_xdist_alone(environ, tmp_path):
    from fuzz.run.workers import xdist_env

    env = xdist_env(tmp_path / "run.json", MPS)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == ROOT
    assert all(env[name] == "1" for name in child.THREAD_POOL_ENV)
    assert {k: env[k] for k in MPS} == MPS
    assert env["SYNCFUZZ_RUN_FILE"] == str(tmp_path / "run.json") and env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert "PYTEST_ADDOPTS" not in env and "PYTEST_PLUGINS" not in env


def test_a_replay_child_gets_the_root_and_no_thread_settings_as_before(environ, monkeypatch):
    from fuzz.run.isolation import Isolation
    from fuzz.run.replay import replay_env

    env = replay_env()
    assert env["PYTHONPATH"] == os.pathsep.join([ROOT, "/elsewhere"])
    assert not set(child.THREAD_POOL_ENV) & env.keys()
    # An MPS victim's replay (fuzz/run/isolation.py): the isolation's environment, outside the run's MPS server.
    victim = replay_env(outside_mps(Isolation(env=dict(MPS)).full_env()))
    assert victim["PYTHONPATH"].split(os.pathsep)[0] == ROOT
    assert PIPE_ENV not in victim and LOG_ENV not in victim and victim[SHARE_ENV] == "time-sliced"


def test_a_setting_survives_the_round_trip_to_each_child_and_a_changed_one_is_refused(tmp_path):
    """A setting must not be lost on the way to a worker process."""
    from fuzz.records.model import TargetEntry
    from fuzz.run.isolation import _read_result, job_args, job_config
    from fuzz.run.workers import _entries

    config = everything_set()
    entry = TargetEntry(name="fla-chunk-offsets")
    # The isolated worker: the job file in, the result file back.
    args = json.loads(json.dumps(job_args("fla-chunk-offsets", config, first_chunk=0, ends_at=None,
                                          journal=tmp_path / "j", result=tmp_path / "r.json")))
    _, received = job_config(args)
    child.send_back(tmp_path / "r.json", received, entry=entry.to_json())
    assert _read_result(tmp_path / "r.json", config) == entry
    child.send_back(tmp_path / "r.json", received.replace(stress=not config.stress), entry=entry.to_json())
    with pytest.raises(HarnessError, match=r"^the worker ran with other settings than it was sent \(stress\)$"):
        _read_result(tmp_path / "r.json", config)
    # An xdist item: the same answer, named after the item.
    (tmp_path / "items").mkdir()
    child.send_back(tmp_path / "items" / "00000.json", config, entry=entry.to_json())
    assert [e.name for e in _entries([tmp_path / "items" / "00000.json"], config)] == [entry.name]
    child.send_back(tmp_path / "items" / "00001.json", config.replace(seed=config.seed + 1), entry=entry.to_json())
    with pytest.raises(HarnessError, match=r"xdist item 00001 ran with other settings than it was sent \(seed\)"):
        _entries([tmp_path / "items" / "00001.json"], config)


def test_an_answer_without_its_config_is_refused():
    config = RunConfig()
    child.check_config_came_back(config, json.loads(json.dumps(child.config_payload(config))), "the child")
    with pytest.raises(HarnessError, match="the worker ran with other settings"):
        child.check_config_came_back(config, None, "the worker")
    with pytest.raises(HarnessError, match=r"\(surplus\)"):
        child.check_config_came_back(config, {**child.config_payload(config), "surplus": 1}, "the child")
