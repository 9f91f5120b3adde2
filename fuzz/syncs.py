"""Count the GPU<->CPU syncs one call makes, with torch's sync debug mode.

``torch.cuda.set_sync_debug_mode("warn")`` makes every synchronizing CUDA
operation (``.item()``, ``.tolist()``, D2H copies, blocking H2D copies from
pageable memory, ``nonzero`` ...) emit a UserWarning. We arm it only around the
call, catch the warnings with a ``showwarning`` hook and classify each one by
whether it happened inside ``gpu_sync_allowed()`` (a deliberate upstream sync).
On CPU there is nothing to count and CPU-only torch raises on the call, so the
counter is simply not armed there.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from fuzz.upstream_shims import sync_allowed_depth

_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"


@dataclass
class SyncTally:
    total: int = 0
    allowed: int = 0


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
            yield tally
        finally:
            torch.cuda.set_sync_debug_mode(previous)
