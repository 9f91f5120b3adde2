# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Copyright (c) 2025 PaddlePaddle Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Copied from vllm 0.28.0: vllm/model_executor/models/paddleocr_vl.py ::
SigLIPRotaryEmbedding (whole class, verbatim), SiglipEncoder (whole class,
verbatim but for the attention-backend lookup) and
PaddleOCRVLForConditionalGeneration.encode_image (method body verbatim).

The code under test is the code that builds and stages the inputs of the
neural layers, so those layers are replaced by small deterministic stand-ins
that record what they receive (all marked ADAPTED below):

* ``SiglipEncoderLayer`` (attention + MLP upstream) records ``hidden_states``,
  ``cu_seqlens``, ``rotary_pos_emb`` and ``max_seqlen`` and returns
  ``hidden_states + 1``;
* ``SiglipVisionModel`` (the whole vision tower upstream) returns the keyword
  arguments ``encode_image`` gave it;
* ``PaddleOCRVLForConditionalGeneration`` holds only ``visual``.
"""
from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in
from types import SimpleNamespace  # ADAPTED: for the config stand-in

import numpy as np
import torch
import torch.nn as nn

from optimized.torch_utils import async_tensor_h2d  # ADAPTED: upstream `from vllm.utils.torch_utils import async_tensor_h2d`


PretrainedConfig = SimpleNamespace  # ADAPTED: transformers' config; hidden_size, num_attention_heads, num_hidden_layers and (stand-in) attn_backend are read
QuantizationConfig = object  # ADAPTED: vllm's quantization config; only passed through to the layers


class AttentionBackendEnum(Enum):  # ADAPTED: vllm.v1.attention.backends.registry; only the members SiglipEncoder reads
    FLASH_ATTN = "FLASH_ATTN"  # ADAPTED
    ROCM_AITER_FA = "ROCM_AITER_FA"  # ADAPTED
    TRITON_ATTN = "TRITON_ATTN"  # ADAPTED
    TORCH_SDPA = "TORCH_SDPA"  # ADAPTED: a backend that needs no max_seqlen


class SiglipEncoderLayer(nn.Module):  # ADAPTED: recording stand-in for attention + MLP; keeps upstream's call signature
    def __init__(self, config: PretrainedConfig, quant_config: QuantizationConfig | None = None, prefix: str = ""):  # ADAPTED
        super().__init__()  # ADAPTED
        self.received: list[dict] = []  # ADAPTED: one entry per call, cloned so later in-place work cannot change it

    def forward(self, hidden_states: torch.Tensor, *, cu_seqlens: torch.Tensor, rotary_pos_emb: torch.Tensor | None, max_seqlen: torch.Tensor | None) -> torch.Tensor:  # ADAPTED
        def keep(value):  # ADAPTED: clone tensors (no sync), keep anything else as is
            return value.clone() if isinstance(value, torch.Tensor) else value  # ADAPTED
        self.received.append({"hidden_states": keep(hidden_states), "cu_seqlens": keep(cu_seqlens), "rotary_pos_emb": keep(rotary_pos_emb), "max_seqlen": keep(max_seqlen)})  # ADAPTED
        return hidden_states + 1  # ADAPTED: deterministic, so the returned state shows every layer ran in order


class SigLIPRotaryEmbedding(nn.Module):
    def __init__(self, dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.dim = dim
        self.theta = theta
        self.rope_init()

    def rope_init(self):
        inv_freq = 1.0 / (
            self.theta ** (torch.arange(0, self.dim, 2, dtype=torch.float) / self.dim)
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seqlen: int) -> torch.Tensor:
        seq = torch.arange(
            seqlen,
            device=self.inv_freq.device,
            dtype=self.inv_freq.dtype,
        )
        freqs = torch.outer(seq, self.inv_freq)
        return freqs


class SiglipEncoder(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ):
        super().__init__()
        self.config = config
        embed_dim = config.hidden_size
        num_heads = config.num_attention_heads
        head_dim = embed_dim // num_heads

        self.attn_backend = config.attn_backend  # ADAPTED: upstream asks get_vit_attn_backend(head_size=head_dim, dtype=torch.get_default_dtype()) for the platform's backend

        self.layers = nn.ModuleList(
            [
                SiglipEncoderLayer(
                    config,
                    quant_config=quant_config,
                    prefix=f"{prefix}.layers.{layer_idx}",
                )
                for layer_idx in range(config.num_hidden_layers)
            ]
        )
        self.rotary_pos_emb = SigLIPRotaryEmbedding(head_dim // 2)

    @staticmethod
    def flatten_list(image_grid_thw):
        tmp_image_grid_thw = list()
        for image_grid in image_grid_thw:
            if isinstance(image_grid, list):
                tmp_image_grid_thw.extend(image_grid)
            else:
                tmp_image_grid_thw.append(image_grid)
        return tmp_image_grid_thw

    def forward(
        self,
        inputs_embeds,
        cu_seqlens: torch.Tensor | None = None,
        image_grid_thw: list[tuple[int, int, int] | list[tuple[int, int, int]]]
        | None = None,
        height_position_ids: torch.Tensor | None = None,
        width_position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        device = inputs_embeds.device
        hidden_states = inputs_embeds

        flatten_image_grid_thw = self.flatten_list(image_grid_thw)

        if width_position_ids is None or height_position_ids is None:
            split_hids = list()
            split_wids = list()
            for t, h, w in flatten_image_grid_thw:
                image_pids = torch.arange(t * h * w, device=device) % (h * w)
                sample_hids = image_pids // w
                sample_wids = image_pids % w
                split_hids.append(sample_hids)
                split_wids.append(sample_wids)
            width_position_ids = torch.concat(split_wids, dim=0)
            height_position_ids = torch.concat(split_hids, dim=0)

        pids = torch.stack(
            [height_position_ids, width_position_ids],
            dim=-1,
        )
        # The ids are built from the grids above, so `h`/`w` bound them
        # and the table size is known on the host.
        max_grid_size = max(max(h, w) for _, h, w in flatten_image_grid_thw)
        rope_emb_max_grid = self.rotary_pos_emb(max_grid_size)
        rotary_pos_emb = rope_emb_max_grid[pids].flatten(1)

        if cu_seqlens is None:
            raise ValueError("cu_seqlens cannot be None for SiglipEncoder.")
        if not isinstance(cu_seqlens, torch.Tensor):
            cu_seqlens = async_tensor_h2d(cu_seqlens, dtype=torch.int32, device=device)
        else:
            cu_seqlens = cu_seqlens.to(device=device, non_blocking=True)

        max_seqlen = None
        if self.attn_backend in {
            AttentionBackendEnum.FLASH_ATTN,
            AttentionBackendEnum.ROCM_AITER_FA,
            AttentionBackendEnum.TRITON_ATTN,
        }:
            max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()

        hidden_states = inputs_embeds
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(
                hidden_states,
                cu_seqlens=cu_seqlens,
                rotary_pos_emb=rotary_pos_emb,
                max_seqlen=max_seqlen,
            )
        return hidden_states


class SiglipVisionModel(nn.Module):  # ADAPTED: recording stand-in for the vision tower
    def __init__(self, dtype: torch.dtype):  # ADAPTED: upstream reads the patch embedding's weight dtype
        super().__init__()  # ADAPTED
        self._dtype = dtype  # ADAPTED

    @property
    def dtype(self) -> torch.dtype:  # ADAPTED: upstream returns self.vision_model.embeddings.patch_embedding.weight.dtype
        return self._dtype  # ADAPTED

    def forward(self, pixel_values, interpolate_pos_encoding: bool = False, position_ids: torch.Tensor | None = None, image_grid_thw=None, cu_seqlens: torch.Tensor | None = None) -> dict:  # ADAPTED: same keywords as upstream
        return {"pixel_values": pixel_values, "interpolate_pos_encoding": interpolate_pos_encoding, "position_ids": position_ids, "image_grid_thw": image_grid_thw, "cu_seqlens": cu_seqlens}  # ADAPTED: what it received


class PaddleOCRVLForConditionalGeneration(nn.Module):  # ADAPTED: stand-in holding only what encode_image reads
    def __init__(self, visual: SiglipVisionModel):  # ADAPTED
        super().__init__()  # ADAPTED
        self.visual = visual  # ADAPTED: upstream builds SiglipVisionModel(config.vision_config, ...)

    def encode_image(
        self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
    ) -> torch.Tensor:
        pixel_values = pixel_values.type(self.visual.dtype)
        siglip_position_ids = list()
        image_grid_hws = list()
        cu_seqlens = [0]

        thw_tuple = tuple(image_grid_thw.tolist())
        numel = np.prod(thw_tuple)
        image_grid_hws.append(thw_tuple)
        image_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])
        siglip_position_ids.append(image_position_ids)
        cu_seqlens.append(cu_seqlens[-1] + numel)

        # Both are built on the host; stage them over non-blocking.
        siglip_position_ids = torch.concat(siglip_position_ids, dim=0).to(
            pixel_values.device, non_blocking=True
        )
        cu_seqlens = async_tensor_h2d(
            cu_seqlens, dtype=torch.int32, device=pixel_values.device
        )

        vision_outputs = self.visual(
            pixel_values=pixel_values,
            image_grid_thw=image_grid_hws,
            position_ids=siglip_position_ids,
            interpolate_pos_encoding=True,
            cu_seqlens=cu_seqlens,
        )
        return vision_outputs
