"""Budget shares are fair at any scale: a simulated run of items with real
costs (start-up, early finishes, overruns) on 1-64 parallel slots, started in
the order a pytest-xdist-like scheduler starts them, gives every item a share
within a stated factor of its fair share -- and the real file-based board
gives the same shares as the formula."""

from __future__ import annotations

import heapq
import math
import random

import pytest

from fuzz.budget import Board, fair_share

# Every item gets at least 90% of what equal items packed into the slots would
# get (budget / ceil(items / workers)), so at least 45% of the fair share
# budget x workers / items, with overruns of up to 5% of that per item.
PACKED = 0.9


def waves_rule(now: float, ends_at: float, workers: int, not_started: int, promised_until: list[float]) -> float:
    """The rule before 2026-12-01: the time left over the waves not yet started."""
    return max(ends_at - now, 0.0) / math.ceil(max(not_started, 1) / workers)


def simulate(workers: int, items: int, budget: float, seed: int, rule=fair_share, overrun: float = 0.05,
             early: float = 0.2) -> list[float]:
    """Shares granted when each free slot takes the next item; an item uses
    its share plus an overrun of up to 5% of the fair share (its last example,
    start-up of a fresh worker), or stops early (all its examples done)."""
    rng = random.Random(seed)
    fair = budget * workers / items
    free = [(0.0, slot) for slot in range(workers)]  # (time the slot is free, slot)
    heapq.heapify(free)
    running: list[tuple[float, float]] = []  # (finish time, promised until)
    granted = []
    for index in range(items):
        now, slot = heapq.heappop(free)
        running = [(end, until) for end, until in running if end > now]
        share = rule(now, budget, workers, items - index, [until for _, until in running])
        granted.append(share)
        used = share * rng.uniform(0.2, 1.0) if rng.random() < early else share
        used += rng.uniform(0.0, overrun) * fair
        running.append((now + used, now + share))
        heapq.heappush(free, (now + used, slot))
    return granted


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("items", [1, 7, 42, 130])
def test_every_item_gets_a_fair_share_at_any_scale(workers, items):
    budget = 150.0
    packed = budget / math.ceil(items / workers)
    for seed in range(5):
        granted = simulate(workers, items, budget, seed)
        assert min(granted) >= PACKED * packed, (workers, items, seed, min(granted), packed)
        assert min(granted) >= 0.45 * min(budget * workers / items, budget)
        assert max(granted) <= budget + 1e-9


@pytest.mark.parametrize("workers,items", [(16, 42), (32, 40), (2, 7), (64, 130)])
def test_equal_items_get_equal_shares(workers, items):
    """Items that use exactly their share all get budget / ceil(items / workers).
    The rule before (time left over the waves not yet started, blind to the
    items still running) gave the first wave of the H200 nightly 50-75 s each."""
    packed = 150.0 / math.ceil(items / workers)
    exact = simulate(workers, items, 150.0, seed=0, overrun=0.0, early=0.0)
    assert exact == pytest.approx([packed] * items)
    assert max(simulate(workers, items, 150.0, seed=0, rule=waves_rule, overrun=0.0, early=0.0)) > 1.2 * packed


def test_a_share_never_runs_past_the_end_and_is_never_negative():
    assert fair_share(now=100.0, ends_at=90.0, workers=4, not_started=3, promised_until=[200.0]) == 0.0
    assert fair_share(now=0.0, ends_at=10.0, workers=64, not_started=1, promised_until=[]) == 10.0


def test_running_items_keep_what_they_were_promised():
    # 2 workers, 10 s left, one item runs until t=8: the two left fit as 5 + 5
    # on the free slot (the busy one has only 2 s after its item).
    assert fair_share(0.0, 10.0, 2, 2, [8.0]) == pytest.approx(5.0)
    # 7 equal items on 2 slots: 4 rounds of 37.5 s, not 150 * 2 / 7 (the last would starve).
    assert fair_share(0.0, 150.0, 2, 7, []) == pytest.approx(37.5)


def test_the_board_grants_what_the_formula_does(tmp_path, monkeypatch):
    import fuzz.budget as budget

    now = [1000.0]
    monkeypatch.setattr(budget.time, "time", lambda: now[0])
    board = Board(tmp_path / "board")
    ends_at = 1000.0 + 90.0
    # 40 items on 32 workers: two rounds of 45 s.
    assert board.start(0, total=40, workers=32, ends_at=ends_at) == pytest.approx(45.0)
    for index in range(1, 32):
        board.start(index, total=40, workers=32, ends_at=ends_at)
    now[0] += 45.0  # the first wave is done
    for index in range(32):
        board.finish(index)
    # 8 items left, 45 s left, nothing promised: each gets all that is left.
    assert board.start(32, total=40, workers=32, ends_at=ends_at) == pytest.approx(45.0)
    now[0] = ends_at + 1
    assert board.start(33, total=40, workers=32, ends_at=ends_at) == 0.0
