"""A run's items, one after another: budget shares, isolation, one entry per target.

``fuzz.engine.runner`` fuzzes one target in this process; this module decides which
item runs next, with what share of the budget, and where (here, or in a
watched worker process: ``fuzz.run.isolation``), then adds the items' entries of
each target up (``fuzz.records.model``). ``fuzz.run.workers`` hands the same items to
pytest-xdist instead.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fuzz.config import NO_HOOKS, Hooks, RunConfig
from fuzz.engine.devices import devices_for
from fuzz.records.model import Interrupted, TargetEntry, add_entries
from fuzz.run.budget import fair_share
from fuzz.run.interrupts import interrupted_by
from fuzz.run.plan import Item, plan
from fuzz.targets import Target

if TYPE_CHECKING:
    from fuzz.run.isolation import Isolation


def fuzz_all(targets: list[Target], config: RunConfig, hooks: Hooks = NO_HOOKS,
             isolation: Isolation | None = None, items: list[Item] | None = None,
             seconds: float | None = None) -> list[TargetEntry]:
    """Fuzz every item (a target, or a piece of one), in worker processes when
    ``isolation`` is given; return one entry per target. A budget (``seconds``,
    default the config's) is shared fairly by the items (fuzz.run.budget); time one
    leaves unused rolls over."""
    if items is None:
        items = plan(targets, seed=config.seed, pieces=1, max_examples=config.max_examples)
    seconds = config.budget if seconds is None else seconds
    entries: list[TargetEntry] = []
    start = time.monotonic()
    try:
        for index, item in enumerate(items):
            deadline = None
            if seconds is not None:
                now = time.monotonic()
                deadline = now + fair_share(now, start + seconds, 1, len(items) - index, ())
            entries.append(run_item(item, config, isolation, deadline, hooks))
            if hooks.item_done:
                hooks.item_done(item, entries[-1])
    except KeyboardInterrupt:
        signal_name = interrupted_by()  # first: the signal is handled, not raised again during the clean-up
        if isolation is not None:
            isolation.discard_worker()
        raise Interrupted(add_entries(entries), signal_name) from None
    return add_entries(entries)


def run_item(item: Item, config: RunConfig, isolation: Isolation | None, deadline: float | None,
             hooks: Hooks = NO_HOOKS) -> TargetEntry:
    """One item's entry: its own seed and share of the examples."""
    item_config = config.replace(seed=item.seed, max_examples=item.max_examples)
    if isolation is not None and devices_for(item.target.devices, config.devices):
        from fuzz.run.isolation import fuzz_isolated

        return fuzz_isolated(item.target, item_config, deadline, isolation)
    from fuzz.engine.runner import fuzz_target  # here: an xdist worker imports this module and needs no torch

    return fuzz_target(item.target, item_config, deadline, hooks).entry()

