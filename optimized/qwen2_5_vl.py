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

Also (target qwen25-vl-encoder-metadata): vllm/model_executor/models/qwen2_5_vl.py ::
Qwen2_5_VisionTransformer.prepare_encoder_metadata, .invert_permutation and .device (verbatim, 0.30.0); the
0.30.0 change is one line: the window index goes up with ``async_tensor_h2d(window_index, device)`` instead of 0.29.0's
(= 0.28.0's) ``window_index.to(device=device, non_blocking=True)``. Its callees are copied beside it from
the same release: vllm/model_executor/layers/attention/mm_encoder_attention.py :: MMEncoderAttention.compute_max_seqlen,
.maybe_compute_seq_lens, .maybe_recompute_cu_seqlens, add_padding_to_seqlens, bucket_flashinfer_max_seqlen
and their bucket lists (``maybe_compute_seq_lens`` went from a pageable ``.to(device, non_blocking=True)`` to
``async_tensor_h2d`` in 0.29.0: target mm-encoder-seq-lens); vllm/utils/math_utils.py :: round_up.
``CustomOp``, ``maybe_get_oot_by_class`` (no out-of-tree op) and ``AttentionBackendEnum`` (the ViT backends)
are stood in, marked ADAPTED; the stand-in ``__init__`` takes the attributes prepare_encoder_metadata reads
(``attn_backend``, ``hidden_size``, ``tp_size``, ``fp8_padded_hidden_size``, ``patch_embed``) as keywords.
Helpers from vllm/model_executor/layers/attention/mm_encoder_attention.py, vllm/utils/torch_utils.py,
vllm/utils/math_utils.py.
"""

from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in

import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np

# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.30.0
# from vllm.utils.cache import LRUCache  # ADAPTED: stood in below
# from .utils import WeightsMapper  # ADAPTED: weight loading only; the class attribute below just holds its arguments
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)
# from vllm.model_executor.layers.attention import MMEncoderAttention  # ADAPTED: its classmethods copied below
# from vllm.model_executor.custom_op import CustomOp, maybe_get_oot_by_class  # ADAPTED: stood in below
# from vllm.utils.math_utils import round_up  # ADAPTED: copied below from vllm/utils/math_utils.py
# from vllm.v1.attention.backends.registry import AttentionBackendEnum  # ADAPTED: stood in below


class CustomOp:  # ADAPTED: stands in for vllm.model_executor.custom_op.CustomOp (an nn.Module base); only classmethods run
    pass  # ADAPTED


class AttentionBackendEnum(Enum):  # ADAPTED: stands in for vllm/v1/attention/backends/registry.py's enum: the ViT backends
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"  # ADAPTED: value as upstream
    TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"  # ADAPTED: value as upstream
    ROCM_AITER_FA = "vllm.v1.attention.backends.rocm_aiter_fa.AiterFlashAttentionBackend"  # ADAPTED: value as upstream
    TORCH_SDPA = ""  # ADAPTED: value as upstream ("this tag is only used for ViT")
    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"  # ADAPTED: value as upstream


def maybe_get_oot_by_class(class_type: type) -> type:  # ADAPTED: stands in for vllm/model_executor/custom_op.py's lookup
    return class_type  # ADAPTED: no out-of-tree op is registered (upstream: op_registry_oot.get(name, class_type))


def round_up(x: int, y: int) -> int:
    """Round up x to the nearest multiple of y."""
    return ((x + y - 1) // y) * y


FLASHINFER_BATCH_BUCKETS = [8, 16, 32, 64]


FLASHINFER_MAX_SEQLEN_BUCKETS = [
    1 * 1024,
    2 * 1024,
    4 * 1024,
    8 * 1024,
    16 * 1024,
    32 * 1024,
    64 * 1024,
    128 * 1024,
]


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


def bucket_flashinfer_max_seqlen(
    real_max_seqlen: int,
) -> int:
    if real_max_seqlen <= 0:
        return FLASHINFER_MAX_SEQLEN_BUCKETS[0]
    return next(
        (s for s in FLASHINFER_MAX_SEQLEN_BUCKETS if s >= real_max_seqlen),
        round_up(real_max_seqlen, FLASHINFER_MAX_SEQLEN_BUCKETS[-1]),
    )
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

    def __init__(self, spatial_merge_size, patch_size, window_size, rotary_pos_emb, *, attn_backend=None, hidden_size=0, tp_size=1, fp8_padded_hidden_size=None, patch_embed=None):  # ADAPTED: stand-in holding only what the copied methods read
        super().__init__()  # ADAPTED
        # args for get_window_index_thw
        self.window_size = window_size  # ADAPTED: upstream vision_config.window_size
        self.patch_size = patch_size  # ADAPTED: upstream vision_config.patch_size
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.spatial_merge_unit = self.spatial_merge_size**2
        self._rope_by_thw_cache = LRUCache(capacity=1024)
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: upstream get_rope(head_size=head_dim, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor": 0.5})
        self.patch_embed = patch_embed  # ADAPTED: upstream Qwen2_5_VisionPatchEmbed; only proj.weight.device is read
        self.hidden_size = hidden_size  # ADAPTED: upstream vision_config.hidden_size
        self.tp_size = tp_size  # ADAPTED: upstream 1 or the TP world size (get_tensor_model_parallel_world_size())
        self.fp8_padded_hidden_size = fp8_padded_hidden_size  # ADAPTED: upstream get_fp8_padded_hidden_size(...): None without FP8 attention
        self.attn_backend = attn_backend  # ADAPTED: upstream get_vit_attn_backend(head_size=head_dim, dtype=torch.get_default_dtype())

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

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    @staticmethod
    def invert_permutation(perm: torch.Tensor) -> torch.Tensor:
        # building the inverse permutation in O(n) time
        inv = torch.empty_like(perm, pin_memory=PIN_MEMORY)
        inv[perm] = torch.arange(perm.numel(), device=perm.device, dtype=perm.dtype)
        return inv

    def prepare_encoder_metadata(
        self,
        grid_thw: list[list[int]],
        *,
        max_batch_size: int | None = None,
        max_frames_per_batch: int | None = None,
        max_window_seqs_per_batch: int | None = None,
        max_seqlen_override: int | None = None,
        max_seqlen_window_override: int | None = None,
        device: torch.device | None = None,
    ) -> dict[str, torch.Tensor]:
        """Compute encoder metadata from grid_thw.

        Shared by the eager forward path, CUDA graph capture, and
        CUDA graph replay to avoid duplicated implementation.

        Args:
            grid_thw: Grid configurations as list of [t, h, w].
            max_batch_size: If set, pad cu_seqlens to this size
                (needed for CUDA graph capture/replay).
            max_frames_per_batch: If set, overrides max_batch_size for
                cu_seqlens padding. For video inputs each item contributes
                T attention sequences (frames); this sizes the buffer to
                the total frame budget so video replays never overflow.
            max_window_seqs_per_batch: If set, pad cu_window_seqlens to this
                number of window sequences. This keeps cu_window_seqlens shape
                stable across capture/replay for CUDA graph safety.
            max_seqlen_override: If set, use this value for max_seqlen
                instead of computing from cu_seqlens (needed for CUDA
                graph capture to cover worst-case replay scenarios).
            max_seqlen_window_override: If set, use this value for
                window-attention max_seqlen instead of computing from
                cu_window_seqlens (needed for CUDA graph capture to
                cover worst-case replay scenarios).
            device: Device to place tensors on. Defaults to self.device.
        """

        if device is None:
            device = self.device
        metadata: dict[str, torch.Tensor] = {}

        # patchify
        rotary_pos_emb_cos = []
        rotary_pos_emb_sin = []
        window_index: list = []
        cu_window_seqlens: list = [torch.tensor([0], dtype=torch.int32)]
        cu_seqlens: list = []

        window_index_id = 0
        cu_window_seqlens_last = 0
        for t, h, w in grid_thw:
            t, h, w = int(t), int(h), int(w)
            llm_h = h // self.spatial_merge_size
            llm_w = w // self.spatial_merge_size

            (
                cos_thw,
                sin_thw,
                window_index_thw,
                cu_seqlens_window_thw,
                cu_seqlens_thw,
            ) = self.get_rope_by_thw(t, h, w)

            window_index.append(window_index_thw + window_index_id)
            window_index_id += t * llm_h * llm_w

            cu_seqlens_window_thw = cu_seqlens_window_thw + cu_window_seqlens_last
            cu_window_seqlens_last = cu_seqlens_window_thw[-1]
            cu_window_seqlens.append(cu_seqlens_window_thw)

            rotary_pos_emb_cos.append(cos_thw)
            rotary_pos_emb_sin.append(sin_thw)

            cu_seqlens.append(cu_seqlens_thw)

        rotary_pos_emb_cos = torch.cat(rotary_pos_emb_cos)
        rotary_pos_emb_sin = torch.cat(rotary_pos_emb_sin)
        window_index = torch.cat(window_index)
        # compute reverse indices
        reverse_indices = self.invert_permutation(window_index)
        cu_window_seqlens = torch.cat(cu_window_seqlens)
        cu_window_seqlens = torch.unique_consecutive(cu_window_seqlens)
        cu_seqlens = torch.cat(cu_seqlens)
        cu_seqlens = torch.cumsum(cu_seqlens, dim=0, dtype=torch.int32)
        cu_seqlens = F.pad(cu_seqlens, (1, 0), "constant", 0)

        # Pad cu_seqlens to the required number of sequences.
        # For videos each item contributes T frames = T attention sequences,
        # so the total can exceed max_batch_size. max_frames_per_batch
        # overrides the pad target when set.
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

        # Pad cu_window_seqlens to a stable number of window sequences.
        # Like cu_seqlens, we repeat the last cumulative offset so padded
        # entries represent empty sequences.
        if max_window_seqs_per_batch is not None:
            num_window_seqs = len(cu_window_seqlens) - 1
            if num_window_seqs < max_window_seqs_per_batch:
                cu_window_seqlens = torch.cat(
                    (
                        cu_window_seqlens,
                        torch.full(
                            (max_window_seqs_per_batch - num_window_seqs,),
                            cu_window_seqlens[-1],
                            dtype=cu_window_seqlens.dtype,
                            device=cu_window_seqlens.device,
                        ),
                    )
                )

        cu_seqlens_np = cu_seqlens.cpu().numpy()
        cu_window_seqlens_np = cu_window_seqlens.cpu().numpy()

        # FlashInfer needs the real per-sequence lengths in addition to
        # cu_seqlens. For other backends this returns None and is ignored.
        sequence_lengths_full = MMEncoderAttention.maybe_compute_seq_lens(
            self.attn_backend, cu_seqlens_np, device
        )
        sequence_lengths_window = MMEncoderAttention.maybe_compute_seq_lens(
            self.attn_backend, cu_window_seqlens_np, device
        )

        # Pre-compute max sequence lengths for window/full attention. FlashInfer
        # buckets this value for cuDNN graph reuse; other backends keep the exact
        # maximum. Keep the scalar on CPU because attention wrappers call .item().
        if max_seqlen_override is None:
            max_seqlen_full_val = MMEncoderAttention.compute_max_seqlen(
                self.attn_backend, cu_seqlens_np
            )
        else:
            max_seqlen_full_val = max_seqlen_override
        max_seqlen_full = torch.tensor(max_seqlen_full_val, dtype=torch.int32)
        if max_seqlen_window_override is None:
            max_seqlen_window_val = MMEncoderAttention.compute_max_seqlen(
                self.attn_backend, cu_window_seqlens_np
            )
        else:
            max_seqlen_window_val = max_seqlen_window_override
        max_seqlen_window = torch.tensor(max_seqlen_window_val, dtype=torch.int32)

        # FlashInfer uses backend-specific cu_seqlens offsets into the flattened
        # Q/K/O and V buffers. Other backends receive the original cumulative
        # token offsets unchanged.
        cu_seqlens = MMEncoderAttention.maybe_recompute_cu_seqlens(
            self.attn_backend,
            cu_seqlens_np,
            self.hidden_size,
            self.tp_size,
            device,
            fp8_padded_hidden_size=self.fp8_padded_hidden_size,
        )
        cu_window_seqlens = MMEncoderAttention.maybe_recompute_cu_seqlens(
            self.attn_backend,
            cu_window_seqlens_np,
            self.hidden_size,
            self.tp_size,
            device,
            fp8_padded_hidden_size=self.fp8_padded_hidden_size,
        )
        rotary_pos_emb_cos = rotary_pos_emb_cos.to(device=device, non_blocking=True)
        rotary_pos_emb_sin = rotary_pos_emb_sin.to(device=device, non_blocking=True)
        window_index = async_tensor_h2d(window_index, device)
        reverse_indices = reverse_indices.to(device=device, non_blocking=True)

        metadata["rotary_pos_emb_cos"] = rotary_pos_emb_cos
        metadata["rotary_pos_emb_sin"] = rotary_pos_emb_sin
        metadata["window_index"] = window_index
        metadata["reverse_indices"] = reverse_indices
        metadata["cu_seqlens"] = cu_seqlens
        metadata["cu_window_seqlens"] = cu_window_seqlens
        metadata["max_seqlen_full"] = max_seqlen_full
        metadata["max_seqlen_window"] = max_seqlen_window
        metadata["sequence_lengths_full"] = sequence_lengths_full
        metadata["sequence_lengths_window"] = sequence_lengths_window

        return metadata


# @CustomOp.register("mm_encoder_attn")  # ADAPTED: vllm decorator, not run here
class MMEncoderAttention(CustomOp):
    """Multi-headed attention without any cache, used for multimodal encoder."""

    # --8<-- [end:mm_encoder_attn]
    @classmethod
    def compute_max_seqlen(
        cls,
        attn_backend: AttentionBackendEnum,
        cu_seqlens: np.ndarray,
    ) -> int:
        max_seqlen = 0
        if (
            attn_backend
            in (
                AttentionBackendEnum.FLASH_ATTN,
                AttentionBackendEnum.ROCM_AITER_FA,
                AttentionBackendEnum.TRITON_ATTN,
                AttentionBackendEnum.FLASHINFER,
            )
            and len(cu_seqlens) >= 2
        ):
            max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
        if attn_backend == AttentionBackendEnum.FLASHINFER:
            max_seqlen = bucket_flashinfer_max_seqlen(max_seqlen)
        return max_seqlen

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

    @classmethod
    def maybe_recompute_cu_seqlens(
        cls,
        attn_backend: AttentionBackendEnum,
        cu_seqlens: np.ndarray,
        hidden_size: int,
        tp_size: int,
        device: torch.device,
        fp8_padded_hidden_size: int | None = None,
    ) -> torch.Tensor:
        if (oot_class := maybe_get_oot_by_class(cls)) is not cls:
            return oot_class.maybe_recompute_cu_seqlens(  # type: ignore[attr-defined]
                attn_backend,
                cu_seqlens,
                hidden_size,
                tp_size,
                device,
                fp8_padded_hidden_size=fp8_padded_hidden_size,
            )

        if attn_backend == AttentionBackendEnum.FLASHINFER:
            batch_size = len(cu_seqlens) - 1

            if fp8_padded_hidden_size is not None:
                # FP8 path: after quantization Q/K/V are each independent
                # contiguous tensors with stride H * padded_D per token.
                # All sections use the same element stride.
                scale = fp8_padded_hidden_size // tp_size
                cu_seqlens = cu_seqlens * scale
                cu_seqlens_padded = add_padding_to_seqlens(
                    cu_seqlens, batch_size, cu_seqlens[-1]
                )
                cu_seqlens = np.concatenate([cu_seqlens_padded, cu_seqlens_padded])
            else:
                # BF16 path: Q/K/V are non-contiguous views into shared
                # buffers. V section has 3x stride from interleaved QKV.
                scale = hidden_size // tp_size
                cu_seqlens = cu_seqlens * scale

                cu_seqlens_qko = cu_seqlens
                cu_seqlens_v = cu_seqlens * 3

                cu_seqlens_qko = add_padding_to_seqlens(
                    cu_seqlens_qko, batch_size, cu_seqlens_qko[-1]
                )
                cu_seqlens_v = add_padding_to_seqlens(
                    cu_seqlens_v, batch_size, cu_seqlens_v[-1]
                )
                cu_seqlens = np.concatenate([cu_seqlens_qko, cu_seqlens_v])

        cu_seqlens = async_tensor_h2d(cu_seqlens, device=device)
        return cu_seqlens


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
