# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.30.0:
vllm/model_executor/models/qwen2_vl.py :: Qwen2VisionTransformer.prepare_encoder_metadata, Qwen2VisionTransformer.rot_pos_emb, Qwen2VisionTransformer.compute_attn_mask_seqlen, Qwen2VisionTransformer.device
(definitions verbatim; a method with its class's own lines). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).
Helpers: ``async_tensor_h2d`` and ``PIN_MEMORY`` from vllm/utils/torch_utils.py (0.30.0), on the optimized side only.

Between 0.29.0 and 0.30.0 ``prepare_encoder_metadata`` changed its one H2D copy: 0.29.0 copies ``cu_seqlens``
(built on the host with numpy) with ``cu_seqlens.to(device=device, non_blocking=True)``, a non-blocking copy
from pageable memory (the driver stages it synchronously); 0.30.0 copies it with
``async_tensor_h2d(cu_seqlens, device)``, staged through a pinned buffer. This copy: copies ``cu_seqlens`` with ``async_tensor_h2d(cu_seqlens, device)`` (staged through pinned memory).
``rot_pos_emb`` (0.29.0 = 0.30.0), ``compute_attn_mask_seqlen`` and ``device`` are copied as callees.

A copy module of its own (not legacy/qwen2_vl.py): qwen2_vl.py holds the 0.28.0/0.29.0 pair of ``rot_pos_emb``,
in which ``prepare_encoder_metadata`` is the same text on both sides; a copy module is checked against one
release pair.

Qwen2VisionTransformer itself is far larger (patch embedding, attention blocks, merger); the ``__init__`` here
is a stand-in holding only what the copied methods read (``spatial_merge_size``, ``rotary_pos_emb``,
``patch_embed``, ``attn_backend``), marked ADAPTED. ``AttentionBackendEnum`` is stood in by an Enum of the
vision backends ``get_vit_attn_backend`` picks from.
"""

from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in

import numpy as np
import torch
import torch.nn as nn

# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.30.0
# from vllm.utils.platform_utils import is_pin_memory_available  # ADAPTED: vllm's platform layer
# Upstream (vllm/utils/torch_utils.py): PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms.
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer
# from vllm.v1.attention.backends.registry import AttentionBackendEnum  # ADAPTED: stood in below
# from .utils import WeightsMapper  # ADAPTED: weight loading only; the class attribute below just holds its arguments
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)


class AttentionBackendEnum(Enum):  # ADAPTED: stand-in for vllm.v1.attention.backends.registry.AttentionBackendEnum
    FLASH_ATTN = "FLASH_ATTN"  # ADAPTED: compute_attn_mask_seqlen only tests membership
    TRITON_ATTN = "TRITON_ATTN"  # ADAPTED
    ROCM_AITER_FA = "ROCM_AITER_FA"  # ADAPTED
    TORCH_SDPA = "TORCH_SDPA"  # ADAPTED: a backend that gets max_seqlen=None
    FLASHINFER = "FLASHINFER"  # ADAPTED: a backend that gets max_seqlen=None


class Qwen2VisionTransformer(nn.Module):
    # Vision checkpoints store qkv pre-fused; merge separate q/k/v into qkv.
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            ".q_proj": (".qkv", "q"),
            ".k_proj": (".qkv", "k"),
            ".v_proj": (".qkv", "v"),
        }
    )

    def __init__(self, spatial_merge_size, rotary_pos_emb, patch_embed, attn_backend):  # ADAPTED: stand-in holding only what the copied methods read
        super().__init__()  # ADAPTED
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: upstream get_rope(head_size=head_dim, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor": 0.5})
        self.patch_embed = patch_embed  # ADAPTED: upstream Qwen2VisionPatchEmbed; only proj.weight.device is read
        self.attn_backend = attn_backend  # ADAPTED: upstream get_vit_attn_backend(head_size=head_dim, dtype=torch.get_default_dtype())

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    def rot_pos_emb(
        self, grid_thw: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.device
        pos_ids = []
        max_grid_size = 0
        for t, h, w in grid_thw:
            hpos_ids = torch.arange(h, device=device).unsqueeze(1).expand(-1, w)
            wpos_ids = torch.arange(w, device=device).unsqueeze(0).expand(h, -1)
            hpos_ids = (
                hpos_ids.reshape(
                    h // self.spatial_merge_size,
                    self.spatial_merge_size,
                    w // self.spatial_merge_size,
                    self.spatial_merge_size,
                )
                .permute(0, 2, 1, 3)
                .flatten()
            )
            wpos_ids = (
                wpos_ids.reshape(
                    h // self.spatial_merge_size,
                    self.spatial_merge_size,
                    w // self.spatial_merge_size,
                    self.spatial_merge_size,
                )
                .permute(0, 2, 1, 3)
                .flatten()
            )
            pos_ids.append(torch.stack([hpos_ids, wpos_ids], dim=-1).repeat(t, 1))
            max_grid_size = max(max_grid_size, h, w)
        pos_ids = torch.cat(pos_ids, dim=0)

        # Use pre-computed cos_sin_cache from RotaryEmbedding
        cos, sin = self.rotary_pos_emb.get_cos_sin(max_grid_size)

        cos_combined = cos[pos_ids].flatten(1)
        sin_combined = sin[pos_ids].flatten(1)
        return cos_combined, sin_combined

    def compute_attn_mask_seqlen(self, cu_seqlens: torch.Tensor) -> int | None:
        max_seqlen = None
        if self.attn_backend in {
            AttentionBackendEnum.FLASH_ATTN,
            AttentionBackendEnum.ROCM_AITER_FA,
            AttentionBackendEnum.TRITON_ATTN,
        }:
            max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()
        return max_seqlen

    def prepare_encoder_metadata(
        self,
        grid_thw: list[list[int]],
        *,
        max_batch_size: int | None = None,
        max_frames_per_batch: int | None = None,
        max_seqlen_override: int | None = None,
        device: torch.device | None = None,
    ) -> dict[str, torch.Tensor]:
        if device is None:
            device = self.device

        # Position embeddings.
        rotary_pos_emb_cos, rotary_pos_emb_sin = self.rot_pos_emb(grid_thw)

        grid_thw_np = np.array(grid_thw, dtype=np.int32)
        cu_seqlens = np.repeat(
            grid_thw_np[:, 1] * grid_thw_np[:, 2],
            grid_thw_np[:, 0],
        ).cumsum(dtype=np.int32)
        cu_seqlens = np.concatenate([np.zeros(1, dtype=np.int32), cu_seqlens])
        cu_seqlens = torch.from_numpy(cu_seqlens)

        # Keep cu_seqlens shape stable across capture/replay.
        pad_to = (
            max_frames_per_batch if max_frames_per_batch is not None else max_batch_size
        )
        if pad_to is not None:
            num_seqs = len(cu_seqlens) - 1
            if num_seqs < pad_to:
                cu_seqlens = torch.cat(
                    (
                        cu_seqlens,
                        torch.full(
                            (pad_to - num_seqs,),
                            cu_seqlens[-1],
                            dtype=cu_seqlens.dtype,
                            device=cu_seqlens.device,
                        ),
                    )
                )

        # Compute (or override) max seqlen used by FA-style backends.
        if max_seqlen_override is None:
            max_seqlen = self.compute_attn_mask_seqlen(cu_seqlens)
        else:
            max_seqlen = torch.tensor(max_seqlen_override, dtype=torch.int32)

        return {
            "rotary_pos_emb_cos": rotary_pos_emb_cos,
            "rotary_pos_emb_sin": rotary_pos_emb_sin,
            "cu_seqlens": async_tensor_h2d(cu_seqlens, device),
            "max_seqlen": max_seqlen,
        }


def async_tensor_h2d(
    data: list | np.ndarray | torch.Tensor,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Copy list/numpy array/tensor async from host to device."""
    if dtype is None and out is not None:
        dtype = out.dtype
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        t = data
        if PIN_MEMORY and not t.is_pinned():
            # Stage in pinned, contiguous buffer to ensure fully async copy.
            t = torch.empty(
                t.shape, dtype=dtype or t.dtype, device="cpu", pin_memory=True
            ).copy_(t)
    else:
        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")
    assert t.is_cpu

    if out is not None:
        assert out.dtype == dtype
        return out.copy_(t, non_blocking=True)
    assert device is not None, "must provide destination tensor or device"
    return t.to(device=device, dtype=dtype, non_blocking=True)
