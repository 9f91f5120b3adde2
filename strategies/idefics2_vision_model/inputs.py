"""Inputs of ``Idefics2VisionEmbeddings.get_position_ids(patch_attention_mask, tgt_sizes=None)``
(vllm/model_executor/models/idefics2_vision_model.py): the host/index logic only, never the weights.

Callers (vllm 0.30.0), each with the mask on the model's device:

* ``Idefics2VisionEmbeddings.forward`` (when no ``position_ids`` are given), reached through
  ``Idefics2VisionTransformer.forward(pixel_values, patch_attention_mask, tgt_sizes)``;
  that forward builds an all-ones ``[B, H / patch, W / patch]`` mask when it gets none;
* idefics3.py (Idefics3 and SmolVLM): ``Idefics3Model.get_position_ids`` ->
  ``get_patch_attention_mask(pixel_attention_mask)`` -> ``embeddings.get_position_ids(mask)``: a
  ``[B, Hp, Wp]`` bool mask, each image a top-left rectangle of patches (the processor pads images at the
  bottom and right), ``tgt_sizes=None``; the encoder CUDA graph capture passes all-ones masks
  (``dummy_pixel_attention_mask = torch.ones(...)``), the replay the request's own mask; phi4mm.py
  (``image_attention_mask`` of each crop) and aria.py (``_create_patch_attention_mask``) hand the tower
  the same kind of mask;
* minicpmv.py (MiniCPM-V 2.6 / 4.x): ``patch_attn_mask[i, :num_patches_item] = True`` on a
  ``[B, max_patches]`` mask, passed as ``patch_attn_mask.unsqueeze(1)`` (``[B, 1, max_patches]``) with
  ``tgt_sizes`` ``[B, 2]`` (patch rows, patch columns) kept on the CPU (``keep_on_cpu=True``), int32 or
  int64; MiniCPM-V 2.5 passes the same mask with ``tgt_sizes=None`` ("v2.5 infers patch layout from the
  attention mask").

Half the batches are of small images (at most 2 patch rows and 3 columns, grid ``pad`` 0 half the time):
the only way to a ``[B, 2, Wp]`` grid mask, which must take the padded-grid stride (``shape[1] > 1``), not
MiniCPM-V's one-row one.

``n = num_patches_per_side = image_size // patch_size`` comes from the checkpoint: 70 (980/14: Idefics2,
MiniCPM-V, Aria), 32 (448/14 Phi-4-multimodal, 512/16 SmolVLM-256M/500M), 27 (384/14 SmolVLM-Instruct,
SmolVLM2-2.2B), 26 (364/14 Idefics3-8B). An image has at most ``n`` patches per side.

The wide contract adds what 0.29.0 also took: other ``n``, images with more than ``n`` patches per side,
an image with no patch (a zero row of ``tgt_sizes``, an all-false mask row), ``tgt_sizes`` on the device
and the mask on the CPU (the result then moves to the weights' device).

A spec is JSON: ``n``, ``kind`` ("grid": the idefics3 form; "flat": MiniCPM-V with ``tgt_sizes``;
"flat_v25": MiniCPM-V 2.5), ``images`` (``[h, w]`` patches each), ``pad`` (the grid mask's extra rows
and columns past the largest image), ``tgt_dtype``, ``tgt_on``, ``mask_on``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import INT_DTYPES, choice_of, devices, int_dtypes

SHIPPED_SIDES = (70, 32, 27, 26)
KINDS = choice_of(["grid", "flat", "flat_v25"])
WIDE_SIDES = choice_of([*SHIPPED_SIDES, 1, 2, 3, 5, 7, 8, 12])
CALLER_SIDES = choice_of(list(SHIPPED_SIDES))
PLACES = choice_of(["device", "cpu"])
# A batch of small images (at most 2 patch rows, 3 columns; idefics3 pads each to the batch's largest): the
# only grid masks of 2 rows, [B, 2, Wp], which must not be read as MiniCPM-V's one-row [B, 1, L] mask.
# Counts drawn up to n almost never give a whole batch at most 2 rows.
SMALL_ROWS, SMALL_COLUMNS = st.integers(1, 2), st.integers(1, 3)
WIDE_SMALL_ROWS, WIDE_SMALL_COLUMNS = st.integers(0, 2), st.integers(0, 3)
# Rows/columns of a grid mask past the batch's largest image: none half the time (the mask sized to the
# largest image), so that batch of small images is a [B, 2, Wp] mask often enough.
PADS = choice_of([0, 0, 1, 2])


@lru_cache(maxsize=None)  # built once per bound (strategies/common.py says why)
def _extents(n: int, wide: bool) -> st.SearchStrategy[int]:
    """A patch count along one side: the full side about one time in three (whole tiles, the capture
    path), else any count up to ``n`` (wide: from 0, and a few past ``n``)."""
    return st.just(n) | st.integers(0 if wide else 1, n + 3 if wide else n)


@st.composite
def _position_ids_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    n = draw(WIDE_SIDES if wide else CALLER_SIDES)
    kind = draw(KINDS)
    count = draw(st.integers(1, 3))
    if draw(st.booleans()):
        rows, columns = (WIDE_SMALL_ROWS, WIDE_SMALL_COLUMNS) if wide else (SMALL_ROWS, SMALL_COLUMNS)
    else:
        rows = columns = _extents(n, wide)
    images = [[draw(rows), draw(columns)] for _ in range(count)]
    return {
        "device": draw(devices(available)),
        "n": n,
        "kind": kind,
        "images": images,
        "pad": [draw(PADS), draw(PADS)] if kind == "grid" else [0, 0],
        "tgt_dtype": draw(int_dtypes()) if kind == "flat" else "int64",
        "tgt_on": draw(PLACES) if wide and kind == "flat" else "cpu",
        "mask_on": draw(PLACES) if wide else "device",
    }


def mask_of(spec: dict) -> torch.Tensor:
    """The patch attention mask the spec's callers build (on the CPU): "grid" ``[B, Hp, Wp]`` with each
    image's top-left ``h x w`` rectangle set; "flat"/"flat_v25" ``[B, 1, max(h * w)]`` with each image's
    first ``h * w`` entries set."""
    images = spec["images"]
    if spec["kind"] == "grid":
        rows = max(h for h, _ in images) + spec["pad"][0]
        columns = max(w for _, w in images) + spec["pad"][1]
        mask = torch.zeros(len(images), rows, columns, dtype=torch.bool)
        for b, (h, w) in enumerate(images):
            mask[b, :h, :w] = True
        return mask
    longest = max(h * w for h, w in images)
    mask = torch.zeros(len(images), longest, dtype=torch.bool)
    for b, (h, w) in enumerate(images):
        mask[b, : h * w] = True
    return mask.unsqueeze(1)


def tgt_sizes_of(spec: dict) -> torch.Tensor | None:
    """MiniCPM-V's ``tgt_sizes`` (``[B, 2]`` patch rows, columns) for "flat"; None otherwise."""
    if spec["kind"] != "flat":
        return None
    return torch.tensor(spec["images"], dtype=INT_DTYPES[spec["tgt_dtype"]])


def _embeddings(side_module: Any, spec: dict) -> torch.nn.Module:
    """The side's own ``Idefics2VisionEmbeddings`` with a 1-channel, 1-wide config (patch_size 1, so
    ``num_patches_per_side == image_size == n``); its weights are only read for their device."""
    if spec["n"] < 1:
        raise HarnessError(f"num_patches_per_side {spec['n']} must be >= 1")
    config = SimpleNamespace(hidden_size=1, image_size=spec["n"], patch_size=1, num_channels=1)
    return side_module.Idefics2VisionEmbeddings(config).to(spec["device"])


class Idefics2PositionIdsInputs:
    """``get_position_ids(mask, tgt_sizes)`` on the side's own embeddings module; the thunk returns the
    position ids (``[B, mask positions]``, on the weights' device)."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _position_ids_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Idefics2VisionEmbeddings.get_position_ids")
        module = _embeddings(impl.module, spec)
        device = spec["device"]
        mask = mask_of(spec).to(device if spec["mask_on"] == "device" else "cpu")
        tgt_sizes = tgt_sizes_of(spec)
        if tgt_sizes is not None and spec["tgt_on"] == "device":
            tgt_sizes = tgt_sizes.to(device)
        get_position_ids = impl.function

        def call() -> torch.Tensor:
            return get_position_ids(module, mask, tgt_sizes)

        return call


def _untied(extent: int, n: int) -> int:
    """The nearest count at or below ``extent`` that shares no factor with ``n`` (1 always does): no
    fractional coordinate ``r / extent`` then equals a boundary ``k / n`` for ``0 < r < extent``."""
    while extent > 1 and math.gcd(extent, n) != 1:
        extent -= 1
    return extent


def _exact(extent: int) -> bool:
    """A power of two: every coordinate ``r / extent`` is an exact binary fraction, which 0.29.0's
    ``arange(0, 1 - 1e-6, 1 / extent)`` and 0.30.0's ``r / extent`` both compute exactly, so on a tie both
    compare the same value with the same boundary tensor and pick the same bucket."""
    return extent > 0 and extent & (extent - 1) == 0


class Idefics2PositionIdsUntiedInputs(Idefics2PositionIdsInputs):
    """The same callers with every image size moved to one whose fractional coordinates never sit on a
    bucket boundary (``gcd(size, n) == 1``; for MiniCPM-V 2.5 the flattened ``h * w``): there the two
    releases' float arithmetic cannot round a coordinate into another bucket (the distance to the nearest
    boundary is at least ``1 / (n * size)``), so only the mask/stride/``tgt_sizes`` logic is compared.
    A power-of-two size is kept (``_exact``: its ties are computed exactly on both sides), so a batch of
    2-row images, the only ``[B, 2, Wp]`` grid masks, stays drawn for every shipped ``n``.
    Used by the planted bugs and benign refactors of strategies/idefics2_vision_model/planted.py: the real
    copies differ at exact ties (docs/findings/README.md, F20), which would drown every plant."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return super().specs(available, contract).map(_untie)


def _untie(spec: dict) -> dict:
    n = spec["n"]
    images = []
    for h, w in spec["images"]:
        # gcd(h * w, n) == 1 when both are: MiniCPM-V 2.5's one-row layout (nb_w = h * w) is untied too
        hu, wu = (h if _exact(h) else _untied(h, n)), (w if _exact(w) else _untied(w, n))
        if spec["kind"] == "flat_v25" and not (_exact(hu * wu) or math.gcd(hu * wu, n) == 1):
            hu, wu = _untied(h, n), _untied(w, n)  # its one coordinate is r / (h * w)
        images.append([hu, wu])
    return {**spec, "images": images}
