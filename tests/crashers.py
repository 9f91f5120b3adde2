"""Targets whose optimized side kills or hangs its process on some inputs.

They stand in for a CUDA device-side assert, a segfault in an extension or a
deadlock, so the isolation layer can be tested on a CPU-only host. Each
misbehaves once ``cu_seqlens`` holds three or more sequences and otherwise
returns the real optimized result. Registered with
``SYNCFUZZ_TARGET_MODULES=tests.crashers``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import time

import torch

from fuzz.targets import catalog_targets
from optimized.fla_index import prepare_chunk_offsets

CATALOG = catalog_targets()


def _trips(cu_seqlens: torch.Tensor) -> bool:
    return cu_seqlens.numel() > 3


def aborting(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if _trips(cu_seqlens):
        os.abort()
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


def segfaulting(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if _trips(cu_seqlens):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


def hanging(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if _trips(cu_seqlens):
        time.sleep(3600)
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


def chatty(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Correct, but writes to stdout on every call, from Python and from C
    (fd 1): a persistent worker's control channel must not be garbled by it."""
    print("chatty: print() to stdout")
    os.write(1, b"done chatty: raw write to fd 1\n")
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


_BASE = {t.name: t for t in CATALOG}["fla-chunk-offsets"]
TARGETS = [
    dataclasses.replace(_BASE, name=f"crasher-{kind}", optimized=f"tests.crashers:{function}")
    for kind, function in (("abort", "aborting"), ("segfault", "segfaulting"), ("hang", "hanging"))
]


def alternating(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Wrong on every other call (a counter in a file shared by all processes):
    a failure that does not always reproduce, i.e. a flaky one."""
    counter = os.environ.get("SYNCFUZZ_TEST_TOGGLE")
    result = prepare_chunk_offsets(cu_seqlens, chunk_size)
    if counter and len(cu_seqlens) > 2:
        count = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
        with open(counter, "w") as handle:
            handle.write(str(count))
        if count % 2:
            return result + 1
    return result


TARGETS.append(dataclasses.replace(_BASE, name="flaky-alternating", optimized="tests.crashers:alternating"))
TARGETS.append(dataclasses.replace(_BASE, name="chatty-stdout", optimized="tests.crashers:chatty"))


def dies_once(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Kills its process the first time it trips (a marker file, shared by all processes, remembers), then
    is correct: what an MPS client whose context another client's fault ended looks like -- the example
    passes when re-run in a fresh process."""
    marker = os.environ.get("SYNCFUZZ_TEST_DIES_ONCE")
    if marker and _trips(cu_seqlens) and not os.path.exists(marker):
        open(marker, "w").close()
        os.abort()
    return prepare_chunk_offsets(cu_seqlens, chunk_size)


TARGETS.append(dataclasses.replace(_BASE, name="crasher-dies-once", optimized="tests.crashers:dies_once"))


class _ContextGoneInputs:
    """fla-chunk-offsets' input model, except that building inputs the first time ``cu_seqlens`` trips
    raises what torch raises once the process' CUDA context is gone (a marker file remembers): on the
    H200, under MPS, another client's illegal memory access surfaced in a victim's input building."""

    def __getattr__(self, name: str):
        from strategies.fla_index.inputs import ChunkIndexInputs

        return getattr(ChunkIndexInputs(), name)

    def materialize(self, spec: dict, impl, form: str):
        from strategies.fla_index.inputs import ChunkIndexInputs

        marker = os.environ.get("SYNCFUZZ_TEST_CONTEXT_GONE")
        if marker and len(spec["cu_seqlens"]) > 3 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return ChunkIndexInputs().materialize(spec, impl, form)


TARGETS.append(dataclasses.replace(_BASE, name="crasher-context-gone-in-inputs",
                                   inputs="tests.crashers:_ContextGoneInputs"))
