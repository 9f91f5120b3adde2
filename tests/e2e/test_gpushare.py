"""GPU sharing through CUDA MPS (fuzz/run/gpushare.py), on a CPU-only host.

A fake ``nvidia-cuda-mps-control`` on PATH stands in for NVIDIA's: ``-d`` starts a
background process named like the daemon (so fuzz.run.gpushare finds it in /proc) that
creates ``control`` in its pipe folder and ends when ``quit`` is sent. The client probe
(a CUDA context through libcuda) is replaced where a test needs the server to take
clients. The real daemon's behaviour is recorded in lab/gpu-runs/2026-12-02-mps-h200.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fuzz.run import gpushare
from fuzz.run.gpushare import PIPE_ENV, SHARE_ENV, daemon_pids, gpu_sharing, open_sharing, wanted_mode

FAKE_CONTROL = textwrap.dedent('''\
    #!{python}
    import ctypes, os, sys, time
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    if sys.argv[1:] == ["-d"]:
        if os.environ.get("FAKE_MPS_FAIL"):
            print("An instance of this daemon is already running", file=sys.stderr)
            sys.exit(1)
        if os.fork():
            sys.exit(0)
        os.setsid()
        ctypes.CDLL(None).prctl(15, b"nvidia-cuda-mps", 0, 0, 0)  # PR_SET_NAME, as the real daemon's comm
        open(os.path.join(pipe, "control"), "w").close()
        while not os.path.exists(os.path.join(pipe, "quit")):
            time.sleep(0.05)
        os.remove(os.path.join(pipe, "control"))
        os.remove(os.path.join(pipe, "quit"))
        os._exit(0)
    command = sys.stdin.read().strip()
    if not os.path.exists(os.path.join(pipe, "control")):
        print("Cannot find MPS control daemon process", file=sys.stderr)
        sys.exit(1)
    if command == "quit":
        open(os.path.join(pipe, "quit"), "w").close()
    elif command == "get_server_list":
        print("")
    ''')


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    """The fake control tool on PATH; clients are taken (the probe says so)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / gpushare.CONTROL
    tool.write_text(FAKE_CONTROL.format(python=sys.executable))
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(PIPE_ENV, raising=False)
    monkeypatch.setattr(gpushare, "client_probe", lambda env, timeout=0: None)
    monkeypatch.setattr(gpushare, "DEFAULT_PIPE", str(tmp_path / "no-default-daemon"))
    yield tool
    for pipe in tmp_path.rglob("control"):  # a test that failed half-way leaves no fake daemon behind
        gpushare.stop_daemon(str(pipe.parent))


def _gone(pipe_dir: str, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while daemon_pids(pipe_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not daemon_pids(pipe_dir)


@pytest.mark.parametrize("asked, workers, gpus, devices, mode", [
    ("auto", 16, 1, ("cpu", "cuda"), "mps"),
    ("auto", 2, 1, ("cuda",), "mps"),
    ("auto", 1, 1, ("cuda",), "own-gpu"),
    ("auto", 4, 4, ("cuda",), "own-gpu"),  # one worker per GPU: nothing shared
    ("auto", 8, 4, ("cuda",), "mps"),  # two per GPU; one daemon serves them all
    ("off", 16, 1, ("cuda",), "time-sliced"),
    ("mps", 4, 4, ("cuda",), "mps"),
    ("auto", 16, 0, ("cpu",), "none"),
    ("mps", 16, 1, ("cpu",), "none"),  # no CUDA examples: no GPU to share
])
def test_the_mode_each_setting_means(asked, workers, gpus, devices, mode):
    assert wanted_mode(asked, workers, gpus, devices) == mode


def test_a_daemon_is_started_in_the_journal_folder_and_stopped(fake_mps, tmp_path, monkeypatch):
    monkeypatch.setattr(gpushare, "MAX_PIPE_PATH", 400)  # pytest's own tmp_path may be longer than a socket allows
    journal = tmp_path / "j"
    with gpu_sharing("auto", 4, 1, ("cuda",), journal) as sharing:
        assert sharing.mode == "mps" and sharing.daemon == "started"
        assert Path(sharing.pipe_dir) == (journal / "mps" / "pipe").resolve()
        assert daemon_pids(sharing.pipe_dir), "the daemon runs while the block does"
        env = sharing.env()
        assert env[PIPE_ENV] == sharing.pipe_dir and env[SHARE_ENV] == "mps"
    assert _gone(sharing.pipe_dir)
    assert sharing.to_json()["daemon"] == "started"


def test_the_daemon_is_stopped_when_the_block_raises(fake_mps, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with gpu_sharing("mps", 2, 1, ("cuda",), tmp_path / "j") as sharing:
            raise KeyboardInterrupt
    assert _gone(sharing.pipe_dir)


def test_a_running_daemon_is_used_and_left_running(fake_mps, tmp_path, monkeypatch):
    pipe = tmp_path / "theirs"
    pipe.mkdir()
    subprocess.run([str(fake_mps), "-d"], env={**os.environ, PIPE_ENV: str(pipe)}, check=True)
    monkeypatch.setenv(PIPE_ENV, str(pipe))
    assert _wait_for(lambda: (pipe / "control").exists())
    with gpu_sharing("auto", 4, 1, ("cuda",), tmp_path / "j") as sharing:
        assert (sharing.mode, sharing.daemon, sharing.pipe_dir) == ("mps", "existing", str(pipe))
    assert daemon_pids(str(pipe)), "a daemon this run did not start is not this run's to stop"
    gpushare.stop_daemon(str(pipe))
    assert _gone(str(pipe))


def test_off_with_a_daemon_running_says_clients_use_it(fake_mps, tmp_path, monkeypatch):
    pipe = tmp_path / "theirs"
    pipe.mkdir()
    subprocess.run([str(fake_mps), "-d"], env={**os.environ, PIPE_ENV: str(pipe)}, check=True)
    monkeypatch.setenv(PIPE_ENV, str(pipe))
    assert _wait_for(lambda: (pipe / "control").exists())
    state = open_sharing("off", 4, 1, ("cuda",), tmp_path / "j")
    assert state.sharing.mode == "time-sliced" and "whatever --gpu-share says" in state.sharing.note
    gpushare.stop_daemon(str(pipe))


@pytest.mark.parametrize("why", ["missing", "refused", "no-client"])
def test_mps_that_cannot_start_is_one_line_and_the_run_goes_on_time_sliced(fake_mps, tmp_path, monkeypatch, why):
    said = []
    if why == "missing":
        monkeypatch.setenv("PATH", "/nonexistent")
    elif why == "refused":
        monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    else:
        monkeypatch.setattr(gpushare, "client_probe", lambda env, timeout=0: "cuInit: CUDA_ERROR_MPS_CONNECTION_FAILED")
    with gpu_sharing("auto", 16, 1, ("cuda",), tmp_path / "j", say=said.append) as sharing:
        assert sharing.mode == "time-sliced" and sharing.daemon is None
        assert sharing.env() == {SHARE_ENV: "time-sliced"}
    assert len(said) == 1 and said[0].startswith("[fuzz] --gpu-share auto: MPS could not start: ")
    expected = {"missing": "not on PATH", "refused": "exited with status 1: An instance",
                "no-client": "took no client (cuInit: CUDA_ERROR_MPS_CONNECTION_FAILED)"}[why]
    assert expected in said[0] and expected in sharing.note
    assert not list((tmp_path / "j").rglob("control")), "a daemon whose server took no client is stopped"


def test_a_long_journal_path_gets_a_short_pipe_folder(fake_mps, tmp_path):
    journal = tmp_path / ("x" * 90)
    with gpu_sharing("auto", 4, 1, ("cuda",), journal) as sharing:
        assert len(sharing.pipe_dir) <= gpushare.MAX_PIPE_PATH + 30 and "syncfuzz-mps-" in sharing.pipe_dir
        assert (journal / "mps" / "log").is_dir()
    assert _gone(sharing.pipe_dir)


GUARDED_RUN = textwrap.dedent('''\
    import os, signal, sys, time
    from pathlib import Path
    from fuzz.run import gpushare
    gpushare.client_probe = lambda env, timeout=0: None
    gpushare.DEFAULT_PIPE = sys.argv[2]
    how = sys.argv[3]
    if how == "sigterm":
        from fuzz.run.interrupts import guard_signals
        with guard_signals():
            try:
                with gpushare.gpu_sharing("auto", 4, 1, ("cuda",), Path(sys.argv[1])) as sharing:
                    print(sharing.pipe_dir, flush=True)
                    time.sleep(60)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
    else:
        state = gpushare.open_sharing("auto", 4, 1, ("cuda",), Path(sys.argv[1]))
        print(state.sharing.pipe_dir, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the run's process dies without a word
    ''')


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_no_daemon_is_left_when_the_run_is_stopped_or_dies(fake_mps, tmp_path, how):
    """SIGTERM: the run's own clean-up quits the daemon. SIGKILL of the run's process: its guardian sees
    the pipe from the run close and quits it."""
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", GUARDED_RUN, str(tmp_path / "j"),
                              str(tmp_path / "no-default-daemon"), how],
                             stdout=subprocess.PIPE, text=True, cwd=root,
                             env={**os.environ, "PYTHONPATH": str(root)})
    pipe_dir = child.stdout.readline().strip()
    assert pipe_dir and _wait_for(lambda: daemon_pids(pipe_dir))
    if how == "sigterm":
        child.send_signal(signal.SIGTERM)
    child.wait(timeout=60)
    assert _gone(pipe_dir), f"MPS processes left after {how}: {daemon_pids(pipe_dir)}"
    if how == "sigterm":
        assert "interrupted" in child.stdout.read()


def _wait_for(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------- faults under MPS (fuzz/run/isolation.py)

@pytest.fixture
def under_fake_mps(tmp_path, monkeypatch):
    """An isolation whose workers believe they are MPS clients; any example may be a victim (on a GPU host
    only CUDA examples can be) and the server always takes clients again."""
    from fuzz.run import isolation

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.crashers")
    monkeypatch.setenv("SYNCFUZZ_TEST_DIES_ONCE", str(tmp_path / "died"))
    monkeypatch.setattr(isolation, "_may_be_victim", lambda spec, iso: iso.under_mps())
    monkeypatch.setattr(isolation, "wait_until_ready", lambda env, seconds=0: None)
    return isolation.Isolation(workdir=tmp_path / "journal", env={SHARE_ENV: "mps"}, progress=False)


def _run(name, isolation, tmp_path, max_examples=20):
    from fuzz.config import RunConfig
    from fuzz.run.orchestrate import run_item
    from fuzz.run.plan import plan
    from fuzz.targets import lookup

    config = RunConfig(devices=("cpu",), seed=0, max_examples=max_examples, corpus=str(tmp_path / "corpus"),
                       target_modules=("tests.crashers",), example_timeout=60, max_restarts=1)
    (item,) = plan(lookup([name], ["tests.crashers"]), seed=0, pieces=1, max_examples=max_examples)
    try:
        return run_item(item, config, isolation, None)
    finally:
        isolation.discard_worker()


def test_a_victim_is_rerun_outside_mps_and_counted_by_its_replay(under_fake_mps, tmp_path):
    entry = _run("crasher-dies-once", under_fake_mps, tmp_path)
    assert (tmp_path / "died").exists(), "the planted death happened"
    assert entry.verdict == "agree" and not entry.failures
    assert under_fake_mps.victims_replayed == 1
    assert entry.examples >= 20
    assert not list((tmp_path / "corpus" / "failures").glob("*.json")), "a victim's example is no failure"


def test_the_faulting_target_still_gets_its_crash_with_the_input_saved(under_fake_mps, tmp_path):
    entry = _run("crasher-abort", under_fake_mps, tmp_path)
    assert entry.verdict == "crash" and under_fake_mps.victims_replayed == 0
    (failure,) = entry.failures
    saved = json.loads(Path(failure.repro).read_text())
    assert saved["verdict"] == "crash" and len(saved["input"]["cu_seqlens"]) > 3


def test_a_server_that_takes_no_client_sends_the_worker_on_without_mps(under_fake_mps, tmp_path, monkeypatch):
    from fuzz.run import isolation

    monkeypatch.setattr(isolation, "wait_until_ready", lambda env, seconds=0: "cuInit: CUDA_ERROR_MPS_SERVER_NOT_READY")
    entry = _run("crasher-dies-once", under_fake_mps, tmp_path)
    assert under_fake_mps.victims_replayed == 1 and entry.verdict == "agree"
    assert "CUDA_ERROR_MPS_SERVER_NOT_READY" in under_fake_mps.left_mps
    assert not under_fake_mps.under_mps() and under_fake_mps.full_env()[SHARE_ENV] == "time-sliced"


def test_without_mps_a_death_is_the_targets_crash(tmp_path, monkeypatch):
    from fuzz.run.isolation import Isolation

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.crashers")
    monkeypatch.setenv("SYNCFUZZ_TEST_DIES_ONCE", str(tmp_path / "died"))
    entry = _run("crasher-dies-once", Isolation(workdir=tmp_path / "journal", progress=False), tmp_path)
    assert entry.verdict == "crash"


def test_a_worker_dead_before_its_first_example_is_started_again_under_mps(tmp_path, monkeypatch):
    from fuzz.config import RunConfig
    from fuzz.run import isolation
    from fuzz.run.orchestrate import run_item
    from fuzz.run.plan import plan
    from fuzz.targets import lookup

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.dies_at_start")
    monkeypatch.setenv("SYNCFUZZ_TEST_DIES_AT_START", str(tmp_path / "died"))
    monkeypatch.setattr(isolation, "wait_until_ready", lambda env, seconds=0: None)
    config = RunConfig(devices=("cpu",), seed=0, max_examples=5, corpus=str(tmp_path / "corpus"),
                       target_modules=("tests.dies_at_start",), example_timeout=60, max_restarts=0)
    (item,) = plan(lookup(["starts-after-a-death"], ["tests.dies_at_start"]), seed=0, pieces=1, max_examples=5)
    for env, verdict in (({SHARE_ENV: "mps"}, "agree"), ({}, "fuzzer-error")):
        (tmp_path / "died").unlink(missing_ok=True)
        watched = isolation.Isolation(workdir=tmp_path / "journal", env=env, progress=False)
        try:
            entry = run_item(item, config, watched, None)
        finally:
            watched.discard_worker()
        assert (tmp_path / "died").exists() and entry.verdict == verdict, (env, entry.fuzzer_error)


def test_worker_thread_pools_follow_syncfuzz_threads_unless_set():
    from fuzz.run import child

    assert child.worker_threads_env({}) == dict.fromkeys(child.THREAD_POOL_ENV, "1")
    assert child.worker_threads_env({"SYNCFUZZ_THREADS": "2", "OMP_NUM_THREADS": "4"}) == {
        "MKL_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}


def test_a_context_lost_while_building_inputs_is_a_death_not_a_fuzzer_error(under_fake_mps, tmp_path, monkeypatch):
    """On the H200 a victim of another MPS client's illegal address failed in its input model's first CUDA
    call: that must end the worker (so the server takes clients again) and be re-run, like a death in a side."""
    from fuzz.run.isolation import Isolation

    monkeypatch.setenv("SYNCFUZZ_TEST_CONTEXT_GONE", str(tmp_path / "gone"))
    entry = _run("crasher-context-gone-in-inputs", under_fake_mps, tmp_path)
    assert (tmp_path / "gone").exists() and entry.verdict == "agree" and not entry.fuzzer_error
    assert under_fake_mps.victims_replayed == 1
    (tmp_path / "gone").unlink()
    entry = _run("crasher-context-gone-in-inputs", Isolation(workdir=tmp_path / "j2", progress=False), tmp_path)
    assert entry.verdict == "crash" and "CUDA context lost" in entry.failures[0].mismatches[0]["detail"]
