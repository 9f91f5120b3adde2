# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0: vllm/utils/torch_utils.py :: async_tensor_h2d (body verbatim);
pin_memory_available (a stand-in).

``async_tensor_h2d`` is the helper the optimized copies stage host data through
(``from optimized.torch_utils import async_tensor_h2d``), so they run upstream's own
code: pin the host data when pinned memory exists, then
``.to(device, dtype, non_blocking=True)``. Its 0.27.1 and 0.28.0 bodies are
identical.

``pin_memory_available()`` stands in for vllm's
vllm/utils/platform_utils.py::is_pin_memory_available: vllm decides pinning
once per process (true on CUDA platforms); CPU-only torch raises on
``pin_memory()``, so the copies pin only when CUDA is available -- the same
answer vllm's platform check gives.
"""
import numpy as np
import torch

# Upstream: PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms; CPU-only torch raises on pin_memory().
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer


def async_tensor_h2d(
    data: list | np.ndarray | torch.Tensor,
    device: str | torch.device,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Copy list/numpy array/tensor async from host to device."""
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        t = data.pin_memory() if PIN_MEMORY else data
    else:
        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")
    assert t.is_cpu
    return t.to(device=device, dtype=dtype, non_blocking=True)


def pin_memory_available() -> bool:  # ADAPTED: stands in for vllm's is_pin_memory_available()
    """vllm's ``is_pin_memory_available()`` answer (true on CUDA platforms)."""  # ADAPTED: stand-in docstring
    return PIN_MEMORY  # ADAPTED: upstream asks current_platform; PIN_MEMORY holds the same answer
