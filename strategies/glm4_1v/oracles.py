"""Oracles of glm4_1v's vision position embeddings (glm4v-embeddings, glm4v-pos-embeds).

What the outputs mean (vllm/model_executor/models/glm4_1v.py, 0.28.0):

* ``Glm4vVisionEmbeddings.forward(embeddings, lengths, image_shapes, h_coords, w_coords)``
  returns ``embeddings + adapted_pos_embed``: the learned ``orig x orig`` table of
  position embeddings (``position_embedding.weight.view(orig, orig, hidden)``),
  resampled bicubically (``grid_sample(mode="bicubic", align_corners=False,
  padding_mode="border")``) to each image's ``(h, w)`` patch grid and read at each
  token's ``(h_coords, w_coords)``. Token block ``i`` (``lengths[i]`` tokens) takes
  its target ``(h, w)`` from ``image_shapes[i % len(image_shapes)]``: "Shapes are
  cycled: in data parallel mode some GPUs might not have all image shapes." One
  output row per coordinate (``total_seq = h_coords.shape[0]``), ``hidden`` wide.
* ``Glm4vVisionTransformer.pos_embeds_interpolate(grid_thw)``: "Pre-compute absolute
  position embeddings for all input samples" -- per image, the same resampling at
  every patch of its ``h x w`` grid in merge-window order ("Coordinate generation
  matches `rot_pos_emb` exactly"), repeated for each of its ``t`` frames
  (``lengths = [h * w] * t``), concatenated, in the tower's dtype.

The reference resamples with ``F.interpolate(size=(h, w), mode="bicubic",
align_corners=False)``, which is the same sampling: interpolate reads output pixel
``d`` at source ``(d + 0.5) * orig / h - 0.5`` (area_pixel_compute_source_index,
cubic: unclamped), and grid_sample's ``((d + 0.5) / h) * 2 - 1`` unnormalises
(align_corners=False) to ``((x + 1) * orig - 1) / 2``, the same point; both use
the cubic convolution with A = -0.75 and clamp every tap index to the border
(upsample_get_value_bounded / padding_mode="border"). Checked numerically: all
grids orig 1..8 -> h, w 1..16 agree within 5e-6 (float32 noise; the reference
itself runs in float64).

Consumers: neither output is read on the host. ``pos_embeds_interpolate``'s result
is cached as ``encoder_metadata["pos_embeds"]`` (prepare_encoder_metadata), copied
into the encoder CUDA-graph buffers (``buffer_keys=[..., "pos_embeds", ...]``) and
added on the device, ``x = x + pos_embeds`` (Glm4vVisionTransformer.forward); the
embeddings module's output only feeds that ``torch.cat``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from fuzz.api import Reference, per_spec
from strategies.common import FLOAT_DTYPES, seeded_floats
from strategies.glm4_1v.inputs import grid_coords

# Relative rounding step of each weight dtype (machine epsilon): the tolerance of
# an output that went through one rounding to it.
_EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-8, "float16": 2.0**-10}
_SLACK = 1e-4  # absolute: grid_sample's own float32 error (< 5e-6 measured) with a wide margin


# -- shared helpers: the inputs as the input model builds them, on the CPU ----------------------------------


@per_spec
def _weights(spec: dict) -> torch.Tensor:
    orig, hidden = spec["orig_size"], spec["hidden_size"]
    return seeded_floats((orig * orig, hidden), spec["weight_dtype"], spec["seed"], "cpu")


def _tokens(spec: dict) -> int:
    return sum(spec["lengths"])


def _resampled(spec: dict, h: int, w: int, cache: dict) -> torch.Tensor:
    """The position table resampled to an ``h x w`` grid, float64, ``(hidden, h, w)``."""
    if (h, w) not in cache:
        orig, hidden = spec["orig_size"], spec["hidden_size"]
        grid = _weights(spec).double().view(orig, orig, hidden).permute(2, 0, 1).unsqueeze(0)
        cache[(h, w)] = F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False)[0]
    return cache[(h, w)]


def _block_shapes(spec: dict) -> list[tuple[int, int]]:
    """Target ``(h, w)`` of token block ``i``: ``image_shapes[i % len(image_shapes)]``."""
    shapes = spec["image_shapes"]
    return [(shapes[i % len(shapes)][1], shapes[i % len(shapes)][2]) for i in range(len(spec["lengths"]))]


@per_spec
def _token_keys(spec: dict) -> list[tuple[int, int, int, int]] | None:
    """``(target_h, target_w, h, w)`` per token, from the DP cycling and the coordinates;
    None where a coordinate falls outside its target grid (the meaning -- reading the
    resampled grid at a patch -- says nothing about those)."""
    if not spec["image_shapes"]:
        return None
    h_coords, w_coords = (c.long().tolist() for c in grid_coords({**spec, "device": "cpu"}))
    keys, token = [], 0
    for (height, width), length in zip(_block_shapes(spec), spec["lengths"]):
        for _ in range(length):
            hc, wc = h_coords[token], w_coords[token]
            if not (0 <= hc < height and 0 <= wc < width):
                return None
            keys.append((height, width, hc, wc))
            token += 1
    return keys


def _as_tensor(output: Any) -> tuple[torch.Tensor | None, str | None]:
    if not isinstance(output, torch.Tensor):
        return None, f"output is a {type(output).__name__}, not a tensor"
    return output.detach().cpu(), None


def _shape_problem(output: torch.Tensor, rows: int, spec: dict) -> str | None:
    want = (rows, spec["hidden_size"])
    if tuple(output.shape) != want:
        return f"output has shape {tuple(output.shape)}, expected (tokens, hidden) = {want}"
    dtype = FLOAT_DTYPES[spec["weight_dtype"]]
    if output.dtype != dtype:
        return f"output has dtype {output.dtype}, the position table {dtype}"
    return None


def _far(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor, eps: float) -> int | None:
    """Index of the first row where ``got`` and ``want`` differ by more than one rounding of ``scale``."""
    bad = ((got - want).abs() > eps * scale + _SLACK).any(dim=-1)
    return int(bad.nonzero()[0, 0]) if bool(bad.any()) else None


# -- glm4v-embeddings -----------------------------------------------------------------------------------------


def embeddings_shape_follows_tokens(spec: dict, output: Any) -> str | None:
    """One output row per token -- ``sum(lengths)`` rows, each ``hidden`` wide -- in
    the position table's dtype, on its device (forward adds one interpolated
    embedding per coordinate, ``total_seq = h_coords.shape[0]``, to ``embeddings``)."""
    tensor, problem = _as_tensor(output)
    if problem:
        return problem
    problem = _shape_problem(tensor, _tokens(spec), spec)
    if problem:
        return problem
    if output.device.type != torch.device(spec["device"]).type:
        return f"output is on {output.device}, the module on {spec['device']}"
    return None


def _position_parts(spec: dict, output: Any) -> tuple[torch.Tensor, torch.Tensor, list, str | None]:
    """``output - embeddings`` (float64), the rounding scale of each element, and the token keys."""
    keys = _token_keys(spec)
    tensor, problem = _as_tensor(output)
    if keys is None or problem or _shape_problem(tensor, len(keys), spec):
        # Shape and type are embeddings_shape_follows_tokens' to report.
        return torch.empty(0), torch.empty(0), [], "skip"
    embeddings = _embeddings64(spec)
    got = tensor.double()
    return got - embeddings, got.abs() + embeddings.abs(), keys, None


@per_spec
def _embeddings64(spec: dict) -> torch.Tensor:
    """The ``embeddings`` argument the input model drew, float64, on the CPU."""
    tokens = sum(spec["lengths"])
    return seeded_floats((tokens, spec["hidden_size"]), spec["weight_dtype"], spec["seed"] + 2, "cpu").double()


def embeddings_cycle_image_shapes(spec: dict, output: Any) -> str | None:
    """The position part of a token (output minus ``embeddings``) depends only on its
    target grid and coordinate: tokens of blocks ``i`` and ``j`` with
    ``image_shapes[i % n] == image_shapes[j % n]`` and the same ``(h, w)`` get the
    same embedding (the shapes are cycled by modulo for data-parallel ranks that do
    not hold every shape; forward's comment)."""
    parts, scale, keys, skip = _position_parts(spec, output)
    if skip:
        return None
    if not keys:
        return None
    # Each token against the first token with its key, all at once; the first token
    # (in order) that differs is reported.
    first: dict = {}
    firsts = torch.tensor([first.setdefault(key, token) for token, key in enumerate(keys)])
    tolerance = _EPS[spec["weight_dtype"]] * (scale + scale[firsts]) + _SLACK
    bad = ((parts - parts[firsts]).abs() > tolerance).any(dim=-1)
    if not bool(bad.any()):
        return None
    token = int(bad.nonzero()[0, 0])
    key, other = keys[token], int(firsts[token])
    return (f"tokens {other} and {token} share target grid {key[:2]} and patch {key[2:]} but get "
            f"different position embeddings (lengths={spec['lengths']}, "
            f"image_shapes={spec['image_shapes']})")


def embeddings_identity_grid_reads_the_table(spec: dict, output: Any) -> str | None:
    """A token whose target grid is the table's own ``orig x orig`` grid gets the table
    row of its patch, ``weight[h * orig + w]``: resampling a grid to its own size at
    pixel centres (``(c + 0.5) / size``, align_corners=False) is the identity."""
    parts, scale, keys, skip = _position_parts(spec, output)
    if skip:
        return None
    orig, table = spec["orig_size"], _weights(spec).double()
    rows = [t for t, (height, width, _, _) in enumerate(keys) if (height, width) == (orig, orig)]
    if not rows:
        return None
    want = table[[keys[t][2] * orig + keys[t][3] for t in rows]]
    bad = _far(parts[rows], want, scale[rows], _EPS[spec["weight_dtype"]])
    if bad is None:
        return None
    token = rows[bad]
    return (f"token {token} on the table's own {orig}x{orig} grid at patch {keys[token][2:]} has position "
            f"embedding {parts[token][:3].tolist()}..., the table row {want[bad][:3].tolist()}...")


def _embeddings_expected(spec: dict) -> dict | None:
    keys = _token_keys(spec)
    if keys is None:
        return None
    expected: dict[str, Any] = {"shape": [len(keys), spec["hidden_size"]], "dtype": spec["weight_dtype"]}
    if spec["weight_dtype"] != "float32":
        # bfloat16/float16: one rounding step of the position part can flip between
        # two equally right implementations, and after the sum with `embeddings`
        # (which may nearly cancel it) that step exceeds assert_close's relative
        # tolerance. Values are compared in float32; the invariants above cover the
        # half dtypes with a per-element rounding bound.
        return expected
    cache: dict = {}
    position = torch.zeros(len(keys), spec["hidden_size"], dtype=torch.float64)
    by_grid: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for token, (height, width, hc, wc) in enumerate(keys):
        by_grid.setdefault((height, width), []).append((token, hc, wc))
    for (height, width), members in by_grid.items():  # each token reads its grid at its patch
        tokens, hcs, wcs = (list(column) for column in zip(*members))
        position[tokens] = _resampled(spec, height, width, cache)[:, hcs, wcs].T
    embeddings = seeded_floats((len(keys), spec["hidden_size"]), "float32", spec["seed"] + 2, "cpu")
    expected["values"] = embeddings + position.float()
    return expected


def _embeddings_observed(output: Any) -> dict:
    name = {v: k for k, v in FLOAT_DTYPES.items()}.get(output.dtype, str(output.dtype))
    observed: dict[str, Any] = {"shape": list(output.shape), "dtype": name}
    if output.dtype == torch.float32:
        observed["values"] = output.detach().cpu()
    return observed


EMBEDDINGS_REFERENCE = Reference(expected=_embeddings_expected, observed=_embeddings_observed, floats="close")
"""Shape, dtype and (float32 tables) values of ``embeddings + position``: per token,
the target grid by modulo cycling over ``image_shapes``, the table resampled to it
with ``F.interpolate(bicubic)`` in float64, read at the token's patch."""


# -- glm4v-pos-embeds -----------------------------------------------------------------------------------------


def _merge_order(h: int, w: int, merge: int) -> list[tuple[int, int]]:
    """The patches of an ``h x w`` grid in merge-window order: windows row by row,
    inside each its ``merge x merge`` patches row by row (rot_pos_emb's order)."""
    order = []
    for block_h in range(h // merge):
        for block_w in range(w // merge):
            for i in range(merge):
                for j in range(merge):
                    order.append((block_h * merge + i, block_w * merge + j))
    return order


def pos_embeds_shape_follows_grids(spec: dict, output: Any) -> str | None:
    """One row per patch of every frame, ``sum(t * h * w)`` rows of ``hidden``, in
    the tower's dtype (one embedding per patch, each image's ``t`` frames)."""
    tensor, problem = _as_tensor(output)
    if problem:
        return problem
    return _shape_problem(tensor, sum(t * h * w for t, h, w in spec["grid_thw"]), spec)


def _frames(spec: dict, output: Any) -> list[tuple[int, list[torch.Tensor]]] | None:
    """Per image, its ``t`` frame blocks of the output; None when the shape is wrong."""
    tensor, problem = _as_tensor(output)
    if problem or pos_embeds_shape_follows_grids(spec, output):
        return None
    images, start = [], 0
    for t, h, w in spec["grid_thw"]:
        images.append((h * w, [tensor[start + k * h * w:start + (k + 1) * h * w] for k in range(t)]))
        start += t * h * w
    return images


def pos_embeds_frames_repeat(spec: dict, output: Any) -> str | None:
    """Every frame of an image gets the same embeddings: the position embedding is
    spatial, and each frame repeats the image's ``h x w`` coordinates
    (``lengths = [h * w] * t``, ``h_coords.repeat(t)``)."""
    images = _frames(spec, output)
    if images is None:
        return None
    for index, (_, frames) in enumerate(images):
        for k, frame in enumerate(frames[1:], start=1):
            if not torch.equal(frame, frames[0]):
                return f"image {index} ({spec['grid_thw'][index]}): frame {k} differs from frame 0"
    return None


def pos_embeds_identity_grid_reads_the_table(spec: dict, output: Any) -> str | None:
    """An image whose grid is the table's own ``orig x orig`` gets, at each patch
    ``(h, w)`` (merge-window order), the table row ``weight[h * orig + w]``:
    resampling a grid to its own size at pixel centres is the identity."""
    images = _frames(spec, output)
    if images is None:
        return None
    orig, table = spec["orig_size"], _weights(spec).double()
    eps = _EPS[spec["weight_dtype"]]
    for index, (t, h, w) in enumerate(spec["grid_thw"]):
        if (h, w) != (orig, orig):
            continue
        order = _merge_order(h, w, spec["merge"])
        want = table[[r * orig + c for r, c in order]]
        got = images[index][1][0].double()
        bad = _far(got, want, want.abs(), eps)
        if bad is not None:
            return (f"image {index} ({[t, h, w]}) on the table's own grid: patch {order[bad]} has "
                    f"{got[bad][:3].tolist()}..., the table row {want[bad][:3].tolist()}...")
    return None


def _pos_embeds_expected(spec: dict) -> torch.Tensor | None:
    if not spec["grid_thw"]:
        return None  # torch.cat of no image raises in both releases
    cache: dict = {}
    blocks = []
    for t, h, w in spec["grid_thw"]:
        order = _merge_order(h, w, spec["merge"])
        rows, columns = [r for r, _ in order], [c for _, c in order]
        blocks.extend([_resampled(spec, h, w, cache)[:, rows, columns].T] * t)
    # grid_sample ran in float32, then the result went to the tower's dtype.
    return torch.cat(blocks).float().to(FLOAT_DTYPES[spec["weight_dtype"]])


def _pos_embeds_observed(output: Any) -> torch.Tensor:
    return output.detach().cpu()


POS_EMBEDS_REFERENCE = Reference(expected=_pos_embeds_expected, observed=_pos_embeds_observed, floats="close")
"""Per image, the table resampled to ``h x w`` (``F.interpolate(bicubic)``, float64)
read in merge-window order, repeated ``t`` times, in the tower's dtype."""
