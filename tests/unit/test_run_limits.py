"""What a run is refused up front: more workers than the host can run, a budget its start-up eats."""

from __future__ import annotations

import pytest

import fuzz.run.limits as limits
from fuzz.cli import main
from fuzz.errors import UsageError
from fuzz.run.limits import (
    CONFIRM_SHARE,
    MEMORY_PER_WORKER_MIB,
    MIN_SECONDS_PER_ITEM,
    WORKER_START_SECONDS,
    XDIST_START_SECONDS,
    XDIST_WORKER_START_SECONDS,
    check_budget,
    min_budget,
)


@pytest.fixture
def host(monkeypatch):
    """A host of 4 cores and 16 GiB available, whatever this one has."""
    def make(cores: int = 4, memory: int | None = 16384) -> None:
        monkeypatch.setattr(limits, "usable_cores", lambda: cores)
        monkeypatch.setattr(limits, "available_memory_mib", lambda: memory)
    make()
    return make


def test_workers_up_to_the_cores_are_accepted(host):
    for workers in (1, 2, 4):
        limits.check_workers(workers)


def test_more_workers_than_cores_is_refused_naming_the_cap(host):
    with pytest.raises(UsageError, match=r"--workers 5 is more than the 4 CPU core\(s\).*use --workers 4 or fewer"):
        limits.check_workers(5)


def test_more_workers_than_memory_holds_is_refused_naming_the_cap(host):
    host(cores=16, memory=3 * MEMORY_PER_WORKER_MIB + 100)
    limits.check_workers(3)
    with pytest.raises(UsageError, match=r"about 640 MiB, so at most 3 fit; use --workers 3 or fewer"):
        limits.check_workers(4)
    host(cores=16, memory=None)  # memory unknown (not Linux): the cores alone
    limits.check_workers(16)


def test_one_worker_is_always_allowed(host):
    host(cores=1, memory=10)
    limits.check_workers(1)


def test_too_many_workers_is_one_line_and_exit_2_before_any_work(host, capsys, tmp_path):
    code = main(["run", "--workers", "9", "--device", "cpu", "--corpus", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "use --workers 4 or fewer" in err, err
    assert not (tmp_path / "c").exists()


def test_this_hosts_own_figures_are_read():
    cores, memory = limits.usable_cores(), limits.available_memory_mib()
    assert cores >= 1 and (memory is None or memory > 0)
    with pytest.raises(UsageError):
        limits.check_workers(cores + 1)


# --------------------------------------------------------------------------- budgets and start-up


def test_min_budget_is_the_start_up_plus_the_items_shares():
    rounds = 22  # the catalog's 22 targets, one worker
    exact = rounds * (WORKER_START_SECONDS + MIN_SECONDS_PER_ITEM) / (1 - CONFIRM_SHARE)
    assert min_budget(22, 1, confirm=3) == 74 == -(-exact // 1)
    assert min_budget(22, 1, confirm=0) == 66
    # Two xdist workers: their start, then 11 rounds, the first on each also paying its fuzz process.
    assert min_budget(22, 2, confirm=0) == -(-(XDIST_START_SECONDS + 11 * (XDIST_WORKER_START_SECONDS + 0.5)) // 1)
    assert min_budget(22, 2, confirm=3) == 58
    assert min_budget(2, 1, confirm=3, isolated=False) == 2  # in-process: no worker start


@pytest.mark.parametrize("items, workers, confirm, isolated", [
    (22, 1, 3, True), (22, 2, 3, True), (44, 2, 0, True), (1, 1, 3, True), (2, 1, 3, False), (7, 16, 3, True)])
def test_the_minimum_named_is_accepted_and_one_second_less_is_refused(items, workers, confirm, isolated):
    needed = min_budget(items, workers, confirm, isolated)
    check_budget(float(needed), items, workers, confirm, isolated)
    with pytest.raises(UsageError, match=rf"use --budget {needed} or more"):
        check_budget(needed - 1.0, items, workers, confirm, isolated)


def test_the_budget_that_left_a_target_untested_is_refused_with_the_minimum():
    """--budget 30 on CPU, every target: accepted before, and glm4v-embeddings ran no example (exit 3)."""
    with pytest.raises(UsageError) as refused:
        check_budget(30.0, 22, 1, 3)
    message = str(refused.value)
    assert "use --budget 74 or more" in message and "starting it" in message and "\n" not in message
    check_budget(1.2, 2, 1, 3, isolated=False)  # tests/e2e/test_model.py's in-process run: still accepted
