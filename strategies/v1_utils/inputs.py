"""Inputs of ``CpuGpuBuffer.copy_to_gpu(n)`` (vllm/v1/utils.py) as the v1 model runner uses it.

The runner allocates each buffer once -- ``CpuGpuBuffer(*size, dtype=..., device=...)``,
pinned by default (``pin_memory=PIN_MEMORY``), a few with ``pin_memory=False`` or
``with_numpy=False`` (bfloat16 cannot have a numpy view) -- fills the host side
through ``buf.np`` (or ``buf.cpu``) every step and calls ``copy_to_gpu(n)`` with
the number of rows in use, ``0 <= n <= size[0]``, or with no ``n`` for the whole
buffer. The device buffer still holds the previous step's rows, so rows past
``n`` must be left alone.

The wide contract adds ``n`` outside that range: negative (a slice from the end)
and past the buffer's length (a slice clamps), which both versions accept.

A spec is JSON only: ``size``, ``dtype``, ``pin_memory`` ("default" = upstream's
default, or an explicit bool; ``True`` only where CUDA exists, since pinning
needs it), ``with_numpy``, ``n`` (None = no argument), and the seeds of the
host rows and of the stale device rows.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import FLOAT_DTYPES, INT_DTYPES, devices, seeded_floats

_DTYPES = {**INT_DTYPES, **FLOAT_DTYPES, "bool": torch.bool}
_NO_NUMPY = {"bfloat16"}  # CpuGpuBuffer refuses with_numpy=True for these

# Strategies with fixed arguments, built once (strategies/common.py says why).
DTYPE_NAMES = st.sampled_from(sorted(_DTYPES))
PIN_MEMORY_CHOICES = st.sampled_from(["default", False])
CUDA_PIN_MEMORY_CHOICES = st.sampled_from(["default", False, True])  # pinning needs CUDA


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _copy_lengths(low: int, high: int) -> st.SearchStrategy[int | None]:
    """``n`` for ``copy_to_gpu(n)``: no argument, or a row count in ``[low, high]``."""
    return st.none() | st.integers(low, high)


@st.composite
def _buffer_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    device = draw(devices(available))
    rows = draw(st.integers(1, 12))
    size = [rows, *draw(st.lists(st.integers(1, 5), max_size=2))]
    dtype = draw(DTYPE_NAMES)
    pins = CUDA_PIN_MEMORY_CHOICES if "cuda" in available else PIN_MEMORY_CHOICES
    with_numpy = False if dtype in _NO_NUMPY else draw(st.booleans())
    if contract == "caller":
        n = draw(_copy_lengths(0, rows))
    else:
        n = draw(_copy_lengths(-rows - 2, rows + 3))
    return {
        "device": device,
        "size": size,
        "dtype": dtype,
        "pin_memory": draw(pins),
        "with_numpy": with_numpy,
        "n": n,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "stale_seed": draw(st.integers(0, 2**31 - 1)),
    }


def seeded_buffer_values(size: Sequence[int], dtype: str, seed: int) -> torch.Tensor:
    """Deterministic host values of ``dtype`` (never all zeros: the buffer starts zeroed)."""
    if dtype in FLOAT_DTYPES:
        return seeded_floats(tuple(size), dtype, seed, "cpu")
    generator = torch.Generator().manual_seed(seed)
    if dtype == "bool":
        return torch.rand(tuple(size), generator=generator) < 0.5
    return torch.randint(-1000, 1000, tuple(size), generator=generator, dtype=_DTYPES[dtype])


class CopyToGpuInputs:
    """A buffer of the side's ``CpuGpuBuffer`` class with fresh host rows and stale device rows;
    the thunk calls ``copy_to_gpu`` and returns what it returned, the device buffer and the host
    buffer (copy_to_gpu must change only the first ``n`` device rows, and no host row)."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _buffer_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        buffer_class = impl.owner  # the side's CpuGpuBuffer (a copy, a mutant or vllm's)
        dtype = _DTYPES[spec["dtype"]]
        options: dict[str, Any] = {"dtype": dtype, "device": torch.device(spec["device"]),
                                   "with_numpy": spec["with_numpy"]}
        if spec["pin_memory"] != "default":
            options["pin_memory"] = spec["pin_memory"]
        buffer = buffer_class(*spec["size"], **options)
        host = seeded_buffer_values(spec["size"], spec["dtype"], spec["seed"])
        if spec["with_numpy"]:
            buffer.np[...] = host.numpy()  # how the runner fills it
        else:
            buffer.cpu.copy_(host)
        buffer.gpu.copy_(seeded_buffer_values(spec["size"], spec["dtype"], spec["stale_seed"]))  # last step's rows
        copy_to_gpu, n = impl.function, spec["n"]

        def call() -> dict[str, torch.Tensor]:
            out = copy_to_gpu(buffer) if n is None else copy_to_gpu(buffer, n)
            return {"returned": out, "gpu": buffer.gpu, "cpu": buffer.cpu.clone()}

        # The runner rewrites the buffer's host rows (.np / .cpu) for its next step once the call returned, maybe
        # before this step's copy ran under async scheduling (vLLM #24527, #31373): the race oracle may too.
        call.caller_owned = (buffer,)  # type: ignore[attr-defined]
        return call
