"""The pytest plugin each xdist worker loads beside fuzz.run.xdist_items (``-p fuzz.run.xdist_last``): it tells an
item whether it is its worker's last.

pytest-xdist's ``load`` scheduling gives a worker its next item only when the worker is about to need it,
and sends "shutdown" once no item is left to give out; a worker runs an item only when it knows the next
one (``nextitem``), which is ``None`` exactly when "shutdown" came. So an item whose ``nextitem`` is
``None`` is the last its worker will ever run, and every item of the run has been handed out: its slot
has nothing else to do, and the item may fuzz until the run's end (fuzz.run.budget.Board.start). Before, such
a slot idled: on the H200 nightly (44 items on 16 workers) 4 workers ran 2 items and sat out the third
round, 8% of the fuzzing phase (docs/reliability.md "Budgets")."""

from __future__ import annotations

import pytest

LAST_ON_WORKER = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    item.stash[LAST_ON_WORKER] = nextitem is None  # returns None: pytest's own protocol runs the item
