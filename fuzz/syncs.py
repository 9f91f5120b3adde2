"""Count the GPU<->CPU syncs one call makes.

Two detectors, armed only around the call and only on CUDA:

* torch's own: ``torch.cuda.set_sync_debug_mode("warn")`` makes every
  synchronizing CUDA operation (``.item()``, ``.tolist()``, D2H copies,
  *blocking* H2D copies, ``nonzero`` ...) emit a UserWarning, caught here with a
  ``showwarning`` hook and classified by whether it happened inside
  ``gpu_sync_allowed()`` (a deliberate upstream sync).
* one for what torch's detector is blind to: a ``non_blocking=True`` H2D copy
  whose source is *pageable* (not pinned) host memory. CUDA stages such a copy
  through a driver buffer and the host waits for it, so it is a sync in all but
  name -- the review summary's risk 4 ("non_blocking only helps from pinned
  memory"). A ``TorchDispatchMode`` sees every ``_to_copy``/``copy_`` and
  counts those; they are reported as ``hidden`` syncs and included in the total.

On CPU there is nothing to count and CPU-only torch raises on the debug-mode
call, so nothing is armed there (the run says so once).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzz.upstream_shims import sync_allowed_depth

_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"


@dataclass
class SyncTally:
    total: int = 0  # torch-detected + hidden
    allowed: int = 0  # inside gpu_sync_allowed()
    hidden: int = 0  # non-blocking H2D copies from pageable memory


def _is_cuda(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def _pageable_host(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu" and not tensor.is_pinned()


class _PageableAsyncCopies(TorchDispatchMode):
    """Counts ``non_blocking=True`` host-to-device copies from pageable memory."""

    def __init__(self, tally: SyncTally) -> None:
        super().__init__()
        self.tally = tally

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            if kwargs.get("non_blocking") and _is_cuda(kwargs.get("device")) and _pageable_host(args[0]):
                self._count()
        elif func is torch.ops.aten.copy_.default:
            non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
            if non_blocking and args[0].device.type == "cuda" and _pageable_host(args[1]):
                self._count()
        return func(*args, **kwargs)

    def _count(self) -> None:
        self.tally.total += 1
        self.tally.hidden += 1
        if sync_allowed_depth.get():
            self.tally.allowed += 1


@contextmanager
def counting_syncs(enabled: bool) -> Iterator[SyncTally | None]:
    if not enabled:
        # Still silence warnings from the code under test (numpy's
        # divide-by-zero and the like): they are not outputs we compare.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield None
        return
    tally = SyncTally()

    def hook(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        if _TORCH_SYNC_WARNING in str(message):
            tally.total += 1
            if sync_allowed_depth.get():
                tally.allowed += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", message=f".*{_TORCH_SYNC_WARNING}.*")
        warnings.showwarning = hook
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with _PageableAsyncCopies(tally):
                yield tally
        finally:
            torch.cuda.set_sync_debug_mode(previous)
