"""Inputs of Qwen3-VL's EVS host logic (vllm/model_executor/models/qwen3_vl.py, 0.29.0 / 0.30.0):
``Qwen3VLForConditionalGeneration._postprocess_image_embeds_evs`` and ``._get_expanded_positions``.

Callers (0.30.0):

* ``embed_multimodal`` calls ``_postprocess_image_embeds_evs(image_embeddings, image_input)`` for every image
  batch, pruning on or off (the method checks ``self.is_multimodal_pruning_enabled`` itself), with
  ``image_embeddings = self._process_image_input(image_input)``: the tower's output split per image,
  ``t*h*w / merge**2`` rows each (``t == 1``), in ``self.visual.dtype`` on the model's device;
  ``image_input["image_grid_thw"]`` an ``(N, 3)`` int64 tensor kept on the host (``keep_on_cpu=True``).
* ``_create_final_video_embeddings`` (from ``_postprocess_video_embeds_evs``, from ``embed_multimodal`` when
  pruning is on) calls ``_get_expanded_positions(device=merged_embeddings.device, seq_len=
  merged_embeddings.shape[0], video_grid_thw=size, num_tokens_per_frame=..., timestamps=..., is_video_embed=...,
  is_vision_start=..., retention_mask=...)`` where ``size`` is one ``[t, h, w]`` list of
  ``video_grid_thw.tolist()``; ``retention_mask`` the video's bool mask over its ``t*h*w / merge**2`` tokens on
  the device, from EVS (``compute_retention_mask``: every token of the first frame kept, later frames may keep
  none) or VidCom2 (``vidcom2_compute_retention_mask``: at least one token per frame);
  ``num_tokens_per_frame = retention_mask.reshape(t, rows, cols).sum(dim=(1, 2)).long().tolist()``;
  ``timestamps = video_input.timestamps[video_idx]``, one float (seconds) per frame; ``repl_token_ids =
  torch.tensor(get_video_repl(tokens_per_frame=num_tokens_per_frame, ...).full, device=device)``,
  ``is_video_embed = torch.isin(repl_token_ids, video_token_id)``, ``is_vision_start =
  repl_token_ids.eq(vision_start_token_id)`` and ``seq_len == len(repl_token_ids)``.

Class state read: ``config.video_token_id`` / ``vision_start_token_id`` / ``vision_end_token_id`` (Qwen3-VL's
151656 / 151652 / 151653), ``config.vision_config.spatial_merge_size`` and ``visual.spatial_merge_size`` (2),
``self._tokenizer`` (``cached_tokenizer_from_config``; here a stand-in whose ``encode`` gives one id per
character, so timestamps of different lengths give different token counts, as the real one does) and
``is_multimodal_pruning_enabled``. No weights: the tower, the language model's embedding and the kernels are
out of reach and not what changed.

``wide`` adds: masks of any shape of keep (frames that keep nothing first), a mask on the host, timestamps as a
tensor (0.29.0+ annotate ``list[float | int] | torch.Tensor``), a grid tensor on the device for images, images
with ``t > 1`` and other merge sizes.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import choice_of, devices, float_dtypes, seeded_floats

VIDEO_TOKEN_ID = 151656
VISION_START_TOKEN_ID = 151652
VISION_END_TOKEN_ID = 151653
CALLER_MERGE_SIZES = (2,)
WIDE_MERGE_SIZES = (1, 2, 3)
MASK_STYLES_CALLER = ("evs", "vidcom2")
MASK_STYLES_WIDE = ("evs", "vidcom2", "any", "none_kept", "all_kept")

_DTYPES = float_dtypes(("bfloat16", "float16", "float32"))
_SEEDS = st.integers(0, 2**31 - 1)


class TimestampTokenizer:
    """Stands in for the model's tokenizer: ``encode`` gives one id per character (ids far from the special
    tokens), deterministic, so ``"<0.5 seconds>"`` and ``"<12.0 seconds>"`` have different lengths."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1000 + ord(c) for c in text]


@functools.lru_cache(maxsize=None)  # built once per argument set (strategies/common.py says why)
def _grid(max_t: int, max_side: int, merge: int, image_t1: bool) -> st.SearchStrategy[list[int]]:
    side = st.integers(1, max_side).map(lambda k: k * merge)
    t = st.just(1) if image_t1 else st.integers(1, max_t)
    return st.tuples(t, side, side).map(list)


def make_model(owner: type, spec: dict) -> Any:
    """An instance of the side's model class holding only the state the methods read (module docstring)."""
    model = owner.__new__(owner)
    torch.nn.Module.__init__(model)
    merge = spec["merge"]
    model.visual = SimpleNamespace(spatial_merge_size=merge)
    model.config = SimpleNamespace(
        video_token_id=VIDEO_TOKEN_ID, vision_start_token_id=VISION_START_TOKEN_ID,
        vision_end_token_id=VISION_END_TOKEN_ID, vision_config=SimpleNamespace(spatial_merge_size=merge))
    model._tokenizer = TimestampTokenizer()
    model.is_multimodal_pruning_enabled = spec.get("pruning", True)
    return model


# -- images --------------------------------------------------------------------------------------------------

@st.composite
def _image_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    merge = draw(choice_of(WIDE_MERGE_SIZES if wide else CALLER_MERGE_SIZES))
    return {
        "device": draw(devices(available)),
        "grids": draw(st.lists(_grid(3, 4, merge, not wide), min_size=1, max_size=3)),
        "merge": merge,
        "hidden": draw(st.integers(1, 6)),
        "dtype": draw(_DTYPES),
        "seed": draw(_SEEDS),
        "pruning": draw(st.booleans()),
        "grid_on_device": draw(st.booleans()) if wide else False,
    }


def image_rows(spec: dict) -> list[int]:
    merge = spec["merge"]
    return [t * h * w // merge // merge for t, h, w in spec["grids"]]


def image_embeddings(spec: dict, device: str | None = None) -> list[torch.Tensor]:
    """The split tower output ``_process_image_input`` returns: views of one seeded tensor."""
    device = spec["device"] if device is None else device
    whole = seeded_floats((sum(image_rows(spec)), spec["hidden"]), spec["dtype"], spec["seed"], device)
    return list(whole.split(image_rows(spec)))


class Qwen3ImageEvsInputs:
    """The split image embeddings and the parsed image input; the thunk returns the method's tuple."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _image_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        model = make_model(impl.owner, spec)
        embeddings = tuple(image_embeddings(spec))
        grid_device = spec["device"] if spec["grid_on_device"] else "cpu"
        image_input = {"type": "image_embeds",
                       "image_grid_thw": torch.tensor(spec["grids"], dtype=torch.int64, device=grid_device)}
        method = impl.function

        def call() -> tuple[torch.Tensor, ...]:
            return method(model, embeddings, image_input)

        return call


def image_sync_budget(spec: dict) -> int:
    """On CUDA, by design: none for the callers (grid on the host); a device grid's ``.tolist()`` (wide)."""
    return int(spec["grid_on_device"] and spec["pruning"])


# -- expanded positions --------------------------------------------------------------------------------------

@st.composite
def _video_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    merge = draw(choice_of(WIDE_MERGE_SIZES if wide else CALLER_MERGE_SIZES))
    grid = draw(_grid(5, 3, merge, False))
    fps = draw(choice_of((0.5, 1.0, 2.0, 3.0)))
    start = draw(st.integers(0, 40))
    return {
        "device": draw(devices(available)),
        "grid": grid,
        "merge": merge,
        # The processor's per-frame timestamps: ascending seconds, one per temporal patch.
        "timestamps": [round((start + 2 * i + 1) / (2 * fps), 3) for i in range(grid[0])],
        "mask_style": draw(choice_of(MASK_STYLES_WIDE if wide else MASK_STYLES_CALLER)),
        "mask_seed": draw(_SEEDS),
        "mask_on_device": draw(st.booleans()) if wide else True,
        "timestamps_tensor": draw(st.booleans()) if wide else False,
    }


def retention_mask(spec: dict) -> torch.Tensor:
    """The video's keep mask over its ``t * rows * cols`` tokens, as EVS or VidCom2 would shape it (host)."""
    t, h, w = spec["grid"]
    per_frame = (h // spec["merge"]) * (w // spec["merge"])
    rng = np.random.default_rng(spec["mask_seed"])
    keep = rng.random((t, per_frame)) < rng.random()
    style = spec["mask_style"]
    if style == "evs":
        keep[0, :] = True
    elif style == "vidcom2":
        for frame in range(t):
            if not keep[frame].any():
                keep[frame, rng.integers(per_frame)] = True
    elif style == "none_kept":
        keep[:] = False
    elif style == "all_kept":
        keep[:] = True
    return torch.from_numpy(keep.reshape(-1).copy())


def tokens_per_frame(spec: dict) -> list[int]:
    t = spec["grid"][0]
    return retention_mask(spec).reshape(t, -1).sum(dim=1).long().tolist()


def frame_token_ids(spec: dict, counts: Sequence[int]) -> list[int]:
    """``get_video_repl(...).full``, written out: per frame the timestamp's ids, vision_start, ``count`` video
    tokens, vision_end."""
    tokenizer, ids = TimestampTokenizer(), []
    for timestamp, count in zip(spec["timestamps"], counts):
        ids += tokenizer.encode(f"<{timestamp:.1f} seconds>", add_special_tokens=False)
        ids += [VISION_START_TOKEN_ID] + [VIDEO_TOKEN_ID] * count + [VISION_END_TOKEN_ID]
    return ids


class Qwen3ExpandedPositionsInputs:
    """What ``_create_final_video_embeddings`` passes for one video; the thunk returns the expanded positions."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _video_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        model = make_model(impl.owner, spec)
        device = torch.device(spec["device"])
        mask = retention_mask(spec)
        counts = mask.reshape(spec["grid"][0], -1).sum(dim=1).long().tolist()
        repl_token_ids = torch.tensor(frame_token_ids(spec, counts), device=device)
        is_video_embed = torch.isin(repl_token_ids, torch.tensor(VIDEO_TOKEN_ID, device=device))
        is_vision_start = repl_token_ids.eq(VISION_START_TOKEN_ID)
        if spec["mask_on_device"]:
            mask = mask.to(device)
        timestamps: Any = list(spec["timestamps"])
        if spec["timestamps_tensor"]:
            timestamps = torch.tensor(timestamps, dtype=torch.float64)
        method = impl.function

        def call() -> torch.Tensor:
            return method(
                model, device=device, seq_len=int(repl_token_ids.shape[0]), video_grid_thw=list(spec["grid"]),
                num_tokens_per_frame=counts, timestamps=timestamps, is_video_embed=is_video_embed,
                is_vision_start=is_vision_start, retention_mask=mask)

        return call
