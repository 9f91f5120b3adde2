# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.27.1: vllm/utils/torch_utils.py :: async_tensor_h2d (body verbatim).

The helper every optimized copy stages host data through; fuzz.upstream_shims
re-exports the optimized copy, so the copies run upstream's own code.
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
