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

import inspect
import math
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES, INT_DTYPES, choice_of, devices, float_dtypes, int_dtypes, seeded_floats

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


# --- idefics2-embeddings-forward: Idefics2VisionEmbeddings.forward ---------------------------------------

FORWARD_PATCHES = choice_of([1, 2, 3])  # a tiny patch_size (14 / 16 upstream): only n and the grid matter
FORWARD_CHANNELS = 3  # every caller hands the tower RGB pixels (idefics3, minicpmv, phi4mm, aria)
FORWARD_HIDDEN = st.integers(1, 8)
FLAT_LAYOUTS = choice_of(["row", "bucket"])
GRID_FORMS = choice_of(["tile", "padded"])
# One example in four hands the forward the ids itself (idefics3's encoder CUDA graph replay).
GIVEN_IDS = choice_of([False, False, False, True])


@st.composite
def _forward_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    base = _untie(draw(_position_ids_specs(available, contract)))
    n, kind, images = base["n"], base["kind"], base["images"]
    patch = draw(FORWARD_PATCHES)
    extra = draw(st.integers(0, patch - 1))  # image_size % patch_size: 384 = 27 * 14 + 6 (SmolVLM-Instruct)
    spec = {**base, "patch": patch, "image_size": n * patch + extra, "hidden": draw(FORWARD_HIDDEN),
            "seed": draw(st.integers(0, 2**31 - 1)), "weight_dtype": draw(float_dtypes())}
    spec["pixel_dtype"] = draw(float_dtypes(("float32", spec["weight_dtype"]))) if wide else spec["weight_dtype"]
    spec["noise_padding"] = draw(st.booleans()) if wide else False
    spec["ids_given"] = draw(GIVEN_IDS) if wide or kind == "grid" else False
    if kind == "grid":
        fits_tile = all(h <= n and w <= n for h, w in images)
        if fits_tile and draw(GRID_FORMS) == "tile":  # idefics3 / phi4mm: a whole image_size tile
            spec.update(grid_hw=[n, n], extra=[extra, extra], pad=[n - max(h for h, _ in images),
                                                                   n - max(w for _, w in images)])
        else:
            rows, columns = max(h for h, _ in images) + base["pad"][0], max(w for _, w in images) + base["pad"][1]
            spec.update(grid_hw=[rows, columns], extra=[draw(st.integers(0, patch - 1)) for _ in range(2)])
        return spec
    longest = max(h * w for h, w in images)
    spec["extra"] = [0, 0]
    if draw(FLAT_LAYOUTS) == "row" or longest == 0:  # minicpmv get_vision_hidden_states: (B, 3, p, L * p)
        spec["grid_hw"] = [1, max(longest, 1)]  # wide: a batch of empty images still has one (masked) patch
        return spec
    # minicpmv's encoder CUDA graph: a (B, 3, th * p, tw * p) bucket of th x tw >= longest patches, the mask
    # [B, 1, th * tw], tgt_sizes moved up front with async_tensor_h2d(..., dtype=torch.long)
    side = max(n, max(max(h, w) for h, w in images))
    tw = draw(st.integers(-(-longest // side), side))
    th = min(-(-longest // tw) + draw(st.integers(0, 1)), side)
    spec["grid_hw"] = [th, tw]
    if kind == "flat":
        spec.update(tgt_on=draw(PLACES) if wide else "device", tgt_dtype=draw(int_dtypes()) if wide else "int64")
    return spec


def forward_mask_of(spec: dict) -> torch.Tensor:
    """The forward's patch mask (CPU): "grid" ``[B, Hp, Wp]`` (the conv's grid) with each image's top-left
    ``h x w`` rectangle set (idefics3 ``get_patch_attention_mask``); "flat"/"flat_v25" ``[B, 1, Hp * Wp]``
    with each image's first ``h * w`` entries set (minicpmv ``patch_attn_mask[i, :num_patches_item]``)."""
    images, (rows, columns) = spec["images"], spec["grid_hw"]
    if spec["kind"] == "grid":
        mask = torch.zeros(len(images), rows, columns, dtype=torch.bool)
        for b, (h, w) in enumerate(images):
            mask[b, :h, :w] = True
        return mask
    mask = torch.zeros(len(images), rows * columns, dtype=torch.bool)
    for b, (h, w) in enumerate(images):
        mask[b, : h * w] = True
    return mask.unsqueeze(1)


def forward_pixels(spec: dict) -> torch.Tensor:
    """``pixel_values`` ``[B, 3, Hp * p + eh, Wp * p + ew]`` (float32, CPU, before the spec's dtype): seeded
    noise in every patch of an image, zero past it (the processors pad with zeros: idefics3's padded tiles,
    minicpmv's ``torch.zeros((B, 3, P, L))``), or noise everywhere (``noise_padding``, wide)."""
    (rows, columns), p, (eh, ew) = spec["grid_hw"], spec["patch"], spec["extra"]
    shape = (len(spec["images"]), FORWARD_CHANNELS, rows * p + eh, columns * p + ew)
    noise = seeded_floats(shape, "float32", spec["seed"] + 3, "cpu")
    if spec["noise_padding"]:
        return noise
    valid = forward_mask_of(spec).reshape(len(spec["images"]), 1, rows, columns).float()
    valid = valid.repeat_interleave(p, dim=2).repeat_interleave(p, dim=3)
    covered = torch.zeros(shape[0], 1, shape[2], shape[3])
    covered[:, :, : rows * p, : columns * p] = valid
    return noise * covered


def forward_weights(spec: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The seeded patch conv weight ``[D, 3, p, p]``, its bias ``[D]`` and the position table ``[n * n, D]``,
    in the spec's weight dtype on the CPU: the same on both sides and in the oracles."""
    d, p, dtype, seed = spec["hidden"], spec["patch"], spec["weight_dtype"], spec["seed"]
    n = spec["image_size"] // p
    return (seeded_floats((d, FORWARD_CHANNELS, p, p), dtype, seed, "cpu"),
            seeded_floats((d,), dtype, seed + 1, "cpu"),
            seeded_floats((n * n, d), dtype, seed + 2, "cpu"))


def _forward_module(side_module: Any, spec: dict) -> torch.nn.Module:
    """The side's own ``Idefics2VisionEmbeddings`` with a tiny config and the seeded weights."""
    config = SimpleNamespace(hidden_size=spec["hidden"], image_size=spec["image_size"], patch_size=spec["patch"],
                             num_channels=FORWARD_CHANNELS)
    module = side_module.Idefics2VisionEmbeddings(config)
    weight, bias, table = forward_weights(spec)
    with torch.no_grad():
        module.patch_embedding.weight.copy_(weight)
        module.patch_embedding.bias.copy_(bias)
        module.position_embedding.weight.copy_(table)
    return module.to(FLOAT_DTYPES[spec["weight_dtype"]]).to(spec["device"])


def takes_position_ids(function: Callable[..., Any]) -> bool:
    """0.29.0 added ``position_ids`` (idefics3's encoder CUDA graph hands it the replay buffer's ids);
    0.28.0's forward has no such parameter and always computes the ids itself."""
    return "position_ids" in inspect.signature(function).parameters


class Idefics2EmbeddingsForwardInputs:
    """``Idefics2VisionEmbeddings.forward(pixel_values, patch_attention_mask, tgt_sizes[, position_ids])``
    on the side's own module (tiny config, seeded weights, the same on both sides); the thunk returns the
    embeddings ``[B, Hp * Wp, D]``.

    Callers (vllm 0.30.0 .. 0.34.0), all through ``Idefics2VisionTransformer.forward``
    (idefics2_vision_model.py), which calls ``self.embeddings(pixel_values=..., patch_attention_mask=...,
    tgt_sizes=..., position_ids=...)`` with keywords:

    * idefics3.py (Idefics3, SmolVLM) ``image_pixels_to_features``: ``pixel_values`` ``[B, 3, image_size,
      image_size]`` tiles cast to the weights' dtype, ``patch_attention_mask = get_patch_attention_mask(
      pixel_attention_mask)`` (``[B, n, n]``, each image a top-left rectangle: the processor pads at the
      bottom/right), ``tgt_sizes=None``; ``image_size`` need not be a multiple of the patch (384 / 14: the
      conv and the mask's ``unfold`` both drop the last 6 pixels). Its encoder CUDA graph
      (``encoder_cudagraph_forward``) passes ``position_ids=self.model.get_position_ids(pixel_attention_mask)``
      (the replay buffer, built by the same ``embeddings.get_position_ids``): "ids_given";
    * phi4mm.py ``get_img_features``: ``img_processor(img_embeds, patch_attention_mask=attention_mask)``,
      448 px crops with their ``image_attention_mask`` (``[crops, 32, 32]``); aria's
      ``_create_patch_attention_mask``: the same grid form ("grid", "tile" or "padded");
    * minicpmv.py ``get_vision_hidden_states``: ``all_pixel_values`` ``torch.zeros((B, 3, P, L))`` (P the
      patch size, each slice's patches in a row, zeros past it), ``patch_attn_mask[i, :num_patches_item] =
      True`` passed as ``.unsqueeze(1)`` (``[B, 1, L]``), ``tgt_sizes`` ``[B, 2]`` kept on the CPU (2.6 / 4.x;
      2.5 passes ``tgt_sizes=None``): "flat"/"flat_v25", layout "row"; its encoder CUDA graph
      (``encoder_cudagraph_forward``): a ``(B, 3, th * p, tw * p)`` pixel bucket with the flat mask
      ``arange(th * tw) < tgt_sizes.prod(-1)`` and ``tgt_sizes`` already on the device as ``torch.long``
      (``async_tensor_h2d``): layout "bucket".

    Every image size is untied (``_untie``): the two releases differ where a patch coordinate sits exactly
    on a bucket boundary (docs/findings/README.md, F20, fuzzed and accepted by idefics2-position-ids), which
    would hide every other change of the forward; sizes coprime with ``n`` (or powers of two) keep every mask
    form, kind and grid. The wide contract adds what 0.28.0/0.29.0 also took (those of
    ``Idefics2PositionIdsInputs``: other ``n``, images past ``n`` or empty, host/device ``tgt_sizes`` and mask)
    plus float32 pixels for half weights (the forward casts them) and noise in the padding. The ids-given
    form is passed only to a side whose forward takes ``position_ids`` (0.28.0's computes them itself).
    """

    # 0.28.0's forward has no ``position_ids``: fits() judges the signature instead of the engine's check
    fits_checks_signature = True

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _forward_specs(available, contract)

    def fits(self, impl: Impl) -> str | None:
        """None where the side's forward takes the three arguments every caller passes and needs no other."""
        parameters = inspect.signature(impl.function).parameters
        missing = [p for p in ("pixel_values", "patch_attention_mask", "tgt_sizes") if p not in parameters]
        known = {"self", "pixel_values", "patch_attention_mask", "tgt_sizes", "position_ids"}
        required = [name for name, p in parameters.items() if name not in known
                    and p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if missing or required:
            return f"forward lacks {missing} or requires {required}"
        return None

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Idefics2VisionEmbeddings.forward")
        module = _forward_module(impl.module, spec)
        device = spec["device"]
        pixels = forward_pixels(spec).to(FLOAT_DTYPES[spec["pixel_dtype"]]).to(device)
        mask = forward_mask_of(spec).to(device if spec["mask_on"] == "device" else "cpu")
        tgt_sizes = tgt_sizes_of(spec)
        if tgt_sizes is not None and spec["tgt_on"] == "device":
            tgt_sizes = tgt_sizes.to(device)
        forward = impl.function
        given = spec["ids_given"] and takes_position_ids(forward) and hasattr(module, "get_position_ids")

        def call() -> torch.Tensor:
            with torch.inference_mode():
                if given:  # idefics3's replay buffer: the module's own ids, then the forward
                    ids = module.get_position_ids(mask, tgt_sizes)
                    return forward(module, pixel_values=pixels, patch_attention_mask=mask, tgt_sizes=tgt_sizes,
                                   position_ids=ids)
                return forward(module, pixel_values=pixels, patch_attention_mask=mask, tgt_sizes=tgt_sizes)

        return call
