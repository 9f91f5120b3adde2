"""Budget shares: how long the next item of a budgeted run may fuzz.

A run of ``items`` items on ``workers`` parallel slots: when an item starts,
its share is the largest that every item not yet started could still get,
packed into the slots as they come free (this one now, the busy ones when
their items reach what they were promised), never past the run's end. With
equal items that is ``budget / ceil(items / workers)`` each -- at least half
the fair share ``budget x workers / items`` -- and what earlier items left
unused or overran by (start-up, a slow last example, shrinking) moves the
later shares, whatever order and timing the scheduler (pytest-xdist) starts
items in. An item that is the last its worker will run gets all the time left
instead: nothing else can use that slot (fuzz/run/xdist_last.py), and with 44
items on 16 workers 4 slots used to idle for the last round. The older rule
split the time left over "waves" of items not yet started and ignored the items
still running: on 16 workers the first wave got up to 1.3x its share, later
ones more, and 6 of 42 items of a 150 s nightly got nothing (H200 host,
2026-12-01). tests/unit/test_budget.py simulates 1-64 workers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path


def fair_share(now: float, ends_at: float, workers: int, not_started: int, promised_until: Iterable[float]) -> float:
    """Seconds for the item starting ``now`` (``not_started`` counts it).

    The largest share ``s`` such that every item not yet started can still get
    ``s``: packed into the slots as they come free -- this one now, the others
    when the items running on them reach what they were promised -- before the
    run's end. With equal items that is ``budget / ceil(items / workers)`` for
    each; what an item leaves unused or overruns moves the later shares.
    """
    left = max(ends_at - now, 0.0)
    if not_started <= 0 or left <= 0.0:
        return left
    busy = sorted(min(max(until - now, 0.0), left) for until in promised_until)[: max(workers - 1, 0)]
    available = [left] * (workers - len(busy)) + [left - b for b in busy]

    def fits(share: float) -> bool:
        return sum(int(a / share + 1e-9) for a in available) >= not_started

    low, high = 0.0, left
    if fits(high):
        return high
    for _ in range(60):  # bisection to well below a millisecond
        mid = (low + high) / 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def item_share(now: float, ends_at: float, workers: int, not_started: int, promised_until: Iterable[float],
               *, last: bool) -> float:
    """The share of the item starting ``now``: the fair share, or, when it is the last item its worker will
    run (``last``: every item has been handed out), all the time left -- no other item can use that slot."""
    if last:
        return max(ends_at - now, 0.0)
    return fair_share(now, ends_at, workers, not_started, promised_until)


class Board:
    """The shared record of a run's started and finished items: one small file
    per item in a folder every worker of the run sees (the run's own temporary
    folder, so concurrent runs never share one)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def start(self, index: int, *, total: int, workers: int, ends_at: float, last: bool = False) -> float:
        """Record item ``index`` as started; return its share in seconds. ``last``: the item is the last its
        worker will run (fuzz/run/xdist_last.py) -- every item has been handed out, so its slot has nothing else
        to do and the item gets all the time left (the slot counts as busy to the end for the others)."""
        now = time.time()
        started, promised = 0, []
        for path in self.folder.glob("*.start"):
            started += 1
            if not (self.folder / f"{path.stem}.done").exists():
                promised.append(_read_until(path))
        share = item_share(now, ends_at, workers, total - started, promised, last=last)
        tmp = self.folder / f".{index}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"until": now + share}))
        os.replace(tmp, self.folder / f"{index}.start")  # whole or absent: never half-read
        return share

    def finish(self, index: int) -> None:
        (self.folder / f"{index}.done").touch()


def _read_until(path: Path) -> float:
    try:
        return float(json.loads(path.read_text())["until"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0
