"""Inputs for glm4_1v's ``Glm4vVisionEmbeddings.forward`` and
``Glm4vVisionTransformer.pos_embeds_interpolate``.

Built the way upstream builds them: ``pos_embeds_interpolate`` walks
``grid_thw`` and, per image, passes ``lengths=[h*w]*t``, ``image_shapes`` with
that grid, and the merge-permuted ``h``/``w`` patch coordinates repeated ``t``
times, already on the device. Data-parallel ranks may hold fewer shapes than
lengths, so ``lengths`` longer than ``image_shapes`` (cycled by modulo) is part
of the caller contract; so are zero lengths and empty lists. The wide contract
adds every form the 0.27.1 forward accepted: ``lengths``/``image_shapes`` as
numpy arrays or CPU/device tensors (int32/int64), coordinates on the CPU,
coordinates that are not a grid, fewer lengths than shapes, no shapes at all.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import INT_DTYPES, devices, float_dtypes, in_form, int_dtypes, seeded_floats, tensor_forms
from strategies.grids import grid_thws

PATCH_SIZE = 14  # GLM-4.1V's patch size; only image_size // patch_size matters

# Strategies with fixed arguments are built once: strategies/common.py says why.
COORD_KINDS = st.sampled_from(["grid", "random"])
COORD_PLACES = st.sampled_from(["device", "cpu"])
MERGE_SIZES = st.sampled_from([1, 2])


def _weights(draw: st.DrawFn) -> dict:
    return {
        "hidden_size": draw(st.integers(1, 16)),
        "orig_size": draw(st.integers(1, 8)),
        "weight_dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@st.composite
def _embeddings_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = {"device": draw(devices(available)), **_weights(draw)}
    shapes = draw(grid_thws(min_size=0 if wide else 1))
    if shapes and not (wide and draw(st.booleans())):
        # Upstream's shape: one entry per frame, cycling through the shapes.
        count = draw(st.integers(len(shapes) if not wide else 0, 3 * len(shapes)))
        full = [shapes[i % len(shapes)][1] * shapes[i % len(shapes)][2] for i in range(count)]
        # A zero-length frame about one time in ten (shrinks towards none).
        dice = draw(st.lists(st.integers(0, 9), min_size=count, max_size=count))
        lengths = [0 if d == 9 else n for n, d in zip(full, dice)]
    else:
        lengths = draw(st.lists(st.integers(0, 40), max_size=6))
    spec.update(
        image_shapes=shapes,
        lengths=lengths,
        coords=draw(COORD_KINDS) if wide else "grid",
        lengths_form=draw(tensor_forms()) if wide else "list",
        shapes_form=draw(tensor_forms()) if wide else "list",
        meta_dtype=draw(int_dtypes()) if wide else "int64",
        coords_on=draw(COORD_PLACES) if wide else "device",
        coords_dtype=draw(int_dtypes()) if wide else "int64",
    )
    return spec


def merged_grid_coords(h: int, w: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Patch coordinates in upstream's merge-window order (pos_embeds_interpolate)."""
    h_coords = torch.arange(h).unsqueeze(1).expand(-1, w)
    w_coords = torch.arange(w).unsqueeze(0).expand(h, -1)

    def order(c: torch.Tensor) -> torch.Tensor:
        return c.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).flatten()

    return order(h_coords), order(w_coords)


def grid_coords(spec: dict) -> tuple[torch.Tensor, torch.Tensor]:
    shapes, blocks_h, blocks_w = spec["image_shapes"], [], []
    generator = torch.Generator().manual_seed(spec["seed"] + 1)
    for i, length in enumerate(spec["lengths"]):
        _, h, w = shapes[i % len(shapes)] if shapes else (1, 8, 8)
        if spec["coords"] == "grid" and length == h * w and h % 2 == 0 and w % 2 == 0:
            hc, wc = merged_grid_coords(h, w, 2)
        else:
            hc = torch.randint(0, h, (length,), generator=generator)
            wc = torch.randint(0, w, (length,), generator=generator)
        blocks_h.append(hc)
        blocks_w.append(wc)
    empty = torch.zeros(0, dtype=torch.long)
    h_all = torch.cat(blocks_h) if blocks_h else empty
    w_all = torch.cat(blocks_w) if blocks_w else empty
    dtype = INT_DTYPES[spec["coords_dtype"]]
    where = spec["device"] if spec["coords_on"] == "device" else "cpu"
    return h_all.to(dtype).to(where), w_all.to(dtype).to(where)


def _embedding_module(side_module: ModuleType, spec: dict) -> torch.nn.Module:
    """The side's own ``Glm4vVisionEmbeddings`` (from ``impl.module``) with drawn weights."""
    cls = side_module.Glm4vVisionEmbeddings
    orig, hidden = spec["orig_size"], spec["hidden_size"]
    config = SimpleNamespace(hidden_size=hidden, image_size=orig * PATCH_SIZE, patch_size=PATCH_SIZE)
    module = cls(config)
    weight = seeded_floats((orig * orig, hidden), spec["weight_dtype"], spec["seed"], spec["device"])
    module.position_embedding.weight = torch.nn.Parameter(weight, requires_grad=False)
    return module.to(spec["device"])


class Glm4EmbeddingsInputs:
    """``Glm4vVisionEmbeddings.forward(embeddings, lengths, image_shapes, h_coords, w_coords)``."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _embeddings_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Glm4vVisionEmbeddings.forward")
        module = _embedding_module(impl.module, spec)
        device = spec["device"]
        h_coords, w_coords = grid_coords(spec)
        total = h_coords.shape[0]
        embeddings = seeded_floats((total, spec["hidden_size"]), spec["weight_dtype"], spec["seed"] + 2, device)
        lengths = in_form(spec["lengths"], spec["lengths_form"], spec["meta_dtype"], device)
        shapes = in_form(spec["image_shapes"], spec["shapes_form"], spec["meta_dtype"], device)

        def call() -> torch.Tensor:
            with torch.inference_mode():
                return impl.function(module, embeddings, lengths, shapes, h_coords, w_coords)

        return call


@st.composite
def _pos_embeds_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    merge = draw(MERGE_SIZES)
    return {
        "device": draw(devices(available)),
        **_weights(draw),
        "merge": merge,
        "grid_thw": draw(grid_thws(min_size=0, max_size=4, merge=merge)),
    }


class Glm4PosEmbedsInputs:
    """``Glm4vVisionTransformer.pos_embeds_interpolate(grid_thw)``: the host-built
    coordinates and their staging, through the side's own embeddings module."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _pos_embeds_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Glm4vVisionTransformer.pos_embeds_interpolate")
        embeddings = _embedding_module(impl.module, spec)
        tower = impl.owner(embeddings, spec["merge"])
        grid_thw = [list(g) for g in spec["grid_thw"]]

        def call() -> torch.Tensor:
            with torch.inference_mode():
                return impl.function(tower, grid_thw)

        return call
