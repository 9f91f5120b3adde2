"""Inputs of ``Qwen3_VisionTransformer.rot_pos_emb(grid_thw)`` (vllm/model_executor/models/qwen3_vl.py).

Callers (vllm 0.29.0), all passing ``grid_thw`` as a Python ``list[list[int]]``:

* ``Qwen3_VisionTransformer.prepare_encoder_metadata(grid_thw_list)`` calls
  ``self.rot_pos_emb(grid_thw_list)``; ``forward`` hands it ``grid_thw`` if it is a list, else
  ``grid_thw.tolist()``; the encoder CUDA graph's replay/capture paths pass
  ``_get_grid_thw_by_modality(mm_kwargs)`` lists and the capture strips.

So the caller contract is a non-empty list of ``[t, h, w]`` lists, ``h``/``w`` multiples of
``spatial_merge_size`` (Qwen3-VL ships 2): images (``t == 1``, ``rot_pos_ids`` returned as is) and
videos (``t > 1``, ``.repeat(t, 1)``). The change under test is ``rot_pos_ids``'s cache (0.28.0: a
process-wide ``lru_cache`` on a staticmethod; 0.29.0: a per-tower ``LRUCache``), so the model also
may append an item of the first item's ``h`` and its ``w`` (a cache hit inside one call) or a
wider ``w`` (a key differing in ``w`` only).
The wide contract adds an empty list (both raise in ``max``), tuples and an ``[n, 3]`` numpy array.

``self`` is the copy's stand-in ``Qwen3_VisionTransformer(spatial_merge_size, rotary_pos_emb,
patch_embed)``, built fresh per side: the qwen2_vl target's ``RopeTable`` (a seeded ``cos_sin_cache``
with upstream's ``get_cos_sin``) and an empty weight on the spec's device.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES, choice_of
from strategies.qwen2_vl.inputs import grid_in_form, rope_grid_specs, rope_table

GRID_FORMS_WIDE = choice_of(["list", "tuple", "numpy"])


@st.composite
def _rot_pos_emb_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    spec = draw(rope_grid_specs(available, contract))
    if spec["grid_thw"] and draw(st.booleans()):
        # A further item of the first item's h and its w or one merge block wider, any t: the
        # cache's hit path within one call, and a key that differs from a cached one in w only.
        t, h, w = spec["grid_thw"][0]
        w2 = w + spec["merge"] * draw(st.integers(0, 1))
        spec["grid_thw"] = spec["grid_thw"] + [[draw(st.integers(1, 3)), h, w2]]
    spec["grid_form"] = draw(GRID_FORMS_WIDE) if contract == "wide" else "list"
    return spec


class Qwen3RotPosEmbInputs:
    """``Qwen3_VisionTransformer.rot_pos_emb(grid_thw)`` on the side's own class with a stand-in
    ``self``; the thunk returns ``(cos_combined, sin_combined)`` as upstream does."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _rot_pos_emb_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Qwen3_VisionTransformer.rot_pos_emb")
        if spec["dtype"] not in FLOAT_DTYPES:
            raise HarnessError(f"unknown dtype {spec['dtype']!r}")
        device = spec["device"]
        weight = torch.empty(0, dtype=FLOAT_DTYPES[spec["dtype"]], device=device)
        patch_embed = SimpleNamespace(proj=SimpleNamespace(weight=weight))
        tower = impl.owner(spec["merge"], rope_table(spec, device), patch_embed)
        grid_thw = grid_in_form(spec["grid_thw"], spec["grid_form"], device)

        def call() -> tuple[torch.Tensor, torch.Tensor]:
            return impl.function(tower, grid_thw)

        return call
