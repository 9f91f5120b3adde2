"""Inputs of ``MMEncoderAttention.maybe_compute_seq_lens(attn_backend, cu_seqlens, device)``
(vllm/model_executor/layers/attention/mm_encoder_attention.py, 0.28.0 / 0.29.0).

Callers (0.29.0) build ``cu_seqlens`` on the host as a 1-D ``np.int32`` array starting at 0,
nondecreasing, one more entry than sequences, and pass the encoder's backend and device:
* models/pixtral.py:_make_packed_sequence_metadata: ``np.concatenate([zeros(1, int32),
  lengths.cumsum(dtype=int32)])`` of the patch counts;
* models/qwen3_vl.py / glm4_1v.py (``compute_vit_metadata``-style builders): padded to
  ``max_batch_size`` / ``max_frames_per_batch`` with ``np.full(pad, cu_seqlens[-1], int32)``:
  trailing empty sequences;
* models/qwen2_5_vl.py: ``cu_seqlens.cpu().numpy()`` and ``cu_window_seqlens.cpu().numpy()``
  (int32; windows may be empty, padded the same way);
* models/ultravox.py:_build_chunk_attn_metadata: ``np.unique(...).astype(np.int32)``.
(also llava_onevision2, muse_glimmer, kimi_k25_vit, qwen3_omni_moe_thinker). The backend is the
ViT backend (FLASH_ATTN, TRITON_ATTN, ROCM_AITER_FA, TORCH_SDPA or FLASHINFER); only
FLASHINFER gets lengths, padded to FlashInfer's batch buckets (8, 16, 32, 64, then multiples of 8).

Wide contract, beyond that: ``int64`` arrays (what ``np.unique`` of int64 bounds gives before the
cast), a ``cu_seqlens`` of one entry or none (no sequence), decreasing entries (negative
lengths), and a CPU ``torch.Tensor`` in place of the array (what qwen2_5_vl had before
``.numpy()``).

A spec is JSON: ``backend`` (a name), ``lengths`` (real sequence lengths), ``pad`` (trailing
empty sequences), ``start`` (cu_seqlens[0], 0 for callers), ``dtype`` and ``form``
("numpy" | "tensor"), or ``empty`` for a zero-length array.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import devices

BACKENDS = ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "ROCM_AITER_FA", "TORCH_SDPA")
# FLASHINFER drawn most: the only backend with a result.
BACKEND_NAMES = st.sampled_from(("FLASHINFER", "FLASHINFER", "FLASHINFER", *BACKENDS[1:]))
# Around FlashInfer's buckets (8, 16, 32, 64) and past them (multiples of 8).
COUNTS = st.one_of(st.integers(1, 10), st.sampled_from([7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 72, 80]))
CALLER_LENGTHS = st.integers(1, 4096)
WIDE_LENGTHS = st.integers(-5, 4096)
PADS = st.integers(0, 9)
DTYPES = st.sampled_from(["int32", "int64"])
WIDE_FORMS = st.sampled_from(["numpy", "tensor"])


@st.composite
def _specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec: dict[str, Any] = {"device": draw(devices(available)), "backend": draw(BACKEND_NAMES)}
    if wide and draw(st.integers(0, 9)) == 0:  # no sequence at all: cu_seqlens of one entry, or none
        spec.update(lengths=[], pad=0, start=0, empty=draw(st.booleans()))
    else:
        count = draw(COUNTS)
        spec.update(lengths=draw(st.lists(WIDE_LENGTHS if wide else CALLER_LENGTHS, min_size=count, max_size=count)),
                    pad=draw(PADS), start=draw(st.integers(0, 100)) if wide else 0, empty=False)
    spec["dtype"] = draw(DTYPES) if wide else "int32"
    spec["form"] = draw(WIDE_FORMS) if wide else "numpy"
    return spec


def cu_seqlens_of(spec: dict) -> np.ndarray:
    """The host ``cu_seqlens`` the caller builds: ``[start, start + l0, ...]`` then ``pad``
    repeats of the last entry (empty sequences), of the spec's dtype."""
    dtype = np.dtype(spec["dtype"])
    if spec.get("empty"):
        return np.zeros(0, dtype=dtype)
    bounds = np.concatenate([[spec["start"]], spec["start"] + np.cumsum(spec["lengths"], dtype=np.int64)])
    bounds = np.concatenate([bounds, np.full(spec["pad"], bounds[-1])])
    return bounds.astype(dtype)


class SeqLensInputs:
    """A fresh ``cu_seqlens`` and the backend member of the side's own enum; the thunk calls the
    classmethod and returns its result (None or the device lengths) and ``cu_seqlens`` after the
    call (it is only read: callers go on to use it for ``max_seqlen`` and ``cu_seqlens``)."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        backend = getattr(impl.module.AttentionBackendEnum, spec["backend"])
        cu_seqlens: Any = cu_seqlens_of(spec)
        if spec["form"] == "tensor":
            cu_seqlens = torch.from_numpy(cu_seqlens)
        device = torch.device(spec["device"])
        compute = impl.function  # the classmethod, bound to the side's MMEncoderAttention

        def call() -> dict[str, Any]:
            out = compute(backend, cu_seqlens, device)
            # A copy taken as the call returns: it shows whatever the call did to the caller's array, and the
            # caller may rewrite the array afterwards (--stress does): returning the array itself made the
            # stress poison look like the optimized side's output (the H100 run of 2026-12-06d).
            after = (cu_seqlens if isinstance(cu_seqlens, torch.Tensor) else torch.from_numpy(cu_seqlens)).clone()
            return {"seq_lens": out, "cu_seqlens": after}

        return call
