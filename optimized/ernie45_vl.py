# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

# Copyright 2025 The Baidu team.
# Copyright 2023 The vLLM team.
# Copyright 2022 EleutherAI and the HuggingFace Inc. team. All rights reserved.
#
# This code is based on EleutherAI's GPT-NeoX library and the GPT-NeoX
# and OPT implementations in this library. It has been modified from its
# original forms to accommodate minor architectural differences compared
# to GPT-NeoX and OPT used by the Meta AI team that trained the model.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Copied from vllm 0.28.0: vllm/model_executor/models/ernie45_vl.py ::
Ernie4_5_VisionPatchEmbed and Ernie4_5_VisionRotaryEmbedding (whole classes,
verbatim); Ernie4_5_VisionTransformer.dtype, .device, .rot_pos_emb,
.compute_attn_mask_seqlen and .prepare_encoder_metadata; and
VariableResolutionResamplerModel (__init__, spatial_conv_reshape and forward
with its fwd_placeholder, verbatim; load_weights left out); and
Ernie4_5_VLMoeForConditionalGeneration.prepare_encoder_cudagraph_capture_inputs
and .prepare_encoder_cudagraph_replay_buffers (verbatim, in a stand-in class
holding only ``vision_model`` and ``resampler_model``), which the encoder
CUDA-graph manager (vllm/v1/worker/encoder_cudagraph.py) calls at capture and
before each replay; and, in the same class, .encoder_cudagraph_forward (what
the captured graph runs), .encoder_eager_forward (the manager's eager
fallback) and .postprocess_encoder_output (run by the manager after either,
verbatim), plus Ernie4_5_VisionTransformer.dtype (verbatim).
``scatter_output_slices`` (vllm/model_executor/models/utils.py, the same text
0.28.0 .. 0.34.0) is stood in beside them, marked ADAPTED. The tower stand-in
has no ``forward``: the input model (strategies/ernie45_vl/inputs.py,
ErnieEncoderOutputInputs) subclasses it with a tiny deterministic ViT.

Ernie4_5_VisionTransformer.prepare_encoder_metadata is verbatim (0.28.0 split it
out of forward for encoder CUDA graphs and staged cu_seqlens non-blocking).

Ernie4_5_VisionTransformer itself holds attention blocks, tensor-parallel
layers and a backend choice: only the attributes the copied methods read are
reproduced, in a stand-in class marked ADAPTED. The resampler's vllm layers
(ColumnParallelLinear, RMSNorm) get small deterministic stand-ins; the linear
stand-in also keeps the last input it received, so the fuzzer can observe
exactly which rows fwd_placeholder gathered.
"""
from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from optimized.torch_utils import async_tensor_h2d  # ADAPTED: upstream `from vllm.utils.torch_utils import async_tensor_h2d`
from optimized.gpu_sync_debug import gpu_sync_allowed  # ADAPTED: upstream `from vllm.utils.gpu_sync_debug import gpu_sync_allowed`


class AttentionBackendEnum(Enum):  # ADAPTED: stand-in for vllm.v1.attention.backends.registry.AttentionBackendEnum
    FLASH_ATTN = "FLASH_ATTN"  # ADAPTED: compute_attn_mask_seqlen only tests membership
    TRITON_ATTN = "TRITON_ATTN"  # ADAPTED
    ROCM_AITER_FA = "ROCM_AITER_FA"  # ADAPTED
    TORCH_SDPA = "TORCH_SDPA"  # ADAPTED: a backend that gets max_seqlen=None


class ColumnParallelLinear(nn.Linear):  # ADAPTED: vllm's TP linear at tp_size=1 is a plain linear layer
    def __init__(self, input_size, output_size, bias=True, gather_output=False, quant_config=None, prefix=""):  # ADAPTED
        super().__init__(input_size, output_size, bias=bias)  # ADAPTED: quant_config/prefix unused at tp_size=1
        self.received = None  # ADAPTED: last input seen, the fuzzer's view of what was gathered

    def forward(self, input_):  # ADAPTED
        self.received = input_  # ADAPTED
        return super().forward(input_), None  # ADAPTED: vllm returns (output, output_bias); bias fused, so None


class RMSNorm(nn.Module):  # ADAPTED: vllm.model_executor.layers.layernorm.RMSNorm, its forward_native math
    def __init__(self, hidden_size, eps=1e-6):  # ADAPTED
        super().__init__()  # ADAPTED
        self.variance_epsilon = eps  # ADAPTED
        self.weight = nn.Parameter(torch.ones(hidden_size))  # ADAPTED

    def forward(self, x):  # ADAPTED
        orig_dtype = x.dtype  # ADAPTED
        x = x.to(torch.float32)  # ADAPTED
        variance = x.pow(2).mean(dim=-1, keepdim=True)  # ADAPTED
        x = x * torch.rsqrt(variance + self.variance_epsilon)  # ADAPTED
        return x.to(orig_dtype) * self.weight  # ADAPTED


class Ernie4_5_VisionPatchEmbed(nn.Module):
    def __init__(
        self,
        patch_size: int = 14,
        in_channels: int = 3,
        embed_dim: int = 1280,
        prefix="",
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.embed_dim = embed_dim

        self.proj = nn.Linear(
            in_channels * patch_size * patch_size, embed_dim, bias=False
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        target_dtype = self.proj.weight.dtype
        hidden_states = hidden_states.to(target_dtype)
        hidden_states = self.proj(hidden_states)

        return hidden_states


class Ernie4_5_VisionRotaryEmbedding(nn.Module):
    def __init__(self, dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.inv_freq = 1.0 / theta ** (
            torch.arange(start=0, end=dim, step=2, dtype=torch.float32) / dim
        )

    def forward(self, seqlen: int) -> torch.Tensor:
        seq = torch.arange(
            seqlen, device=self.inv_freq.device, dtype=self.inv_freq.dtype
        )
        freqs = torch.outer(input=seq, vec2=self.inv_freq)
        return freqs


class Ernie4_5_VisionTransformer(nn.Module):  # ADAPTED: stand-in holding only what the copied methods read
    def __init__(self, spatial_merge_size: int, head_dim: int, attn_backend: AttentionBackendEnum) -> None:  # ADAPTED
        super().__init__()
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.patch_embed = Ernie4_5_VisionPatchEmbed(patch_size=1, in_channels=1, embed_dim=1)  # ADAPTED: only proj.weight.device is read
        self.rotary_pos_emb = Ernie4_5_VisionRotaryEmbedding(head_dim // 2)
        self.attn_backend = attn_backend  # ADAPTED: upstream get_vit_attn_backend(head_size=head_dim, ...)

    @property
    def dtype(self) -> torch.dtype:
        return self.patch_embed.proj.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    def rot_pos_emb(self, grid_thw: torch.Tensor) -> torch.Tensor:
        pos_ids = []
        for t, h, w in grid_thw:
            hpos_ids = torch.arange(h).unsqueeze(1).expand(-1, w)
            wpos_ids = torch.arange(w).unsqueeze(0).expand(h, -1)
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
        pos_ids = torch.cat(pos_ids, dim=0)
        max_grid_size = grid_thw[:, 1:].max()
        rotary_pos_emb_full = self.rotary_pos_emb(max_grid_size)
        # `pos_ids` is built on the host; stage it over non-blocking so the
        # gather below doesn't index a device tensor with a CPU one.
        pos_ids = pos_ids.to(rotary_pos_emb_full.device, non_blocking=True)
        rotary_pos_emb = rotary_pos_emb_full[pos_ids].flatten(1)
        return rotary_pos_emb

    def compute_attn_mask_seqlen(self, cu_seqlens: torch.Tensor) -> torch.Tensor | None:
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
        grid_thw: torch.Tensor | list[list[int]],
        *,
        num_pad: int = 0,
        max_batch_size: int | None = None,
        max_seqlen_override: int | None = None,
        device: torch.device | None = None,
    ) -> dict[str, torch.Tensor]:
        """Compute encoder metadata outside the CUDA graph.

        Splits the rotary embeddings, ``cu_seqlens`` and ``max_seqlen`` out of
        `forward` so they can be precomputed on the host side and fed into a
        captured graph through fixed buffers. Shared by the eager path, CUDA
        graph capture and CUDA graph replay

        Args:
            grid_thw: Per-frame grid sizes as a ``[num_frames, 3]`` tensor or
                an equivalent list of ``[t, h, w]``.
            num_pad: Legacy ``cu_seqlens`` padding
            max_batch_size: If set, pad ``cu_seqlens`` to ``max_batch_size + 1``
                entries for a fixed graph buffer shape.
            max_seqlen_override: If set, use this value for ``max_seqlen``
                instead of deriving it from ``cu_seqlens``. CUDA graph capture
                bakes ``max_seqlen`` at capture time, so it must cover the
                worst-case replay.
            device: Device for the returned tensors. Defaults to ``self.device``.

        Returns:
            Dict with ``rotary_pos_emb``, ``cu_seqlens`` and ``max_seqlen``.
        """
        if device is None:
            device = self.device
        if not isinstance(grid_thw, torch.Tensor):
            grid_thw = torch.tensor(grid_thw, dtype=torch.int32)

        rotary_pos_emb = self.rot_pos_emb(grid_thw).to(device)

        cu_seqlens = torch.repeat_interleave(
            grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]
        ).cumsum(dim=0, dtype=torch.int32)

        zeros = cu_seqlens.new_zeros(1)
        if num_pad > 0:
            cu_seqlens = torch.cat([zeros, cu_seqlens, zeros])
            cu_seqlens[-1] = cu_seqlens[-2] + num_pad
        else:
            cu_seqlens = torch.cat([zeros, cu_seqlens])

        # Pad cu_seqlens to a fixed number of sequences so the CUDA graph
        # replay buffer keeps a constant shape across batches.
        if max_batch_size is not None:
            num_seqs = cu_seqlens.numel() - 1
            if num_seqs < max_batch_size:
                cu_seqlens = torch.cat(
                    [
                        cu_seqlens,
                        cu_seqlens.new_full(
                            (max_batch_size - num_seqs,), cu_seqlens[-1]
                        ),
                    ]
                )

        # max_seqlen is baked into the graph at capture time, so capture passes
        # a worst-case override. compute_attn_mask_seqlen keeps it on CPU
        # (consumed via .item()), avoiding a captured D2H copy.
        if max_seqlen_override is not None:
            max_seqlen = torch.tensor(max_seqlen_override, dtype=torch.int32)
        else:
            max_seqlen = self.compute_attn_mask_seqlen(cu_seqlens)

        cu_seqlens = cu_seqlens.to(device, non_blocking=True)

        return {
            "rotary_pos_emb": rotary_pos_emb,
            "cu_seqlens": cu_seqlens,
            "max_seqlen": max_seqlen,
        }


class VariableResolutionResamplerModel(nn.Module):
    def __init__(
        self,
        in_dim,
        out_dim,
        spatial_conv_size,
        temporal_conv_size,
        config,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.config = config
        self.spatial_conv_size = spatial_conv_size
        self.temporal_conv_size = temporal_conv_size
        self.use_temporal_conv = config.use_temporal_conv

        # compress 2d conv(picture) to 1d
        self.spatial_dim = self.in_dim * self.spatial_conv_size * self.spatial_conv_size
        # compress 3d conv(video) to 1d
        self.temporal_dim = (
            self.in_dim
            * self.spatial_conv_size
            * self.spatial_conv_size
            * self.temporal_conv_size
        )

        self.spatial_linear1 = ColumnParallelLinear(
            self.spatial_dim,
            self.spatial_dim,
            bias=True,
            gather_output=True,
            quant_config=getattr(config, "quant_config", None),
            prefix=f"{prefix}.spatial_linear1",
        )

        self.spatial_gelu = nn.GELU()

        self.spatial_linear2 = ColumnParallelLinear(
            self.spatial_dim,
            self.spatial_dim,
            bias=True,
            gather_output=True,
            quant_config=getattr(config, "quant_config", None),
            prefix=f"{prefix}.spatial_linear2",
        )

        self.spatial_norm = nn.LayerNorm(self.spatial_dim, eps=1e-6)

        if self.use_temporal_conv:
            self.temporal_linear1 = ColumnParallelLinear(
                self.temporal_dim,
                self.spatial_dim,
                bias=True,
                gather_output=True,
                quant_config=getattr(config, "quant_config", None),
                prefix=f"{prefix}.temporal_linear1",
            )

            self.temporal_gelu = nn.GELU()

            self.temporal_linear2 = ColumnParallelLinear(
                self.spatial_dim,
                self.spatial_dim,
                bias=True,
                gather_output=True,
                quant_config=getattr(config, "quant_config", None),
                prefix=f"{prefix}.temporal_linear2",
            )

            self.temporal_norm = nn.LayerNorm(self.spatial_dim, eps=1e-6)

        self.mlp = ColumnParallelLinear(
            self.spatial_dim,
            self.out_dim,
            bias=True,
            gather_output=True,
            quant_config=getattr(config, "quant_config", None),
            prefix=f"{prefix}.mlp",
        )

        self.after_norm = RMSNorm(
            hidden_size=out_dim, eps=getattr(config, "rms_norm_eps", 1e-6)
        )

    def spatial_conv_reshape(self, x, spatial_conv_size):
        S, C = x.shape
        x = x.reshape([-1, C * (spatial_conv_size**2)])
        return x

    def forward(self, x, grid_thw):
        def fwd_spatial(x):
            x = self.spatial_conv_reshape(x, self.spatial_conv_size)

            x, _ = self.spatial_linear1(x)
            x = self.spatial_gelu(x)
            x, _ = self.spatial_linear2(x)
            x = self.spatial_norm(x)

            return x

        def fwd_placeholder(x, grid_thw, to_tensor=False):
            # The per-image grids drive the Python-level offset arithmetic
            # below; the same read is wrapped on the cudagraph path.
            with gpu_sync_allowed():
                grid_thw_cpu = grid_thw.cpu().numpy()
            grid_t, grid_hw = grid_thw_cpu[:, 0], grid_thw_cpu[:, 1:]
            grid_hw_after_conv = grid_hw.prod(-1) // (self.spatial_conv_size**2)

            tokens_per_img_or_vid = grid_thw_cpu.prod(-1) // (self.spatial_conv_size**2)
            batch_offset = np.empty(
                tokens_per_img_or_vid.size, dtype=tokens_per_img_or_vid.dtype
            )
            batch_offset[0] = 0
            batch_offset[1:] = tokens_per_img_or_vid.cumsum()[:-1]

            slice_offsets = []
            for temporoal_size, spatial_size, b_offset in zip(
                grid_t, grid_hw_after_conv, batch_offset
            ):
                for temp_offset in range(0, temporoal_size, 2):
                    slice_offsets.append(
                        np.arange(
                            b_offset + (temp_offset) * spatial_size,
                            b_offset + (temp_offset + 1) * spatial_size,
                        )
                    )
            slice_offsets = async_tensor_h2d(
                np.concatenate(slice_offsets, axis=-1), device=x.device
            )

            slice_offsets2 = []
            for temporoal_size, spatial_size, b_offset in zip(
                grid_t, grid_hw_after_conv, batch_offset
            ):
                for temp_offset in range(
                    1 if temporoal_size > 1 else 0, temporoal_size, 2
                ):
                    slice_offsets2.append(
                        np.arange(
                            b_offset + (temp_offset) * spatial_size,
                            b_offset + (temp_offset + 1) * spatial_size,
                        )
                    )
            slice_offsets2 = async_tensor_h2d(
                np.concatenate(slice_offsets2, axis=-1), device=x.device
            )

            x_timestep_1 = torch.index_select(x, dim=0, index=slice_offsets)
            x_timestep_2 = torch.index_select(x, dim=0, index=slice_offsets2)
            x = torch.concat([x_timestep_1, x_timestep_2], dim=-1)
            return x

        def fwd_temporal(x):
            x, _ = self.temporal_linear1(x)
            x = self.temporal_gelu(x)
            x, _ = self.temporal_linear2(x)
            x = self.temporal_norm(x)
            return x

        def fwd_mlp(x):
            x, _ = self.mlp(x)
            x = self.after_norm(x)
            return x

        x = fwd_spatial(x)
        if self.use_temporal_conv:
            x = fwd_placeholder(x, grid_thw)
            x = fwd_temporal(x)
        x = fwd_mlp(x)
        return x


def scatter_output_slices(  # ADAPTED: stands in for vllm.model_executor.models.utils.scatter_output_slices (same text 0.28.0..0.34.0)
    output: torch.Tensor,  # ADAPTED
    indices: list[int],  # ADAPTED
    per_item_out_tokens: list[int],  # ADAPTED
    dest: dict[int, torch.Tensor] | list[torch.Tensor | None],  # ADAPTED
    clone: bool = False,  # ADAPTED
) -> None:  # ADAPTED
    """Slice a concatenated output tensor and scatter into dest by index."""  # ADAPTED
    offset = 0  # ADAPTED
    for idx in indices:  # ADAPTED
        n_tok = per_item_out_tokens[idx]  # ADAPTED
        sliced = output[offset : offset + n_tok]  # ADAPTED
        dest[idx] = sliced.clone() if clone else sliced  # ADAPTED
        offset += n_tok  # ADAPTED


class EncoderCudaGraphCaptureInputs:  # ADAPTED: stand-in for vllm/v1/worker/encoder_cudagraph_defs.py's dataclass
    def __init__(self, values):  # ADAPTED: the field the manager reads
        self.values = values  # ADAPTED


class EncoderCudaGraphReplayBuffers:  # ADAPTED: stand-in for vllm/v1/worker/encoder_cudagraph_defs.py's dataclass
    def __init__(self, values):  # ADAPTED: the field the manager reads
        self.values = values  # ADAPTED


class Ernie4_5_VLMoeForConditionalGeneration(nn.Module):  # ADAPTED: stand-in holding only what the copied methods read
    def __init__(self, vision_model: Ernie4_5_VisionTransformer, resampler_model=None) -> None:  # ADAPTED
        super().__init__()
        self.vision_model = vision_model  # ADAPTED: upstream Ernie4_5_VisionTransformer(config.vision_config, ...)
        self.resampler_model = resampler_model  # ADAPTED: upstream VariableResolutionResamplerModel(...)

    def prepare_encoder_cudagraph_capture_inputs(
        self,
        token_budget,
        max_batch_size,
        max_frames_per_batch,
        device,
        dtype,
        path: str = "default",
    ):
        # from vllm.v1.worker.encoder_cudagraph_defs import EncoderCudaGraphCaptureInputs  # ADAPTED: the module-level stand-in

        m = self.vision_model.spatial_merge_size
        # Ceil so the buffer fits the worst case of one item using the full
        # budget.
        per_mm_item_output = (token_budget + max_batch_size - 1) // max_batch_size
        # Image-format grid (T=1): h=m, w=per_mm_item_output*m, so the merged
        # token count per item equals per_mm_item_output.
        grid_config = [[1, m, per_mm_item_output * m] for _ in range(max_batch_size)]

        patch_embed = self.vision_model.patch_embed
        in_channels = patch_embed.in_channels
        patch_size = patch_embed.patch_size
        total_patches = sum(t * h * w for t, h, w in grid_config)
        flattened_patch_size = in_channels * patch_size * patch_size
        dummy_pixel_values = torch.randn(
            total_patches, flattened_patch_size, device=device, dtype=dtype
        )

        # max_seqlen is baked at capture: worst case is one item consuming the
        # full budget - seq_len = token_budget * spatial_merge_size**2.
        metadata = self.vision_model.prepare_encoder_metadata(
            grid_config,
            max_batch_size=max_batch_size,
            max_seqlen_override=token_budget * (m**2),
            device=device,
        )
        values = metadata | {"pixel_values": dummy_pixel_values}
        return EncoderCudaGraphCaptureInputs(values=values)

    def prepare_encoder_cudagraph_replay_buffers(
        self, mm_kwargs, max_batch_size, max_frames_per_batch, path: str = "default"
    ):
        # from vllm.v1.worker.encoder_cudagraph_defs import EncoderCudaGraphReplayBuffers  # ADAPTED: the module-level stand-in

        # The per-image grids are needed as Python ints to size the buffers.
        with gpu_sync_allowed():
            grid_thw_list = mm_kwargs["image_grid_thw"].tolist()
        metadata = self.vision_model.prepare_encoder_metadata(
            grid_thw_list, max_batch_size=max_batch_size
        )
        values = metadata | {
            "pixel_values": mm_kwargs["pixel_values"],
        }
        return EncoderCudaGraphReplayBuffers(values=values)

    def encoder_cudagraph_forward(
        self, values: dict[str, torch.Tensor], path: str = "default"
    ) -> torch.Tensor:
        # Graph captures the ViT only, and the resampler runs in
        # postprocess_encoder_output.
        pixel_values = values.pop("pixel_values")
        return self.vision_model(pixel_values, encoder_metadata=values)

    def encoder_eager_forward(
        self, mm_kwargs: dict[str, Any], path: str = "default"
    ) -> torch.Tensor:
        # Eager fallback: run the full pipeline (ViT + resampler). The result
        # is scattered directly, so it must be the post-merge embeddings.
        pixel_values = mm_kwargs["pixel_values"].type(self.vision_model.dtype)
        grid_thw = mm_kwargs["image_grid_thw"].to(self.vision_model.device)
        image_features = self.vision_model(pixel_values, grid_thw)
        return self.resampler_model(image_features, grid_thw)

    def postprocess_encoder_output(
        self,
        outputs: dict[str, torch.Tensor],
        indices: list[int],
        per_item_out_tokens: list[int],
        dest,
        clone: bool = False,
        batch_mm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        # The graph output is the raw ViT features (pre-merge), padded to the
        # token budget. Run the resampler eagerly on the valid portion using
        # the actual batch grid_thw, then scatter the post-merge embeddings.
        # Ernie only uses the single "default" encoder path.
        output = outputs["default"]
        grid_thw = batch_mm_kwargs["image_grid_thw"].to(output.device)
        # The valid token count slices the graph output for the eager
        # resampler call, so it has to come back to the host.
        with gpu_sync_allowed():
            num_valid = int((grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]).sum())
        image_embeds = self.resampler_model(output[:num_valid], grid_thw)
        scatter_output_slices(image_embeds, indices, per_item_out_tokens, dest, clone)
