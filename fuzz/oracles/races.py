"""The race oracle (``--race``, CUDA): host memory rewritten or read while a copy that uses it is pending.

The races sync removal has caused in vLLM are between the host and a pending copy (a reused pinned
staging buffer overwritten before its H2D copy ran: #24527, #28706, #31373, #31841; a pinned D2H result
read before its event: #36013, #36942). On an idle GPU the copy wins, so comparing outputs sees nothing.
Here one side's call is run again, *held*: on a fresh stream that first runs a sleep kernel, so every
copy the call enqueues on it is still pending when the host does the things a real caller may do next:

1. **Caller memory rewritten.** Once the call returned, the host memory the caller owns (what the input
   model handed the call: tensors and arrays in the thunk's closure, the objects ``caller_owned`` names)
   is overwritten with poison where a pending H2D copy reads it. Code that staged its own snapshot
   (``pin_memory()`` of the data, a fresh pinned buffer per call) is immune; code that copies straight
   from memory the caller rewrites for its next step is not.
2. **The next call.** The same function is called once more, on its own inputs poisoned, before any
   wait: a staging buffer the function keeps between calls (a module-level scratch, a ring reused
   without waiting) is rewritten while the first call's copy from it is pending.
3. **Copied-to-host results read early.** The destination of every held ``non_blocking`` D2H copy is
   poisoned right after the copy is enqueued: the pending copy overwrites the poison when it runs, so
   code that waits for it reads real data and code that reads before (a ``.tolist()`` with no event)
   reads poison.

Then the stream is synchronized and the first call's output compared, with the target's comparison,
with the same side's ordinary output on a fresh copy of the same inputs. A difference is a race of that
side; the ``race`` verdict is the optimized side racing where legacy does not (a race both share is
not the change's: relative, as syncs are with sides from sources).

**Soundness.** Poison may only be written while the copies it targets are certainly still pending;
else a copy that already ran would be "raced" by the harness itself. A copy is held when it was enqueued
on the held stream behind a sleep that had not finished; a sync inside the call (legacy's ``.item()``)
waits the sleep out, so before each later ``non_blocking`` copy a new sleep is queued (``Hold.rearm``).
After poisoning, the latest sleep must still be running: then nothing behind it has started. If it is
not, the run is *inconclusive* (reported as no race) and repeated once with a sleep ten times longer.
Copies on another stream (the function's own) are not held: their memory is never poisoned, and
they are listed as unheld, for the CUDA stream sanitizer run (docs/verdicts.md#races) to cover.

What it cannot see: copies issued from C++ (compiled graphs, CUDA graph replay, custom ops) or from
other threads; UVA reads (a kernel reading pinned memory in place: no copy call to see); host memory
freed inside the call (torch's caching host allocator waits for the copy's event before reusing a
pinned block, PyTorch #69124); a stale host mirror (not timing: the differential and invariants judge
it); anything on CPU (no asynchronous copies: ``--stress`` catches outputs aliasing caller memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from fuzz.interface import holding_steps
from fuzz.oracles.copywatch import CopyCall, CopyWatch, caller_site
from fuzz.oracles.hold import SLEEP_CYCLES, Hold
from fuzz.oracles.stress import host_inputs, poison

try:  # numpy 2 moved it
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # numpy 1.x
    _byte_bounds = np.byte_bounds

RETRY_FACTOR = 10  # an inconclusive run is repeated once with a sleep this many times longer
_MAX_DEPTH = 4


# --------------------------------------------------------------------------- memory ranges

def byte_range(obj: Any) -> tuple[int, int] | None:
    """[low, high) of the host bytes a CPU tensor or numpy array spans; None for anything else or empty."""
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu" or obj.numel() == 0:
            return None
        low = high = 0
        for size, stride in zip(obj.shape, obj.stride()):
            extent = (size - 1) * stride
            if extent < 0:
                low += extent
            else:
                high += extent
        start = obj.data_ptr()
        return start + low * obj.element_size(), start + (high + 1) * obj.element_size()
    if isinstance(obj, np.ndarray):
        if obj.size == 0:
            return None
        low, high = _byte_bounds(obj)
        return int(low), int(high)
    return None


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def caller_inputs(thunk: Callable[[], Any]) -> list[Any]:
    """What a caller owns once the call returned: the host inputs of the thunk's closure (as ``--stress`` finds
    them: fuzz/oracles/stress.py, lists of numbers included) and the buffers of the objects its
    ``caller_owned`` attribute names -- objects whose host memory the caller itself rewrites (a CpuGpuBuffer's
    ``.cpu`` / ``.np``), set by the input model; never the function's own state (a pool's slots are its to
    reuse, after waiting). The next call's inputs are poisoned in all of it."""
    owned = getattr(thunk, "caller_owned", ())
    return host_inputs(thunk) + [buffer for obj in owned for buffer in _buffers_of(obj, set(), 0)]


def caller_memory(thunk: Callable[[], Any]) -> list[Any]:
    """``caller_inputs`` that are host memory a copy can read (CPU tensors and arrays, not lists)."""
    return [obj for obj in caller_inputs(thunk) if byte_range(obj) is not None]


def _buffers_of(value: Any, seen: set[int], depth: int) -> Iterator[Any]:
    if id(value) in seen or depth > _MAX_DEPTH:
        return
    seen.add(id(value))
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if byte_range(value) is not None:
            yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _buffers_of(item, seen, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _buffers_of(item, seen, depth + 1)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for item in vars(value).values():
            yield from _buffers_of(item, seen, depth + 1)


# --------------------------------------------------------------------------- the copies of a held run

@dataclass
class HeldCopy:
    direction: str  # "H2D" or "D2H"
    host: Any  # the H2D source or the D2H destination (kept alive until the run is judged)
    site: str  # file:line of the copy
    held: bool  # enqueued on the held stream behind a running sleep
    call: int  # 0: the call judged, 1: the next call


@dataclass
class RaceRecorder:
    """A CopyWatch observer: re-arms the hold before each non_blocking copy, records each copy's host
    memory, and poisons held D2H destinations as soon as they are enqueued."""

    hold: Hold
    call: int = 0
    copies: list[HeldCopy] = field(default_factory=list)
    lost_hold: bool = False  # a poisoning could not be shown to precede its copy: the run is inconclusive

    def before(self, call: CopyCall) -> None:
        if call.non_blocking:
            self.hold.rearm()

    def copied(self, call: CopyCall) -> None:
        if not call.non_blocking:
            return
        direction = call.direction(self.hold.gpu)
        if direction is None:
            return
        host = call.source if direction == "H2D" else call.destination
        held = self.hold.on_held_stream() and self.hold.holding()
        self.copies.append(HeldCopy(direction, host, caller_site(2), held, self.call))
        if direction == "D2H" and held and self.call == 0 and host.is_pinned():
            poison([host])
            if not self.hold.holding():  # the copy may have run while the poison was written
                self.lost_hold = True

    def pending_sources(self, call: int) -> list[tuple[int, int]]:
        """The byte ranges of the pinned H2D sources ``call`` enqueued while held."""
        return [r for c in self.copies
                if c.call == call and c.held and c.direction == "H2D" and c.host.is_pinned()
                for r in [byte_range(c.host)] if r is not None]

    def sites(self) -> list[str]:
        """Each recorded copy, once per site: "H2D at dir/file.py:LINE" (``unheld`` when not held)."""
        lines = [f"{c.direction} at {c.site}" + ("" if c.held else " (unheld)") for c in self.copies if c.call == 0]
        return list(dict.fromkeys(lines))


@dataclass
class RacedRun:
    value: Any = None
    raised: BaseException | None = None
    conclusive: bool = True
    sites: list[str] = field(default_factory=list)
    poisoned: int = 0  # caller buffers rewritten while a copy from them was pending


def run_held(make_thunk: Callable[[], Callable[[], Any]], cycles: int = SLEEP_CYCLES,
             hold_type: Callable[[int], Hold] = Hold) -> RacedRun:
    """One held run of a side (module docstring): its first call's output, read after a full sync; whether
    every poisoning provably preceded its copy; the copy sites. Repeated once with a longer sleep when not.
    ``hold_type``: how copies are held (tests without a GPU pass a stand-in)."""
    run = _run_held_once(make_thunk, hold_type(cycles))
    if not run.conclusive:
        run = _run_held_once(make_thunk, hold_type(cycles * RETRY_FACTOR))
    return run


def _run_held_once(make_thunk: Callable[[], Callable[[], Any]], hold: Hold) -> RacedRun:
    first, following = make_thunk(), make_thunk()
    poison(_own(caller_inputs(following), caller_inputs(first)))  # the next call stages other data than the first
    recorder = RaceRecorder(hold)
    run = RacedRun()
    with hold.entered():
        hold.sleep()
        with CopyWatch([recorder]), holding_steps(hold.rearm):
            try:
                run.value = first()
            except Exception as exc:  # noqa: BLE001 -- the ordinary run judges exceptions; here it is no race
                run.raised = exc
            pending = recorder.pending_sources(0)
            rewritten = _rewrite_pending(caller_memory(first), pending)
            # Poison is sound only while what it targets is still queued behind the running sleep.
            run.conclusive = not recorder.lost_hold and (not rewritten or hold.holding())
            # If the sleep ran out here (the call synced after its copies), the next call can no longer overwrite a
            # buffer they read: sound, only weaker, and not repeated (such a side would wait out any sleep).
            recorder.call = 1
            try:
                following()
            except Exception:  # noqa: BLE001 -- the next call's own outcome is not judged: only what it overwrote
                pass
    hold.finish()
    run.sites, run.poisoned = recorder.sites(), rewritten
    return run


def _own(inputs: list[Any], others: list[Any]) -> list[Any]:
    """``inputs`` less what ``others`` share (an input model that cached an object for both calls): poisoning
    the next call's inputs must not write the first call's."""
    shared = {id(obj) for obj in others}
    ranges = [r for r in map(byte_range, others) if r is not None]
    return [obj for obj in inputs if id(obj) not in shared
            and not any(overlaps(r, other) for r in [byte_range(obj)] if r is not None for other in ranges)]


def _rewrite_pending(memory: Iterable[Any], pending: list[tuple[int, int]]) -> int:
    """Poison each caller buffer a pending H2D copy reads from; how many were."""
    hit = [obj for obj in memory if any(overlaps(byte_range(obj), source) for source in pending)]
    poison(hit)
    return len(hit)
