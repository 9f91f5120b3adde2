# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.29.0:
vllm/model_executor/layers/attention/mm_encoder_attention.py :: MMEncoderAttention.maybe_compute_seq_lens, add_padding_to_seqlens
(definitions verbatim; a method with its class's own lines). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).
"""

import numpy as np
import torch

# from vllm.model_executor.custom_op import CustomOp  # ADAPTED: stood in / copied below
# from vllm.model_executor.custom_op import maybe_get_oot_by_class  # ADAPTED: stood in / copied below
# from vllm.utils.math_utils import round_up  # ADAPTED: stood in / copied below
# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: stood in / copied below
# from vllm.v1.attention.backends.registry import AttentionBackendEnum  # ADAPTED: stood in / copied below

from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in (vllm/v1/attention/backends/registry.py)


class CustomOp:  # ADAPTED: stands in for vllm.model_executor.custom_op.CustomOp (an nn.Module base); only a classmethod runs
    pass  # ADAPTED


class AttentionBackendEnum(Enum):  # ADAPTED: stands in for vllm/v1/attention/backends/registry.py's enum: the ViT backends
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"  # ADAPTED: value as upstream
    TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"  # ADAPTED: value as upstream
    ROCM_AITER_FA = "vllm.v1.attention.backends.rocm_aiter_fa.AiterFlashAttentionBackend"  # ADAPTED: value as upstream
    TORCH_SDPA = ""  # ADAPTED: value as upstream ("this tag is only used for ViT")
    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"  # ADAPTED: value as upstream


def maybe_get_oot_by_class(class_type: type) -> type:  # ADAPTED: stands in for vllm/model_executor/custom_op.py's lookup
    return class_type  # ADAPTED: no out-of-tree op is registered (upstream: op_registry_oot.get(name, class_type))


# vllm/utils/math_utils.py
def round_up(x: int, y: int) -> int:
    """Round up x to the nearest multiple of y."""
    return ((x + y - 1) // y) * y


# vllm/utils/torch_utils.py (0.29.0): PIN_MEMORY = is_pin_memory_available() and async_tensor_h2d.
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


FLASHINFER_BATCH_BUCKETS = [8, 16, 32, 64]


def add_padding_to_seqlens(
    seq: np.ndarray,
    batch_size: int,
    padding_value: int,
) -> np.ndarray:
    batch_size_padded = next(
        (b for b in FLASHINFER_BATCH_BUCKETS if b >= batch_size),
        round_up(batch_size, FLASHINFER_BATCH_BUCKETS[0]),
    )
    if batch_size_padded == batch_size:
        return seq
    return np.concatenate(
        [
            seq,
            np.full((batch_size_padded - batch_size,), padding_value, dtype=seq.dtype),
        ]
    )


# @CustomOp.register("mm_encoder_attn")  # ADAPTED: vllm decorator, not run here
class MMEncoderAttention(CustomOp):
    """Multi-headed attention without any cache, used for multimodal encoder."""

    # --8<-- [end:mm_encoder_attn]

    @classmethod
    def maybe_compute_seq_lens(
        cls,
        attn_backend: AttentionBackendEnum,
        cu_seqlens: np.ndarray,
        device: torch.device,
    ) -> torch.Tensor | None:
        if (oot_class := maybe_get_oot_by_class(cls)) is not cls:
            return oot_class.maybe_compute_seq_lens(attn_backend, cu_seqlens, device)  # type: ignore[attr-defined]

        if attn_backend != AttentionBackendEnum.FLASHINFER:
            return None

        sequence_lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        sequence_lengths = add_padding_to_seqlens(
            sequence_lengths, len(sequence_lengths), 0
        )
        return async_tensor_h2d(sequence_lengths, device=device)
