"""A target that spends its whole budget share before its first example.

Its input model takes ``SETUP_SECONDS`` to build its strategy (as a heavy
import or a slow first CUDA call would), so in a run with ``--budget`` below
that, every item after it finds the budget spent and runs no example -- on any
machine, however loaded: the test of "untested" and exit 3 needs no timing
luck. Registered with ``SYNCFUZZ_TARGET_MODULES=tests.slow_targets``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from fuzz.targets import catalog_targets, resolve_object

CATALOG = catalog_targets()

SETUP_SECONDS = 1.5
_OFFSETS = next(t for t in CATALOG if t.name == "fla-chunk-offsets")


class SlowToDrawInputs:
    """fla-chunk-offsets' input model, slow to set up."""

    def __init__(self) -> None:
        model = resolve_object(_OFFSETS.inputs)
        self.inner = model() if isinstance(model, type) else model

    def specs(self, *args: Any) -> Any:
        time.sleep(SETUP_SECONDS)
        return self.inner.specs(*args)

    def materialize(self, *args: Any) -> Any:
        return self.inner.materialize(*args)


TARGETS = [dataclasses.replace(_OFFSETS, name="slow-to-draw", inputs="tests.slow_targets:SlowToDrawInputs")]


def stuck_after_saying_so(cu_seqlens: Any, chunk_size: int) -> Any:
    """Correct, until ``cu_seqlens`` holds three sequences: then it creates the
    file named by SYNCFUZZ_TEST_STUCK and sleeps, so a test knows the run is
    stuck here (every earlier item done) before it sends a signal."""
    import os
    from pathlib import Path

    from optimized.fla_index import prepare_chunk_offsets

    if cu_seqlens.numel() > 3:
        # Written aside, then renamed: the test polls for the file and reads it at once,
        # and a plain write_text is seen as an empty file in between (CI, 2026-12-01).
        stuck = Path(os.environ["SYNCFUZZ_TEST_STUCK"])
        aside = stuck.with_name(stuck.name + f".{os.getpid()}.tmp")
        aside.write_text(str(os.getpid()))  # whoever is stuck here
        os.replace(aside, stuck)
        time.sleep(3600)
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


TARGETS.append(dataclasses.replace(_OFFSETS, name="stuck", optimized="tests.slow_targets:stuck_after_saying_so"))


def off_by_one(cu_seqlens: Any, chunk_size: int) -> Any:
    """Wrong on every input: the interrupt tests need a failure found at once."""
    from optimized.fla_index import prepare_chunk_offsets

    return prepare_chunk_offsets(cu_seqlens, chunk_size) + 1


def off_by_one_then_stuck_in_replay(cu_seqlens: Any, chunk_size: int) -> Any:
    """``off_by_one`` while fuzzing; in a confirmation replay (a worker's replay job,
    fuzz.run.isolation._replay_job) it says so in SYNCFUZZ_TEST_STUCK and sleeps, so a
    test can signal the run while it confirms."""
    import os
    import sys
    from pathlib import Path

    if _in_replay_job(sys._getframe(1)):
        stuck = Path(os.environ["SYNCFUZZ_TEST_STUCK"])
        aside = stuck.with_name(stuck.name + f".{os.getpid()}.tmp")
        aside.write_text(str(os.getpid()))
        os.replace(aside, stuck)
        time.sleep(3600)
    return off_by_one(cu_seqlens, chunk_size)


def _in_replay_job(frame: Any) -> bool:
    """Whether this call runs inside a worker's replay job (the stack holds fuzz.run.isolation._replay_job)."""
    while frame is not None:
        # By file: the worker runs fuzz/run/isolation.py as __main__.
        if frame.f_code.co_name == "_replay_job" and frame.f_code.co_filename.endswith("isolation.py"):
            return True
        frame = frame.f_back
    return False


TARGETS.append(dataclasses.replace(_OFFSETS, name="always-diverges", optimized="tests.slow_targets:off_by_one"))
TARGETS.append(dataclasses.replace(_OFFSETS, name="stuck-in-replay",
                                   optimized="tests.slow_targets:off_by_one_then_stuck_in_replay"))
