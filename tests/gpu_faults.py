"""Targets whose optimized side raises a fatal CUDA fault on some inputs (GPU hosts only).

For the fault-containment trials under CUDA MPS (lab/scripts/mps_fault_trials.sh,
docs/gpu-sharing.md#faults): beside real targets on other workers sharing the GPU,
``fault-device-assert`` trips a device-side assert (an out-of-range index in a torch
kernel) and ``fault-illegal-address`` a store far outside any allocation (a Triton
kernel), once ``cu_seqlens`` holds four or more sequences. On the CPU, and below that,
each returns the real optimized result. Registered with
``SYNCFUZZ_TARGET_MODULES=tests.gpu_faults``.
"""

from __future__ import annotations

import dataclasses

import torch

from fuzz.targets import catalog_targets
from optimized.fla_index import prepare_chunk_offsets

CATALOG = catalog_targets()


def _trips(cu_seqlens: torch.Tensor) -> bool:
    return cu_seqlens.is_cuda and cu_seqlens.numel() > 4


def device_assert(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if _trips(cu_seqlens):
        cu_seqlens[torch.tensor([1 << 20], device=cu_seqlens.device)]  # index out of bounds: device-side assert
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


_store_far = None


def illegal_address(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if _trips(cu_seqlens):
        _store_far_kernel()[(1,)](cu_seqlens, 1 << 40)  # a store 8 TiB past the tensor: illegal address
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


def _store_far_kernel():
    """The Triton kernel, compiled on first use (importing triton costs seconds; the CPU never needs it)."""
    global _store_far
    if _store_far is None:
        import triton
        import triton.language as tl

        @triton.jit
        def store_far(pointer, offset):
            tl.store(pointer + offset, 1)

        _store_far = store_far
    return _store_far


_BASE = {t.name: t for t in CATALOG}["fla-chunk-offsets"]
TARGETS = [
    dataclasses.replace(_BASE, name="fault-device-assert", optimized="tests.gpu_faults:device_assert"),
    dataclasses.replace(_BASE, name="fault-illegal-address", optimized="tests.gpu_faults:illegal_address"),
]
