# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0:
vllm/model_executor/models/qwen3_vl.py :: Qwen3_VisionTransformer.rot_pos_emb, Qwen3_VisionTransformer.rot_pos_ids, Qwen3_VisionTransformer.device
(definitions verbatim; a method with its class's own lines).

0.28.0's rot_pos_ids is a @staticmethod under a process-wide @lru_cache(maxsize=1024); 0.29.0 makes it
an instance method with a per-tower LRUCache(capacity=1024) built in __init__. rot_pos_emb is the same text in both.
The __init__ here is a stand-in holding only what these methods read. Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).
"""

from functools import lru_cache, partial
import numpy as np
import torch
import torch.nn as nn

# from vllm.utils.torch_utils import PIN_MEMORY  # ADAPTED: map to a local helper
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: vllm's is_pin_memory_available() without the platform layer
# from .utils import WeightsMapper  # ADAPTED: weight loading only; the class attribute below just holds its arguments
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)


class Qwen3_VisionTransformer(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            "attn.q.": ("attn.qkv.", "q"),
            "attn.k.": ("attn.qkv.", "k"),
            "attn.v.": ("attn.qkv.", "v"),
        }
    )

    def __init__(self, spatial_merge_size, rotary_pos_emb, patch_embed):  # ADAPTED: stand-in holding only what rot_pos_emb reads
        super().__init__()  # ADAPTED
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: upstream get_rope(head_size=head_dim, ...); only get_cos_sin is read
        self.patch_embed = patch_embed  # ADAPTED: upstream Qwen3_VisionPatchEmbed; only proj.weight.device is read

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    @staticmethod
    @lru_cache(maxsize=1024)
    def rot_pos_ids(h: int, w: int, spatial_merge_size: int) -> torch.Tensor:
        hpos_ids = np.broadcast_to(np.arange(h).reshape(h, 1), (h, w))
        h_div = h // spatial_merge_size
        w_div = w // spatial_merge_size
        hpos_ids = hpos_ids.reshape(
            h_div,
            spatial_merge_size,
            w_div,
            spatial_merge_size,
        )
        hpos_ids = hpos_ids.transpose(0, 2, 1, 3)
        hpos_ids = hpos_ids.flatten()

        wpos_ids = np.broadcast_to(np.arange(w).reshape(1, w), (h, w))
        wpos_ids = wpos_ids.reshape(
            h_div,
            spatial_merge_size,
            w_div,
            spatial_merge_size,
        )
        wpos_ids = wpos_ids.transpose(0, 2, 1, 3)
        wpos_ids = wpos_ids.flatten()

        return torch.from_numpy(np.stack([hpos_ids, wpos_ids], axis=-1))

    def rot_pos_emb(self, grid_thw: list[list[int]]):
        max_grid_size = max(max(h, w) for _, h, w in grid_thw)
        pos_ids = [
            self.rot_pos_ids(h, w, self.spatial_merge_size)
            if t == 1
            else self.rot_pos_ids(h, w, self.spatial_merge_size).repeat(t, 1)
            for t, h, w in grid_thw
        ]
        num_pos = sum(p.shape[0] for p in pos_ids)
        pinned = torch.empty(
            (num_pos, pos_ids[0].shape[1]),
            dtype=pos_ids[0].dtype,
            pin_memory=PIN_MEMORY,
        )
        pos_ids = torch.cat(pos_ids, dim=0, out=pinned).to(
            self.device, non_blocking=True
        )

        # Use pre-computed cos_sin_cache from RotaryEmbedding
        cos, sin = self.rotary_pos_emb.get_cos_sin(max_grid_size)

        cos_combined = cos[pos_ids].flatten(1)
        sin_combined = sin[pos_ids].flatten(1)

        return cos_combined, sin_combined
