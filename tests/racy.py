"""A broken ``async_tensor_h2d`` for planted race tests.

It stages through one module-level host buffer that it reuses on the next
call *without waiting* for the previous asynchronous copy to finish -- the
classic pinned-staging-buffer race. On CUDA the second call overwrites data a
pending copy has not read yet (visible under ``--stress``); on CPU the
"copy" is the buffer itself, so the first result is overwritten outright.
"""

from __future__ import annotations

import numpy as np
import torch

from optimized.torch_utils import pin_memory_available

_STAGING: dict[torch.dtype, torch.Tensor] = {}


def reused_buffer_h2d(data, device, dtype=None) -> torch.Tensor:  # noqa: ANN001
    source = torch.as_tensor(np.asarray(data) if not isinstance(data, torch.Tensor) else data)
    dtype = dtype or source.dtype
    buffer = _STAGING.get(dtype)
    if buffer is None or buffer.numel() < source.numel():
        buffer = torch.empty(max(source.numel(), 1 << 12), dtype=dtype, pin_memory=pin_memory_available())
        _STAGING[dtype] = buffer
    staged = buffer[: source.numel()].view(source.shape)
    staged.copy_(source)  # no wait on the copy that last read this buffer
    return staged.to(device=device, non_blocking=True)
