"""Oracles of ``Qwen2VisionTransformer.prepare_encoder_metadata`` (vllm/model_executor/models/qwen2_vl.py,
0.29.0 / 0.30.0), written from what the metadata means to its readers, not from either copy.

``Qwen2VisionTransformer.forward`` hands the dict to every vision block: ``cu_seqlens`` (int32, on the
attention's device) are the boundaries of the attention sequences, one per *frame* (``h * w`` patches each,
images in ``grid_thw`` order, frames in order), padded with copies of the last boundary up to the CUDA
graph's sequence budget (``max_frames_per_batch``, else ``max_batch_size``) so replays keep capture's
shape; ``max_seqlen`` is what the flash-style wrappers (FLASH_ATTN, TRITON_ATTN, ROCM_AITER_FA) read with
``.item()`` -- the longest sequence, or capture's override -- and stays on the host, and other backends get
None; ``rotary_pos_emb_cos`` / ``_sin`` are ``rot_pos_emb``'s rows (strategies/qwen2_vl/oracles.py).

The thunk (strategies/qwen2_vl_meta/inputs.py) returns the dict.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.qwen2_vl import oracles as qwen2
from strategies.qwen2_vl_meta.inputs import FLASH_STYLE, metadata_device, pad_target

KEYS = ("rotary_pos_emb_cos", "rotary_pos_emb_sin", "cu_seqlens", "max_seqlen")


def _metadata(output: Any) -> tuple[dict | None, str | None]:
    if not isinstance(output, dict) or set(output) != set(KEYS):
        keys = sorted(output) if isinstance(output, dict) else type(output).__name__
        return None, f"metadata is {keys}, not the keys {list(KEYS)}"
    return output, None


def expected_cu_seqlens(spec: dict) -> torch.Tensor:
    """Frame boundaries ``[0, h*w, ...]`` (each image's frames in turn), padded with the last boundary to the
    padding target's number of sequences (CPU int32)."""
    bounds = [0]
    for t, h, w in spec["grid_thw"]:
        for _ in range(t):
            bounds.append(bounds[-1] + h * w)
    target = pad_target(spec)
    if target is not None and len(bounds) - 1 < target:
        bounds += [bounds[-1]] * (target - (len(bounds) - 1))
    return torch.tensor(bounds, dtype=torch.int32)


def expected_max_seqlen(spec: dict) -> torch.Tensor | None:
    """Capture's override as a host int32 scalar; else, for the flash-style backends, the longest frame."""
    override = spec["kwargs"].get("max_seqlen_override")
    if override is not None:
        return torch.tensor(override, dtype=torch.int32)
    if spec["backend"] not in FLASH_STYLE:
        return None
    return torch.tensor(max(h * w for _, h, w in spec["grid_thw"]), dtype=torch.int32)


def metadata_cu_seqlens_are_frame_boundaries(spec: dict, output: Any) -> str | None:
    """``cu_seqlens`` is int32 on the attention's device and holds the frame boundaries: 0, then a running
    sum of ``h * w`` once per frame, padded with the last boundary up to the graph's sequence budget."""
    metadata, problem = _metadata(output)
    if problem or not spec["grid_thw"]:
        return problem
    cu = metadata["cu_seqlens"]
    if not isinstance(cu, torch.Tensor):
        return f"cu_seqlens is a {type(cu).__name__}, not a tensor"
    if cu.dtype != torch.int32:
        return f"cu_seqlens is {cu.dtype}, the attention kernels take int32"
    if cu.device.type != torch.device(metadata_device(spec)).type:
        return f"cu_seqlens is on {cu.device}, the attention runs on {metadata_device(spec)}"
    want = expected_cu_seqlens(spec)
    got = cu.cpu()
    if tuple(got.shape) != tuple(want.shape):
        return f"cu_seqlens has shape {tuple(got.shape)}, expected {tuple(want.shape)} (frames + padding + 1)"
    if not torch.equal(got, want):
        bad = int((got != want).nonzero()[0])
        return f"cu_seqlens[{bad}] is {int(got[bad])}, the boundary there is {int(want[bad])}"
    return None


def metadata_max_seqlen_follows_backend(spec: dict, output: Any) -> str | None:
    """``max_seqlen`` is capture's override when given; else the longest frame for the flash-style backends
    (FLASH_ATTN, TRITON_ATTN, ROCM_AITER_FA) and None for the others; a tensor is an int32 scalar on the
    host, where the wrappers' ``.item()`` costs no sync."""
    metadata, problem = _metadata(output)
    if problem or not spec["grid_thw"]:
        return problem
    got, want = metadata["max_seqlen"], expected_max_seqlen(spec)
    if want is None:
        return None if got is None else f"max_seqlen is {got!r}, backend {spec['backend']} gets None"
    if not isinstance(got, torch.Tensor):
        return f"max_seqlen is {got!r}, expected a host int32 scalar {int(want)}"
    if got.device.type != "cpu":
        return f"max_seqlen is on {got.device}: every block's .item() would sync"
    if got.dtype != torch.int32 or got.dim() != 0:
        return f"max_seqlen is a {got.dtype} tensor of shape {tuple(got.shape)}, not an int32 scalar"
    if int(got) != int(want):
        return f"max_seqlen is {int(got)}, expected {int(want)}"
    return None


def metadata_rotary_rows_follow_the_patches(spec: dict, output: Any) -> str | None:
    """``rotary_pos_emb_cos`` / ``_sin`` are the tower's rope rows of every patch (Qwen2-VL's 2-D rope:
    shape, dtype, device, frames repeating, each patch the rows of its row and column)."""
    metadata, problem = _metadata(output)
    if problem:
        return problem
    pair = (metadata["rotary_pos_emb_cos"], metadata["rotary_pos_emb_sin"])
    for invariant in (qwen2.rot_pos_emb_shape_follows_grids, qwen2.rot_pos_emb_frames_repeat,
                      qwen2.rot_pos_emb_rows_follow_the_patches):
        problem = invariant(spec, pair)
        if problem:
            return problem
    return None


def _expected(spec: dict) -> dict[str, Any] | None:
    rope = qwen2.ROT_POS_EMB_REFERENCE.expected(spec)
    if rope is None:
        return None  # no image: both releases raise in rot_pos_emb's torch.cat
    return {"rotary_pos_emb_cos": rope[0], "rotary_pos_emb_sin": rope[1],
            "cu_seqlens": expected_cu_seqlens(spec), "max_seqlen": expected_max_seqlen(spec)}


def _observed(output: Any) -> dict[str, Any]:
    return {key: value.detach().cpu() if isinstance(value, torch.Tensor) else value
            for key, value in output.items()}


METADATA_REFERENCE = Reference(expected=_expected, observed=_observed, floats="exact")
"""The rope rows of qwen2-vl-rot-pos-emb's reference, the padded frame boundaries, the backend's max_seqlen."""


def encoder_blocks_read_metadata(spec: dict, output: Any) -> None:
    """The host reads one vision block makes of the metadata (vllm 0.30.0).

    ``Qwen2VisionTransformer.forward`` passes ``cu_seqlens`` and ``max_seqlen`` unchanged to every block;
    ``Qwen2VisionAttention.forward`` hands them to ``MMEncoderAttention``
    (vllm/model_executor/layers/attention/mm_encoder_attention.py: ``_forward_fa`` for FLASH_ATTN /
    ROCM_AITER_FA, ``_forward_triton``, ``_forward_sdpa``), whose wrappers
    (vllm/v1/attention/ops/vit_attn_wrappers.py) read ``max_seqlen.item()`` (flash/Triton) or
    ``(cu_seqlens[1:] - cu_seqlens[:-1]).tolist()`` (torch SDPA; ``forward_cpu`` always takes SDPA).
    FLASHINFER's reads are of its own metadata keys, which this tower does not build: no read made here.
    The spec has no depth: this is one block's reads; a forward pays them ``depth`` times.
    """
    cu_seqlens, max_seqlen = output["cu_seqlens"], output["max_seqlen"]
    if torch.device(spec["device"]).type == "cpu" or spec["backend"] == "TORCH_SDPA":
        (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    elif spec["backend"] in FLASH_STYLE and max_seqlen is not None:
        max_seqlen.item()
