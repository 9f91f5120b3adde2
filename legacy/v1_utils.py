# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.29.0: vllm/v1/utils.py :: CpuGpuBuffer.__init__ and
CpuGpuBuffer.copy_to_gpu (method bodies verbatim, the class's own lines verbatim;
copy_to_cpu left out).

vLLM PR #56888 changed ``copy_to_gpu`` between 0.29.0 and 0.30.0: 0.30.0
slices both buffers first, then copies from ``cpu.pin_memory()`` when pinned memory
exists (a no-op for a buffer allocated pinned, a pinned staging copy for one
allocated with ``pin_memory=False``), so the ``non_blocking`` copy is truly
asynchronous and never reads the pageable buffer late.

``PIN_MEMORY`` stands in for vllm/utils/torch_utils.py's ``PIN_MEMORY =
is_pin_memory_available()``, the same answer optimized/torch_utils.py gives
(true when CUDA is available); it is defined here, not imported from the
0.27.1/0.28.0 helper copies, because a copy is checked against one release.
"""

import torch
import numpy as np

# Upstream: from vllm.utils.torch_utils import PIN_MEMORY (is_pin_memory_available(): true on CUDA).
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer


class CpuGpuBuffer:
    """Buffer to easily copy tensors between CPU and GPU."""

    def __init__(
        self,
        *size: int | torch.SymInt,
        dtype: torch.dtype,
        device: torch.device,
        pin_memory: bool = PIN_MEMORY,
        with_numpy: bool = True,
    ) -> None:
        # these buffers are mutable runtime state, so allocate them as normal
        with torch.inference_mode(False):
            self.cpu = torch.zeros(
                *size, dtype=dtype, device="cpu", pin_memory=pin_memory
            )
            self.gpu = torch.zeros_like(self.cpu, device=device)
        self.np: np.ndarray
        # To keep type hints simple (avoiding generics and subclasses), we
        # only conditionally create the numpy array attribute. This can cause
        # AttributeError if `self.np` is accessed when `with_numpy=False`.
        if with_numpy:
            if dtype == torch.bfloat16:
                raise ValueError(
                    "Bfloat16 torch tensors cannot be directly cast to a "
                    "numpy array, so call CpuGpuBuffer with with_numpy=False"
                )
            self.np = self.cpu.numpy()

    def copy_to_gpu(self, n: int | None = None) -> torch.Tensor:
        if n is None:
            return self.gpu.copy_(self.cpu, non_blocking=True)
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)
