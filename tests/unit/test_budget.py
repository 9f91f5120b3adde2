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

from fuzz.run.budget import Board, fair_share, item_share

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


@pytest.fixture
def clocked_board(tmp_path, monkeypatch):
    """A real file board on a clock the test moves: (board, [now])."""
    import fuzz.run.budget as budget

    now = [1000.0]
    monkeypatch.setattr(budget.time, "time", lambda: now[0])
    return Board(tmp_path / "board"), now


def test_the_board_grants_what_the_formula_does(clocked_board):
    board, now = clocked_board
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


def simulate_xdist(workers: int, items: int, budget: float, last_runs_to_end: bool) -> tuple[list[float], float]:
    """Equal items that use exactly their share, scheduled as pytest-xdist's ``load`` mode hands them out:
    two queued per worker at first (all round-robin when there are fewer than two per worker), one more
    each time a worker finishes an item while any is left, "shutdown" once none is; a worker starts its
    next item only when it knows the one after (``nextitem``), which is None after "shutdown"
    (fuzz/run/xdist_last.py). Returns the shares and the share of workers x budget the items filled."""
    pending = list(range(items))
    queues: list[list[int]] = [[] for _ in range(workers)]
    shut = [False] * workers
    if items < 2 * workers:
        for index in range(items):
            queues[index % workers].append(pending.pop(0))
    else:
        for queue in queues:
            queue.extend(pending[:2])
            del pending[:2]
    if not pending:
        shut = [True] * workers
    running: list[tuple[float, float]] = []  # (finish, promised until) of items started
    started = 0
    shares: list[float] = []
    events = [(0.0, worker) for worker in range(workers)]  # (time the worker is free, worker)
    heapq.heapify(events)
    while events:
        now, worker = heapq.heappop(events)
        queue = queues[worker]
        if not queue:
            continue
        if len(queue) == 1 and not shut[worker]:  # the controller answers the finished item first
            if pending:
                queue.append(pending.pop(0))
            else:
                shut[worker] = True
        queue.pop(0)
        last = not queue and shut[worker]
        running = [(end, until) for end, until in running if end > now]
        share = item_share(now, budget, workers, items - started, [until for _, until in running],
                           last=last_runs_to_end and last)
        started += 1
        shares.append(share)
        running.append((now + share, now + share))
        heapq.heappush(events, (now + share, worker))
    return shares, sum(shares) / (workers * budget)


@pytest.mark.parametrize("workers,items", [(16, 44), (2, 3), (16, 42), (8, 20), (4, 9), (16, 32), (64, 130)])
def test_a_workers_last_item_fills_its_slot_and_takes_from_no_one(workers, items):
    """The H200 nightly (44 items, 16 workers): with the packed share alone 4 workers ran 2 items and idled
    through the third round (the items filled 0.917 of the slots); letting each worker's last item run to
    the end fills them, and no item gets less than the packed share."""
    packed = 150.0 / math.ceil(items / workers)
    before, filled_before = simulate_xdist(workers, items, 150.0, last_runs_to_end=False)
    after, filled_after = simulate_xdist(workers, items, 150.0, last_runs_to_end=True)
    assert len(after) == items
    assert min(after) >= packed - 1e-6
    assert filled_after == pytest.approx(min(1.0, items / workers))
    assert filled_after >= filled_before
    if items % workers and items > workers:
        assert filled_before < 0.95


def test_the_last_item_on_a_worker_gets_all_the_time_left(clocked_board):
    board, now = clocked_board
    ends_at = 1000.0 + 60.0
    # 3 items on 2 workers: the first gets half; the other worker's only item gets all 60 s, and its slot
    # then counts as busy to the end, so the first worker's second (and last) item gets the rest of its own.
    assert board.start(0, total=3, workers=2, ends_at=ends_at) == pytest.approx(30.0)
    assert board.start(1, total=3, workers=2, ends_at=ends_at, last=True) == pytest.approx(60.0)
    now[0] += 30.0
    board.finish(0)
    assert board.start(2, total=3, workers=2, ends_at=ends_at, last=True) == pytest.approx(30.0)
    now[0] = ends_at + 5
    assert board.start(3, total=4, workers=2, ends_at=ends_at, last=True) == 0.0
