"""Oracles of Qwen3-VL's EVS host logic (vllm/model_executor/models/qwen3_vl.py, 0.29.0 / 0.30.0).

Upstream meaning:

* ``_postprocess_image_embeds_evs``: with pruning on, "Append mrope positions for each for images ... Resulting
  embeddings will have extra 5 channels for computed mrope positions, consistent with video embeddings":
  ``compute_mrope_for_media``'s ``[t_index, h_index, w_index, llm_grid_w]`` per merged token in raster order, then
  a zero ("Dummy extra fifth channel"), concatenated onto the embeddings (so in their dtype). With pruning off,
  the embeddings unchanged.
* ``_get_expanded_positions``: "Expand positions to match the full sequence length (includes both video tokens and
  indicator tokens) Shape: [full_length, 5] ... [t_index, h_index, w_index, is_vision_start, is_video]". The
  positions are those of the *unpruned* sequence (Qwen3-VL's mrope: text tokens -- timestamps, vision_start,
  vision_end -- take one position in all three channels, counting up; each frame's grid of merged tokens sits at
  ``(p, p + row, p + col)`` after the text before it, and the next text continues at ``p + max(rows, cols)``),
  carried over to the pruned sequence: the kept video tokens keep their own positions, the text tokens theirs.

``EXPANDED_POSITIONS_REFERENCE`` computes exactly that from the mask and the timestamps' token ids (independent of
the copies' ``_get_mrope_input_positions`` and ``_iter_mm_grid_hw``); ``IMAGE_EVS_REFERENCE`` the images' output.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES
from strategies.qwen3_vl_evs.inputs import (
    VIDEO_TOKEN_ID,
    VISION_START_TOKEN_ID,
    frame_token_ids,
    image_embeddings,
    image_rows,
    retention_mask,
    tokens_per_frame,
)

# -- images --------------------------------------------------------------------------------------------------

def _image_items(output: Any, spec: dict) -> tuple[list[torch.Tensor], str | None]:
    if not isinstance(output, tuple) or not all(isinstance(x, torch.Tensor) for x in output):
        return [], f"output is {type(output).__name__}, not a tuple of tensors"
    if len(output) != len(spec["grids"]):
        return [], f"{len(output)} items for {len(spec['grids'])} images"
    return [x.detach().cpu() for x in output], None


def image_positions(grid: list[int], merge: int) -> torch.Tensor:
    """``[t, h, w, llm_grid_w, 0]`` per merged token of an image, raster order (module docstring)."""
    t, h, w = grid
    rows, cols = h // merge, w // merge
    return torch.tensor([[ti, hi, wi, cols, 0] for ti in range(t) for hi in range(rows) for wi in range(cols)],
                        dtype=torch.int64).reshape(-1, 5)


def _image_expected(spec: dict) -> list[torch.Tensor]:
    embeds = image_embeddings(spec, "cpu")
    if not spec["pruning"]:
        return embeds
    dtype = FLOAT_DTYPES[spec["dtype"]]
    return [torch.cat([e, image_positions(g, spec["merge"]).to(dtype)], dim=1) for e, g in zip(embeds, spec["grids"])]


def image_evs_items_have_their_shape(spec: dict, output: Any) -> str | None:
    """Every image keeps all its rows and the embeddings' dtype; with pruning on it has 5 more columns (the
    positions and the dummy channel), with pruning off none."""
    items, problem = _image_items(output, spec)
    if problem:
        return problem
    width = spec["hidden"] + (5 if spec["pruning"] else 0)
    for i, (item, rows) in enumerate(zip(items, image_rows(spec))):
        if tuple(item.shape) != (rows, width):
            return f"image {i}: shape {tuple(item.shape)}, expected {(rows, width)}"
        if item.dtype != FLOAT_DTYPES[spec["dtype"]]:
            return f"image {i}: dtype {item.dtype}, the embeddings are {FLOAT_DTYPES[spec['dtype']]}"
    return None


def image_evs_embeddings_come_first_and_unchanged(spec: dict, output: Any) -> str | None:
    """The first ``hidden`` columns are the embeddings, bitwise; the appended fifth position channel is zero."""
    items, problem = _image_items(output, spec)
    if problem:
        return problem
    hidden = spec["hidden"]
    for i, (item, embeds) in enumerate(zip(items, image_embeddings(spec, "cpu"))):
        if item.dim() != 2 or item.shape[0] != embeds.shape[0] or item.shape[1] < hidden:
            return f"image {i}: shape {tuple(item.shape)} cannot hold its {tuple(embeds.shape)} embeddings"
        if not torch.equal(item[:, :hidden], embeds):
            return f"image {i}: the first {hidden} columns are not the embeddings"
        if spec["pruning"] and item.shape[1] == hidden + 5 and bool(item[:, -1].ne(0).any()):
            return f"image {i}: the dummy fifth position channel is not zero"
    return None


def _observed(output: Any) -> list[torch.Tensor]:
    return [x.detach().cpu() for x in output]


IMAGE_EVS_REFERENCE = Reference(expected=_image_expected, observed=_observed, floats="exact")


# -- expanded positions --------------------------------------------------------------------------------------

def unpruned_positions(spec: dict) -> tuple[list[int], torch.Tensor]:
    """The unpruned sequence's token ids and mrope positions ``(n, 3)`` (module docstring's rule)."""
    t, h, w = spec["grid"]
    rows, cols = h // spec["merge"], w // spec["merge"]
    ids = frame_token_ids(spec, [rows * cols] * t)
    positions, p, i = [], 0, 0
    while i < len(ids):
        if ids[i] == VIDEO_TOKEN_ID:
            positions += [[p, p + r, p + c] for r in range(rows) for c in range(cols)]
            p += max(rows, cols)
            i += rows * cols
        else:
            positions.append([p, p, p])
            p += 1
            i += 1
    return ids, torch.tensor(positions, dtype=torch.int64).reshape(-1, 3)


def _expanded_expected(spec: dict) -> torch.Tensor:
    ids, positions = unpruned_positions(spec)
    is_video = torch.tensor(ids) == VIDEO_TOKEN_ID
    kept_video = positions[is_video][retention_mask(spec)]
    text = positions[~is_video]
    pruned_ids = torch.tensor(frame_token_ids(spec, tokens_per_frame(spec)))
    pruned_video = pruned_ids == VIDEO_TOKEN_ID
    out = torch.zeros(len(pruned_ids), 5, dtype=torch.int64)
    out[pruned_video, :3] = kept_video
    out[~pruned_video, :3] = text
    out[:, 3] = pruned_ids == VISION_START_TOKEN_ID
    out[:, 4] = pruned_video
    return out


EXPANDED_POSITIONS_REFERENCE = Reference(
    expected=_expanded_expected, observed=lambda output: output.detach().cpu(), floats="exact")


def _pruned_ids(spec: dict) -> torch.Tensor:
    return torch.tensor(frame_token_ids(spec, tokens_per_frame(spec)))


def expanded_positions_flag_their_tokens(spec: dict, output: Any) -> str | None:
    """One int64 row of 5 per token of the pruned sequence, on the device asked for; channel 3 is 1 exactly at
    the vision_start tokens, channel 4 exactly at the video tokens."""
    if not isinstance(output, torch.Tensor):
        return f"output is {type(output).__name__}, not a tensor"
    ids = _pruned_ids(spec)
    if tuple(output.shape) != (len(ids), 5) or output.dtype != torch.int64:
        return f"shape {tuple(output.shape)} {output.dtype}, expected ({len(ids)}, 5) int64"
    if output.device.type != torch.device(spec["device"]).type:
        return f"on {output.device}, asked for {spec['device']}"
    got = output.detach().cpu()
    for channel, flag in ((3, ids == VISION_START_TOKEN_ID), (4, ids == VIDEO_TOKEN_ID)):
        if not torch.equal(got[:, channel], flag.long()):
            row = int((got[:, channel] != flag.long()).nonzero()[0])
            return f"row {row}: channel {channel} is {int(got[row, channel])}, the token says {int(flag[row])}"
    return None


def expanded_positions_text_counts_up_and_frames_sit_after_it(spec: dict, output: Any) -> str | None:
    """Text rows (timestamps, vision_start/end) carry one position in all three channels, strictly increasing
    along the sequence; each kept video token sits on its frame's grid: ``t`` is one past the frame's
    vision_start, ``h - t`` and ``w - t`` inside the merged grid."""
    if not isinstance(output, torch.Tensor) or output.dim() != 2 or output.shape[1] < 3:
        return f"output is not a (n, 5) tensor: {getattr(output, 'shape', type(output).__name__)}"
    ids = _pruned_ids(spec)
    if output.shape[0] != len(ids):
        return f"{output.shape[0]} rows for {len(ids)} tokens"
    got = output.detach().cpu()
    _, h, w = spec["grid"]
    rows, cols = h // spec["merge"], w // spec["merge"]
    last_text, frame_start = -1, None
    for i, token in enumerate(ids.tolist()):
        t, hh, ww = got[i, :3].tolist()
        if token == VIDEO_TOKEN_ID:
            if frame_start is None or t != frame_start + 1 or not (0 <= hh - t < rows and 0 <= ww - t < cols):
                return f"row {i}: video token at {[t, hh, ww]}, not on the grid after vision_start {frame_start}"
            continue
        if not t == hh == ww:
            return f"row {i}: text token with positions {[t, hh, ww]}, not one position"
        if t <= last_text:
            return f"row {i}: text position {t} after {last_text}"
        last_text = t
        if token == VISION_START_TOKEN_ID:
            frame_start = t
    return None
