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
"""Copied from vllm 0.27.1: vllm/model_executor/models/ernie45_vl.py ::
Ernie4_5_VisionPatchEmbed and Ernie4_5_VisionRotaryEmbedding (whole classes,
verbatim); Ernie4_5_VisionTransformer.dtype, .device, .rot_pos_emb,
.compute_attn_mask_seqlen and .prepare_encoder_metadata; and
VariableResolutionResamplerModel (__init__, spatial_conv_reshape and forward
with its fwd_placeholder, verbatim; load_weights left out).

Ernie4_5_VisionTransformer.prepare_encoder_metadata does not exist in 0.27.1:
its body is the metadata block of Ernie4_5_VisionTransformer.forward
(rotary embeddings, cu_seqlens with num_pad, max_seqlen), extracted into a
method with the same name and keywords as 0.28.0's so both sides are called
alike; the body lines are verbatim, the extraction lines are marked ADAPTED.
Left out of the extraction: patch_embed and the `hidden_states.unsqueeze`
between the cu_seqlens and max_seqlen lines (they touch only hidden_states).

Ernie4_5_VisionTransformer itself holds attention blocks, tensor-parallel
layers and a backend choice: only the attributes the copied methods read are
reproduced, in a stand-in class marked ADAPTED. The resampler's vllm layers
(ColumnParallelLinear, RMSNorm) get small deterministic stand-ins; the linear
stand-in also keeps the last input it received, so the fuzzer can observe
exactly which rows fwd_placeholder gathered.

Also (target ernie-encoder-output): Ernie4_5_VLMoeForConditionalGeneration
._vision_forward (verbatim) and, under 0.28.0's name encoder_eager_forward, the
body of ._process_image_input (verbatim; the header is ADAPTED), in a stand-in
class holding only ``vision_model`` and ``resampler_model``: 0.27.1 has no
encoder CUDA graphs, and this is the path its images' embeddings take. The
tower stand-in has no ``forward``: the input model subclasses it with a tiny
deterministic ViT (strategies/ernie45_vl/inputs.py, ErnieEncoderOutputInputs).
"""
from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def prepare_encoder_metadata(  # ADAPTED: 0.27.1 computes this inline in forward(); extracted here
        self, grid_thw: torch.Tensor, *, num_pad=0, device: torch.device  # ADAPTED: device is forward's hidden_states.device
    ) -> dict[str, torch.Tensor]:  # ADAPTED
        rotary_pos_emb = self.rot_pos_emb(grid_thw)
        rotary_pos_emb = rotary_pos_emb.to(device)  # ADAPTED: upstream .to(hidden_states.device)

        cu_seqlens = torch.repeat_interleave(
            grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]
        ).cumsum(dim=0, dtype=torch.int32)

        zeros = cu_seqlens.new_zeros(1)
        if num_pad > 0:
            cu_seqlens = torch.cat([zeros, cu_seqlens, zeros])
            cu_seqlens[-1] = cu_seqlens[-2] + num_pad
        else:
            cu_seqlens = torch.cat([zeros, cu_seqlens])

        # pre-compute max_seqlen for attn mask to reduce cuMemcpy operations
        max_seqlen = self.compute_attn_mask_seqlen(cu_seqlens)

        return {  # ADAPTED: forward hands these three to every block
            "rotary_pos_emb": rotary_pos_emb,  # ADAPTED
            "cu_seqlens": cu_seqlens,  # ADAPTED
            "max_seqlen": max_seqlen,  # ADAPTED
        }  # ADAPTED


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
            slice_offsets = torch.tensor(np.concatenate(slice_offsets, axis=-1)).to(
                x.device
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
            slice_offsets2 = torch.tensor(np.concatenate(slice_offsets2, axis=-1)).to(
                x.device
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


class Ernie4_5_VLMoeForConditionalGeneration(nn.Module):  # ADAPTED: stand-in holding only what the copied methods read
    def __init__(self, vision_model: Ernie4_5_VisionTransformer, resampler_model=None) -> None:  # ADAPTED
        super().__init__()
        self.vision_model = vision_model  # ADAPTED: upstream Ernie4_5_VisionTransformer(config.vision_config, ...)
        self.resampler_model = resampler_model  # ADAPTED: upstream VariableResolutionResamplerModel(...)

    def encoder_eager_forward(  # ADAPTED: 0.27.1's _process_image_input (its eager image path) under 0.28.0's name
        self, image_input  # ADAPTED: the batch's mm_kwargs (pixel_values, image_grid_thw)
    ) -> tuple[torch.Tensor, ...]:
        grid_thw = image_input["image_grid_thw"]
        assert grid_thw.ndim == 2

        pixel_values = image_input["pixel_values"].type(self.vision_model.dtype)
        image_features = self._vision_forward(
            pixel_values=pixel_values, grid_thw=grid_thw
        )
        image_embeds = self.resampler_model(image_features, grid_thw)

        merge_size = self.vision_model.spatial_merge_size
        sizes = grid_thw.prod(-1) // merge_size // merge_size

        return image_embeds.split(sizes.tolist())

    def _vision_forward(
        self,
        pixel_values: torch.Tensor,
        grid_thw: torch.Tensor,
    ) -> torch.Tensor:
        if grid_thw is not None:
            grid_thw = grid_thw[grid_thw > 0]
            if grid_thw.numel() % 3 != 0:
                raise ValueError(
                    f"grid_thw has {grid_thw.numel()} elements after filtering,"
                    "which is not divisible by 3."
                )
            grid_thw = grid_thw.reshape(-1, 3)
            # example: [[1,64,64],[2,80,80]] -> [[1,64,64],[1,80,80],[1,80,80]]
            grid_thw = F.pad(
                torch.repeat_interleave(grid_thw[:, 1:], grid_thw[:, 0], 0),
                [1, 0, 0, 0],
                value=1,
            )
        image_features = self.vision_model(pixel_values, grid_thw)
        return image_features

