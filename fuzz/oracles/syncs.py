"""Count the GPU<->CPU syncs one call makes.

Two detectors, armed only around the call and only on CUDA:

* torch's own: ``torch.cuda.set_sync_debug_mode("warn")`` makes every
  synchronizing CUDA operation (``.item()``, ``.tolist()``, D2H copies,
  *blocking* H2D copies, ``nonzero`` ...) emit a UserWarning, caught here with a
  ``showwarning`` hook and classified by whether it happened inside
  ``gpu_sync_allowed()`` (a deliberate upstream sync). Which ContextVar holds the depth of those
  regions is the target record's to say (``Target.sync_allow_region``: the copies' lives in
  ``optimized/gpu_sync_debug.py``), so the engine imports no copy.
* one for what torch's detector is blind to: a ``non_blocking=True`` H2D copy
  whose source is *pageable* (not pinned) host memory and too large for the
  driver to stage at once -- the review summary's risk 4 ("non_blocking only
  helps from pinned memory"). Measured on an H200 (driver 580.159.04, CUDA
  13.0, scripts/gpu_pageable_probe.py): with a 50 ms kernel queued, such a
  copy returned in < 0.3 ms up to 2 MiB and waited the full 50 ms at 4 MiB.
  So only copies above ``PAGEABLE_STAGED_BYTES`` (2 MiB; the band up to 4 MiB
  is unmeasured) are counted; every table the fuzzed code stages is far
  smaller. While armed, ``Tensor.to`` / ``.cuda`` / ``.copy_`` are wrapped
  (every ``non_blocking=True`` in the copied code is such a Python-level
  call); counted copies are reported as ``hidden`` syncs (with their source
  line) and included in the total. Wrapping only those three methods costs
  1.04-1.24x the call on CPU rounds; a ``TorchFunctionMode`` (a Python call
  for *every* torch call) cost 1.44-2.16x, and a ``TorchDispatchMode`` (every
  aten op) 1.7-2.8x -- on the cheapest targets that was most of the fuzzer's
  overhead over a bare ``@given`` test.

Syncs made while ``consumer_reads()`` is active -- the host reads a target's
consumer stand-in makes of the output (fuzz/oracles/) -- are counted apart,
as ``consumer``: they are the cost of the output for its real consumer, not
of the function, and never part of ``total`` or the function's budget.

On CPU there is nothing to count and CPU-only torch raises on the debug-mode
call, so nothing is armed there (the run says so once).
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from fuzz.interface import consumer_reads, in_consumer_reads  # noqa: F401 -- consumer_reads: re-exported for the engine
from fuzz.oracles.copypolicy import judge_call
from fuzz.oracles.copywatch import CopyCall, CopyWatch, caller_site

_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"
# Largest pageable non_blocking H2D copy seen to return without waiting for
# the GPU (see the module docstring); SYNCFUZZ_PAGEABLE_STAGED_BYTES overrides
# it for another driver (0 counts every pageable copy).
PAGEABLE_STAGED_BYTES = int(os.environ.get("SYNCFUZZ_PAGEABLE_STAGED_BYTES", 2 * 1024 * 1024))
@dataclass
class SyncTally:
    total: int = 0  # torch-detected + hidden
    allowed: int = 0  # inside gpu_sync_allowed()
    hidden: int = 0  # non-blocking H2D copies from pageable memory
    hidden_sites: list[str] = field(default_factory=list)  # "file:line" of each, for people reading a report
    consumer: int = 0  # made by the consumer stand-in's reads of the output, not by the call (not in total)
    # The call's copies vLLM's CI copy check rejects (fuzz/oracles/copypolicy.py), one line each with its site:
    # not syncs (a pinned-memory rule, not a wait), judged apart by the copy-policy oracle (syncrule.py).
    policy: list[str] = field(default_factory=list)


def _pageable_host(tensor: Any) -> bool:
    """A host tensor whose non_blocking copy to the GPU makes the host wait:
    pageable and larger than the driver stages at once. An empty one copies
    nothing (and reports is_pinned() False even when pinned: counting it cried
    wolf on async_tensor_h2d([]), H200 nightly run 2026-11-29)."""
    return (isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
            and tensor.numel() * tensor.element_size() > PAGEABLE_STAGED_BYTES and not tensor.is_pinned())


class _HiddenSyncs:
    """Counts ``non_blocking=True`` host-to-device copies from pageable memory (a CopyWatch observer)."""

    def __init__(self, tally: SyncTally, allowed: Callable[[], bool]) -> None:
        self.tally = tally
        self.allowed = allowed

    def copied(self, call: CopyCall) -> None:
        if not call.non_blocking:
            return
        target = call.destination
        if isinstance(target, torch.Tensor) and target.device.type == "cuda" and _pageable_host(call.source):
            self._count()

    def _count(self) -> None:
        if in_consumer_reads():
            self.tally.consumer += 1
            return
        self.tally.total += 1
        self.tally.hidden += 1
        self.tally.hidden_sites.append(caller_site(3))
        if self.allowed():
            self.tally.allowed += 1


class _CopyPolicy:
    """Lists the copies vLLM's CI copy check rejects (fuzz/oracles/copypolicy.py), as vLLM reports them: outside
    ``gpu_sync_allowed()`` regions. The consumer stand-in's copies are the harness', not the function's."""

    def __init__(self, tally: SyncTally, allowed: Callable[[], bool]) -> None:
        self.tally = tally
        self.allowed = allowed

    def copied(self, call: CopyCall) -> None:
        if not call.non_blocking or in_consumer_reads() or self.allowed():
            return
        reason = judge_call(call.method, call.args, call.kwargs)
        if reason is not None:
            self.tally.policy.append(f"{reason} at {caller_site(3)}")


def copy_watch(tally: SyncTally, allowed: Callable[[], bool]) -> CopyWatch:
    """The hidden-sync counter and the copy policy armed over the copy methods (one CopyWatch)."""
    return CopyWatch([_HiddenSyncs(tally, allowed), _CopyPolicy(tally, allowed)])


@contextmanager
def counting_syncs(enabled: bool, allow_region: ContextVar[int] | None = None) -> Iterator[SyncTally | None]:
    """The syncs made inside, counted on CUDA (``enabled``); those made while ``allow_region`` (the depth
    of the side's ``gpu_sync_allowed()`` regions, fuzz.targets.Target.allow_region) is above zero are
    also counted as allowed."""
    if not enabled:
        # Still silence warnings from the code under test (numpy's
        # divide-by-zero and the like): they are not outputs we compare.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield None
        return
    tally = SyncTally()

    def allowed() -> bool:
        return allow_region is not None and allow_region.get() > 0

    def hook(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if _TORCH_SYNC_WARNING in str(message):
            if in_consumer_reads():
                tally.consumer += 1
                return
            tally.total += 1
            if allowed():
                tally.allowed += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", message=f".*{_TORCH_SYNC_WARNING}.*")
        warnings.showwarning = hook
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with copy_watch(tally, allowed):
                yield tally
        finally:
            torch.cuda.set_sync_debug_mode(previous)
