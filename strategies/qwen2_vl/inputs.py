"""Inputs of ``Qwen2VisionTransformer.rot_pos_emb(grid_thw)`` (vllm/model_executor/models/qwen2_vl.py).

Callers (vllm 0.29.0), all passing ``grid_thw`` as a Python ``list[list[int]]``:

* ``Qwen2VisionTransformer.prepare_encoder_metadata(grid_thw)`` calls ``self.rot_pos_emb(grid_thw)``;
  it is reached from ``Qwen2VisionTransformer.forward`` with ``grid_thw if isinstance(grid_thw, list)
  else grid_thw.tolist()`` (``_process_image_input``/``_process_video_input`` hand it the processor's
  ``[n, 3]`` grid tensor), from ``Qwen2VLForConditionalGeneration.prepare_encoder_cudagraph_replay_buffers``
  with ``_get_grid_thw_by_modality(mm_kwargs)`` (``grid_thw.tolist()``), and from
  ``prepare_encoder_cudagraph_capture_inputs`` with ``grid_config``: ``max_batch_size`` identical
  strips ``[frames_per_item, spatial_merge_size, tokens * spatial_merge_size]`` (h is one merge
  block, w long);
* kanana_v.py ``CustomQwen2VLVE.forward`` calls ``self.rot_pos_emb(grid_thw_list)`` with
  ``grid_thw.tolist()`` or the caller's list.

So the caller contract is a non-empty list of ``[t, h, w]`` lists, ``h`` and ``w`` multiples of
``spatial_merge_size`` (the processor's patch merger requires it), images (``t == 1``), videos
(``t > 1``), a batch of one, and the capture strips. The wide contract adds what 0.28.0 also took:
an empty list (both raise in ``torch.cat``), tuples, a numpy array and CPU or device tensors
(iterating one yields 0-d tensors / numpy ints).

``self`` is the copy's stand-in ``Qwen2VisionTransformer(spatial_merge_size, rotary_pos_emb,
patch_embed)``: ``rotary_pos_emb`` a :class:`RopeTable` (upstream's ``get_rope(...)`` module, here
a seeded ``cos_sin_cache`` in the model's dtype on the device), ``patch_embed.proj.weight`` an
empty tensor on the same device (the ``device`` property reads it; in a loaded model the cache
buffer and the weights are moved together by ``.to(device)``).
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES, choice_of, devices, float_dtypes, in_form, seeded_floats
from strategies.grids import grid_thws

# Rows of the stand-in cos/sin cache: upstream's max_position is 8192; every position id drawn
# here is below MAX_HW (the capture strips' w included), and the copies slice the cache to
# max(h, w) before indexing, so the rows past that are never read.
MAX_HW = 48
MAX_POSITION = 64
MERGE_SIZES = choice_of([2, 1])  # Qwen2-VL / Qwen2.5-VL ship spatial_merge_size=2
SHAPE_KINDS = choice_of(["images", "capture"])
GRID_FORMS_WIDE = choice_of(["list", "tuple", "numpy", "cpu_tensor", "device_tensor"])


class RopeTable(torch.nn.Module):
    """Stands in for the ``get_rope(head_size=head_dim, max_position=8192, is_neox_style=True,
    rope_parameters={"partial_rotary_factor": 0.5})`` module: a ``cos_sin_cache`` buffer of shape
    ``[max_position, rotary_dim]`` (cos half, then sin half) in the model's dtype, seeded random
    values instead of the frequencies so that every position reads a distinct row.
    ``get_cos_sin`` is vllm/model_executor/layers/rotary_embedding/base.py's
    ``RotaryEmbeddingBase.get_cos_sin`` (unchanged 0.28.0 .. 0.34.0)."""

    def __init__(self, cache: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def get_cos_sin(self, seqlen: int) -> tuple[torch.Tensor, torch.Tensor]:
        cos_sin = self.cos_sin_cache[:seqlen]
        cos, sin = cos_sin.chunk(2, dim=-1)
        return cos, sin


def rope_cache(spec: dict) -> torch.Tensor:
    """The stand-in ``cos_sin_cache`` of a spec (``rotary_half`` columns of cos, then of sin), on the CPU."""
    return seeded_floats((MAX_POSITION, 2 * spec["rotary_half"]), spec["dtype"], spec["seed"], "cpu")


def rope_table(spec: dict, device: str) -> RopeTable:
    return RopeTable(rope_cache(spec).to(device))


@lru_cache(maxsize=None)  # built once per merge size (strategies/common.py says why)
def _capture_strips(merge: int) -> st.SearchStrategy[list[list[int]]]:
    """``grid_config`` of the encoder CUDA graph capture: ``max_batch_size`` identical
    ``[frames_per_item, merge, tokens * merge]`` strips."""
    strip = st.tuples(st.integers(1, 3), st.integers(1, MAX_HW // merge))
    return st.tuples(st.integers(1, 3), strip).map(
        lambda bs: [[bs[1][0], merge, bs[1][1] * merge] for _ in range(bs[0])]
    )


@st.composite
def rope_grid_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    """The fields every Qwen-VL rope target draws: device, merge size, rotary width, dtype, seed
    and ``grid_thw`` (a list of ``[t, h, w]`` lists; empty only under ``wide``)."""
    wide = contract == "wide"
    merge = draw(MERGE_SIZES)
    if draw(SHAPE_KINDS) == "capture":
        grid = draw(_capture_strips(merge))
    else:
        grid = draw(grid_thws(min_size=0 if wide else 1, max_size=4, max_t=3, max_hw=12, merge=merge))
    return {
        "device": draw(devices(available)),
        "merge": merge,
        "rotary_half": draw(st.integers(1, 4)),
        "dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "grid_thw": grid,
    }


@st.composite
def _rot_pos_emb_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    spec = draw(rope_grid_specs(available, contract))
    spec["grid_form"] = draw(GRID_FORMS_WIDE) if contract == "wide" else "list"
    return spec


def grid_in_form(grid: list[list[int]], form: str, device: str) -> Any:
    """``grid_thw`` as a caller hands it: a list of lists (a fresh copy), tuples, or an ``[n, 3]`` array/tensor."""
    if form == "tuple":
        return [tuple(g) for g in grid]
    return in_form(grid, form, "int64", device)


class Qwen2RotPosEmbInputs:
    """``Qwen2VisionTransformer.rot_pos_emb(grid_thw)`` on the side's own class with a stand-in
    ``self``; the thunk returns ``(cos_combined, sin_combined)`` as upstream does."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _rot_pos_emb_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Qwen2VisionTransformer.rot_pos_emb")
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
