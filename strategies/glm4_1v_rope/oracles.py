"""Oracles of ``Glm4vVisionTransformer.rot_pos_emb(grid_thw)`` (vllm/model_executor/models/glm4_1v.py,
0.28.0 / 0.29.0), written from what the result means, not from either copy.

GLM-4.1V's vision rope is Qwen2-VL's (strategies/qwen2_vl/oracles.py): every patch gets the rotary rows of
its row index ``h`` and its column index ``w``, the patches in the patch merger's order, each image's
``h x w`` patches once per frame, images in ``grid_thw`` order. GLM's method also returns the position ids
it gathered with, ``pos_ids`` (``[sum(t*h*w), 2]``, ``[h, w]`` per patch), which the one caller
(``prepare_encoder_metadata``) discards; the ids must be exactly those rows.

The thunk (strategies/glm4_1v_rope/inputs.py) returns ``(cos_combined, sin_combined, pos_ids)``.

No consumer: cos/sin go to the vision blocks' rotary kernels on the device; ``pos_ids`` is dropped.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.qwen2_vl import oracles as qwen2

_PARTS = ("cos", "sin", "pos_ids")


def _triple(output: Any) -> tuple[tuple[torch.Tensor, ...] | None, str | None]:
    if not isinstance(output, tuple) or len(output) != 3:
        return None, f"output is {type(output).__name__}, not a (cos, sin, pos_ids) triple"
    for name, value in zip(_PARTS, output):
        if not isinstance(value, torch.Tensor):
            return None, f"{name} is a {type(value).__name__}, not a tensor"
    return output, None


def expected_pos_ids(spec: dict) -> torch.Tensor:
    """``[h, w]`` of every patch: per image and frame the patches in merge order (CPU int64)."""
    rows = []
    for t, h, w in spec["grid_thw"]:
        rows.extend(qwen2.merge_order(h, w, spec["merge"]) * t)
    return torch.tensor(rows, dtype=torch.long).reshape(-1, 2)


def glm_rot_pos_emb_rope_is_qwen2_vl_rope(spec: dict, output: Any) -> str | None:
    """cos and sin mean what Qwen2-VL's do: one row per patch of every frame, ``rotary_dim`` columns, the
    cache's dtype, the model's device; frames repeat; patch ``k`` reads the rows of its own row and column."""
    triple, problem = _triple(output)
    if problem:
        return problem
    pair = triple[:2]
    for invariant in (qwen2.rot_pos_emb_shape_follows_grids, qwen2.rot_pos_emb_frames_repeat,
                      qwen2.rot_pos_emb_rows_follow_the_patches):
        problem = invariant(spec, pair)
        if problem:
            return problem
    return None


def glm_rot_pos_emb_pos_ids_are_the_patch_positions(spec: dict, output: Any) -> str | None:
    """``pos_ids`` holds ``[h, w]`` of every patch (merge order, once per frame, images in order) as
    integer indices on the device the cache lives on (it indexed the cache there)."""
    triple, problem = _triple(output)
    if problem or not spec["grid_thw"]:
        return problem
    pos_ids = triple[2]
    if pos_ids.dtype != torch.long:
        return f"pos_ids is {pos_ids.dtype}, not torch.int64"
    if pos_ids.device.type != torch.device(spec["device"]).type:
        return f"pos_ids is on {pos_ids.device}, the model on {spec['device']}"
    want = expected_pos_ids(spec)
    if tuple(pos_ids.shape) != tuple(want.shape):
        return f"pos_ids has shape {tuple(pos_ids.shape)}, expected {tuple(want.shape)}"
    got = pos_ids.cpu()
    if not torch.equal(got, want):
        bad = int((got != want).any(dim=1).nonzero()[0])
        return f"pos_ids row {bad} is {got[bad].tolist()}, the patch is at {want[bad].tolist()}"
    return None


def _expected(spec: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    pair = qwen2.ROT_POS_EMB_REFERENCE.expected(spec)
    if pair is None:
        return None  # torch.cat of no image raises in both releases
    return (*pair, expected_pos_ids(spec))


def _observed(output: Any) -> tuple[torch.Tensor, ...]:
    return tuple(tensor.detach().cpu() for tensor in output)


ROT_POS_EMB_REFERENCE = Reference(expected=_expected, observed=_observed, floats="exact")
"""Per image and frame, the patches in merge order: ``[table[h], table[w]]`` of cos and of sin, and ``[h, w]``."""
