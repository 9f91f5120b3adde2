"""Inputs of Qwen2.5-VL's EVS post-processing (vllm/model_executor/models/qwen2_5_vl.py, 0.29.0 / 0.30.0):
``Qwen2_5_VLForConditionalGeneration._postprocess_image_embeds_evs`` and ``._postprocess_video_embeds_evs``.

Caller (0.30.0, the only one): ``Qwen2_5_VLForConditionalGeneration.embed_multimodal`` calls them when
``self.is_multimodal_pruning_enabled`` (``multimodal_config.is_multimodal_pruning_enabled()``: a
``video_pruning_rate`` in ``(0, 1)``; ``MultiModalConfig`` refuses values outside ``[0, 1)``), with

* ``image_embeddings = self._process_image_input(image_input)``: the vision tower's output split per item,
  ``image_embeds.split((grid_thw.prod(-1) // merge_size // merge_size).tolist())`` -- one tensor of
  ``t*h*w / merge**2`` rows of ``out_hidden_size`` columns per item, in ``self.visual.dtype`` (bf16 in
  practice), on the model's device; contiguous views of one tensor;
* the same split of the video tower's output for videos;
* ``image_input["image_grid_thw"]`` / ``video_input["video_grid_thw"]``: ``(N, 3)`` int64 tensors, kept on
  the host (``MultiModalFieldConfig.batched(..., keep_on_cpu=True)``, qwen2_vl.py ``_get_mm_fields_config``);
  ``h``, ``w`` multiples of ``spatial_merge_size`` (2), ``t == 1`` for an image (HF image processor);
* ``video_input["second_per_grid_ts"]``: ``(N,)`` float tensor kept on the host (``keep_on_cpu=True``,
  ``Qwen2_5_VLMultiModalProcessor._get_mm_fields_config``), ``temporal_patch_size / fps`` per video
  (1.0 at the default 2 fps; 0.5, 2.0, ...), or absent: ``_parse_and_validate_video_input`` passes
  ``kwargs.pop("second_per_grid_ts", None)``, e.g. for ``video_embeds`` given without it, which the method refuses
  with a ValueError (drawn about one time in ten).

Class state read: ``self.visual.spatial_merge_size`` (2 in every Qwen2.5-VL config),
``self.config.vision_config.tokens_per_second`` (2 in the released configs) and ``self.video_pruning_rate``.
The instance is made with ``nn.Module.__init__`` alone and given exactly that state (no weights: the tower and
its kernels are out of reach, and not what changed).

``wide`` adds what the methods accept beyond those callers: grids and ``second_per_grid_ts`` on the
embeddings' device, non-contiguous embeddings, images with ``t > 1``, other ``tokens_per_second`` and merge
sizes, and a pruning rate of 0 (retain everything).

A spec is JSON only: ``device``, ``kind`` (image / video), ``grids``, ``hidden``, ``dtype``, ``seed``,
``merge``, ``tokens_per_second``, ``second_per_grid`` (one per grid, or None: absent), ``q``, ``grid_on_device``,
``seconds_on_device``, ``transposed`` (the embeddings as a transposed view).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import choice_of, devices, float_dtypes, seeded_floats

# What callers pass (module docstring) and what the wide contract adds.
CALLER_PRUNING_RATES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
CALLER_SECONDS_PER_GRID = (0.5, 1.0, 2.0, 2.0 / 3.0, 4.0)
CALLER_TOKENS_PER_SECOND = (2,)
WIDE_TOKENS_PER_SECOND = (1, 2, 4, 0.5)
CALLER_MERGE_SIZES = (2,)
WIDE_MERGE_SIZES = (1, 2, 3)

_CALLER_DTYPES = float_dtypes(("bfloat16", "float16", "float32"))
_HIDDEN = st.integers(1, 6)
_SEEDS = st.integers(0, 2**31 - 1)
_SECONDS_ABSENT = st.integers(0, 9).map(lambda k: k == 0)  # about one video batch in ten


@functools.lru_cache(maxsize=None)  # built once per argument set (strategies/common.py says why)
def _grid(max_t: int, max_side: int, merge: int, image_t1: bool) -> st.SearchStrategy[list[int]]:
    side = st.integers(1, max_side).map(lambda k: k * merge)
    t = st.just(1) if image_t1 else st.integers(1, max_t)
    return st.tuples(t, side, side).map(list)


@st.composite
def _evs_specs(draw: st.DrawFn, available: Sequence[str], contract: str, kind: str) -> dict:
    wide = contract == "wide"
    merge = draw(choice_of(WIDE_MERGE_SIZES if wide else CALLER_MERGE_SIZES))
    grids = draw(st.lists(_grid(4, 4, merge, kind == "image" and not wide), min_size=1, max_size=3))
    if wide:
        q = draw(st.just(0.0) | choice_of(CALLER_PRUNING_RATES) | st.floats(0.0, 0.999))
        seconds = draw(st.lists(choice_of(CALLER_SECONDS_PER_GRID) | st.floats(0.01, 8.0),
                                min_size=len(grids), max_size=len(grids)))
    else:
        q = draw(choice_of(CALLER_PRUNING_RATES) | st.floats(0.01, 0.99))
        seconds = draw(st.lists(choice_of(CALLER_SECONDS_PER_GRID), min_size=len(grids), max_size=len(grids)))
    if kind == "video" and draw(_SECONDS_ABSENT):
        seconds = None
    return {
        "device": draw(devices(available)),
        "kind": kind,
        "grids": grids,
        "hidden": draw(_HIDDEN),
        "dtype": draw(_CALLER_DTYPES),
        "seed": draw(_SEEDS),
        "merge": merge,
        "tokens_per_second": draw(choice_of(WIDE_TOKENS_PER_SECOND if wide else CALLER_TOKENS_PER_SECOND)),
        "second_per_grid": seconds,
        "q": q,
        "grid_on_device": draw(st.booleans()) if wide else False,
        "seconds_on_device": draw(st.booleans()) if wide else False,
        "transposed": draw(st.booleans()) if wide else False,
    }


def rows_per_item(spec: dict) -> list[int]:
    """Rows of each item's embeddings: ``t*h*w // merge**2`` (``_process_*_input``'s split sizes)."""
    merge = spec["merge"]
    return [t * h * w // merge // merge for t, h, w in spec["grids"]]


def item_embeddings(spec: dict, device: str | None = None) -> list[torch.Tensor]:
    """Each item's embeddings as ``_process_*_input`` returns them: views of one seeded tensor, split per item
    (a transposed view's split under ``transposed``)."""
    device = spec["device"] if device is None else device
    total, hidden = sum(rows_per_item(spec)), spec["hidden"]
    if spec["transposed"]:
        whole = seeded_floats((hidden, total), spec["dtype"], spec["seed"], device).t()
    else:
        whole = seeded_floats((total, hidden), spec["dtype"], spec["seed"], device)
    return list(whole.split(rows_per_item(spec)))


def make_model(owner: type, spec: dict) -> Any:
    """An instance of the side's model class holding only the state the EVS methods read (module docstring)."""
    model = owner.__new__(owner)
    torch.nn.Module.__init__(model)
    model.visual = SimpleNamespace(spatial_merge_size=spec["merge"])
    model.config = SimpleNamespace(vision_config=SimpleNamespace(tokens_per_second=spec["tokens_per_second"]))
    model.video_pruning_rate = spec["q"]
    model.is_multimodal_pruning_enabled = True  # embed_multimodal calls these only then
    return model


def _multimodal_input(spec: dict) -> dict[str, torch.Tensor]:
    device = spec["device"]
    grid = torch.tensor(spec["grids"], dtype=torch.int64, device=device if spec["grid_on_device"] else "cpu")
    if spec["kind"] == "image":
        return {"type": "image_embeds", "image_grid_thw": grid}
    if spec["second_per_grid"] is None:
        return {"type": "video_embeds", "video_grid_thw": grid, "second_per_grid_ts": None}
    seconds = torch.tensor(spec["second_per_grid"], dtype=torch.float32,
                           device=device if spec["seconds_on_device"] else "cpu")
    return {"type": "video_embeds", "video_grid_thw": grid, "second_per_grid_ts": seconds}


class _Qwen25EvsInputs:
    """The split embeddings and the parsed multimodal input one ``embed_multimodal`` call passes; the thunk
    returns the tuple the method returns."""

    kind = ""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _evs_specs(available, contract, self.kind)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        model = make_model(impl.owner, spec)
        embeddings = tuple(item_embeddings(spec))
        multimodal_input = _multimodal_input(spec)
        method = impl.function

        def call() -> tuple[torch.Tensor, ...]:
            return method(model, embeddings, multimodal_input)

        return call


class Qwen25ImageEvsInputs(_Qwen25EvsInputs):
    kind = "image"


class Qwen25VideoEvsInputs(_Qwen25EvsInputs):
    kind = "video"


def video_sync_budget(spec: dict) -> int:
    """Syncs the optimized copy makes by design on CUDA: a device grid costs its ``.tolist()``, device seconds one
    ``.item()`` per video (wide contract only); and, inside its ``gpu_sync_allowed()`` region, the two masked
    reads per video (``emb[retention_mask]``, ``positions[retention_mask]``: a nonzero each) once the call gets
    that far -- it raises first without ``second_per_grid_ts`` (H100, 2026-12-06: 2 per video, 0 when it
    raised; lab/scripts/evs_sync_counts.py)."""
    seconds_on_device = spec["seconds_on_device"] and spec["second_per_grid"] is not None
    masked_reads = 2 * len(spec["grids"]) if spec["second_per_grid"] is not None else 0
    return int(spec["grid_on_device"]) + (len(spec["grids"]) if seconds_on_device else 0) + masked_reads


def image_sync_budget(spec: dict) -> int:
    """As ``video_sync_budget``: a device grid's ``.tolist()`` only."""
    return int(spec["grid_on_device"])
