"""Inputs for keye's encoder rope, vision-tower output split and the image/video
metadata builders (vllm/model_executor/models/keye.py, docs/design.md rows 2-4).

Callers in 0.28.0:

* ``BaseKeyeModule._process_image_input`` / ``_process_video_embeds`` get the
  processor's int64 ``[n, 3]`` grid. keye.py marks ``image_grid_thw`` and
  ``video_grid_thw`` ``keep_on_cpu``, so they arrive on the CPU; keye_vl1_5.py
  does not, so its grids arrive on the device, and its videos are first split
  per frame (``split_thw``: rows ``[1, h, w]``). Images have ``t == 1``.
* They hand the tower a flat list of ``(t, h, w)`` tuples of Python ints,
  ``cu_seqlens`` as the int32 device running sum of ``t*h*w`` and no
  ``height/width_position_ids``; ``KeyeSiglipVisionTransformer.forward`` passes
  all of that on to ``KeyeSiglipEncoder.forward`` with ``use_rope=True``.

The caller contract also draws two forms the encoder's signature declares and
the PR's reasoning ("the ids are built from the grids") covers: grids grouped
in nested lists (``flatten_list``) and position ids passed in, built from the
grids the way the encoder builds them.

The wide contract adds every form the 0.27.1 functions accepted: grid rows as
numpy arrays or CPU/device tensors (int32/int64), a whole 2-D grid tensor,
zero-sized and odd grids, empty batches; position ids of any length and range,
on the CPU or device; ``cu_seqlens`` that is not the running sum of the grids
(numpy or tensor, int32/int64); ``use_rope=False``; grid tensors of either
dtype on either side of the bus for the metadata builders.
"""

from __future__ import annotations

import functools
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import (
    FLOAT_DTYPES,
    INT_DTYPES,
    devices,
    fixed_dict,
    float_dtypes,
    in_form,
    int_dtypes,
    seeded_floats,
)
from strategies.grids import grid_thws

MERGE = 2  # Keye's spatial_merge_size: processor grids have h, w multiples of it
MAX_VIDEO_ROWS = 4  # grid rows a video call draws; bounds the per-row syncs (expected_optimized_syncs)
GRID_FORMS = ("tuple", "numpy", "cpu_tensor", "device_tensor")


# --- shared factories ---------------------------------------------------------


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def raw_grid_thws(
    *, min_size: int = 0, max_size: int = 4, min_dim: int = 0, max_dim: int = 5
) -> st.SearchStrategy[list[list[int]]]:
    """``[t, h, w]`` grids with any sizes from ``min_dim`` to ``max_dim``:
    zero-sized, odd and non-mergeable grids, which the legacy functions accepted."""
    if min_size < 0 or max_size < min_size or min_dim < 0 or max_dim < min_dim:
        raise HarnessError("raw_grid_thws: need 0 <= min_size <= max_size and 0 <= min_dim <= max_dim")
    dim = st.integers(min_dim, max_dim)
    return st.lists(st.tuples(dim, dim, dim).map(list), min_size=min_size, max_size=max_size)


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
@st.composite
def grid_nestings(draw: st.DrawFn, count: int, *, nested: bool = True) -> list:
    """How ``count`` grids are grouped for ``flatten_list``: each entry is a
    grid index (a flat item) or a list of indices (a nested list, possibly
    empty). ``nested=False`` gives the flat ``[0, 1, ...]`` callers build."""
    if count < 0:
        raise HarnessError("grid_nestings: count must be >= 0")
    if not nested:
        return list(range(count))
    groups: list = []
    i = 0
    while i < count:
        if draw(st.booleans()):
            groups.append(i)
            i += 1
        else:
            n = draw(st.integers(1, count - i))
            groups.append(list(range(i, i + n)))
            i += n
    if draw(st.integers(0, 9)) == 9:  # an empty nested list now and then
        groups.insert(draw(st.integers(0, len(groups))), [])
    return groups


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def grid_forms(contract: str) -> st.SearchStrategy[dict]:
    """How each grid row reaches the tower: tuples of Python ints (callers), or
    numpy rows / CPU or device tensor rows, or one whole 2-D tensor (wide)."""
    if contract == "caller":
        return st.just({"form": "tuple", "dtype": "int64", "whole_tensor": False})
    return fixed_dict(
        {"form": st.sampled_from(GRID_FORMS), "dtype": int_dtypes(), "whole_tensor": st.booleans()}
    )


# Strategies with fixed arguments, built once (strategies/common.py says why).
WIDE_TOWER_GRIDS = st.one_of(grid_thws(min_size=0, max_size=4, merge=MERGE), raw_grid_thws(max_size=4, min_dim=1))
WIDE_METADATA_GRIDS = st.one_of(grid_thws(min_size=0, max_size=MAX_VIDEO_ROWS, merge=MERGE),
                                raw_grid_thws(max_size=MAX_VIDEO_ROWS))
WIDE_ID_KINDS = st.sampled_from(["computed", "grid", "random"])
CALLER_ID_KINDS = st.sampled_from(["computed", "grid"])
ID_PLACES = st.sampled_from(["device", "cpu"])
WIDE_CU_FORMS = st.sampled_from(["numpy", "cpu_tensor", "device_tensor"])
GRID_PLACES = st.sampled_from(["cpu", "device"])
CALLER_MODELS = st.sampled_from(["keye", "keye_vl1_5"])


def materialize_grids(grids: list[list[int]], nesting: list, form: dict, device: str) -> Any:
    """The ``image_grid_thw`` argument: rows in ``form``, grouped by ``nesting``."""
    if form["form"] == "tuple":
        rows: list[Any] = [tuple(g) for g in grids]
    elif form["form"] == "numpy":
        rows = list(np.asarray(grids, dtype=form["dtype"]).reshape(-1, 3))
    else:
        where = device if form["form"] == "device_tensor" else "cpu"
        table = torch.tensor(grids, dtype=INT_DTYPES[form["dtype"]]).reshape(-1, 3).to(where)
        if form["whole_tensor"]:
            return table  # iterating a 2-D tensor yields its rows, as flatten_list does
        rows = list(table)
    return [rows[g] if isinstance(g, int) else [rows[i] for i in g] for g in nesting]


def running_sum(sizes: Sequence[int]) -> list[int]:
    out = [0]
    for n in sizes:
        out.append(out[-1] + n)
    return out


def numels(grids: list[list[int]]) -> list[int]:
    return [t * h * w for t, h, w in grids]


def grid_position_ids(grids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(height, width) patch ids exactly as the encoder builds them from grids."""
    hids, wids = [torch.zeros(0, dtype=torch.long)], [torch.zeros(0, dtype=torch.long)]
    for t, h, w in grids:
        pids = torch.arange(t * h * w) % max(h * w, 1)
        hids.append(pids // max(w, 1))
        wids.append(pids % max(w, 1))
    return torch.cat(hids), torch.cat(wids)


def _tower_config(draw: st.DrawFn) -> dict:
    heads = draw(st.integers(1, 2))
    return {
        "heads": heads,
        "hidden_size": heads * 2 * draw(st.integers(1, 4)),  # head_dim even: the rotary dim is head_dim // 2
        "layers": draw(st.integers(1, 2)),
        "dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def _config(spec: dict) -> SimpleNamespace:
    return SimpleNamespace(
        hidden_size=spec["hidden_size"],
        num_attention_heads=spec["heads"],
        num_hidden_layers=spec["layers"],
        layer_norm_eps=1e-6,
    )


def _side_module(impl: Impl, qualname: str) -> ModuleType:
    if impl.owner is None or impl.owner.__name__ != qualname:
        raise HarnessError(f"{impl.path} must be a method of {qualname}")
    return impl.module


def _grid_spec(draw: st.DrawFn, contract: str, *, zero_sized: bool) -> dict:
    wide = contract == "wide"
    if wide and zero_sized and draw(st.booleans()):
        grids = draw(raw_grid_thws())
    elif wide:
        grids = draw(WIDE_TOWER_GRIDS)
    else:
        grids = draw(grid_thws(min_size=1, max_size=4, merge=MERGE))
    form = dict(draw(grid_forms(contract)))  # a copy: the caller's st.just dict is shared
    flat = form["whole_tensor"] and form["form"] in ("cpu_tensor", "device_tensor")
    return {"grids": grids, "nesting": draw(grid_nestings(len(grids), nested=not flat)), "grid_form": form}


# --- row 2: KeyeSiglipEncoder.forward, use_rope branch --------------------------------


def _largest_side(grids: list[list[int]]) -> int:
    return max((max(h, w) for _, h, w in grids), default=0)


@st.composite
def _encoder_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = {"device": draw(devices(available)), **_tower_config(draw), **_grid_spec(draw, contract, zero_sized=True)}
    kind = draw(WIDE_ID_KINDS if wide else CALLER_ID_KINDS)
    ids: dict[str, Any] = {"kind": kind}
    if kind == "random":
        largest = _largest_side(spec["grids"])
        # An id at or past max(h, w) indexes past the optimized rope table: an
        # IndexError on the CPU, but a device-side assert on CUDA that would
        # poison the process, so CUDA examples stay inside the table (with no
        # grids at all optimized fails on max() before indexing: safe).
        inside = spec["device"] != "cpu" and bool(spec["grids"])
        cap = largest if inside else largest + 3
        length = draw(st.integers(0, 24)) if cap > 0 else 0
        ids.update(length=length, bound=draw(st.integers(1, max(cap, 1))), seed=draw(st.integers(0, 2**31 - 1)))
    if kind != "computed":
        ids.update(dtype=draw(int_dtypes()) if wide else "int64",
                   on=draw(ID_PLACES) if wide else "device")
    spec["position_ids"] = ids
    return spec


def passed_position_ids(spec: dict) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
    ids = spec["position_ids"]
    if ids["kind"] == "computed":
        return None, None
    if ids["kind"] == "grid":
        hids, wids = grid_position_ids(spec["grids"])
    else:
        generator = torch.Generator().manual_seed(ids["seed"])
        hids, wids = torch.randint(0, ids["bound"], (2, ids["length"]), generator=generator)
    where = spec["device"] if ids["on"] == "device" else "cpu"
    dtype = INT_DTYPES[ids["dtype"]]
    return hids.to(dtype).to(where), wids.to(dtype).to(where)


class KeyeEncoderRopeInputs:
    """``KeyeSiglipEncoder.forward(..., use_rope=True)``; the observable is what
    the (recording) layers are handed, above all the rope ``(cos, sin)``."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _encoder_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        _side_module(impl, "KeyeSiglipEncoder")
        device = spec["device"]
        encoder = impl.owner(_config(spec)).to(device)
        hids, wids = passed_position_ids(spec)
        length = hids.shape[0] if hids is not None else sum(numels(spec["grids"]))
        inputs_embeds = seeded_floats((1, length, spec["hidden_size"]), spec["dtype"], spec["seed"], device)
        cu_seqlens = torch.tensor(running_sum(numels(spec["grids"])), dtype=torch.int32, device=device)
        grids = materialize_grids(spec["grids"], spec["nesting"], spec["grid_form"], device)

        def call() -> dict[str, Any]:
            with torch.inference_mode():
                out = impl.function(encoder, inputs_embeds, cu_seqlens=cu_seqlens, image_grid_thw=grids,
                                    height_position_ids=hids, width_position_ids=wids, use_rope=True,
                                    window_size=-1, vision_or_text="vision")
            return {"hidden_states": out, "layers": [layer.received for layer in encoder.layers]}

        return call


# --- row 3: KeyeSiglipVisionTransformer.forward, the per-image split ------------------


@st.composite
def _vision_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = {"device": draw(devices(available)), **_tower_config(draw), **_grid_spec(draw, contract, zero_sized=False)}
    total = sum(numels(spec["grids"]))
    if wide and draw(st.booleans()):
        # Not the running sum of the grids: padding, a stale table, another batch.
        start = draw(st.integers(0, 3))
        lengths = draw(st.lists(st.integers(0, max(total, 1)), max_size=5))
        spec["cu_seqlens"] = [start + c for c in running_sum(lengths)]
    else:
        spec["cu_seqlens"] = running_sum(numels(spec["grids"]))
    spec.update(
        cu_form=draw(WIDE_CU_FORMS) if wide else "device_tensor",
        cu_dtype=draw(int_dtypes()) if wide else "int32",
        use_rope=draw(st.booleans()) if wide else True,
    )
    return spec


class KeyeVisionSplitInputs:
    """``KeyeSiglipVisionTransformer.forward`` as KeyeSiglipVisionModel calls it:
    the per-image split of the (pass-through) tower output."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _vision_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        _side_module(impl, "KeyeSiglipVisionTransformer")
        device = spec["device"]
        tower = impl.owner(_config(spec)).to(device)
        # Loaded in the model dtype upstream; the rope buffer stays float32 (built with dtype=torch.float).
        tower.post_layernorm.to(FLOAT_DTYPES[spec["dtype"]])
        total = sum(numels(spec["grids"]))
        features = seeded_floats((1, total, spec["hidden_size"]), spec["dtype"], spec["seed"], device)
        cu_seqlens = in_form(spec["cu_seqlens"], spec["cu_form"], spec["cu_dtype"], device)
        grids = materialize_grids(spec["grids"], spec["nesting"], spec["grid_form"], device)

        def call() -> list[torch.Tensor]:
            with torch.inference_mode():
                return impl.function(tower, features, output_attentions=None, output_hidden_states=None,
                                     interpolate_pos_encoding=True, position_ids=None, vision_return_embed_list=True,
                                     image_grid_thw=grids, sample_indices=None, cu_seqlens=cu_seqlens,
                                     return_pooler_output=True, use_rope=spec["use_rope"], window_size=-1)

        return call


# --- row 4: BaseKeyeModule._process_image_input / _process_video_embeds --------------


def _split_per_frame(grids: list[list[int]]) -> list[list[int]]:
    """keye_vl1_5's ``split_thw``: one ``[1, h, w]`` row per frame."""
    return [[1, h, w] for t, h, w in grids for _ in range(t)]


@st.composite
def _metadata_specs(draw: st.DrawFn, available: Sequence[str], contract: str, video: bool) -> dict:
    wide = contract == "wide"
    spec: dict[str, Any] = {
        "device": draw(devices(available)),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "features": draw(st.integers(1, 4)),
        "pixel_dtype": draw(float_dtypes()),
        "tower_dtype": draw(float_dtypes()),
    }
    if wide:
        grids = draw(WIDE_METADATA_GRIDS)
        spec.update(model="any", grid_on=draw(GRID_PLACES), grid_dtype=draw(int_dtypes()))
    else:
        model = draw(CALLER_MODELS)
        if video and model == "keye_vl1_5":
            grids = _split_per_frame(draw(grid_thws(min_size=1, max_size=2, merge=MERGE)))[:MAX_VIDEO_ROWS]
        else:
            grids = draw(grid_thws(min_size=1, max_size=3 if video else MAX_VIDEO_ROWS, max_t=3 if video else 1,
                                   merge=MERGE))
        # keye.py keeps the grids on the CPU (keep_on_cpu); keye_vl1_5 does not.
        spec.update(model=model, grid_on="cpu" if model == "keye" else "device", grid_dtype="int64")
    spec["grids"] = grids
    # The embeddings path raises on both sides; rare, it is not what changed.
    spec["embeds"] = draw(st.integers(0, 19)) == 19
    return spec


def _metadata_call(spec: dict, impl: Impl, video: bool) -> Callable[[], Any]:
    module = _side_module(impl, "BaseKeyeModule")
    device = spec["device"]
    model = impl.owner(module.KeyeSiglipVisionModel(FLOAT_DTYPES[spec["tower_dtype"]]), module.Projector())
    where = device if spec["grid_on"] == "device" else "cpu"
    grid = torch.tensor(spec["grids"], dtype=INT_DTYPES[spec["grid_dtype"]]).reshape(-1, 3).to(where)
    total = sum(numels(spec["grids"]))
    pixels = seeded_floats((total, spec["features"]), spec["pixel_dtype"], spec["seed"], device)
    if video:
        kind = "video_embeds" if spec["embeds"] else "pixel_values_videos"
        return lambda: impl.function(model, kind, grid, pixels)
    image_input = {"type": "image_embeds" if spec["embeds"] else "pixel_values",
                   "pixel_values": pixels, "image_grid_thw": grid}
    return lambda: impl.function(model, image_input)


class KeyeProcessImageInputs:
    """``BaseKeyeModule._process_image_input(image_input)``: what the host-built
    metadata looks like when it reaches the (recording) vision tower."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _metadata_specs(available, contract, video=False)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        return _metadata_call(spec, impl, video=False)


class KeyeProcessVideoInputs:
    """``BaseKeyeModule._process_video_embeds(video_type, video_grid_thw, pixel_values_videos)``."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _metadata_specs(available, contract, video=True)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        return _metadata_call(spec, impl, video=True)
