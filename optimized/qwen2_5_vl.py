# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.30.0: vllm/model_executor/models/qwen2_5_vl.py ::
Qwen2_5_VisionTransformer.get_rope_by_thw, Qwen2_5_VisionTransformer.rotary_pos_emb_thw and
Qwen2_5_VisionTransformer.get_window_index_thw (definitions verbatim; the class's own lines verbatim);
vllm/utils/torch_utils.py :: async_tensor_h2d (verbatim, 0.30.0's: it stages a pageable tensor through a
pinned buffer), defined here because the torch_utils helper modules are the 0.27.1/0.28.0 copies and a
copy module serves one version pair. ``LRUCache`` (vllm/utils/cache.py) is stood in by a dict.

Changes 0.28.0 -> 0.30.0 (issue #43): 0.29.0 builds the 2-D position ids of ``rotary_pos_emb_thw`` on
the rope cache's device (``torch.arange(h, device=cos.device)``) instead of on the host followed by
``pos_ids.to(cos.device, non_blocking=True)`` (a pageable H2D copy), and replaces ``get_rope_by_thw``'s
``@lru_cache(maxsize=1024)`` (keyed by ``self`` too, shared by every instance) with a per-instance
``LRUCache(capacity=1024)`` keyed by ``(t, h, w)``; 0.30.0 copies the window index with
``async_tensor_h2d`` (staged through pinned memory) instead of
``window_index_thw.to(cos_thw.device, non_blocking=True)``.

``Qwen2_5_VisionTransformer`` itself is far larger (patch embedding, window/full attention blocks,
merger); its ``__init__`` here is a stand-in holding only what these methods read
(``spatial_merge_size``, ``spatial_merge_unit``, ``patch_size``, ``window_size``, ``rotary_pos_emb``, ``_rope_by_thw_cache``),
marked ADAPTED. ``rotary_pos_emb`` is the model's ``get_rope(...)`` module; the input model
(strategies/qwen2_5_vl/inputs.py) hands in a stand-in with a seeded ``cos_sin_cache`` and upstream's
``get_cos_sin``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np

# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.30.0
# from vllm.utils.cache import LRUCache  # ADAPTED: stood in below
# from .utils import WeightsMapper  # ADAPTED: weight loading only; the class attribute below just holds its arguments
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)
# from vllm.utils.platform_utils import is_pin_memory_available  # ADAPTED: vllm's platform layer
# Upstream (vllm/utils/torch_utils.py): PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms.
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer


class LRUCache(dict):  # ADAPTED: stands in for vllm/utils/cache.py's LRUCache: get/set/`in` as a dict below capacity
    def __init__(self, capacity):  # ADAPTED: no fuzzed instance holds anywhere near 1024 keys, so nothing is evicted
        super().__init__()  # ADAPTED
        self.capacity = capacity  # ADAPTED


class Qwen2_5_VisionTransformer(nn.Module):
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            ".attn.q.": (".attn.qkv.", "q"),
            ".attn.k.": (".attn.qkv.", "k"),
            ".attn.v.": (".attn.qkv.", "v"),
            ".mlp.gate_proj.": (".mlp.gate_up_proj.", 0),
            ".mlp.up_proj.": (".mlp.gate_up_proj.", 1),
        }
    )

    def __init__(self, spatial_merge_size, patch_size, window_size, rotary_pos_emb):  # ADAPTED: stand-in holding only what the rope methods read
        super().__init__()  # ADAPTED
        # args for get_window_index_thw
        self.window_size = window_size  # ADAPTED: upstream vision_config.window_size
        self.patch_size = patch_size  # ADAPTED: upstream vision_config.patch_size
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.spatial_merge_unit = self.spatial_merge_size**2
        self._rope_by_thw_cache = LRUCache(capacity=1024)
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: upstream get_rope(head_size=head_dim, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor": 0.5})

    def rotary_pos_emb_thw(self, t, h, w):
        # Use pre-computed cos_sin_cache from RotaryEmbedding
        cos, sin = self.rotary_pos_emb.get_cos_sin(max(h, w))

        hpos_ids = torch.arange(h, device=cos.device).unsqueeze(1).expand(-1, w)
        wpos_ids = torch.arange(w, device=cos.device).unsqueeze(0).expand(h, -1)
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
        pos_ids = torch.stack([hpos_ids, wpos_ids], dim=-1).repeat(t, 1)

        cos_combined = cos[pos_ids].flatten(1)
        sin_combined = sin[pos_ids].flatten(1)

        cos_combined = cos_combined.reshape(
            cos_combined.shape[0] // self.spatial_merge_unit,
            self.spatial_merge_unit,
            -1,
        )
        sin_combined = sin_combined.reshape(
            sin_combined.shape[0] // self.spatial_merge_unit,
            self.spatial_merge_unit,
            -1,
        )

        return cos_combined, sin_combined

    def get_window_index_thw(self, grid_t, grid_h, grid_w):
        vit_merger_window_size = (
            self.window_size // self.spatial_merge_size // self.patch_size
        )

        llm_grid_h = grid_h // self.spatial_merge_size
        llm_grid_w = grid_w // self.spatial_merge_size
        index = torch.arange(grid_t * llm_grid_h * llm_grid_w).reshape(
            grid_t, llm_grid_h, llm_grid_w
        )
        pad_h = vit_merger_window_size - llm_grid_h % vit_merger_window_size
        pad_w = vit_merger_window_size - llm_grid_w % vit_merger_window_size
        num_windows_h = (llm_grid_h + pad_h) // vit_merger_window_size
        num_windows_w = (llm_grid_w + pad_w) // vit_merger_window_size
        index_padded = F.pad(index, (0, pad_w, 0, pad_h), "constant", -100)
        index_padded = index_padded.reshape(
            grid_t,
            num_windows_h,
            vit_merger_window_size,
            num_windows_w,
            vit_merger_window_size,
        )
        index_padded = index_padded.permute(0, 1, 3, 2, 4).reshape(
            grid_t,
            num_windows_h * num_windows_w,
            vit_merger_window_size,
            vit_merger_window_size,
        )
        seqlens = (index_padded != -100).sum([2, 3]).reshape(-1)
        index_padded = index_padded.reshape(-1)
        index_new = index_padded[index_padded != -100]
        cu_seqlens_tmp = seqlens.cumsum(0) * self.spatial_merge_unit
        cu_seqlens_tmp = cu_seqlens_tmp.to(dtype=torch.int32)
        cu_seqlens_tmp = torch.unique_consecutive(cu_seqlens_tmp)

        return index_new, cu_seqlens_tmp

    def get_rope_by_thw(self, t, h, w):
        cache_key = (t, h, w)
        if cache_key in self._rope_by_thw_cache:
            return self._rope_by_thw_cache[cache_key]

        window_index_thw, cu_seqlens_window_thw = self.get_window_index_thw(t, h, w)
        cos_thw, sin_thw = self.rotary_pos_emb_thw(t, h, w)

        window_index_thw_dev = async_tensor_h2d(window_index_thw, cos_thw.device)
        cos_thw = cos_thw[window_index_thw_dev, :, :]
        cos_thw = cos_thw.flatten(start_dim=0, end_dim=1)
        sin_thw = sin_thw[window_index_thw_dev, :, :]
        sin_thw = sin_thw.flatten(start_dim=0, end_dim=1)

        cu_seqlens_thw = torch.repeat_interleave(
            torch.tensor([h * w], dtype=torch.int32), t
        )
        result = (
            cos_thw,
            sin_thw,
            window_index_thw,
            cu_seqlens_window_thw,
            cu_seqlens_thw,
        )
        self._rope_by_thw_cache[cache_key] = result
        return result


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
