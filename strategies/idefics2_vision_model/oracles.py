"""Oracles of ``Idefics2VisionEmbeddings.get_position_ids(patch_attention_mask, tgt_sizes)``
(vllm/model_executor/models/idefics2_vision_model.py, 0.29.0 / 0.30.0), written from what the ids mean.

The NaViT position scheme (Idefics2's docstring: "Patch n' Pack"): an image of ``nb_h x nb_w`` patches
is laid over the pretrained ``n x n`` position grid (``n = num_patches_per_side``); patch ``(r, c)`` takes
the position of the grid cell its fractional coordinate falls into, ``bucket(r / nb_h) * n +
bucket(c / nb_w)``, where ``bucket(x)`` counts the boundaries ``k / n`` (``k = 1 .. n - 1``) at or below
``x`` (``torch.bucketize(..., right=True)``) -- exactly ``floor(r * n / nb_h)`` in rational arithmetic.
The patches of image ``b`` are its mask's true positions in row-major order: the top-left ``nb_h x nb_w``
rectangle of a ``[B, Hp, Wp]`` mask (idefics3), the first ``nb_h * nb_w`` entries of a
``[B, 1, L]`` one (MiniCPM-V, ``tgt_sizes[b] = (nb_h, nb_w)``; without ``tgt_sizes``, MiniCPM-V 2.5, one
row of ``nb_w = h * w`` patches). Every other position is padding and gets id 0.

Both releases compute ``r / nb`` and the boundaries in float32, so where ``r * n / nb`` is an integer
(a coordinate exactly on a boundary) either neighbouring bucket can come out, and the two releases do
differ there (docs/findings/README.md, F20); the invariant accepts either bucket at such a tie and
nothing else.

The thunk (strategies/idefics2_vision_model/inputs.py) returns the ids; the spec names the images.
No consumer: the ids index ``self.position_embedding`` on the device.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference, per_spec
from strategies.common import FLOAT_DTYPES
from strategies.idefics2_vision_model.inputs import forward_mask_of, forward_pixels, forward_weights, mask_of


def _ids(output: Any) -> tuple[torch.Tensor | None, str | None]:
    if not isinstance(output, torch.Tensor):
        return None, f"output is {type(output).__name__}, not a tensor of ids"
    return output, None


def _layout(spec: dict) -> list[tuple[int, int]]:
    """Per image, the ``(nb_h, nb_w)`` its patches are laid out as (module docstring)."""
    if spec["kind"] == "flat_v25":
        return [(1 if h * w else 0, h * w) for h, w in spec["images"]]
    return [(h, w) for h, w in spec["images"]]


def _in_caller_range(spec: dict) -> bool:
    """The meaning above covers images of 1 .. n patches per side; wide specs past that (or empty
    images) are left to the agreement check."""
    return all(1 <= h <= spec["n"] and 1 <= w <= spec["n"] for h, w in spec["images"])


def position_ids_shape_follows_the_mask(spec: dict, output: Any) -> str | None:
    """One int64 id per mask position (``[B, Hp * Wp]`` or ``[B, L]``), on the device of the position
    embedding's weights (the caller indexes ``self.position_embedding`` with it)."""
    ids, problem = _ids(output)
    if problem:
        return problem
    mask = mask_of(spec)
    want = (mask.shape[0], mask[0].numel())
    if tuple(ids.shape) != want or ids.dtype != torch.int64:
        return f"ids are {tuple(ids.shape)} {ids.dtype}, expected {want} torch.int64"
    if ids.device.type != torch.device(spec["device"]).type:
        return f"ids are on {ids.device}, the embedding weights on {spec['device']}"
    return None


def position_ids_padding_is_zero(spec: dict, output: Any) -> str | None:
    """A mask position that is not a patch of its image gets id 0."""
    ids, problem = _ids(output)
    if problem or position_ids_shape_follows_the_mask(spec, output):
        return problem
    flat = mask_of(spec).reshape(len(spec["images"]), -1)
    padding = ids.cpu()[~flat]
    if padding.numel() and bool((padding != 0).any()):
        return f"{int((padding != 0).sum())} padding position(s) have a non-zero id"
    return None


def _allowed(r: int, nb: int, n: int) -> set[int]:
    """The buckets coordinate ``r`` of ``nb`` may take: ``floor(r * n / nb)``, and one below it when
    ``r / nb`` sits exactly on a boundary (float32 rounding either way)."""
    exact, tie = divmod(r * n, nb)
    buckets = {min(exact, n - 1)}
    if tie == 0 and r > 0:
        buckets.add(exact - 1)
    return buckets


def position_ids_bucket_each_coordinate(spec: dict, output: Any) -> str | None:
    """Patch ``(r, c)`` of an ``nb_h x nb_w`` image (its mask's true positions, row-major) has id
    ``bh * n + bw`` with ``bh = floor(r * n / nb_h)`` and ``bw = floor(c * n / nb_w)``, or one bucket
    lower where the coordinate is exactly on a boundary."""
    ids, problem = _ids(output)
    if problem or position_ids_shape_follows_the_mask(spec, output) or not _in_caller_range(spec):
        return problem
    n = spec["n"]
    flat = mask_of(spec).reshape(len(spec["images"]), -1)
    ids = ids.cpu()
    for b, (nb_h, nb_w) in enumerate(_layout(spec)):
        got = ids[b][flat[b]].tolist()
        if len(got) != nb_h * nb_w:
            return f"image {b}: {len(got)} patch positions, its layout has {nb_h} x {nb_w}"
        for k, value in enumerate(got):
            r, c = divmod(k, nb_w)
            bh, bw = divmod(value, n)
            if bh not in _allowed(r, nb_h, n) or bw not in _allowed(c, nb_w, n):
                return (f"image {b} ({nb_h} x {nb_w} patches, n={n}): patch ({r}, {c}) has id {value} = "
                        f"({bh}, {bw}), expected buckets {sorted(_allowed(r, nb_h, n))} x "
                        f"{sorted(_allowed(c, nb_w, n))}")
    return None


# --- idefics2-embeddings-forward: Idefics2VisionEmbeddings.forward ---------------------------------------
# The forward's meaning (the HF Idefics2 / NaViT embeddings it mirrors): position k of image b is the patch
# projection of its p x p pixels (the conv, kernel == stride == p, weight and bias) plus row id(b, k) of the
# position table, where id is 0 at a padding position and the NaViT bucket (module docstring above) at a
# patch. Written from that meaning with an independent float64 projection (an einsum over the pixel
# blocks, no conv) and an integer per-image loop for the ids, from the seeded weights both sides load
# (strategies/idefics2_vision_model/inputs.py ``forward_weights``).

_EPS = {"float32": torch.finfo(torch.float32).eps, "bfloat16": torch.finfo(torch.bfloat16).eps,
        "float16": torch.finfo(torch.float16).eps}


@per_spec
def forward_parts(spec: dict) -> dict[str, torch.Tensor]:
    """float64 on the CPU: ``patch`` (the projection, ``[B, Hp * Wp, D]``), ``scale`` (``sum |w| |x| + |b|``,
    what its rounding is proportional to) and ``table`` (``[n * n, D]``). The pixels are rounded as the
    forward rounds them: to the pixel dtype, then to the weights' (``pixel_values.to(target_dtype)``)."""
    weight, bias, table = (t.double() for t in forward_weights(spec))
    pixels = forward_pixels(spec).to(FLOAT_DTYPES[spec["pixel_dtype"]]).to(FLOAT_DTYPES[spec["weight_dtype"]])
    (rows, columns), p, batch = spec["grid_hw"], spec["patch"], len(spec["images"])
    blocks = pixels.double()[:, :, : rows * p, : columns * p].reshape(batch, -1, rows, p, columns, p)
    patch = torch.einsum("bchiwj,dcij->bhwd", blocks, weight) + bias
    scale = torch.einsum("bchiwj,dcij->bhwd", blocks.abs(), weight.abs()) + bias.abs()
    return {"patch": patch.reshape(batch, rows * columns, -1), "scale": scale.reshape(batch, rows * columns, -1),
            "table": table}


@per_spec
def forward_ids(spec: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(exact, lower_h, lower_w)``, each ``[B, Hp * Wp]`` int64: the exact id ``floor(r * n / nb_h) * n +
    floor(c * n / nb_w)`` of every patch (0 at padding), computed image by image in integers, and the bucket
    rows/columns one lower where the coordinate sits exactly on a boundary (either may come out: F20), else
    the exact ones. Only for specs in the caller range (1 .. n patches per side)."""
    n = spec["image_size"] // spec["patch"]
    flat = forward_mask_of(spec).reshape(len(spec["images"]), -1)
    width = flat.shape[1]
    # Filled as lists, one tensor each at the end: per-element tensor stores made this oracle most of an
    # example's time (and of shrinking a failure).
    bh_exact, bh_low, bw_exact, bw_low = ([0] * flat.numel() for _ in range(4))
    for b, (nb_h, nb_w) in enumerate(_layout(spec)):
        positions = flat[b].nonzero().flatten().tolist()
        for k, position in enumerate(positions):
            r, c = divmod(k, nb_w)
            hs, ws = sorted(_allowed(r, nb_h, n)), sorted(_allowed(c, nb_w, n))
            at = b * width + position
            bh_exact[at], bh_low[at] = hs[-1], hs[0]
            bw_exact[at], bw_low[at] = ws[-1], ws[0]
    bh_exact, bh_low, bw_exact, bw_low = (torch.tensor(v, dtype=torch.int64).reshape(flat.shape)
                                          for v in (bh_exact, bh_low, bw_exact, bw_low))
    exact = bh_exact * n + bw_exact
    return exact, bh_low * n + bw_exact, bh_exact * n + bw_low


def _embeddings(spec: dict, output: Any) -> tuple[torch.Tensor | None, str | None]:
    if not isinstance(output, torch.Tensor):
        return None, f"output is {type(output).__name__}, not a tensor of embeddings"
    if embeddings_shape_follows_the_pixels(spec, output):
        return None, None  # that invariant reports it
    return output.detach().cpu().double(), None


def _eps(spec: dict) -> float:
    """The relative rounding of one step of the forward: the weights' dtype; on CUDA a float32 conv may run
    in TF32 (cuDNN's default, ``torch.backends.cudnn.allow_tf32``: a 10-bit mantissa), so 2 ** -10 there."""
    if spec["weight_dtype"] == "float32" and torch.device(spec["device"]).type == "cuda":
        return 2.0**-10
    return _EPS[spec["weight_dtype"]]


def _within(spec: dict, got: torch.Tensor, ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Per position (``where``), whether ``got`` is the patch projection plus table row ``ids`` up to the
    rounding of a float32-accumulated projection and one add in the weights' dtype (4 eps of the terms;
    a wrong row is off by about the difference of two N(0, 1) rows, far more)."""
    parts = forward_parts(spec)
    row = parts["table"][ids]
    tolerance = 4 * _eps(spec) * (parts["scale"] + row.abs()) + 1e-5
    close = ((got - parts["patch"] - row).abs() <= tolerance).all(dim=-1)
    return close | ~where


def embeddings_shape_follows_the_pixels(spec: dict, output: Any) -> str | None:
    """One embedding of ``hidden_size`` per conv patch, ``[B, (H // p) * (W // p), D]`` (the patch grid of the
    pixels, which the mask spans), in the weights' dtype on their device."""
    if not isinstance(output, torch.Tensor):
        return f"output is {type(output).__name__}, not a tensor of embeddings"
    rows, columns = spec["grid_hw"]
    want = (len(spec["images"]), rows * columns, spec["hidden"])
    dtype = FLOAT_DTYPES[spec["weight_dtype"]]
    if tuple(output.shape) != want or output.dtype != dtype:
        return f"embeddings are {tuple(output.shape)} {output.dtype}, expected {want} {dtype}"
    if output.device.type != torch.device(spec["device"]).type:
        return f"embeddings are on {output.device}, the weights on {spec['device']}"
    return None


def embeddings_padding_reads_row_zero(spec: dict, output: Any) -> str | None:
    """A position that is no patch of its image (mask false) is its pixels' projection plus table row 0."""
    got, problem = _embeddings(spec, output)
    if got is None:
        return problem
    padding = ~forward_mask_of(spec).reshape(len(spec["images"]), -1)
    ok = _within(spec, got, torch.zeros(padding.shape, dtype=torch.int64), padding)
    if not bool(ok.all()):
        b, k = (~ok).nonzero()[0].tolist()
        return f"padding position {k} of image {b} is not its projection plus position row 0"
    return None


def embeddings_patches_read_their_bucket(spec: dict, output: Any) -> str | None:
    """Patch ``(r, c)`` of an ``nb_h x nb_w`` image is its pixels' projection plus table row ``bh * n + bw``
    (the NaViT buckets, ``floor(r * n / nb_h)``, ``floor(c * n / nb_w)``; one lower where the coordinate sits
    exactly on a boundary)."""
    got, problem = _embeddings(spec, output)
    if got is None or not _in_caller_range(spec):
        return problem
    patches = forward_mask_of(spec).reshape(len(spec["images"]), -1)
    exact, low_h, low_w = forward_ids(spec)
    n = spec["image_size"] // spec["patch"]
    both = low_h - exact + low_w  # both coordinates one bucket lower
    ok = torch.zeros(patches.shape, dtype=torch.bool)
    for ids in (exact, low_h, low_w, both):
        ok |= _within(spec, got, ids, patches) & patches
    ok |= ~patches
    if not bool(ok.all()):
        b, k = (~ok).nonzero()[0].tolist()
        nb_h, nb_w = _layout(spec)[b]
        index = int(patches[b, :k].sum())
        r, c = divmod(index, nb_w)
        return (f"image {b} ({nb_h} x {nb_w} patches, n={n}): patch ({r}, {c}) at position {k} is not its "
                f"projection plus the row of bucket {divmod(int(exact[b, k]), n)} (or a tie's lower one)")
    return None


def _forward_expected(spec: dict) -> dict | None:
    """float32 weights in the caller range, on the CPU: projection + the exact row, rounded once to float32
    (the inputs are untied: no coordinate sits on a boundary, so the exact bucket is the only right one).
    Not on CUDA, where the float32 conv may run in TF32 (``_eps``): the invariants check it there."""
    cpu = torch.device(spec["device"]).type == "cpu"
    if spec["weight_dtype"] != "float32" or not cpu or not _in_caller_range(spec):
        return None
    parts = forward_parts(spec)
    exact, _, _ = forward_ids(spec)
    values = parts["patch"] + parts["table"][exact]
    return {"shape": list(values.shape), "dtype": "torch.float32", "values": values.float()}


def _forward_observed(output: Any) -> dict:
    if not isinstance(output, torch.Tensor):
        return {"type": type(output).__name__}
    observed: dict[str, Any] = {"shape": list(output.shape), "dtype": str(output.dtype)}
    if output.dtype == torch.float32:
        observed["values"] = output.detach().cpu()
    return observed


FORWARD_REFERENCE = Reference(expected=_forward_expected, observed=_forward_observed, floats="close")
