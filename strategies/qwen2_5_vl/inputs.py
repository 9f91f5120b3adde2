"""Inputs of ``Qwen2_5_VisionTransformer.get_rope_by_thw(t, h, w)`` (vllm/model_executor/models/qwen2_5_vl.py),
which calls ``rotary_pos_emb_thw`` and ``get_window_index_thw``.

Its one caller, in every release 0.28.0 .. 0.34.0, is ``Qwen2_5_VisionTransformer.prepare_encoder_metadata``:
``for t, h, w in grid_thw: t, h, w = int(t), int(h), int(w)`` ... ``self.get_rope_by_thw(t, h, w)``, one call
per item on the same tower, so a grid seen before is a cache hit. ``grid_thw`` reaches it as a list of
``[t, h, w]``: from ``forward`` (``_process_image_input``/``_process_video_input``: ``grid_thw_list``), from
``prepare_encoder_cudagraph_replay_buffers`` (``_get_grid_thw_by_modality``: ``grid_thw.tolist()``) and from
``prepare_encoder_cudagraph_capture_inputs`` (``grid_config``: ``max_batch_size`` identical strips
``[frames_per_item, spatial_merge_size, tokens * spatial_merge_size]``, every call after the first a hit).

A spec is ``strategies.qwen2_vl.inputs.rope_grid_specs`` (device, merge size, rotary width, cache dtype, seed,
``grid_thw``: processor grids or capture strips) plus the window geometry -- ``window`` is
``window_size // spatial_merge_size // patch_size``, 4 in every shipped Qwen2.5-VL config (112 / 2 / 14),
1..4 drawn -- and ``calls``: the grids in caller order followed by repeats of drawn items, some with
another ``t`` (same ``h, w``), so that the cache is hit and keyed. Under the caller contract every
argument is a Python int (``int(t)`` upstream); the wide contract adds an empty ``grid_thw`` (no call)
and numpy integers, which the 0.28.0 method took as well (they hash and compare equal to the ints).

``self`` is the copy's stand-in ``Qwen2_5_VisionTransformer(spatial_merge_size, patch_size, window_size,
rotary_pos_emb)`` with a fresh cache; ``rotary_pos_emb`` is ``strategies.qwen2_vl.inputs.RopeTable`` on the
device. The thunk makes the calls in order and returns every call's 5-tuple.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES, choice_of
from strategies.qwen2_vl.inputs import grid_in_form, rope_grid_specs, rope_table
from strategies.qwen2_vl_meta import inputs as meta

PATCH_SIZE = 14  # Qwen2.5-VL's patch size: only window_size // merge // patch_size matters
WINDOWS = choice_of([4, 1, 2, 3])  # merged-token window side; 4 = 112 // 2 // 14, the shipped configs
SCALAR_FORMS_WIDE = choice_of(["int", "numpy"])
REPEATS = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), max_size=3)


def rope_calls(spec: dict) -> list[list[int]]:
    """The ``(t, h, w)`` of every call, in order: ``grid_thw`` as prepare_encoder_metadata walks it,
    then the drawn repeats (item ``i % len(grid_thw)``, with ``t`` replaced by ``k`` when ``k > 0``)."""
    grid = spec["grid_thw"]
    calls = [list(g) for g in grid]
    if grid:
        for index, k in spec["repeats"]:
            t, h, w = grid[index % len(grid)]
            calls.append([k or t, h, w])
    return calls


@st.composite
def _rope_by_thw_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    spec = draw(rope_grid_specs(available, contract))
    spec["window"] = draw(WINDOWS)
    spec["repeats"] = [list(r) for r in draw(REPEATS)]
    spec["scalar_form"] = draw(SCALAR_FORMS_WIDE) if contract == "wide" else "int"
    return spec


class Qwen25RopeByThwInputs:
    """``get_rope_by_thw(t, h, w)`` for every item of ``grid_thw`` (and the drawn repeats) on one
    tower of the side's own class; returns the list of what each call returned
    ``(cos_thw, sin_thw, window_index_thw, cu_seqlens_window_thw, cu_seqlens_thw)``."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _rope_by_thw_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Qwen2_5_VisionTransformer.get_rope_by_thw")
        merge = spec["merge"]
        tower = impl.owner(merge, PATCH_SIZE, spec["window"] * merge * PATCH_SIZE, rope_table(spec, spec["device"]))
        scalar = np.int64 if spec["scalar_form"] == "numpy" else int
        calls = [tuple(scalar(v) for v in call) for call in rope_calls(spec)]
        get_rope_by_thw = impl.function

        def call() -> list[tuple]:
            return [get_rope_by_thw(tower, t, h, w) for t, h, w in calls]

        return call


# --- qwen25-vl-encoder-metadata: prepare_encoder_metadata -------------------------------------------------

# Qwen2.5-VL's vision tower: hidden_size 1280 in the shipped configs (a small one too), tensor-parallel
# 1 or 2, FP8 attention off (fp8_padded_hidden_size None) or on (the hidden size padded up).
HIDDEN_SIZES = choice_of([1280, 16])
TP_SIZES = choice_of([1, 2])
FP8_PADDINGS = choice_of([None, 64])


def max_window_seqs(token_budget: int, max_batch_size: int, max_frames_per_batch: int, window: int) -> int:
    """``Qwen2_5_VisionTransformer.get_encoder_cudagraph_max_window_seqs`` (0.30.0): the capture's
    window-sequence budget."""
    max_sequence_units = max(max_batch_size, max_frames_per_batch)
    max_strip_windows = (token_budget + window - 1) // window
    return min(token_budget, max_sequence_units + max_strip_windows)


@st.composite
def _encoder_metadata_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    # The paths, grids, backends and keywords are qwen2-vl-encoder-metadata's (strategies/qwen2_vl_meta/inputs.py):
    # the two towers share their callers' forms; the window keywords are Qwen2.5-VL's own.
    wide = contract == "wide"
    spec = draw(meta.metadata_specs(available, contract))
    window = draw(WINDOWS)
    merge = spec["merge"]
    kwargs = spec["kwargs"]
    if spec["path"] == "capture" and "max_seqlen_override" in kwargs and kwargs["max_batch_size"] is not None:
        token_budget = kwargs["max_seqlen_override"] // merge**2
        kwargs["max_window_seqs_per_batch"] = max_window_seqs(
            token_budget, kwargs["max_batch_size"], kwargs["max_frames_per_batch"], window)
        kwargs["max_seqlen_window_override"] = window**2 * merge**2
    elif wide and spec["path"] != "capture" and draw(meta.BOOLS):
        kwargs["max_window_seqs_per_batch"] = draw(meta.WIDE_PADS)
        kwargs["max_seqlen_window_override"] = draw(meta.WIDE_OVERRIDES)
    hidden = draw(HIDDEN_SIZES)
    fp8 = draw(FP8_PADDINGS)
    spec.update({"window": window, "hidden_size": hidden, "tp_size": draw(TP_SIZES),
                 "fp8_padded_hidden_size": None if fp8 is None else hidden + fp8})
    return spec


class Qwen25EncoderMetadataInputs:
    """``Qwen2_5_VisionTransformer.prepare_encoder_metadata(grid_thw, **kwargs)`` on a fresh tower of the
    side's own class (its rope cache empty), with the drawn backend and caller keywords; returns the
    metadata dict.

    Callers (vllm 0.30.0; 0.34.0 the same): ``Qwen2_5_VisionTransformer.forward(x, grid_thw)`` with no
    ``encoder_metadata`` calls ``self.prepare_encoder_metadata(grid_thw)`` (``grid_thw_list =
    grid_thw.tolist()`` from ``_process_image_input`` / ``_process_video_input``) -- path ``eager``;
    ``prepare_encoder_cudagraph_capture_inputs`` passes ``grid_config`` (strategies/qwen2_vl_meta's
    ``capture_grid``) with ``max_batch_size``, ``max_frames_per_batch``,
    ``max_window_seqs_per_batch=self.visual.get_encoder_cudagraph_max_window_seqs(token_budget,
    max_batch_size, max_frames_per_batch)``, ``max_seqlen_override=token_budget * m**2``,
    ``max_seqlen_window_override=window**2 * m**2`` and ``device``; ``prepare_encoder_cudagraph_replay_buffers``
    passes ``_get_grid_thw_by_modality(mm_kwargs)`` with ``max_batch_size`` (images) or
    ``max_frames_per_batch`` (videos). The tower's ``attn_backend`` is drawn (FLASH_ATTN, TRITON_ATTN,
    ROCM_AITER_FA, TORCH_SDPA, FLASHINFER), as are ``hidden_size``, ``tp_size`` and
    ``fp8_padded_hidden_size``, which only FLASHINFER's cu_seqlens layout reads. The wide contract is
    strategies/qwen2_vl_meta's (other grid forms, an empty grid, any padding targets and overrides) plus
    any window budget and window override outside capture.
    """

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _encoder_metadata_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Qwen2_5_VisionTransformer.prepare_encoder_metadata")
        merge, device = spec["merge"], spec["device"]
        weight = torch.empty(0, dtype=FLOAT_DTYPES[spec["dtype"]], device=device)
        tower = impl.owner(
            merge, PATCH_SIZE, spec["window"] * merge * PATCH_SIZE, rope_table(spec, device),
            attn_backend=impl.module.AttentionBackendEnum[spec["backend"]], hidden_size=spec["hidden_size"],
            tp_size=spec["tp_size"], fp8_padded_hidden_size=spec["fp8_padded_hidden_size"],
            patch_embed=SimpleNamespace(proj=SimpleNamespace(weight=weight)))
        grid_thw = grid_in_form(spec["grid_thw"], spec["grid_form"], device)
        kwargs = dict(spec["kwargs"])
        if kwargs.get("device") == "spec":
            kwargs["device"] = torch.device(device)  # capture passes the runner's device

        def call() -> dict[str, Any]:
            return impl.function(tower, grid_thw, **kwargs)

        return call
