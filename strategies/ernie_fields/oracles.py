"""Oracles of keep-on-cpu-ernie-grid-thw, from the upstream meaning of the result.

``embed_multimodal`` returns one embedding tensor per item, images and videos in the order of the kwargs
("It is important to iterate over the keys in this dictionary to preserve the order of the modalities"),
each as many rows as the processor's placeholders for it (``_get_prompt_updates``: ``t*h*w / 4`` for an
image, ``t*h*w / 8`` for a video after the temporal conv) and the language model's width. The vision
tower attends within one frame at a time (``_vision_forward`` splits the grid into ``[1, h, w]`` frames;
``cu_seqlens`` is their running sum), gets one rotary row per patch, and the flash backends get
``max_seqlen``, the largest frame.

No reference: the stand-in blocks make the embeddings a function of the metadata the invariants pin down,
and the patch embedding, norm and resampler are the copies' own code.
"""

from __future__ import annotations

from typing import Any

import torch

MERGE, TEMPORAL = 2, 2


def _items(spec: dict) -> list[tuple[str, list[int]]]:
    images = [("image", g) for g in spec["image_grids"]]
    videos = [("video", g) for g in spec["video_grids"]]
    return images + videos if spec["images_first"] else videos + images


def _rows(kind: str, grid: list[int]) -> int:
    t, h, w = grid
    return t * h * w // MERGE // MERGE // (TEMPORAL if kind == "video" else 1)


def ernie_fields_one_embedding_per_item(spec: dict, output: Any) -> str | None:
    """One finite ``(placeholders, text_hidden)`` embedding per image and video, in the kwargs' modality
    order."""
    items, embeddings = _items(spec), output["embeddings"]
    if len(embeddings) != len(items):
        return f"{len(embeddings)} embeddings for {len(items)} items"
    for i, (emb, (kind, grid)) in enumerate(zip(embeddings, items)):
        want = (_rows(kind, grid), spec["text_hidden"])
        if tuple(emb.shape) != want:
            return f"item {i} ({kind} {grid}): embedding shape {tuple(emb.shape)}, placeholders need {want}"
        if not bool(torch.isfinite(emb.float()).all()):
            return f"item {i} ({kind} {grid}): non-finite embedding"
    return None


def _frames(grids: list[list[int]]) -> list[int]:
    return [h * w for t, h, w in grids for _ in range(t)]


def ernie_fields_encoder_metadata(spec: dict, output: Any) -> str | None:
    """Every block of each vision call (one per modality, in order) got ``cu_seqlens`` = the running sum of
    the frames' ``h*w``, one rotary row per patch, and, on a flash backend, ``max_seqlen`` = the largest
    frame (None on SDPA)."""
    groups = {"image": spec["image_grids"], "video": spec["video_grids"]}
    order = [m for m in (["image", "video"] if spec["images_first"] else ["video", "image"]) if groups[m]]
    for b, calls in enumerate(output["blocks"]):
        if len(calls) != len(order):
            return f"block {b}: {len(calls)} vision calls for modalities {order}"
        for call, modality in zip(calls, order):
            frames = _frames(groups[modality])
            want = [0]
            for size in frames:
                want.append(want[-1] + size)
            if call["cu_seqlens"].tolist() != want:
                return f"block {b}, {modality}: cu_seqlens {call['cu_seqlens'].tolist()}, frames need {want}"
            if call["rotary_pos_emb"].shape[0] != want[-1]:
                return f"block {b}, {modality}: {call['rotary_pos_emb'].shape[0]} rotary rows for {want[-1]} patches"
            flash = spec["attn_backend"] != "TORCH_SDPA"
            expected = max(frames) if flash else None
            if call["max_seqlen"] != expected:
                return f"block {b}, {modality}: max_seqlen {call['max_seqlen']}, expected {expected}"
    return None


def ernie_fields_attention_reads(spec: dict, output: Any) -> None:
    """The host reads each vision block's attention makes of the metadata it receives (one representative
    attention per stand-in block; upstream ``Ernie4_5_VisionAttention.forward`` passes ``cu_seqlens`` and
    ``max_seqlen`` to ``MMEncoderAttention``). Made by the stand-in blocks themselves during the call, inside
    ``consumer_reads()`` (strategies/ernie_fields/inputs.py ``RecordingErnieBlock``): this function, the
    record's ``consumer``, has nothing left to read; naming it makes the engine report the consumer syncs.

    * FLASH_ATTN / TRITON_ATTN / ROCM_AITER_FA: vllm/v1/attention/ops/vit_attn_wrappers.py
      ``flash_attn_maxseqlen_wrapper``: ``max_seqlen.item()``. 0.28.0 computes it from the device grid's
      ``cu_seqlens`` (a device tensor: one sync per block); 0.34.0 from the host ``cu_seqlens`` before the
      H2D copy (free).
    * TORCH_SDPA: ``torch_sdpa_wrapper``: ``(cu_seqlens[1:] - cu_seqlens[:-1]).tolist()`` of the device
      ``cu_seqlens``, in both releases.
    """
    del spec, output
