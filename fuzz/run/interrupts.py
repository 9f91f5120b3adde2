"""SIGTERM and SIGINT in every phase of a run, and the phases themselves.

A run has four phases: ``set-up`` (sides, targets, devices, the plan),
``fuzzing``, ``confirmation`` (fresh-process replays of each failure) and
``writing`` (the report, Markdown, JUnit). A signal in any of them must still
leave the report of what finished (docs/reliability.md). So, while a run is
guarded (``guard_signals``):

* in the first three phases the first signal is raised as KeyboardInterrupt
  where the run is, and each phase turns it into ``fuzz.records.model.Interrupted``
  carrying what it had finished (the items, the failures confirmed so far);
* while outputs are written, signals are *deferred*: the write finishes (a
  report half-written is no report), then the run says it was interrupted;
* a second signal while the first is being handled is recorded, not raised,
  so the clean-up and the report are never cut short (SIGKILL still stops a
  run at once: then no report is written, docs/reliability.md).

``SYNCFUZZ_PHASE_FILE`` names a file each phase appends a line to
(``<phase> <pid>``): logs and tests see where a run is without guessing from
timing. ``SYNCFUZZ_HOLD_PHASE=<phase>`` makes the run wait at the start of
that phase until a signal arrives (60 s at most): the tests use it to send a
signal *in* a phase, reached by an event instead of a sleep.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable

PHASES = ("set-up", "fuzzing", "confirmation", "writing")
PHASE_FILE_ENV = "SYNCFUZZ_PHASE_FILE"
HOLD_PHASE_ENV = "SYNCFUZZ_HOLD_PHASE"
HOLD_SECONDS = 60.0


class _Guard:
    """What the handlers share: the first signal's name, and whether to raise."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.deferring = False
        self.phase = "set-up"
        self.handled = False  # a phase turned the KeyboardInterrupt into Interrupted (interrupted_by())
        self.redelivering = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        redelivered = self.redelivering
        self.redelivering = False
        if self.received is None:
            self.received = signal.Signals(signum).name
        elif not redelivered:
            return  # a second signal: recorded, never raised (the first is being handled)
        if self.deferring or self.handled:
            return
        if _inside_import(frame):
            # An exception raised inside an import can leave a native extension half set up (a
            # KeyboardInterrupt in triton's import aborted the process, 2026-12-01): ask again later.
            self._redeliver(signum, REDELIVER_SECONDS)
            return
        # Raised here, it may still be swallowed (a __del__, a broad except in a library): unless a
        # phase says it handled it, the signal comes again.
        self._redeliver(signum, RETRY_SECONDS)
        raise KeyboardInterrupt

    def _redeliver(self, signum: int, after: float) -> None:
        def again() -> None:
            if not self.handled and not self.deferring and _GUARD is self:
                self.redelivering = True
                os.kill(os.getpid(), signum)

        timer = threading.Timer(after, again)
        timer.daemon = True
        timer.start()


# A signal that lands inside an import is raised once the import is done; one raised but swallowed
# by the code it landed in is raised again after RETRY_SECONDS.
REDELIVER_SECONDS = 0.05
RETRY_SECONDS = 0.5


def _inside_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_GUARD = _Guard()


def hold_early_signals(argv: list[str]) -> None:
    """For ``run``: a signal during the imports and the argument checks (a third
    of a second) is kept, and the run's own guard acts on it at its first phase
    -- a cancelled job gets its report however early it was cancelled. Other
    commands keep Python's handlers."""
    if argv[:1] != ["run"] or threading.current_thread() is not threading.main_thread():
        return
    _GUARD.deferring = True
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _GUARD.handle)


@contextmanager
def guard_signals() -> Iterator[None]:
    """While the block runs, SIGTERM (a CI job cancelled, a host shutting down)
    stops the run as Ctrl-C does. Handlers are restored after; only the main
    thread may set them (elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _GUARD
    outer, _GUARD = _GUARD, _Guard()
    _GUARD.received = outer.received  # one that came before (hold_early_signals): enter() raises it
    previous = {s: signal.signal(s, _GUARD.handle) for s in (signal.SIGTERM, signal.SIGINT)}
    unraisable = sys.unraisablehook
    sys.unraisablehook = _quiet_about_interrupts(unraisable)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        sys.unraisablehook = unraisable
        _GUARD = outer


def _quiet_about_interrupts(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """An unraisable-exception hook that drops our KeyboardInterrupt. Raised where
    Python cannot pass it on (a gc callback -- Hypothesis has one --, a __del__),
    it is swallowed with a traceback on stderr; the guard raises it again
    (RETRY_SECONDS), so the traceback would only alarm the reader."""

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is KeyboardInterrupt and _GUARD.received:
            return
        previous(unraisable)

    return hook


@contextmanager
def deferred() -> Iterator[None]:
    """Signals arriving inside the block are recorded, not raised (``received()`` says)."""
    before = _GUARD.deferring
    _GUARD.deferring = True
    try:
        yield
    finally:
        _GUARD.deferring = before


def received() -> str | None:
    """The first signal this guarded run got ("SIGTERM"), or None."""
    return _GUARD.received


def interrupted_by() -> str:
    """The signal to name for a KeyboardInterrupt: the one received, else Ctrl-C's.
    Called where a phase turns the KeyboardInterrupt into ``Interrupted``: from
    then on the signal is handled and is not raised again."""
    _GUARD.handled = True
    return _GUARD.received or "SIGINT"


def current_phase() -> str:
    """The phase the guarded run is in (the last one entered)."""
    return _GUARD.phase


def enter(phase: str) -> None:
    """Mark the start of ``phase`` (PHASES): the phase file gets a line, and a
    hold asked for this phase waits here for a signal."""
    _GUARD.phase = phase
    if _GUARD.received and not _GUARD.deferring and phase == PHASES[0]:
        raise KeyboardInterrupt  # it came before the run's handlers were set (hold_early_signals)
    path = os.environ.get(PHASE_FILE_ENV)
    if path:
        with open(path, "a") as handle:
            handle.write(f"{phase} {os.getpid()}\n")
    if os.environ.get(HOLD_PHASE_ENV) == phase:
        until = time.monotonic() + HOLD_SECONDS
        # Raising mode: the signal leaves this loop as KeyboardInterrupt; deferred: it sets received().
        while _GUARD.received is None and time.monotonic() < until:
            time.sleep(0.02)


def die_with_parent() -> None:
    """Linux: the kernel kills this child process when its parent dies. A closed
    stdin ends an idle worker too, but one stuck in an example never reads it (a
    SIGTERM'd xdist run left such a worker sleeping for an hour); a confirmation
    replay must not outlive a run killed with SIGKILL either."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the line above
            os._exit(1)


def exit_now(code: int) -> None:
    """End the process with ``code`` once the command is done: its outputs are
    written, so a signal from now on (torch's teardown can take a second) must
    not turn a finished run's exit code into the signal's. The exit handlers
    still run (coverage, Hypothesis), then the streams are flushed."""
    import atexit

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(code)
