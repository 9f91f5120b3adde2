# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.34.0: vllm/model_executor/models/ernie45_vl.py ::
Ernie4_5VLMultiModalProcessor._get_mm_fields_config; Ernie4_5_VisionPatchEmbed and
Ernie4_5_VisionRotaryEmbedding (whole classes); Ernie4_5_VisionTransformer.{dtype, device, rot_pos_emb,
compute_attn_mask_seqlen, prepare_encoder_metadata, forward}; VariableResolutionResamplerModel.{__init__,
spatial_conv_reshape, forward}; Ernie4_5_VLMoeForConditionalGeneration.{_vision_forward,
_parse_and_validate_image_input, _parse_and_validate_video_input, _process_image_input, _process_video_input,
_parse_and_validate_multimodal_inputs, embed_multimodal} (definitions verbatim; a method with its class's
own lines).

Target keep-on-cpu-ernie-grid-thw (strategies/ernie_fields/): the field config decides where the engine
puts ``image_grid_thw`` / ``video_grid_thw`` (on the host from 0.29.0), and the eager vision path reads them,
so the input model places each side's grids by this module's own ``_get_mm_fields_config``. A copy module
serves one version pair; legacy/ernie45_vl.py and optimized/ernie45_vl.py (0.27.1/0.28.0) are another
target family's. Stand-ins, marked ADAPTED: ``MultiModalFieldConfig`` (records kind, ``keep_on_cpu`` and
the flat sizes); the vision transformer and the model hold only what the copied methods read (the input
model hands in the real patch embedding, rotary table, layer norm and resampler, and deterministic
stand-in blocks); ``ColumnParallelLinear`` (tp_size 1) and ``RMSNorm`` (its native math); the TensorSchemas
are dicts; ``AttentionBackendEnum`` holds the ViT backends compute_attn_mask_seqlen tests.
``gpu_sync_allowed`` (vllm/utils/gpu_sync_debug.py) is stood in by this module's own allow region
(``sync_allowed_depth``), since the shared ``gpu_sync_debug`` helper serves the 0.27.1/0.28.0 pair.
``async_tensor_h2d`` and ``PIN_MEMORY`` are vllm/utils/torch_utils.py's 0.34.0 text (helpers from
vllm/utils/torch_utils.py).
"""

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from contextlib import contextmanager  # ADAPTED: for the gpu_sync_allowed stand-in
from contextvars import ContextVar  # ADAPTED: for the gpu_sync_allowed stand-in
from enum import Enum  # ADAPTED: for the AttentionBackendEnum stand-in

# from transformers import BatchFeature  # ADAPTED: annotation only; the input model passes a dict
BatchFeature = dict  # ADAPTED: hf_inputs is read with .get() only
# from vllm.model_executor.layers.layernorm import RMSNorm  # ADAPTED: stood in below
# from vllm.model_executor.layers.linear import ColumnParallelLinear  # ADAPTED: stood in below
# from vllm.multimodal import MULTIMODAL_REGISTRY  # ADAPTED: the registry decorator is commented out below
# from vllm.multimodal.inputs import MultiModalFieldConfig  # ADAPTED: stood in below
# from vllm.multimodal.processing import BaseMultiModalProcessor  # ADAPTED: stood in below
# from vllm.utils.gpu_sync_debug import gpu_sync_allowed  # ADAPTED: stood in below (vllm/utils/gpu_sync_debug.py)
# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.34.0
# from vllm.utils.platform_utils import is_pin_memory_available  # ADAPTED: vllm's platform layer
# from vllm.v1.attention.backends.registry import AttentionBackendEnum  # ADAPTED: stood in below
# from .interfaces import MultiModalEmbeddings  # ADAPTED: a type alias, annotations only
MultiModalEmbeddings = object  # ADAPTED: annotation only
# from .interfaces import SupportsEncoderCudaGraph, SupportsLoRA, SupportsMRoPE, SupportsMultiModal, SupportsPP  # ADAPTED: stood in below
# from .utils import WeightsMapper  # ADAPTED: weight loading only
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)
# Upstream (vllm/utils/torch_utils.py): PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms.
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer

# Depth of the open gpu_sync_allowed() regions: the record's sync_allow_region, read by the sync oracle.
sync_allowed_depth: ContextVar[int] = ContextVar("optimized_ernie_fields_sync_allow_depth", default=0)  # ADAPTED: this module's allow region


@contextmanager  # ADAPTED: part of the stand-in below
def gpu_sync_allowed(first_only: bool = False):  # ADAPTED: stands in for vllm's gpu_sync_allowed(): always opens the allow region
    token = sync_allowed_depth.set(sync_allowed_depth.get() + 1)  # ADAPTED: upstream _allow_syncs()
    try:  # ADAPTED
        yield  # ADAPTED
    finally:  # ADAPTED
        sync_allowed_depth.reset(token)  # ADAPTED


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


class AttentionBackendEnum(Enum):  # ADAPTED: stands in for vllm.v1.attention.backends.registry.AttentionBackendEnum: the ViT backends
    FLASH_ATTN = "FLASH_ATTN"  # ADAPTED: compute_attn_mask_seqlen only tests membership
    TRITON_ATTN = "TRITON_ATTN"  # ADAPTED
    ROCM_AITER_FA = "ROCM_AITER_FA"  # ADAPTED
    TORCH_SDPA = "TORCH_SDPA"  # ADAPTED: a backend that gets max_seqlen=None


class ColumnParallelLinear(nn.Linear):  # ADAPTED: vllm's TP linear at tp_size=1 is a plain linear layer
    def __init__(self, input_size, output_size, bias=True, gather_output=False, quant_config=None, prefix=""):  # ADAPTED
        super().__init__(input_size, output_size, bias=bias)  # ADAPTED: quant_config/prefix unused at tp_size=1

    def forward(self, input_):  # ADAPTED
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


class MultiModalFieldConfig:  # ADAPTED: stands in for vllm.multimodal.inputs.MultiModalFieldConfig; records what the input model batches by
    def __init__(self, kind, modality, keep_on_cpu=False, sizes=None):  # ADAPTED
        self.kind, self.modality, self.keep_on_cpu, self.sizes = kind, modality, keep_on_cpu, sizes  # ADAPTED

    @staticmethod  # ADAPTED
    def batched(modality, *, keep_on_cpu=False):  # ADAPTED: same signature as upstream
        return MultiModalFieldConfig("batched", modality, keep_on_cpu)  # ADAPTED

    @staticmethod  # ADAPTED
    def flat_from_sizes(modality, size_per_item, dim=0, *, keep_on_cpu=False):  # ADAPTED: same signature as upstream
        return MultiModalFieldConfig("flat", modality, keep_on_cpu, size_per_item)  # ADAPTED


class BaseMultiModalProcessor:  # ADAPTED: stands in for vllm's generic processor base; only _get_mm_fields_config runs
    def __class_getitem__(cls, item):  # ADAPTED: BaseMultiModalProcessor[Info] as upstream writes it
        return cls  # ADAPTED


class SupportsMultiModal:  # ADAPTED: stands in for the interface mixin (class attributes only upstream)
    pass  # ADAPTED


class SupportsLoRA:  # ADAPTED: stands in for the interface mixin
    pass  # ADAPTED


class SupportsPP:  # ADAPTED: stands in for the interface mixin
    pass  # ADAPTED


class SupportsMRoPE:  # ADAPTED: stands in for the interface mixin
    pass  # ADAPTED


class SupportsEncoderCudaGraph:  # ADAPTED: stands in for the interface mixin (the graph path is not under test)
    pass  # ADAPTED


class Ernie4_5_VLImagePixelInputs(dict):  # ADAPTED: stands in for the TensorSchema: read by key, no shape check
    pass  # ADAPTED


class Ernie4_5_VLVideoPixelInputs(dict):  # ADAPTED: stands in for the TensorSchema: read by key, no shape check
    pass  # ADAPTED


class Ernie4_5_VLProcessingInfo:  # ADAPTED: stand-in for upstream vllm/model_executor/models/ernie45_vl.py::Ernie4_5_VLProcessingInfo (only named)
    pass  # ADAPTED


class Ernie4_5_VLDummyInputsBuilder:  # ADAPTED: stand-in for upstream vllm/model_executor/models/ernie45_vl.py::Ernie4_5_VLDummyInputsBuilder (only named)
    pass  # ADAPTED


Ernie4_5_VLImageInputs = Ernie4_5_VLImagePixelInputs


Ernie4_5_VLVideoInputs = Ernie4_5_VLVideoPixelInputs


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
        self.register_buffer(
            "inv_freq",
            1.0
            / theta
            ** (torch.arange(start=0, end=dim, step=2, dtype=torch.float32) / dim),
            persistent=False,
        )

    def forward(self, seqlen: int) -> torch.Tensor:
        seq = torch.arange(
            seqlen, device=self.inv_freq.device, dtype=self.inv_freq.dtype
        )
        freqs = torch.outer(input=seq, vec2=self.inv_freq)
        return freqs


class Ernie4_5_VisionTransformer(nn.Module):  # ADAPTED: stand-in holding only what the copied methods read
    def __init__(self, patch_embed, rotary_pos_emb, blocks, ln, spatial_merge_size, attn_backend) -> None:  # ADAPTED
        super().__init__()
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.patch_embed = patch_embed  # ADAPTED: the real Ernie4_5_VisionPatchEmbed, built by the input model
        self.rotary_pos_emb = rotary_pos_emb  # ADAPTED: the real Ernie4_5_VisionRotaryEmbedding(head_dim // 2)
        self.blocks = blocks  # ADAPTED: deterministic stand-ins for Ernie4_5_VisionBlock (attention + MLP)
        self.ln = ln  # ADAPTED: upstream nn.LayerNorm(hidden_size, eps=1e-6)
        self.attn_backend = attn_backend  # ADAPTED: upstream get_vit_attn_backend(head_size=head_dim, ...)

    @property
    def dtype(self) -> torch.dtype:
        return self.patch_embed.proj.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    def rot_pos_emb(self, grid_thw: torch.Tensor) -> torch.Tensor:
        device = self.device
        pos_ids = []
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

        cu_seqlens = async_tensor_h2d(cu_seqlens, device)

        return {
            "rotary_pos_emb": rotary_pos_emb,
            "cu_seqlens": cu_seqlens,
            "max_seqlen": max_seqlen,
        }

    def forward(
        self,
        hidden_states: torch.Tensor,
        grid_thw: torch.Tensor | None = None,
        num_pad: int = 0,
        *,
        encoder_metadata: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        hidden_states = self.patch_embed(hidden_states)

        if encoder_metadata is None:
            # Eager path: compute metadata inline
            encoder_metadata = self.prepare_encoder_metadata(
                grid_thw, num_pad=num_pad, device=hidden_states.device
            )
        rotary_pos_emb = encoder_metadata["rotary_pos_emb"]
        cu_seqlens = encoder_metadata["cu_seqlens"]
        max_seqlen = encoder_metadata["max_seqlen"]

        # add batch size
        if hidden_states.ndim == 2:
            hidden_states = hidden_states.unsqueeze(dim=1)

        for blk in self.blocks:
            hidden_states = blk(
                hidden_states,
                cu_seqlens=cu_seqlens,
                rotary_pos_emb=rotary_pos_emb,
                max_seqlen=max_seqlen,
            )

        final_output = self.ln(hidden_states)

        if final_output.ndim == 3:
            final_output = final_output.squeeze(dim=1)

        return final_output


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


class Ernie4_5VLMultiModalProcessor(BaseMultiModalProcessor[Ernie4_5_VLProcessingInfo]):

    def _get_mm_fields_config(
        self,
        hf_inputs: BatchFeature,
        hf_processor_mm_kwargs: Mapping[str, object],
    ) -> Mapping[str, MultiModalFieldConfig]:
        image_grid_thw = hf_inputs.get("image_grid_thw", torch.empty((0, 3)))
        image_grid_sizes = image_grid_thw.prod(-1)

        video_grid_thw = hf_inputs.get("video_grid_thw", torch.empty((0, 3)))
        video_grid_sizes = video_grid_thw.prod(-1)

        return dict(
            pixel_values=MultiModalFieldConfig.flat_from_sizes(
                "image", image_grid_sizes
            ),
            image_grid_thw=MultiModalFieldConfig.batched("image", keep_on_cpu=True),
            pixel_values_videos=MultiModalFieldConfig.flat_from_sizes(
                "video", video_grid_sizes
            ),
            video_grid_thw=MultiModalFieldConfig.batched("video", keep_on_cpu=True),
        )


# @MULTIMODAL_REGISTRY.register_processor(  # ADAPTED: vllm decorator, not run here
    # Ernie4_5VLMultiModalProcessor,  # ADAPTED: vllm decorator, not run here
    # info=Ernie4_5_VLProcessingInfo,  # ADAPTED: vllm decorator, not run here
    # dummy_inputs=Ernie4_5_VLDummyInputsBuilder,  # ADAPTED: vllm decorator, not run here
#   # ADAPTED: vllm decorator, not run here
#   # ADAPTED: vllm decorator, not run here
# )  # ADAPTED: vllm decorator, not run here
class Ernie4_5_VLMoeForConditionalGeneration(
    nn.Module,
    SupportsMultiModal,
    SupportsLoRA,
    SupportsPP,
    SupportsMRoPE,
    SupportsEncoderCudaGraph,


):
    packed_modules_mapping = {
        "qkv_proj": [
            "q_proj",
            "k_proj",
            "v_proj",
        ],
        "gate_up_proj": [
            "gate_proj",
            "up_proj",
        ],
    }

    # To ensure correct weight loading and mapping.
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_prefix={
            "lm_head.": "language_model.lm_head.",
            "model.": "language_model.model.",
            # model.resampler_model.-> language_model.model.resampler_model.
            # language_model.model.resampler_model. -> resampler_model.
            "language_model.model.resampler_model.": "resampler_model.",
        },
        # resampler_weight_mappings
        orig_to_new_substr={
            "spatial_linear.0.": "spatial_linear1.",
            "spatial_linear.2.": "spatial_linear2.",
            "spatial_linear.3.": "spatial_norm.",
            "temporal_linear.0.": "temporal_linear1.",
            "temporal_linear.2.": "temporal_linear2.",
            "temporal_linear.3.": "temporal_norm.",
        },
    )

    def __init__(self, config, vision_model, resampler_model) -> None:  # ADAPTED: stand-in holding only what the copied methods read
        super().__init__()  # ADAPTED
        self.config = config  # ADAPTED: upstream vllm_config.model_config.hf_config; temporal_conv_size is read
        self.vision_model = vision_model  # ADAPTED: the Ernie4_5_VisionTransformer stand-in above
        self.resampler_model = resampler_model  # ADAPTED: the real VariableResolutionResamplerModel

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

    def _parse_and_validate_image_input(
        self, **kwargs: object
    ) -> Ernie4_5_VLImageInputs | None:
        pixel_values = kwargs.pop("pixel_values", None)
        image_grid_thw = kwargs.pop("image_grid_thw", None)

        if pixel_values is None:
            return None

        return Ernie4_5_VLImagePixelInputs(
            type="pixel_values",
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
        )

    def _parse_and_validate_video_input(
        self, **kwargs: object
    ) -> Ernie4_5_VLVideoInputs | None:
        pixel_values_videos = kwargs.pop("pixel_values_videos", None)
        video_grid_thw = kwargs.pop("video_grid_thw", None)

        if pixel_values_videos is None:
            return None

        return Ernie4_5_VLVideoPixelInputs(
            type="pixel_values_videos",
            pixel_values_videos=pixel_values_videos,
            video_grid_thw=video_grid_thw,
        )

    # -- SupportsEncoderCudaGraph protocol methods --
    #
    # Only the vision transformer (self.vision_model) is captured into the
    # CUDA graph. The VariableResolutionResamplerModel (spatial merge +
    # projection) runs eagerly in postprocess_encoder_output because its
    # temporal path performs host-side (numpy) indexing that cannot be
    # captured. Image only: video uses a temporal conv that changes the output
    # token count, so it falls back to the eager multimodal path for now.

    def _process_image_input(
        self, image_input: Ernie4_5_VLImageInputs
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

    def _process_video_input(
        self, video_input: Ernie4_5_VLVideoInputs
    ) -> tuple[torch.Tensor, ...]:
        grid_thw = video_input["video_grid_thw"]
        assert grid_thw.ndim == 2

        pixel_values_videos = video_input["pixel_values_videos"].type(
            self.vision_model.dtype
        )
        video_features = self._vision_forward(
            pixel_values=pixel_values_videos, grid_thw=grid_thw
        )
        video_embeds = self.resampler_model(video_features, grid_thw)

        merge_size = self.vision_model.spatial_merge_size
        sizes = (
            (grid_thw.prod(-1) // self.config.temporal_conv_size)
            // merge_size
            // merge_size
        )

        return video_embeds.split(sizes.tolist())

    def _parse_and_validate_multimodal_inputs(self, **kwargs: object) -> dict:
        modalities: dict[
            str, Ernie4_5_VLImageInputs | Ernie4_5_VLVideoInputs | None
        ] = {}

        # Preserve the order of modalities if there are multiple of them
        # from the order of kwargs.
        for input_key in kwargs:
            if (
                input_key in ("pixel_values", "image_embeds")
                and "images" not in modalities
            ):
                modalities["images"] = self._parse_and_validate_image_input(**kwargs)
            if (
                input_key in ("pixel_values_videos", "video_embeds")
                and "videos" not in modalities
            ):
                modalities["videos"] = self._parse_and_validate_video_input(**kwargs)

        return modalities

    def embed_multimodal(self, **kwargs: object) -> MultiModalEmbeddings | None:
        modalities = self._parse_and_validate_multimodal_inputs(**kwargs)
        if not modalities:
            return None

        # The result multimodal_embeddings is tuple of tensors, with each
        # tensor corresponding to a multimodal data item (image or video).
        multimodal_embeddings: tuple[torch.Tensor, ...] = ()

        # NOTE: It is important to iterate over the keys in this dictionary
        # to preserve the order of the modalities.
        for modality in modalities:
            if modality == "images":
                image_input = modalities["images"]
                image_embeddings = self._process_image_input(image_input)
                multimodal_embeddings += tuple(image_embeddings)
            if modality == "videos":
                video_input = modalities["videos"]
                video_embeddings = self._process_video_input(video_input)
                multimodal_embeddings += tuple(video_embeddings)

        return multimodal_embeddings
