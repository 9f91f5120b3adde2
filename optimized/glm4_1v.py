# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Adapted from
# https://github.com/huggingface/transformers/blob/main/src/transformers/models/Glm4v/modeling_Glm4v.py
# Copyright 2025 The vLLM team.
# Copyright 2025 The ZhipuAI Team.
# Copyright 2025 The HuggingFace Inc. team.
# Licensed under the Apache License, Version 2.0.
"""Copied from vllm 0.28.0: vllm/model_executor/models/glm4_1v.py ::
Glm4vVisionEmbeddings (whole class, verbatim) and
Glm4vVisionTransformer.pos_embeds_interpolate (method body verbatim).

Glm4vVisionTransformer itself is far larger (attention blocks, TP layers); only
the attributes pos_embeds_interpolate reads are reproduced, in a stand-in class
marked ADAPTED below.
"""
from types import SimpleNamespace  # ADAPTED: for the Glm4vVisionConfig stand-in

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from optimized.torch_utils import async_tensor_h2d  # ADAPTED: upstream `from vllm.utils.torch_utils import async_tensor_h2d`

Glm4vVisionConfig = SimpleNamespace  # ADAPTED: transformers' config; only hidden_size, image_size, patch_size are read


class Glm4vVisionEmbeddings(nn.Module):
    def __init__(self, config: Glm4vVisionConfig):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.image_size = config.image_size
        self.patch_size = config.patch_size

        self.num_patches = (self.image_size // self.patch_size) ** 2
        self.num_positions = self.num_patches
        self.position_embedding = nn.Embedding(self.num_positions, self.embed_dim)
        self.register_buffer(
            "position_ids",
            torch.arange(self.num_positions).expand((1, -1)),
            persistent=False,
        )

    def forward(
        self, embeddings, lengths, image_shapes, h_coords, w_coords
    ) -> torch.Tensor:
        pos_embed_weight = self.position_embedding.weight
        hidden_size = pos_embed_weight.shape[1]
        total_seq = h_coords.shape[0]
        device = pos_embed_weight.device

        # Move coordinates to correct device. The only caller already hands
        # these over pinned + non-blocking, so this is normally a no-op.
        h_coords, w_coords = h_coords.to(device), w_coords.to(device)

        # Handle empty sequence case
        if total_seq == 0:
            adapted_pos_embed = torch.empty(
                0, hidden_size, device=device, dtype=pos_embed_weight.dtype
            )
        else:
            # Prepare 2D position embedding
            orig_size_sq = pos_embed_weight.shape[0]
            orig_size = int(orig_size_sq**0.5)
            pos_embed_2d = (
                pos_embed_weight.view(orig_size, orig_size, hidden_size)
                .permute(2, 0, 1)
                .unsqueeze(0)
                .to(device=device, dtype=torch.float32)
            )

            # Calculate target dimensions for each patch. `lengths` and
            # `image_shapes` are host data, so expand them with numpy and move
            # the result across once rather than per-image.
            # Shapes are cycled: in data parallel mode some GPUs might not
            # have all image shapes.
            shapes_np = np.asarray(image_shapes)
            shape_idx = np.arange(len(lengths)) % shapes_np.shape[0]
            target_h = async_tensor_h2d(
                np.repeat(shapes_np[shape_idx, 1], lengths),
                device=device,
                dtype=torch.float32,
            )
            target_w = async_tensor_h2d(
                np.repeat(shapes_np[shape_idx, 2], lengths),
                device=device,
                dtype=torch.float32,
            )

            # Normalize coordinates to [-1, 1] range for grid_sample
            h_coords = h_coords.to(device=device, dtype=torch.float32)
            w_coords = w_coords.to(device=device, dtype=torch.float32)
            norm_w = ((w_coords + 0.5) / target_w) * 2 - 1
            norm_h = ((h_coords + 0.5) / target_h) * 2 - 1

            # Create sampling grid
            grid = torch.stack((norm_w, norm_h), dim=-1).unsqueeze(0).unsqueeze(2)

            # Perform bicubic interpolation
            interpolated_embed_fp32 = F.grid_sample(
                pos_embed_2d,
                grid,
                mode="bicubic",
                align_corners=False,
                padding_mode="border",
            )

            # Reshape and convert back to original dtype
            adapted_pos_embed_fp32 = (
                interpolated_embed_fp32.squeeze(0).squeeze(-1).permute(1, 0)
            )
            adapted_pos_embed = adapted_pos_embed_fp32.to(pos_embed_weight.dtype).to(
                embeddings.device
            )

        # Add adapted position encoding to embeddings
        embeddings = embeddings + adapted_pos_embed
        return embeddings


class Glm4vVisionTransformer(nn.Module):  # ADAPTED: stand-in holding only what pos_embeds_interpolate reads
    def __init__(self, embeddings: Glm4vVisionEmbeddings, spatial_merge_size: int):  # ADAPTED
        super().__init__()  # ADAPTED
        self.embeddings = embeddings  # ADAPTED: upstream builds Glm4vVisionEmbeddings(vision_config)
        self.spatial_merge_size = spatial_merge_size  # ADAPTED: upstream vision_config.spatial_merge_size
        self.hidden_size = embeddings.embed_dim  # ADAPTED: upstream vision_config.hidden_size

    @property
    def dtype(self) -> torch.dtype:  # ADAPTED: upstream returns self.patch_embed.proj.weight.dtype
        return self.embeddings.position_embedding.weight.dtype  # ADAPTED: same dtype in a loaded model

    def pos_embeds_interpolate(self, grid_thw: list[list[int]]) -> torch.Tensor:
        """Pre-compute absolute position embeddings for all input samples.
        The original `self.embeddings` fused token embeddings and position embeddings
        in one call, which prevented preparing position embeddings as static metadata
        required by CUDA graph capture / replay. This method decouples the two by
        feeding an all-zero token tensor to `self.embeddings`. The module therefore only
        performs bicubic interpolation based on the coordinates and returns pure
        position embeddings. These are cached in `prepare_encoder_metadata` and later
        added to the patch tokens in `forward` via `x = x + pos_embeds`, keeping the
        forward graph compatible with CUDA graph replay. Coordinate generation matches
        `rot_pos_emb` exactly to guarantee spatial alignment.
        """

        device = self.embeddings.position_embedding.weight.device
        dtype = self.dtype
        all_embeds = []

        for t, h, w in grid_thw:
            # Use the same coordinate generation logic as rot_pos_emb
            # to ensure consistent positional embedding interpolation
            h_coords = torch.arange(h).unsqueeze(1).expand(-1, w)
            w_coords = torch.arange(w).unsqueeze(0).expand(h, -1)
            h_coords = (
                h_coords.reshape(
                    h // self.spatial_merge_size,
                    self.spatial_merge_size,
                    w // self.spatial_merge_size,
                    self.spatial_merge_size,
                )
                .permute(0, 2, 1, 3)
                .flatten()
            )
            w_coords = (
                w_coords.reshape(
                    h // self.spatial_merge_size,
                    self.spatial_merge_size,
                    w // self.spatial_merge_size,
                    self.spatial_merge_size,
                )
                .permute(0, 2, 1, 3)
                .flatten()
            )

            lengths = [h * w] * t
            image_shapes = [[t, h, w]]

            # Build the coordinates on the host (cheap integer math) but move
            # them across pinned + non-blocking, so the consumer's
            # `.to(device)` below is a no-op rather than a blocking H2D.
            h_coords_repeated = async_tensor_h2d(h_coords.repeat(t), device=device)
            w_coords_repeated = async_tensor_h2d(w_coords.repeat(t), device=device)

            embeds = self.embeddings(
                embeddings=torch.zeros(
                    h * w * t, self.hidden_size, device=device, dtype=dtype
                ),
                lengths=lengths,
                image_shapes=image_shapes,
                h_coords=h_coords_repeated,
                w_coords=w_coords_repeated,
            )
            all_embeds.append(embeds)

        return torch.cat(all_embeds, dim=0).to(dtype)
