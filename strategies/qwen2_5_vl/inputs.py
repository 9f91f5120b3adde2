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

from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import choice_of
from strategies.qwen2_vl.inputs import rope_grid_specs, rope_table

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
