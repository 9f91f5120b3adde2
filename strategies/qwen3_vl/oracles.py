"""Oracles of ``Qwen3_VisionTransformer.rot_pos_emb(grid_thw)`` (vllm/model_executor/models/qwen3_vl.py,
0.28.0 / 0.29.0), written from what the result means, not from either copy.

The Qwen3-VL vision rope means what the Qwen2-VL one does (strategies/qwen2_vl/oracles.py): every patch
gets ``[cos_table[h], cos_table[w]]`` (likewise sin) of its row and column, patches in the patch
merger's ``spatial_merge_size`` block order, each image's ``h x w`` patches once per frame, images in
``grid_thw`` order; ``prepare_encoder_metadata`` hands the pair to the vision blocks as
``rotary_pos_emb_cos``/``_sin``. The spec fields (merge, rotary_half, dtype, seed, grid_thw) are the
qwen2_vl model's, so its invariants and reference apply unchanged; this module names them for this target.

No consumer: the pair goes to the vision blocks' rotary kernels on the device; nothing reads it on the host.
"""

from __future__ import annotations

from typing import Any

from strategies.qwen2_vl.oracles import (
    ROT_POS_EMB_REFERENCE,
    rot_pos_emb_frames_repeat,
    rot_pos_emb_rows_follow_the_patches,
    rot_pos_emb_shape_follows_grids,
)

QWEN3_ROT_POS_EMB_REFERENCE = ROT_POS_EMB_REFERENCE
"""Per image and frame, the patches in merge order, each ``[table[h], table[w]]`` of cos and of sin."""


def qwen3_rot_pos_emb_shape_follows_grids(spec: dict, output: Any) -> str | None:
    """cos and sin each have ``sum(t * h * w)`` rows and ``rotary_dim`` columns, in the rope cache's
    dtype, on the model's device."""
    return rot_pos_emb_shape_follows_grids(spec, output)


def qwen3_rot_pos_emb_frames_repeat(spec: dict, output: Any) -> str | None:
    """Every frame of an item gets the same rows (the vision rope is spatial only)."""
    return rot_pos_emb_frames_repeat(spec, output)


def qwen3_rot_pos_emb_rows_follow_the_patches(spec: dict, output: Any) -> str | None:
    """Patch ``k`` (merge order) of an item reads the cache rows of its own row and column index,
    bitwise (a gather); a repeated ``(h, w)`` (the rot_pos_ids cache's hit) reads the same rows."""
    return rot_pos_emb_rows_follow_the_patches(spec, output)
