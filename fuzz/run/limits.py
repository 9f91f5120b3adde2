"""What a run is refused before any work: more workers than the host can run, a budget its start-up eats,
an example watchdog shorter than an example. Constants, not live measurements: the same command is refused or
accepted on every machine, however loaded (docs/reliability.md)."""

from __future__ import annotations

import math
import os

from fuzz.errors import UsageError

# Resident memory of one --workers worker: its pytest-xdist process and the isolated fuzz
# process it runs the items in. Peak RSS measured in `fuzz run --device cpu --workers 2
# --budget 60` (2-core host, 2026-12-01): xdist workers 235 MiB each, their fuzz processes
# 349 and 399 MiB. A CUDA worker's context adds to this; on the H200 hosts memory is not the cap.
MEMORY_PER_WORKER_MIB = 640


def usable_cores() -> int:
    """The CPU cores this process may run on (a pinned or containerised run sees its own share)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def available_memory_mib() -> int | None:
    """MemAvailable of /proc/meminfo in MiB; None where it cannot be read (not Linux): no memory cap."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_workers(workers: int) -> None:
    """--workers N within what the host can run: N <= its cores, since the examples are CPU-bound
    (more workers only share the cores and each pays its start-up), and N x a worker's measured
    memory <= the memory available. One worker runs in this process and is always allowed."""
    if workers <= 1:
        return
    cores, memory = usable_cores(), available_memory_mib()
    by_memory = None if memory is None else max(memory // MEMORY_PER_WORKER_MIB, 1)
    if by_memory is not None and by_memory < min(workers, cores):
        raise UsageError(f"--workers {workers}: this host has {memory} MiB of memory available and a worker takes "
                         f"about {MEMORY_PER_WORKER_MIB} MiB, so at most {by_memory} fit; use --workers {by_memory} "
                         "or fewer")
    if workers > cores:
        raise UsageError(f"--workers {workers} is more than the {cores} CPU core(s) this process may use; the "
                         f"examples are CPU-bound, so extra workers only share the cores; use --workers {cores} "
                         "or fewer")


# A watchdog shorter than this would call ordinary examples hangs.
MIN_EXAMPLE_TIMEOUT = 1.0

# Under --budget with --confirm, the share of the budget kept for the replays
# that confirm each failure (fresh processes, a few seconds each).
CONFIRM_SHARE = 0.1

# Below this share an item cannot be expected to run an example: its target's Hypothesis set-up and
# first example come first (measured in a warm process on the 2-core host: 0.003-0.19 s per target).
MIN_SECONDS_PER_ITEM = 0.5

# Start-up paid inside the first item's share on each worker, so a budget that leaves less leaves
# that item untested (exit 3). Measured on the 2-core host, 2026-12-01, 3 trials each:
# an isolated fuzz worker (torch and fuzz imports, its first target's first example) 1.8-2.1 s;
# `--workers 2`: the pytest controller and each xdist worker up to its first item 1.85-2.33 s, then
# that worker's fuzz process 1.8-2.1 s. A --budget 30 run of the 22 targets (1.23 s a share) left
# glm4v-embeddings untested. --in-process pays neither: torch is imported before the fuzzing starts.
# 2.0 s (the isolated maximum) was not enough under --workers 2, where two fuzz processes start at once
# on the 2 cores: --budget 34 left keye-encoder-rope 0.45 s after start-up, and no example. 2.5 s is
# that case with room: --budget 74 (one worker) then tested all 22 targets. Under --workers 2 the
# first item on each worker still had only 0.4-0.7 s after its start-up at --budget 40 (load ~1.8 from
# other jobs) and ran no example: there a worker's start and first example are taken as 4.0 s.
WORKER_START_SECONDS = 2.5
XDIST_START_SECONDS = 2.5
XDIST_WORKER_START_SECONDS = 4.0


def fuzz_seconds(budget: float, confirm: int) -> float:
    """The part of --budget the fuzzing gets: with --confirm, the replays keep CONFIRM_SHARE."""
    return budget * (1 - CONFIRM_SHARE) if confirm else budget


def _start_seconds(workers: int, isolated: bool) -> tuple[float, float]:
    """(before the first items start, inside each worker's first item): the start-up a run pays."""
    if workers > 1:
        return XDIST_START_SECONDS, XDIST_WORKER_START_SECONDS
    return 0.0, WORKER_START_SECONDS if isolated else 0.0


def min_budget(items: int, workers: int, confirm: int, isolated: bool = True) -> int:
    """The smallest whole --budget whose shares let every worker's first item run an example.

    Shares are packed (fuzz.run.budget): ``ceil(items / workers)`` rounds of equal shares out of the
    fuzzing seconds left once the workers are up, and the first item on each worker also pays its
    fuzz process' start-up. A constant per start and per item, not a live measurement: the same
    command is refused or accepted on every machine, however loaded."""
    return math.ceil(_min_budget_seconds(items, workers, confirm, isolated) - 1e-9)


def _min_budget_seconds(items: int, workers: int, confirm: int, isolated: bool) -> float:
    before, inside = _start_seconds(workers, isolated)
    fuzzing = before + math.ceil(items / workers) * (inside + MIN_SECONDS_PER_ITEM)
    return fuzzing / (1 - CONFIRM_SHARE) if confirm else fuzzing


def check_budget(budget: float | None, items: int, workers: int, confirm: int, isolated: bool = True) -> None:
    if budget is None or not items:
        return
    if budget < _min_budget_seconds(items, workers, confirm, isolated) - 1e-9:
        needed = min_budget(items, workers, confirm, isolated)
        before, inside = _start_seconds(workers, isolated)
        share = fuzz_seconds(budget, confirm) / math.ceil(items / workers)
        start = (f", of which the first item on each worker spends {before + inside:g} s starting it (torch import, "
                 "first example)" if inside else "")
        raise UsageError(f"--budget {budget:g} s gives each of the {items} items {share:.2f} s with {workers} "
                         f"worker(s){start}, too little to run an example; use --budget {needed} or more, or fewer "
                         "--target/--pieces")
