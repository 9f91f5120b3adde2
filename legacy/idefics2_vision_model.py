# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.29.0: vllm/model_executor/models/idefics2_vision_model.py ::
Idefics2VisionEmbeddings.get_position_ids, Idefics2VisionEmbeddings.forward and
Idefics2VisionEmbeddings.__init__ (definitions verbatim; the class's own lines verbatim).

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

``gpu_sync_allowed`` is a no-op context here: the allow region only classifies syncs, and the fuzzer's one
allow-region ContextVar lives in optimized/gpu_sync_debug.py, which a legacy copy may not import; the
legacy side's syncs are counted whole.
"""

import contextlib  # ADAPTED: for the gpu_sync_allowed stand-in
from types import SimpleNamespace  # ADAPTED: for the Idefics2VisionConfig stand-in

import torch
from torch import nn

# from transformers.models.idefics2.configuration_idefics2 import Idefics2VisionConfig  # ADAPTED: map to a local helper
Idefics2VisionConfig = SimpleNamespace  # ADAPTED: transformers' config; only hidden_size, image_size, patch_size, num_channels are read
# from vllm.model_executor.layers.conv import Conv2dLayer  # ADAPTED: map to a local helper
Conv2dLayer = nn.Conv2d  # ADAPTED: vllm's Conv2dLayer holds the same weight/bias and computes the same projection (module docstring)
# from vllm.utils.gpu_sync_debug import gpu_sync_allowed  # ADAPTED: map to a local helper
gpu_sync_allowed = contextlib.nullcontext  # ADAPTED: the allow region only classifies syncs (module docstring)
# from vllm.utils.torch_utils import PIN_MEMORY  # ADAPTED: map to a local helper
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: is_pin_memory_available()'s answer without vllm's platform layer


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
        batch_size, max_nb_patches_h, max_nb_patches_w = patch_attention_mask.shape
        boundaries = torch.arange(
            1 / self.num_patches_per_side, 1.0, 1 / self.num_patches_per_side
        )
        position_ids = torch.full(
            size=(batch_size, max_nb_patches_h * max_nb_patches_w),
            fill_value=0,
            pin_memory=PIN_MEMORY,
        )

        with gpu_sync_allowed():
            patch_attention_mask_cpu = patch_attention_mask.cpu()
            tgt_sizes_cpu = tgt_sizes.cpu() if tgt_sizes is not None else None

        for batch_idx, p_attn_mask in enumerate(patch_attention_mask_cpu):
            if tgt_sizes_cpu is not None:
                nb_patches_h = tgt_sizes_cpu[batch_idx][0]
                nb_patches_w = tgt_sizes_cpu[batch_idx][1]
            else:
                nb_patches_h = p_attn_mask[:, 0].sum()
                nb_patches_w = p_attn_mask[0].sum()
            fractional_coords_h = torch.arange(0, 1 - 1e-6, 1 / nb_patches_h)
            fractional_coords_w = torch.arange(0, 1 - 1e-6, 1 / nb_patches_w)
            bucket_coords_h = torch.bucketize(
                fractional_coords_h, boundaries, right=True
            )
            bucket_coords_w = torch.bucketize(
                fractional_coords_w, boundaries, right=True
            )
            pos_ids = (
                bucket_coords_h[:, None] * self.num_patches_per_side + bucket_coords_w
            ).flatten()
            position_ids[batch_idx][p_attn_mask.view(-1)] = pos_ids

        return position_ids.to(self.position_embedding.weight.device, non_blocking=True)

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
