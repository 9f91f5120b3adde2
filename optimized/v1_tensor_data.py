# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Helpers from vllm/utils/torch_utils.py.
Copied from vllm 0.34.0:
vllm/v1/utils.py :: tensor_data
(definitions verbatim; a method with its class's own lines). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).
"""

import numpy as np  # ADAPTED: TORCH_DTYPE_TO_NUMPY_DTYPE's values (vllm/utils/torch_utils.py)
import torch

# from vllm.utils.torch_utils import TORCH_DTYPE_TO_NUMPY_DTYPE  # ADAPTED: copied below

# vllm/utils/torch_utils.py (0.34.0)
TORCH_DTYPE_TO_NUMPY_DTYPE = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.uint8: np.uint8,
    torch.uint16: np.uint16,
    torch.uint32: np.uint32,
    torch.uint64: np.uint64,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}


def tensor_data(tensor: torch.Tensor) -> memoryview:
    """Get the raw data of a tensor as a uint8 memoryview, useful for
    serializing and hashing.

    Args:
        tensor: The input tensor.

    Returns:
        A memoryview of the tensor data as uint8.

    """
    if tensor.is_cpu and tensor.is_contiguous():
        # Avoid several torch ops, each of which releases and re-acquires the GIL.
        # View dtypes NumPy cannot export as bytes.
        try:
            if tensor.dtype not in TORCH_DTYPE_TO_NUMPY_DTYPE:
                tensor = tensor.view(torch.uint8)
            return memoryview(tensor.numpy()).cast("B")
        except (TypeError, RuntimeError):
            pass
    return tensor.flatten().cpu().contiguous().view(torch.uint8).numpy().data
