"""Oracles of keep-on-cpu-paddleocr-grid-thw, from the upstream meaning of the result.

``embed_multimodal`` returns one embedding tensor per image (the engine scatters them, in order, over the
image's placeholder tokens: ``vllm/model_executor/models/utils.py`` ``_merge_multimodal_embeddings``), and
the number of placeholder tokens per image is what the processor's ``get_num_image_tokens`` counted from the
grid: ``t * h * w / 4`` after the projector's 2x2 merge (``PaddleOCRVLMultiModalProcessor._get_prompt_updates``).
The tower must see each image as its own attention segment (``cu_seqlens``: "One segment per image so that
images never attend to each other", 0.34.0 ``encode_image``) with SigLIP position ids restarting every frame
(``arange(t*h*w) % (h*w)``).

No reference: the stand-in tower makes the embeddings a function of the tower's inputs, which the
invariants already pin down; the projector is the copies' own code. No consumer: the embeddings go to the
language model's merge, a device ``masked_scatter_`` that never reads them on the host.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _merged(grid: list[int]) -> int:
    t, h, w = grid
    return t * (h // 2) * (w // 2)


def paddleocr_fields_one_embedding_per_image(spec: dict, output: Any) -> str | None:
    """One finite ``(t*h*w/4, text_hidden)`` embedding per image, in the grid's order: the placeholder
    count ``_get_prompt_updates`` wrote for that image, the language model's width."""
    embeddings = output["embeddings"]
    if len(embeddings) != len(spec["grids"]):
        return f"{len(embeddings)} embeddings for {len(spec['grids'])} images"
    for i, (emb, grid) in enumerate(zip(embeddings, spec["grids"])):
        want = (_merged(grid), spec["text_hidden"])
        if tuple(emb.shape) != want:
            return f"image {i} (grid {grid}): embedding shape {tuple(emb.shape)}, placeholders need {want}"
        if not bool(torch.isfinite(emb.float()).all()):
            return f"image {i} (grid {grid}): non-finite embedding (the tower saw a token outside every segment)"
    return None


def paddleocr_fields_tower_segments(spec: dict, output: Any) -> str | None:
    """The tower got the images' grids in order, one attention segment of ``t*h*w`` tokens per image, and
    position ids ``arange(t*h*w) % (h*w)`` per image."""
    tower, grids = output["tower"], spec["grids"]
    if [list(g) for g in tower["grids"]] != [list(g) for g in grids]:
        return f"tower saw grids {tower['grids']}, the batch holds {grids}"
    want_lens = [math.prod(g) for g in grids]
    if tower["seq_lens"].tolist() != want_lens:
        return f"tower segments {tower['seq_lens'].tolist()}, one per image needs {want_lens}"
    want_ids = torch.cat([torch.arange(math.prod(g)) % (g[1] * g[2]) for g in grids])
    got = tower["position_ids"].cpu()
    if got.shape != want_ids.shape or not torch.equal(got.long(), want_ids):
        return "tower position ids are not arange(t*h*w) % (h*w) per image"
    return None
