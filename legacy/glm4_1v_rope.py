# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0:
vllm/model_executor/models/glm4_1v.py :: Glm4vVisionTransformer.rot_pos_emb, Glm4vVisionTransformer.device
(definitions verbatim; a method with its class's own lines). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).

Between 0.28.0 and 0.29.0 ``rot_pos_emb`` changed: 0.28.0 builds the 2-D position ids on the host and
copies them with ``pos_ids.to(cos.device, non_blocking=True)`` (a pageable H2D copy); 0.29.0 builds them
with ``torch.arange(..., device=self.device)`` on the model's device and drops the copy. It returns
``pos_ids`` too (the caller, ``prepare_encoder_metadata``, discards it).

A copy module of its own (not legacy/glm4_1v.py): glm4_1v.py's targets hold the 0.27.1/0.28.0 pair, this
change is 0.28.0 -> 0.29.0, and a copy module is checked against one release pair.

Glm4vVisionTransformer itself is far larger (patch embedding, attention blocks, merger); the ``__init__``
here is a stand-in holding only what ``rot_pos_emb`` and ``device`` read (``spatial_merge_size``,
``rotary_pos_emb``, ``patch_embed``), marked ADAPTED. ``rotary_pos_emb`` is the model's ``get_rope(...)``
module; the input model (strategies/glm4_1v_rope/inputs.py) hands in strategies/qwen2_vl's stand-in with
a seeded ``cos_sin_cache`` and upstream's ``get_cos_sin``.
"""

import torch
import torch.nn as nn

# from .utils import WeightsMapper  # ADAPTED: weight loading only; the class attribute below just holds its arguments
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)


class Glm4vVisionTransformer(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            ".attn.q.": (".attn.qkv.", "q"),
            ".attn.k.": (".attn.qkv.", "k"),
            ".attn.v.": (".attn.qkv.", "v"),
            ".gate_proj": (".gate_up_proj", 0),
            ".up_proj": (".gate_up_proj", 1),
        }
    )

    def __init__(self, spatial_merge_size, rotary_pos_emb, patch_embed):  # ADAPTED: stand-in holding only what rot_pos_emb reads
        super().__init__()  # ADAPTED
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: upstream get_rope(head_size=head_dim, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor": 0.5})
        self.patch_embed = patch_embed  # ADAPTED: upstream Glm4vVisionPatchEmbed; only proj.weight.device is read

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    def rot_pos_emb(
        self, grid_thw: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
        max_grid_size = max(max(h, w) for _, h, w in grid_thw)

        # Use pre-computed cos_sin_cache from RotaryEmbedding
        cos, sin = self.rotary_pos_emb.get_cos_sin(max_grid_size)

        pos_ids = pos_ids.to(cos.device, non_blocking=True)
        cos_combined = cos[pos_ids].flatten(1)
        sin_combined = sin[pos_ids].flatten(1)
        return cos_combined, sin_combined, pos_ids
