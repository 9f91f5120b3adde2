# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.33.0:
vllm/v1/utils.py :: tensor_data
(definitions verbatim; a method with its class's own lines). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).
"""

import torch


def tensor_data(tensor: torch.Tensor) -> memoryview:
    """Get the raw data of a tensor as a uint8 memoryview, useful for
    serializing and hashing.

    Args:
        tensor: The input tensor.

    Returns:
        A memoryview of the tensor data as uint8.

    """
    return tensor.flatten().cpu().contiguous().view(torch.uint8).numpy().data
