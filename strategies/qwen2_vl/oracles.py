"""Oracles of ``Qwen2VisionTransformer.rot_pos_emb(grid_thw)`` (vllm/model_executor/models/qwen2_vl.py,
0.28.0 / 0.29.0), written from what the result means, not from either copy.

The Qwen2-VL vision rope is 2-D: every patch of an image gets the rotary rows of its row index ``h``
and of its column index ``w`` (``cos_combined = cos[pos_ids].flatten(1)`` with ``pos_ids = [h, w]``),
the patches listed in the patch merger's order (``spatial_merge_size x spatial_merge_size`` blocks row
by row, each block's patches row by row), each image's ``h x w`` patches once per frame ``t``, images
in ``grid_thw`` order. ``prepare_encoder_metadata`` hands the pair to every vision block as
``rotary_pos_emb_cos`` / ``rotary_pos_emb_sin`` (and the encoder CUDA graph copies them into its
buffers), so the rows must line up one-to-one with the patch tokens of ``pixel_values``.

The thunk (strategies/qwen2_vl/inputs.py) returns ``(cos_combined, sin_combined)``. The stand-in rope module
holds ``rope_cache(spec)`` (``rotary_half`` columns of cos, then of sin) on the spec's device.

No consumer: the pair goes to the vision blocks' rotary kernels on the device; nothing reads it on
the host.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES
from strategies.qwen2_vl.inputs import rope_cache


def merge_order(h: int, w: int, merge: int) -> list[tuple[int, int]]:
    """The patches ``(row, column)`` of an ``h x w`` grid in the patch merger's order: the
    ``merge x merge`` blocks row by row, inside each block its patches row by row."""
    order = []
    for block_h in range(h // merge):
        for block_w in range(w // merge):
            for i in range(merge):
                for j in range(merge):
                    order.append((block_h * merge + i, block_w * merge + j))
    return order


def rope_rows(spec: dict, patches: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin rows of the given patches: ``[table[h], table[w]]`` per patch (CPU, cache dtype)."""
    cache = rope_cache(spec)
    half = spec["rotary_half"]
    cos, sin = cache[:, :half], cache[:, half:]
    rows = torch.tensor([h for h, _ in patches], dtype=torch.long).reshape(-1)
    columns = torch.tensor([w for _, w in patches], dtype=torch.long).reshape(-1)
    return torch.cat([cos[rows], cos[columns]], dim=1), torch.cat([sin[rows], sin[columns]], dim=1)


def _pair(output: Any) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, str | None]:
    if not isinstance(output, tuple) or len(output) != 2:
        return None, f"output is {type(output).__name__}, not a (cos, sin) pair"
    for name, value in zip(("cos", "sin"), output):
        if not isinstance(value, torch.Tensor):
            return None, f"{name} is a {type(value).__name__}, not a tensor"
    return output, None


def rot_pos_emb_shape_follows_grids(spec: dict, output: Any) -> str | None:
    """cos and sin each have one row per patch of every frame (``sum(t * h * w)``) and
    ``rotary_dim`` columns (the row's and the column's rotary halves), in the rope cache's dtype,
    on the device the model (and its cache) lives on."""
    pair, problem = _pair(output)
    if problem:
        return problem
    if not spec["grid_thw"]:
        return None
    want = (sum(t * h * w for t, h, w in spec["grid_thw"]), 2 * spec["rotary_half"])
    dtype = FLOAT_DTYPES[spec["dtype"]]
    for name, tensor in zip(("cos", "sin"), pair):
        if tuple(tensor.shape) != want:
            return f"{name} has shape {tuple(tensor.shape)}, expected {want}"
        if tensor.dtype != dtype:
            return f"{name} is {tensor.dtype}, the rope cache is {dtype}"
        if tensor.device.type != torch.device(spec["device"]).type:
            return f"{name} is on {tensor.device}, the model on {spec['device']}"
    return None


def rot_pos_emb_frames_repeat(spec: dict, output: Any) -> str | None:
    """The vision rope is spatial: every frame of an image gets the same rows (the image's
    ``h x w`` position ids repeated ``t`` times)."""
    pair, problem = _pair(output)
    if problem or rot_pos_emb_shape_follows_grids(spec, output):
        return None
    start = 0
    for index, (t, h, w) in enumerate(spec["grid_thw"]):
        for name, tensor in zip(("cos", "sin"), pair):
            first = tensor[start:start + h * w]
            for k in range(1, t):
                frame = tensor[start + k * h * w:start + (k + 1) * h * w]
                if not torch.equal(frame.cpu(), first.cpu()):
                    return f"image {index} ({[t, h, w]}): {name} of frame {k} differs from frame 0"
        start += t * h * w
    return None


def rot_pos_emb_rows_follow_the_patches(spec: dict, output: Any) -> str | None:
    """Patch ``k`` of an image (merge order) reads the cache rows of its own row and column index:
    ``cos[k] == [cos_table[h_k], cos_table[w_k]]``, likewise sin (a gather, so bitwise)."""
    pair, problem = _pair(output)
    if problem or rot_pos_emb_shape_follows_grids(spec, output):
        return None
    start = 0
    for index, (t, h, w) in enumerate(spec["grid_thw"]):
        order = merge_order(h, w, spec["merge"])
        want = rope_rows(spec, order)
        for name, tensor, expected in zip(("cos", "sin"), pair, want):
            got = tensor[start:start + h * w].cpu()
            if not torch.equal(got, expected):
                bad = int((got != expected).any(dim=1).nonzero()[0])
                return (f"image {index} ({[t, h, w]}): {name} row of patch {order[bad]} is not the "
                        f"cache rows of row {order[bad][0]} and column {order[bad][1]}")
        start += t * h * w
    return None


def _expected(spec: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
    if not spec["grid_thw"]:
        return None  # torch.cat of no image raises in both releases
    patches = []
    for t, h, w in spec["grid_thw"]:
        patches.extend(merge_order(h, w, spec["merge"]) * t)
    return rope_rows(spec, patches)


def _observed(output: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(tensor.detach().cpu() for tensor in output)


ROT_POS_EMB_REFERENCE = Reference(expected=_expected, observed=_observed, floats="exact")
"""Per image and frame, the patches in merge order, each ``[table[h], table[w]]`` of cos and of sin."""
