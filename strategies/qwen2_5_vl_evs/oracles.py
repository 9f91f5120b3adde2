"""Oracles of Qwen2.5-VL's EVS post-processing (vllm/model_executor/models/qwen2_5_vl.py, 0.29.0 / 0.30.0).

Upstream meaning (the methods' docstrings, and vllm/multimodal/video_prune/evs.py):

* ``_postprocess_image_embeds_evs``: "Append mrope positions for each for images ... Resulting embeddings will
  have extra 4 channels for computed mrope positions" -- ``compute_mrope_for_media``: per token, in the
  ``(t, h, w)`` raster order of the merged grid, ``[t_index, h_index, w_index, llm_grid_w]`` with
  ``llm_grid_h = h // merge``, ``llm_grid_w = w // merge`` (images: ``tokens_per_second`` and
  ``video_second_per_grid`` default 1.0).
* ``_postprocess_video_embeds_evs``: "Prunes video embeddings via Efficient Video Sampling (EVS) and then appends
  mrope positions for each retained embeddings". EVS keeps ``max(tokens_per_frame, int(total * (1 - q)))``
  tokens -- exactly the placeholder count the processor put into the prompt
  (``Qwen2_5_VLMultiModalProcessor._get_prompt_updates``, ``compute_retained_tokens_count``) -- always every token
  of the first frame ("ensures that we retain all the tokens from the first frame"), and keeps them in their
  original order (a boolean mask). The video ``t_index`` is ``t * tokens_per_second * long(second_per_grid)``,
  truncated to an integer.

The positions are concatenated onto the embeddings, so they come out in the embeddings' dtype.

No reference for the video method: which tokens EVS keeps follows the cosine similarities computed in the
embeddings' dtype, and an independent float64 computation would choose differently at near-ties without either
being wrong; the count, the order, the first frame and each kept row's positions are checked instead. The image
method has a reference (``IMAGE_EVS_REFERENCE``): the whole output is determined by the inputs.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES
from strategies.qwen2_5_vl_evs.inputs import item_embeddings, rows_per_item


def _items(output: Any, spec: dict) -> tuple[list[torch.Tensor], str | None]:
    if not isinstance(output, tuple) or not all(isinstance(x, torch.Tensor) for x in output):
        return [], f"output is {type(output).__name__}, not a tuple of tensors"
    if len(output) != len(spec["grids"]):
        return [], f"{len(output)} items for {len(spec['grids'])} grids"
    return [x.detach().cpu() for x in output], None


def media_positions(grid: list[int], merge: int, t_scale: float = 1.0) -> torch.Tensor:
    """``[t_index, h_index, w_index, llm_grid_w]`` per merged token, raster order (module docstring)."""
    t, h, w = grid
    rows, cols = h // merge, w // merge
    return torch.tensor([[int(ti * t_scale), hi, wi, cols]
                         for ti in range(t) for hi in range(rows) for wi in range(cols)],
                        dtype=torch.int64).reshape(-1, 4)


def _video_t_scale(spec: dict, item: int) -> float:
    # second_per_grid_ts.long(): the float32 seconds truncated, then times tokens_per_second.
    seconds = int(torch.tensor(spec["second_per_grid"][item], dtype=torch.float32).item())
    return spec["tokens_per_second"] * seconds


def _expected_positions(spec: dict, item: int) -> torch.Tensor:
    scale = 1.0 if spec["kind"] == "image" else _video_t_scale(spec, item)
    return media_positions(spec["grids"][item], spec["merge"], scale).to(FLOAT_DTYPES[spec["dtype"]])


def evs_items_have_their_shape(spec: dict, output: Any) -> str | None:
    """Every item comes back in the embeddings' dtype with 4 more columns than it went in (the mrope
    positions), an image with all its rows, a video with ``max(tokens_per_frame, int(total * (1 - q)))``
    rows -- the placeholder count the processor put into the prompt."""
    items, problem = _items(output, spec)
    if problem:
        return problem
    dtype = FLOAT_DTYPES[spec["dtype"]]
    for i, (item, rows, grid) in enumerate(zip(items, rows_per_item(spec), spec["grids"])):
        if spec["kind"] == "video":
            per_frame = (grid[1] // spec["merge"]) * (grid[2] // spec["merge"])
            rows = max(per_frame, int(rows * (1 - spec["q"])))
        if tuple(item.shape) != (rows, spec["hidden"] + 4):
            return f"item {i}: shape {tuple(item.shape)}, expected {(rows, spec['hidden'] + 4)}"
        if item.dtype != dtype:
            return f"item {i}: dtype {item.dtype}, the embeddings are {dtype}"
    return None


def evs_rows_are_input_rows_with_their_positions(spec: dict, output: Any) -> str | None:
    """Each output row is an input row, kept whole and in its original order, followed by that token's mrope
    positions; a video keeps every token of its first frame (an image keeps every token)."""
    items, problem = _items(output, spec)
    if problem:
        return problem
    hidden = spec["hidden"]
    for i, (item, embeds) in enumerate(zip(items, item_embeddings(spec, "cpu"))):
        grid = spec["grids"][i]
        positions = _expected_positions(spec, i)
        width = hidden + 4
        if item.dim() != 2 or item.shape[1] != width:
            return f"item {i}: shape {tuple(item.shape)}, not (rows, {width})"
        full = torch.cat([embeds, positions], dim=1)
        source = 0
        for j in range(item.shape[0]):
            while source < full.shape[0] and not torch.equal(full[source], item[j]):
                source += 1
            if source == full.shape[0]:
                return (f"item {i} row {j}: {item[j].tolist()} is no later input row with its positions "
                        f"(input rows and positions in order, as EVS keeps them)")
            if source != j and j < (grid[1] // spec["merge"]) * (grid[2] // spec["merge"]):
                return f"item {i}: first-frame token {j} not kept (row {j} is input row {source})"
            source += 1
        if spec["kind"] == "image" and item.shape[0] != full.shape[0]:
            return f"item {i}: {item.shape[0]} rows of an image's {full.shape[0]}"
    return None


def _image_expected(spec: dict) -> list[torch.Tensor] | None:
    return [torch.cat([embeds, _expected_positions(spec, i)], dim=1)
            for i, embeds in enumerate(item_embeddings(spec, "cpu"))]


def _observed(output: Any) -> list[torch.Tensor]:
    return [x.detach().cpu() for x in output]


IMAGE_EVS_REFERENCE = Reference(expected=_image_expected, observed=_observed, floats="exact")
