# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.30.0: vllm/model_executor/models/idefics2_vision_model.py ::
Idefics2VisionEmbeddings.get_position_ids, Idefics2VisionEmbeddings.forward and
Idefics2VisionEmbeddings.__init__ (definitions verbatim; the class's own lines verbatim); vllm/utils/torch_utils.py :: async_tensor_h2d (verbatim, 0.30.0's), defined
here because the torch_utils helper modules are the 0.27.1/0.28.0 copies and a copy module serves one
version pair.

Between 0.29.0 and 0.30.0 ``get_position_ids`` changed: 0.29.0 copies the patch mask (and ``tgt_sizes``)
to the host inside ``gpu_sync_allowed()``, then loops over the images -- per image
``torch.arange(0, 1 - 1e-6, 1 / nb_patches)`` fractional coordinates, ``torch.bucketize`` against the
``arange(1/n, 1.0, 1/n)`` boundaries (``n = num_patches_per_side``), written at the mask's true positions of
a pinned host buffer -- and moves the result with ``.to(weight.device, non_blocking=True)``; 0.30.0
computes every image at once on the mask's device (``h_idx = i // stride_w``, ``h_idx / nb_h``, one
bucketize, ``torch.where(mask, ...)``), copying a host ``tgt_sizes`` up with ``async_tensor_h2d``: no sync.

``Idefics2VisionEmbeddings.__init__`` is verbatim; ``Conv2dLayer`` is torch's ``nn.Conv2d`` (vllm's layer
(vllm/model_executor/layers/conv.py, the same text in 0.29.0 and 0.30.0) holds the same weight and bias and
computes the same patch projection: ``F.conv2d`` on CUDA, an unfold + ``F.linear`` on the CPU since kernel ==
stride; no sync either way, and both copies stand in the same way, so the idefics2-embeddings-forward target
compares the releases' own code around it) and the config a ``SimpleNamespace``.

``forward`` (the idefics2-embeddings-forward target) is the same text in 0.29.0 and 0.30.0: patch
embeddings from ``patch_embedding``, plus ``position_embedding`` of the ids ``get_position_ids`` makes (or
the ids the caller passes); its change between releases is ``get_position_ids``'. In 0.28.0 the forward held
the per-image loop itself (0.29.0 split it out and pinned the host buffer); ``fuzz run --legacy vllm==0.28.0``
rebuilds that forward into this module (docs/sides.md).
"""

from types import SimpleNamespace  # ADAPTED: for the Idefics2VisionConfig stand-in

import torch
from torch import nn
import numpy as np

# from transformers.models.idefics2.configuration_idefics2 import Idefics2VisionConfig  # ADAPTED: map to a local helper
Idefics2VisionConfig = SimpleNamespace  # ADAPTED: transformers' config; only hidden_size, image_size, patch_size, num_channels are read
# from vllm.model_executor.layers.conv import Conv2dLayer  # ADAPTED: map to a local helper
Conv2dLayer = nn.Conv2d  # ADAPTED: vllm's Conv2dLayer holds the same weight/bias and computes the same projection (module docstring)
# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.30.0
# from vllm.utils.platform_utils import is_pin_memory_available  # ADAPTED: vllm's platform layer
# Upstream (vllm/utils/torch_utils.py): PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms.
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer


class Idefics2VisionEmbeddings(nn.Module):
    """
    This is a modified version of `siglip.modelign_siglip.SiglipVisionEmbeddings
    ` to enable images of variable
    resolution.

    The modifications are adapted from [Patch n' Pack: NaViT, a Vision
    Transformer for any Aspect Ratio and Resolution](https://arxiv.org/abs/2307.06304)
    which allows treating images in their native aspect ratio and without the
    need to resize them to the same fixed size. In particular, we start from the
    original pre-trained SigLIP model(which uses images of fixed-size square
    images) and adapt it by training on images of variable resolutions.
    """

    def __init__(self, config: Idefics2VisionConfig):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.image_size = config.image_size
        self.patch_size = config.patch_size
        self.patch_embedding = Conv2dLayer(
            in_channels=config.num_channels,
            out_channels=self.embed_dim,
            kernel_size=self.patch_size,
            stride=self.patch_size,
            padding="valid",
        )
        self.num_patches_per_side = self.image_size // self.patch_size
        self.num_patches = self.num_patches_per_side**2
        self.num_positions = self.num_patches
        self.position_embedding = nn.Embedding(self.num_positions, self.embed_dim)

    def get_position_ids(
        self,
        patch_attention_mask: torch.BoolTensor,
        tgt_sizes: torch.IntTensor | None = None,
    ) -> torch.Tensor:
        batch_size = patch_attention_mask.shape[0]
        device = patch_attention_mask.device
        boundaries = torch.arange(
            1 / self.num_patches_per_side,
            1.0,
            1 / self.num_patches_per_side,
            device=device,
        )

        flat_patch_attention_mask = patch_attention_mask.view(batch_size, -1)
        max_patches = flat_patch_attention_mask.shape[-1]

        if tgt_sizes is not None:
            # tgt_sizes may come from CPU-side mm_kwargs; use a pinned async
            # copy to stay clean under VLLM_GPU_SYNC_CHECK.
            if tgt_sizes.device != device:
                tgt_sizes = async_tensor_h2d(tgt_sizes, device)
            nb_patches_h = tgt_sizes[:, 0]
            nb_patches_w = tgt_sizes[:, 1]
        else:
            if patch_attention_mask.dim() == 3:
                nb_patches_h = patch_attention_mask[:, :, 0].sum(dim=1)
                nb_patches_w = patch_attention_mask[:, 0, :].sum(dim=1)
            else:
                # Fallback for unexpected 2D masks without tgt_sizes
                nb_patches_h = torch.ones(batch_size, device=device)
                nb_patches_w = patch_attention_mask.sum(dim=1)

        nb_h = nb_patches_h.clamp(min=1).unsqueeze(1)
        nb_w = nb_patches_w.clamp(min=1).unsqueeze(1)

        i = torch.arange(max_patches, device=device)

        if patch_attention_mask.dim() == 3 and patch_attention_mask.shape[1] > 1:
            stride_w = patch_attention_mask.shape[2]  # padded 2D grid width
        else:
            stride_w = nb_w  # (batch, 1) — per-item actual patch width

        h_idx = i.unsqueeze(0) // stride_w
        w_idx = i.unsqueeze(0) % stride_w

        fractional_h = h_idx / nb_h
        fractional_w = w_idx / nb_w

        bucket_h = torch.bucketize(fractional_h, boundaries, right=True)
        bucket_w = torch.bucketize(fractional_w, boundaries, right=True)

        pos_ids = bucket_h * self.num_patches_per_side + bucket_w

        position_ids = torch.where(flat_patch_attention_mask, pos_ids.to(torch.long), 0)

        target_device = self.position_embedding.weight.device
        if position_ids.device != target_device:
            position_ids = async_tensor_h2d(position_ids, target_device)
        return position_ids

    def forward(
        self,
        pixel_values: torch.FloatTensor,
        patch_attention_mask: torch.BoolTensor,
        tgt_sizes: torch.IntTensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        target_dtype = self.patch_embedding.weight.dtype
        patch_embeds = self.patch_embedding(pixel_values.to(target_dtype))
        embeddings = patch_embeds.flatten(2).transpose(1, 2)
        if position_ids is None:
            position_ids = self.get_position_ids(patch_attention_mask, tgt_sizes)
        embeddings += self.position_embedding(position_ids)
        return embeddings


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
