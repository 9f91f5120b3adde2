"""Inputs for paddleocr_vl's ``SiglipEncoder.forward`` and
``PaddleOCRVLForConditionalGeneration.encode_image`` (docs/design.md row 5).

How 0.28.0 calls them:

* ``encode_image(pixel, grid)`` is called once per image by
  ``_process_image_input`` (``zip(pixel_values, image_grid_thw)``):
  ``image_grid_thw`` is a batched field, so ``grid`` is one row of an int64
  ``(num_images, 3)`` tensor on the device, and ``pixel`` that image's
  ``(t*h*w, 3, patch, patch)`` float tensor on the device. The drawn batch has
  one to three images; the call encodes one of them.
* ``SiglipEncoder.forward`` is only reached from ``encode_image`` (through
  ``SiglipVisionModel`` and ``SiglipVisionTransformer``), all by keyword:
  ``image_grid_thw=[(t, h, w)]`` (one tuple of Python ints, from ``.tolist()``),
  ``cu_seqlens`` an int32 device tensor ``[0, t*h*w]``, ``inputs_embeds`` of
  shape ``(1, t*h*w, hidden)`` and no explicit position ids.

The wide contract adds every form the 0.27.1 functions accepted: for the
encoder several images, grids nested one level (``flatten_list``), as numpy
arrays or CPU/device tensors of int32/int64, rarely no image at all or grids
with a zero extent, ``cu_seqlens`` as a list, numpy array or CPU/device tensor
of either dtype, and explicit height/width position ids (the grid's own, ids
below ``max(h, w)`` and -- on the CPU only, since an out-of-range gather is a
device-side assert on CUDA -- ids past it, which 0.27.1 sized its rope table
for); for ``encode_image`` the grid row as numpy or a CPU/device tensor of
int32/int64, zero extents included (a list has no ``.tolist()``: both versions
raise, so lists are not drawn).
"""

from __future__ import annotations

import functools
import inspect
import re
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl, release_of
from strategies.common import (
    FLOAT_DTYPES,
    INT_DTYPES,
    choice_of,
    devices,
    float_dtypes,
    in_form,
    int_dtypes,
    seeded_floats,
    tensor_forms,
)
from strategies.grids import grid_thws

ATTN_BACKENDS = ("FLASH_ATTN", "ROCM_AITER_FA", "TRITON_ATTN", "TORCH_SDPA")
# How ``image_grid_thw`` reaches the encoder: "tuples" is what encode_image
# builds; "nested" uses flatten_list's one level of lists; the rest are arrays.
ENCODER_GRID_FORMS = ("tuples", "nested", "numpy", "cpu_tensor", "device_tensor")
# Explicit height/width position ids: none (the caller), the grid's own ids,
# ids below max(h, w), or ids past it (0.27.1 sized the table from the ids).
POSITION_ID_MODES = ("none", "grid", "bounded", "past_grid")

# Strategies with fixed arguments, built once (strategies/common.py says why).
MERGES = st.sampled_from([1, 2])
HEAD_DIMS = st.sampled_from([2, 4, 6, 8])
ATTN_BACKEND_CHOICES = st.sampled_from(ATTN_BACKENDS)
ENCODER_GRID_FORM_CHOICES = st.sampled_from(ENCODER_GRID_FORMS)
ID_PLACES = st.sampled_from(["device", "cpu"])


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def groupings(count: int) -> st.SearchStrategy[list[int]]:
    """How ``count`` grids are laid out for ``flatten_list``: each entry is
    0 for a bare ``(t, h, w)`` tuple or k >= 1 for a list of k tuples."""
    if count < 0:
        raise HarnessError(f"groupings: count={count} must be >= 0")

    @st.composite
    def layout(draw: st.DrawFn) -> list[int]:
        sizes, left = [], count
        while left:
            size = draw(st.integers(0, left))
            sizes.append(size)
            left -= max(size, 1)
        return sizes

    return layout()


def _running_sum(lengths: list[int]) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def _patches(grid: Sequence[int]) -> int:
    t, h, w = grid
    return t * h * w


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
@st.composite
def _wide_grids(draw: st.DrawFn, *, merge: int, max_size: int, allow_empty: bool, degenerate: bool) -> list[list[int]]:
    """Grids for the wide contract: mostly processor-shaped; with ``degenerate``
    rarely no image at all (``allow_empty``) or grids with a zero extent, which
    no processor makes but 0.27.1 took. The rare cases sit at the top of the
    dice so shrinking moves away from them unless a failure needs them."""
    grids = draw(grid_thws(min_size=1, max_size=max_size, merge=merge))
    dice = draw(st.integers(0, 19)) if degenerate else 0
    if dice == 19 and allow_empty:
        return []
    if dice >= 18:
        axis = draw(st.integers(0, 2))
        hit = draw(st.lists(st.booleans(), min_size=len(grids), max_size=len(grids)))
        return [[0 if z and j == axis else n for j, n in enumerate(g)] for g, z in zip(grids, hit)]
    return grids


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
@st.composite
def _position_ids(draw: st.DrawFn, device: str, past_grid: bool) -> dict:
    """The wide contract's explicit ids (see POSITION_ID_MODES)."""
    modes = list(POSITION_ID_MODES)
    if device.startswith("cuda") or not past_grid:
        modes.remove("past_grid")
    return {
        "ids": draw(choice_of(modes)),
        "ids_dtype": draw(int_dtypes()),
        "ids_on": draw(ID_PLACES),
        "ids_past": draw(st.integers(1, 3)),
    }


@st.composite
def _encoder_specs(draw: st.DrawFn, available: Sequence[str], contract: str, known_findings: bool) -> dict:
    wide = contract == "wide"
    device = draw(devices(available))
    if wide:
        merge = draw(MERGES)
        grids = draw(_wide_grids(merge=merge, max_size=3, allow_empty=True, degenerate=known_findings))
    else:
        grids = draw(grid_thws(min_size=1, max_size=1, merge=2))
    spec = {
        "device": device,
        "num_heads": draw(st.integers(1, 2)),
        "head_dim": draw(HEAD_DIMS),
        "num_layers": draw(st.integers(1, 2)),
        "attn_backend": draw(ATTN_BACKEND_CHOICES),
        "embeds_dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "grids": grids,
        "grid_form": draw(ENCODER_GRID_FORM_CHOICES) if wide else "tuples",
        "grid_dtype": draw(int_dtypes()) if wide else "int64",
        "cu_seqlens": _running_sum([_patches(g) for g in grids]),
        "cu_form": draw(tensor_forms()) if wide else "device_tensor",
        "cu_dtype": draw(int_dtypes()) if wide else "int32",
    }
    spec["groups"] = draw(groupings(len(grids))) if spec["grid_form"] == "nested" else []
    if wide:
        spec.update(draw(_position_ids(device, known_findings)))
    else:
        spec.update(ids="none", ids_dtype="int64", ids_on="device", ids_past=1)
    return spec


def _grid_argument(spec: dict) -> Any:
    """``image_grid_thw`` in the drawn form."""
    grids, form = spec["grids"], spec["grid_form"]
    if form == "tuples":
        return [tuple(g) for g in grids]
    if form == "nested":
        out, rest = [], [tuple(g) for g in grids]
        for size in spec["groups"]:
            if size == 0:
                out.append(rest.pop(0))
            else:
                out.append([rest.pop(0) for _ in range(size)])
        if rest:
            raise HarnessError(f"groups {spec['groups']} do not cover {len(grids)} grids")
        return out
    return in_form(grids, form, spec["grid_dtype"], spec["device"])


def grid_position_ids(grids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Height/width ids exactly as the encoder derives them from the grids."""
    empty = torch.zeros(0, dtype=torch.long)
    # max(1, .): a grid with a zero extent has no patches, and no id to divide.
    pids = torch.cat([empty] + [torch.arange(_patches(g)) % max(1, g[1] * g[2]) for g in grids])
    widths = torch.cat([empty] + [torch.full((_patches(g),), max(1, g[2])) for g in grids])
    return pids // widths, pids % widths


def explicit_position_ids(spec: dict) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    mode, grids = spec["ids"], spec["grids"]
    if mode == "none":
        return None, None
    if mode == "grid":
        h_ids, w_ids = grid_position_ids(grids)
    else:
        bound = max(1, max((max(h, w) for _, h, w in grids), default=0))
        if mode == "past_grid":
            bound += spec["ids_past"]
        total = sum(_patches(g) for g in grids)
        generator = torch.Generator().manual_seed(spec["seed"] + 3)
        h_ids = torch.randint(0, bound, (total,), generator=generator)
        w_ids = torch.randint(0, bound, (total,), generator=generator)
    where = spec["device"] if spec["ids_on"] == "device" else "cpu"
    dtype = INT_DTYPES[spec["ids_dtype"]]
    return h_ids.to(dtype).to(where), w_ids.to(dtype).to(where)


def _encoder(module: ModuleType, spec: dict) -> torch.nn.Module:
    """The side's own ``SiglipEncoder`` (from ``impl.module``) with recording layers."""
    config = SimpleNamespace(
        hidden_size=spec["num_heads"] * spec["head_dim"],
        num_attention_heads=spec["num_heads"],
        num_hidden_layers=spec["num_layers"],
        attn_backend=module.AttentionBackendEnum[spec["attn_backend"]],
    )
    return module.SiglipEncoder(config, prefix="visual.vision_model.encoder").to(spec["device"])


class PaddleOCREncoderInputs:
    """``SiglipEncoder.forward(inputs_embeds, cu_seqlens, image_grid_thw,
    height_position_ids, width_position_ids)``; the observable is what every
    (recording) layer received plus the returned hidden states.

    ``known_findings=False`` leaves out the wide inputs known to diverge
    (explicit ids past ``max(h, w)``, an empty batch, grids with a zero
    extent; docs in tests/e2e/test_paddleocr_vl.py), so a wide run can look for
    other divergences.
    """

    def __init__(self, known_findings: bool = True) -> None:
        self.known_findings = known_findings

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _encoder_specs(available, contract, self.known_findings)

    def runs_on(self, spec: dict, device: str) -> bool:
        """Ids past the grid are drawn for cpu only (``_position_ids``): not run on CUDA either."""
        return not (device.startswith("cuda") and spec["ids"] == "past_grid")

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be SiglipEncoder.forward")
        encoder = _encoder(impl.module, spec)
        total = sum(_patches(g) for g in spec["grids"])
        hidden = spec["num_heads"] * spec["head_dim"]
        embeds = seeded_floats((1, total, hidden), spec["embeds_dtype"], spec["seed"], spec["device"])
        grid = _grid_argument(spec)
        cu_seqlens = in_form(spec["cu_seqlens"], spec["cu_form"], spec["cu_dtype"], spec["device"])
        h_ids, w_ids = explicit_position_ids(spec)

        def call() -> dict:
            with torch.inference_mode():
                out = impl.function(
                    encoder,
                    inputs_embeds=embeds,
                    cu_seqlens=cu_seqlens,
                    image_grid_thw=grid,
                    height_position_ids=h_ids,
                    width_position_ids=w_ids,
                )
            return {"hidden_states": out, "layers": [layer.received for layer in encoder.layers]}

        return call


# For records and tests that fuzz the wide contract without the known findings.
ENCODER_INPUTS_WITHOUT_FINDINGS = PaddleOCREncoderInputs(known_findings=False)


@st.composite
def _encode_image_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    if wide:
        grids = draw(_wide_grids(merge=draw(MERGES), max_size=3, allow_empty=False, degenerate=True))
    else:
        grids = draw(grid_thws(min_size=1, max_size=3, merge=2))
    return {
        "device": draw(devices(available)),
        "grids": grids,
        "image": draw(st.integers(0, len(grids) - 1)),
        "grid_form": draw(tensor_forms(("numpy", "cpu_tensor", "device_tensor"))) if wide else "device_tensor",
        "grid_dtype": draw(int_dtypes()) if wide else "int64",
        "patch_size": draw(st.integers(1, 3)),
        "pixel_dtype": draw(float_dtypes()),
        "visual_dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def _one_image(spec: dict) -> tuple[torch.Tensor, Any]:
    """Image ``spec["image"]`` of the batch, as _process_image_input hands it over."""
    k, grids, size = spec["image"], spec["grids"], spec["patch_size"]
    batch_grid = in_form(grids, spec["grid_form"], spec["grid_dtype"], spec["device"])
    pixels = seeded_floats((_patches(grids[k]), 3, size, size), spec["pixel_dtype"], spec["seed"], spec["device"])
    return pixels, batch_grid[k]


# How each release's caller hands encode_image its grids -- the rule, written
# once (vllm/model_executor/models/paddleocr_vl.py,
# PaddleOCRVLForConditionalGeneration._process_image_input):
# * up to 0.32.0, "row": ``for pixel, grid in zip(pixel_values, image_grid_thw)``
#   -- one call per image, ``grid`` a row of the batched int64 device tensor;
# * from 0.33.0, "tuples": ``grids = [tuple(grid) for grid in
#   image_grid_thw.tolist()]`` and one call with the flat patches of all images,
#   ``encode_image(pixel_values, image_grid_thw: list[tuple[int, int, int]])``.
# A rebuilt side's release decides; an unversioned one (a checkout) is read
# off encode_image's annotation of ``image_grid_thw`` (a string in rebuilt
# modules); the copies (0.27.1, 0.28.0) take rows.
TUPLE_GRIDS_SINCE = (0, 33)
GRID_FORM_ANNOTATIONS = {"torch.Tensor": "row", "Tensor": "row", "list[tuple[int, int, int]]": "tuples"}


def encode_image_grid_form(impl: Impl) -> str | None:
    """``"row"`` or ``"tuples"``: how ``impl``'s release is called (the rule above);
    None where neither its release nor its signature says."""
    release = release_of(impl)
    found = re.match(r"(\d+)\.(\d+)", release or "")
    if found:
        return "tuples" if (int(found[1]), int(found[2])) >= TUPLE_GRIDS_SINCE else "row"
    try:
        annotation = inspect.signature(impl.function).parameters["image_grid_thw"].annotation
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(annotation, str):
        annotation = annotation.__name__ if isinstance(annotation, type) else repr(annotation)
    return GRID_FORM_ANNOTATIONS.get(" ".join(annotation.split()).replace("[ ", "[").replace(" ]", "]"))


class PaddleOCREncodeImageInputs:
    """``PaddleOCRVLForConditionalGeneration.encode_image(pixel_values,
    image_grid_thw)`` with a recording vision tower: the observable is the
    keyword arguments the tower received.

    Each side is called in its own release's form (``encode_image_grid_form``):
    a row gets image ``spec["image"]``'s pixels and grid row, tuples get the same
    image as a batch of one, ``[tuple(row.tolist())]`` -- the call 0.33.0's
    ``_process_image_input`` makes for that image alone, so both sides' towers
    see one image. 0.33.0 leaves ``cu_seqlens`` on the host for the tower
    (``torch.from_numpy(np.cumsum(...))``), whose ``SiglipEncoder.forward``
    stages it to the device first thing (``if cu_seqlens.is_cpu: cu_seqlens =
    async_tensor_h2d(...)``): where it was handed is not observable past the
    tower, so for tuples the recorded ``cu_seqlens`` is moved as that line
    moves it before the sides are compared."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _encode_image_specs(available, contract)

    def fits(self, impl: Impl) -> str | None:
        """None when the side's grid form is known, else why the input model cannot call it."""
        if encode_image_grid_form(impl) is not None:
            return None
        return ("neither its release nor encode_image's image_grid_thw annotation says whether it takes a grid "
                "row (<= 0.32.0) or a list of (t, h, w) tuples (>= 0.33.0)")

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be PaddleOCRVLForConditionalGeneration.encode_image")
        visual = impl.module.SiglipVisionModel(FLOAT_DTYPES[spec["visual_dtype"]])
        model = impl.owner(visual)
        pixels, grid = _one_image(spec)
        form = encode_image_grid_form(impl)
        if form == "row":

            def call() -> dict:
                with torch.inference_mode():
                    return impl.function(model, pixels, grid)

            return call
        if form != "tuples":
            raise HarnessError(f"{impl.path}: {self.fits(impl)}")
        grids = [tuple(grid.tolist())]  # the caller's .tolist(), before the call

        def tuples_call() -> dict:
            with torch.inference_mode():
                kwargs = dict(impl.function(model, pixels, grids))
                kwargs["cu_seqlens"] = kwargs["cu_seqlens"].to(pixels.device, non_blocking=True)
                return kwargs

        return tuples_call

