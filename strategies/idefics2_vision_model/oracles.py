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

from strategies.idefics2_vision_model.inputs import mask_of


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
