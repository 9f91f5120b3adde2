"""Where one example's time goes, timed in the engine's own path (bench part s).

``with stage("calls"): ...`` marks a stage of fuzz/engine/execute.py; it does nothing
but one ContextVar read unless ``recording()`` is active, so the nightly's
hundreds of thousands of examples pay no clock reads for it. Under
``recording()`` each stage adds its seconds and one count to the recorder.
Bench reads those instead of re-running a copy of the pipeline (a copy drifted
from the real one: issue #26).

A stage nested in another is its own: its seconds are taken out of the
enclosing stage's, so the stages of one example add up to no more than its
time. GPU work is asynchronous: a recorder given ``sync`` (bench passes
``torch.cuda.synchronize`` on CUDA) calls it before a stage's clock stops, so
the kernels a stage queued count in that stage. A stage may ask not to be
synced (``sync=False``) where a sync would be seen by a detector armed around
it (fuzz/oracles/syncs.py); what it queued then counts in the stage around it.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Callable, Iterator


@dataclass
class Recorder:
    """Seconds and entries per stage name, accumulated while installed by ``recording()``."""

    sync: Callable[[], None] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # The nested seconds of each open stage, innermost last (taken out of its own).
    _open: list[float] = field(default_factory=list, repr=False)


_RECORDER: ContextVar[Recorder | None] = ContextVar("syncfuzz_stage_recorder", default=None)
_OFF = nullcontext()  # reusable: entering it does nothing


class _Timed:
    __slots__ = ("recorder", "name", "sync", "start")

    def __init__(self, recorder: Recorder, name: str, sync: bool) -> None:
        self.recorder, self.name, self.sync = recorder, name, sync

    def __enter__(self) -> None:
        self.recorder._open.append(0.0)
        self.start = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        recorder = self.recorder
        # No sync on the way out of an exception: a lost CUDA context would raise
        # again from the sync and hide the error the engine has to see.
        if kind is None and self.sync and recorder.sync is not None:
            recorder.sync()
        elapsed = time.perf_counter() - self.start
        nested = recorder._open.pop()
        recorder.seconds[self.name] = recorder.seconds.get(self.name, 0.0) + elapsed - nested
        recorder.counts[self.name] = recorder.counts.get(self.name, 0) + 1
        if recorder._open:
            recorder._open[-1] += elapsed


def stage(name: str, sync: bool = True) -> AbstractContextManager[None]:
    """Time the block as stage ``name`` when recording; otherwise a no-op.
    ``sync=False``: do not call the recorder's ``sync`` when the block ends."""
    recorder = _RECORDER.get()
    if recorder is None:
        return _OFF
    return _Timed(recorder, name, sync)


@contextmanager
def recording(sync: Callable[[], None] | None = None) -> Iterator[Recorder]:
    """Install a fresh recorder for this context (and what it runs) and yield it."""
    recorder = Recorder(sync=sync)
    token = _RECORDER.set(recorder)
    try:
        yield recorder
    finally:
        _RECORDER.reset(token)
