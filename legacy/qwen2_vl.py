# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0: vllm/model_executor/models/qwen2_vl.py ::
Qwen2VisionTransformer.rot_pos_emb and Qwen2VisionTransformer.device (definitions verbatim; the class's
own lines verbatim).

Between 0.28.0 and 0.29.0 ``rot_pos_emb`` changed: 0.28.0 builds the position ids on the host and copies
them with ``pos_ids.to(cos.device, non_blocking=True)`` (a pageable H2D copy); 0.29.0 builds them with
``torch.arange(..., device=self.device)`` on the model's device and drops the copy.

Qwen2VisionTransformer itself is far larger (patch embedding, attention blocks, merger); the ``__init__``
here is a stand-in holding only what ``rot_pos_emb`` and ``device`` read (``spatial_merge_size``,
``rotary_pos_emb``, ``patch_embed``), marked ADAPTED. ``rotary_pos_emb`` is the model's ``get_rope(...)``
module; the input model (strategies/qwen2_vl/inputs.py) hands in a stand-in with a seeded ``cos_sin_cache`` and
upstream's ``get_cos_sin``.
"""

import torch
import torch.nn as nn

# from .utils import WeightsMapper  # ADAPTED: weight loading only; the class attribute below just holds its arguments
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)


class Qwen2VisionTransformer(nn.Module):
    # Vision checkpoints store qkv pre-fused; merge separate q/k/v into qkv.
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            ".q_proj": (".qkv", "q"),
            ".k_proj": (".qkv", "k"),
            ".v_proj": (".qkv", "v"),
        }
    )

    def __init__(self, spatial_merge_size, rotary_pos_emb, patch_embed):  # ADAPTED: stand-in holding only what rot_pos_emb reads
        super().__init__()  # ADAPTED
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: upstream get_rope(head_size=head_dim, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor": 0.5})
        self.patch_embed = patch_embed  # ADAPTED: upstream Qwen2VisionPatchEmbed; only proj.weight.device is read

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    def rot_pos_emb(
        self, grid_thw: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pos_ids = []
        max_grid_size = 0
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
            max_grid_size = max(max_grid_size, h, w)
        pos_ids = torch.cat(pos_ids, dim=0)

        # Use pre-computed cos_sin_cache from RotaryEmbedding
        cos, sin = self.rotary_pos_emb.get_cos_sin(max_grid_size)

        pos_ids = pos_ids.to(cos.device, non_blocking=True)
        cos_combined = cos[pos_ids].flatten(1)
        sin_combined = sin[pos_ids].flatten(1)
        return cos_combined, sin_combined
