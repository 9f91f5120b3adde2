"""Holding the copy engine back: a sleep kernel queued on a fresh stream before a call, so that every copy
and kernel the call enqueues is still pending when it returns. ``--stress`` (stress.py) and the race oracle
(races.py) poison host memory in that window; the race oracle also asks whether the sleep is still running
(``holding``), so that a poisoning is known to precede the copies it means to hit."""

from __future__ import annotations

from typing import Any

import torch

SLEEP_CYCLES = 20_000_000  # ~10 ms on an H200: far longer than any staging copy here


class Hold:
    """The held stream: a sleep kernel queued before the copies, and whether the latest sleep still runs."""

    gpu = "cuda"  # the device type whose copies are held

    def __init__(self, cycles: int) -> None:
        self.cycles = cycles
        self.stream = torch.cuda.Stream()
        self._sleeping: torch.cuda.Event | None = None

    def sleep(self) -> None:
        """Queue a sleep on the held stream (the current stream inside ``with torch.cuda.stream``)."""
        torch.cuda._sleep(self.cycles)
        self._sleeping = torch.cuda.Event()
        self._sleeping.record(self.stream)

    def holding(self) -> bool:
        """Whether what is queued behind the latest sleep has certainly not started."""
        return self._sleeping is not None and not self._sleeping.query()

    def on_held_stream(self) -> bool:
        return torch.cuda.current_stream() == self.stream

    def entered(self) -> Any:
        """The context in which the held run's calls run: the held stream made current, after what building
        their inputs queued on the current stream."""
        self.stream.wait_stream(torch.cuda.current_stream())
        return torch.cuda.stream(self.stream)

    def finish(self) -> None:
        """Wait for everything the held run queued."""
        self.stream.synchronize()

    def rearm(self) -> None:
        """A sync inside the call (or the engine's wait between two steps of a sequence) waited the sleep out:
        hold the copies and kernels enqueued from now on."""
        if self.on_held_stream() and not self.holding():
            self.sleep()
