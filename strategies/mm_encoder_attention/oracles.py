"""Oracles of ``MMEncoderAttention.maybe_compute_seq_lens(attn_backend, cu_seqlens, device)``
(vllm/model_executor/layers/attention/mm_encoder_attention.py, 0.28.0 / 0.29.0).

Upstream meaning (``-> torch.Tensor | None``): None for every backend but FLASHINFER, which alone
needs "the real per-sequence lengths in addition to cu_seqlens" (qwen2_5_vl.py's comment at the
call); for FLASHINFER the lengths ``cu_seqlens[1:] - cu_seqlens[:-1]``, padded with zeros by
``add_padding_to_seqlens`` to the first of ``FLASHINFER_BATCH_BUCKETS`` (8, 16, 32, 64) that
holds them, else to a multiple of 8 (``round_up(n, 8)``), on ``device``, of cu_seqlens' dtype.
``cu_seqlens`` is only read: callers go on to derive ``max_seqlen`` and the device cu_seqlens
from it.

The thunk (strategies/mm_encoder_attention/inputs.py) returns ``{"seq_lens", "cu_seqlens"}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fuzz.api import Reference
from strategies.mm_encoder_attention.inputs import cu_seqlens_of

_BUCKETS = (8, 16, 32, 64)


def _padded_length(count: int) -> int:
    return next((b for b in _BUCKETS if b >= count), -(-count // 8) * 8)


def seq_lens_expected(spec: dict) -> Any:
    """The lengths, zero-padded to FlashInfer's bucket, as a host int64 list; None for another
    backend. None for a tensor ``cu_seqlens`` (wide: the annotation is ``np.ndarray``)."""
    if spec["backend"] != "FLASHINFER":
        return {"seq_lens": None}
    if spec["form"] != "numpy":
        return None
    cu = cu_seqlens_of(spec).astype(np.int64)
    lengths = (cu[1:] - cu[:-1]).tolist()
    return {"seq_lens": lengths + [0] * (_padded_length(len(lengths)) - len(lengths))}


def seq_lens_observed(output: Any) -> Any:
    if not isinstance(output, dict) or "seq_lens" not in output:
        return output
    out = output["seq_lens"]
    return {"seq_lens": out.detach().cpu().to(torch.int64).tolist() if isinstance(out, torch.Tensor) else out}


SEQ_LENS_REFERENCE = Reference(expected=seq_lens_expected, observed=seq_lens_observed, floats="exact")
"""The per-sequence lengths and FlashInfer's bucket padding, computed independently."""


def _problem(output: Any) -> str | None:
    if not isinstance(output, dict) or not {"seq_lens", "cu_seqlens"} <= set(output):
        return f"output is {type(output).__name__} without seq_lens/cu_seqlens"
    return None


def seq_lens_only_for_flashinfer(spec: dict, output: Any) -> str | None:
    """None for every backend but FLASHINFER; a tensor for FLASHINFER."""
    if problem := _problem(output):
        return problem
    out = output["seq_lens"]
    if spec["backend"] != "FLASHINFER" and out is not None:
        return f"backend {spec['backend']} got sequence lengths ({type(out).__name__}), expected None"
    if spec["backend"] == "FLASHINFER" and not isinstance(out, torch.Tensor):
        return f"FLASHINFER got {type(out).__name__}, expected a tensor of lengths"
    return None


def seq_lens_on_the_device_in_the_input_dtype(spec: dict, output: Any) -> str | None:
    """The FlashInfer lengths are a 1-D tensor on ``device``, of ``cu_seqlens``' dtype
    (int32 from every caller: FlashInfer's cuDNN prefill takes int32)."""
    if problem := _problem(output):
        return problem
    out = output["seq_lens"]
    if not isinstance(out, torch.Tensor):
        return None
    want = getattr(torch, spec["dtype"])
    if out.dim() != 1:
        return f"sequence lengths have shape {tuple(out.shape)}, expected 1-D"
    if out.device.type != torch.device(spec["device"]).type:
        return f"sequence lengths are on {out.device}, expected {spec['device']}"
    if out.dtype != want:
        return f"sequence lengths are {out.dtype}, cu_seqlens was {want}"
    return None


def seq_lens_leave_cu_seqlens_alone(spec: dict, output: Any) -> str | None:
    """``cu_seqlens`` is only read: after the call it holds what the caller built."""
    if problem := _problem(output):
        return problem
    after = output["cu_seqlens"]
    after = after.numpy() if isinstance(after, torch.Tensor) else np.asarray(after)
    if not np.array_equal(after, cu_seqlens_of(spec)):
        return "cu_seqlens changed by maybe_compute_seq_lens"
    return None
