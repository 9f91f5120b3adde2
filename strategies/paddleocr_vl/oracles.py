"""Oracles for paddleocr_vl's targets (strategies/paddleocr_vl/record.py; docs/design.md row 5).

What the outputs mean upstream (vllm/model_executor/models/paddleocr_vl.py, 0.28.0):

* ``PaddleOCRVLForConditionalGeneration.encode_image(pixel, grid)`` encodes
  one image (``_process_image_input`` zips the batch): it hands the vision
  tower ``image_grid_thw=[(t, h, w)]`` (host ints, from ``.tolist()``), the
  packing ids ``arange(t*h*w) % (h*w)`` and ``cu_seqlens = [0, t*h*w]``
  (int32, on the pixels' device).
* ``SiglipEncoder.forward`` builds SigLIP's 2-D rope as keye does (per image,
  per frame, row-major ``(h, w)`` ids gathered from a
  ``SigLIPRotaryEmbedding(head_dim // 2)`` table sized ``max(h, w)``) but hands
  the layers the raw angles ``rope_emb_max_grid[pids].flatten(1)`` (the
  attention takes ``.cos()`` / ``.sin()``), ``cu_seqlens`` on the device of the
  hidden states and, for the FLASH_ATTN / ROCM_AITER_FA / TRITON_ATTN
  backends, ``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()``.

The SigLIP arithmetic is shared with keye's oracles (strategies/keye/oracles.py).
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES
from strategies.keye.oracles import (
    Grid,
    attention_reads,
    describe,
    device_type,
    float_rows,
    inv_freqs,
    layers_share,
    numels,
    packing_ids,
    patch_positions,
    position_partition_problem,
    recorded_calls,
    rope_angles,
    running_sum,
    tensor_problem,
)

# SiglipEncoder.forward computes max_seqlen only for these backends (None for TORCH_SDPA).
MAX_SEQLEN_BACKENDS = ("FLASH_ATTN", "ROCM_AITER_FA", "TRITON_ATTN")


# --- paddleocr-encoder: SiglipEncoder.forward --------------------------------------------


def _grids(spec: dict) -> list[Grid]:
    """The grids in ``flatten_list`` order (the nested form groups them in order)."""
    return [tuple(int(x) for x in g) for g in spec["grids"]]


def _grid_built_ids(spec: dict) -> bool:
    """No ids passed (the caller) or the grids' own: the ids follow the grids.
    The wide contract's random ids (``bounded``, ``past_grid``) do not."""
    return spec["ids"] in ("none", "grid")


def _positions(spec: dict) -> list[tuple[int, int]]:
    if _grid_built_ids(spec):
        return patch_positions(_grids(spec))
    from strategies.paddleocr_vl.inputs import explicit_position_ids  # the wide input itself: random ids from the seed

    h_ids, w_ids = explicit_position_ids(spec)
    return list(zip(h_ids.tolist(), w_ids.tolist()))


def _cu_dtype_is_defined(spec: dict) -> bool:
    """A tensor ``cu_seqlens`` keeps its dtype (``.to(device)``); lists and numpy
    arrays are staged as int32. Callers pass int32: only that is the meaning."""
    return spec["cu_form"] not in ("cpu_tensor", "device_tensor") or spec["cu_dtype"] == "int32"


def paddleocr_layers_share_metadata(spec: dict, output: Any) -> str | None:
    """Every encoder layer is called once per forward and handed the same
    ``cu_seqlens``, rope angles and ``max_seqlen``: SiglipEncoder.forward
    computes them once before ``for encoder_layer in self.layers``."""
    return layers_share(output, spec["num_layers"], ("cu_seqlens", "rotary_pos_emb", "max_seqlen"))


def paddleocr_cu_seqlens_running_sum(spec: dict, output: Any) -> str | None:
    """The ``cu_seqlens`` each layer receives is on the device of the hidden
    states, int32 (unless the caller passed a tensor of another dtype, which
    ``.to(device)`` keeps), the running sum from 0 of ``t*h*w`` over the
    flattened grids, ending at the token count: the boundaries varlen attention
    splits the sequence at (torch_sdpa_wrapper: ``torch.split(q, lens)``)."""
    calls, problem = recorded_calls(output, spec["num_layers"])
    if problem:
        return problem
    expected = running_sum(numels(_grids(spec)))
    dtype = torch.int32 if _cu_dtype_is_defined(spec) else None
    for k, call in enumerate(calls):
        cu = call.get("cu_seqlens")
        problem = tensor_problem(cu, f"layer {k} cu_seqlens", device=device_type(spec), dtype=dtype, integer=True,
                                 ndim=1)
        if problem:
            return problem
        if cu.tolist() != expected:
            return f"layer {k} cu_seqlens {describe(cu.tolist())} is not the running sum of t*h*w {describe(expected)}"
        hidden = call.get("hidden_states")
        if isinstance(hidden, torch.Tensor) and hidden.dim() == 3 and hidden.shape[1] != expected[-1]:
            return f"layer {k} cu_seqlens ends at {expected[-1]}, the layer got {hidden.shape[1]} tokens"
    return None


def paddleocr_max_seqlen_is_longest_image(spec: dict, output: Any) -> str | None:
    """For the FLASH_ATTN / ROCM_AITER_FA / TRITON_ATTN backends every layer gets
    ``max_seqlen``, a tensor holding the longest sequence ``max(t*h*w)``
    (``(cu_seqlens[1:] - cu_seqlens[:-1]).max()``, read by the wrappers as
    ``max_seqlen_q`` with ``.item()``); for TORCH_SDPA it gets None."""
    calls, problem = recorded_calls(output, spec["num_layers"])
    if problem:
        return problem
    sizes = numels(_grids(spec))
    wanted = spec["attn_backend"] in MAX_SEQLEN_BACKENDS
    for k, call in enumerate(calls):
        value = call.get("max_seqlen")
        if not wanted:
            if value is not None:
                return f"layer {k} got max_seqlen {value!r} under {spec['attn_backend']}, which takes none"
            continue
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return f"layer {k} max_seqlen is {value!r}, expected a one-element tensor under {spec['attn_backend']}"
        if sizes and int(value.item()) != max(sizes):
            return f"layer {k} max_seqlen is {int(value.item())}, the longest image has {max(sizes)} patches"
    return None


def paddleocr_rope_rows_follow_tokens(spec: dict, output: Any) -> str | None:
    """The rope angles each layer receives are a float32 tensor on the device of
    the hidden states with one row per token and ``2 * len(inv_freq)`` columns
    (the gathered ``(h, w)`` rows of the ``SigLIPRotaryEmbedding(head_dim // 2)``
    table, ``.flatten(1)``), what ApplyRotaryEmb rotates q and k with."""
    calls, problem = recorded_calls(output, spec["num_layers"])
    if problem:
        return problem
    width = 2 * len(inv_freqs(spec["head_dim"]))
    tokens = sum(numels(_grids(spec)))
    for k, call in enumerate(calls):
        rope = call.get("rotary_pos_emb")
        problem = tensor_problem(rope, f"layer {k} rotary_pos_emb", device=device_type(spec), dtype=torch.float32,
                                 ndim=2)
        if problem:
            return problem
        if tuple(rope.shape) != (tokens, width):
            return f"layer {k} rotary_pos_emb has shape {tuple(rope.shape)}, expected ({tokens}, {width})"
    return None


def paddleocr_rope_depends_only_on_position(spec: dict, output: Any) -> str | None:
    """Two patches carry the same rope angles exactly when they share an (h, w)
    position: per image, per frame, row-major ids gathered from one table, so
    every frame and every image restarts at (0, 0). Random ids (wide) have no
    grid meaning: None."""
    if not _grid_built_ids(spec):
        return None
    calls, problem = recorded_calls(output, spec["num_layers"])
    if problem:
        return problem
    positions = patch_positions(_grids(spec))
    for k, call in enumerate(calls):
        rope = call.get("rotary_pos_emb")
        problem = tensor_problem(rope, f"layer {k} rotary_pos_emb", ndim=2)
        if problem:
            return problem
        problem = position_partition_problem(rope, positions, f"layer {k} rotary_pos_emb")
        if problem:
            return problem
    return None


def _encoder_expected(spec: dict) -> list[dict] | None:
    grids = _grids(spec)
    if not grids:
        return None  # no image: nothing to encode (both versions raise on the empty concat)
    sizes = numels(grids)
    width = 2 * len(inv_freqs(spec["head_dim"]))
    angles = float_rows(rope_angles(_positions(spec), spec["head_dim"]), width)
    max_seqlen = max(sizes) if spec["attn_backend"] in MAX_SEQLEN_BACKENDS else None
    return [{"cu_seqlens": running_sum(sizes), "rotary_pos_emb": angles, "max_seqlen": max_seqlen}
            for _ in range(spec["num_layers"])]


def _encoder_observed(output: Any) -> list[dict]:
    return [{"cu_seqlens": call["cu_seqlens"].tolist(), "rotary_pos_emb": call["rotary_pos_emb"].cpu(),
             "max_seqlen": None if call["max_seqlen"] is None else int(call["max_seqlen"].item())}
            for layer in output["layers"] for call in layer]


PADDLEOCR_ENCODER = Reference(expected=_encoder_expected, observed=_encoder_observed, floats="close")
"""Per layer call: cu_seqlens, the rope angles of every token computed in float64
from SigLIP's definition (``(h, w)`` ids per image, per frame, row-major;
``angle = id * 10000 ** (-k / dim)``) and max_seqlen (the longest image, or None
for TORCH_SDPA)."""


def paddleocr_encoder_layer_reads(spec: dict, output: Any) -> None:
    """The host reads each encoder layer's attention makes of what it was handed.

    vllm/model_executor/models/paddleocr_vl.py, SiglipAttention.forward:
    ``self.attn(query=q, key=k, value=v, cu_seqlens=cu_seqlens,
    max_seqlen=max_seqlen)`` -> vllm/model_executor/layers/attention/
    mm_encoder_attention.py, MMEncoderAttention.forward_cuda: FLASH_ATTN /
    ROCM_AITER_FA -> _forward_fa -> vit_flash_attn_wrapper, TRITON_ATTN ->
    _forward_triton -> vit_triton_attn_wrapper; vllm/v1/attention/ops/
    vit_attn_wrappers.py, flash_attn_maxseqlen_wrapper and triton_attn_wrapper:
    ``max_seqlen = q_len if max_seqlen is None else max_seqlen.item()``.
    TORCH_SDPA (max_seqlen None) -> _forward_sdpa -> torch_sdpa_wrapper:
    ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()``. One read per
    recorded layer call."""
    for layer in output["layers"]:
        for call in layer:
            if call["max_seqlen"] is not None:
                call["max_seqlen"].item()
            else:
                cu_seqlens = call["cu_seqlens"]
                (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()


# --- paddleocr-encode-image: PaddleOCRVLForConditionalGeneration.encode_image ----------


def _image_grid(spec: dict) -> Grid:
    return tuple(int(x) for x in spec["grids"][spec["image"]])


def _tower_kwargs(output: Any) -> tuple[dict, str | None]:
    if not isinstance(output, dict):
        return {}, f"output is a {type(output).__name__}, expected the tower's keyword arguments"
    return output, None


def paddleocr_image_cu_seqlens_running_sum(spec: dict, output: Any) -> str | None:
    """The ``cu_seqlens`` handed to the tower is ``[0, t*h*w]`` for the one image,
    an int32 tensor on the pixels' device (``cu_seqlens.append(cu_seqlens[-1] +
    numel)``, staged with ``dtype=torch.int32``), ending at the pixel rows."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    cu = kwargs.get("cu_seqlens")
    problem = tensor_problem(cu, "cu_seqlens", device=device_type(spec), dtype=torch.int32, ndim=1)
    if problem:
        return problem
    expected = running_sum(numels([_image_grid(spec)]))
    if cu.tolist() != expected:
        return f"cu_seqlens {cu.tolist()}, the image's t*h*w gives {expected}"
    pixels = kwargs.get("pixel_values")
    if isinstance(pixels, torch.Tensor) and pixels.dim() >= 1 and pixels.shape[0] != expected[-1]:
        return f"cu_seqlens ends at {expected[-1]}, the tower got {pixels.shape[0]} patch rows"
    return None


def paddleocr_image_position_ids_follow_grid(spec: dict, output: Any) -> str | None:
    """The packing position ids count ``0 .. h*w - 1`` row-major in every frame
    (``torch.arange(numel) % np.prod(thw_tuple[1:])``): an integer tensor on
    the pixels' device, one id per patch."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    ids = kwargs.get("position_ids")
    problem = tensor_problem(ids, "position_ids", device=device_type(spec), integer=True, ndim=1)
    if problem:
        return problem
    expected = packing_ids([_image_grid(spec)])
    if ids.tolist() != expected:
        return f"position_ids {describe(ids.tolist())}, the grid gives {describe(expected)}"
    return None


def paddleocr_image_grid_is_host_ints(spec: dict, output: Any) -> str | None:
    """The tower gets ``image_grid_thw=[(t, h, w)]``, one tuple of Python ints
    equal to the image's grid row, and the pixels in the tower's dtype: the
    encoder sizes its rope table (``max(max(h, w) ...)``) and the embeddings
    their loop (``t, h, w = image_grid``) from these on the host."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    grids = kwargs.get("image_grid_thw")
    if not isinstance(grids, list) or len(grids) != 1 or not isinstance(grids[0], tuple):
        return f"image_grid_thw is {grids!r}, expected [(t, h, w)]"
    if not all(type(x) is int for x in grids[0]):
        return f"image_grid_thw[0] holds {[type(x).__name__ for x in grids[0]]}, not Python ints"
    if grids[0] != _image_grid(spec):
        return f"image_grid_thw {grids}, the image's grid row is {[_image_grid(spec)]}"
    pixels = kwargs.get("pixel_values")
    return tensor_problem(pixels, "pixel_values", device=device_type(spec), dtype=FLOAT_DTYPES[spec["visual_dtype"]])


def _image_expected(spec: dict) -> dict:
    grid = _image_grid(spec)
    return {"cu_seqlens": running_sum(numels([grid])), "position_ids": packing_ids([grid]),
            "image_grid_thw": [list(grid)]}


def _image_observed(output: Any) -> dict:
    return {"cu_seqlens": output["cu_seqlens"].tolist(), "position_ids": output["position_ids"].tolist(),
            "image_grid_thw": [[int(x) for x in g] for g in output["image_grid_thw"]]}


PADDLEOCR_ENCODE_IMAGE = Reference(expected=_image_expected, observed=_image_observed)
"""What the tower is handed for one image, by plain loops over its grid row."""


def paddleocr_tower_reads(spec: dict, output: Any) -> None:
    """The host reads the vision tower's attention makes of the ``cu_seqlens``
    encode_image stages (one layer's worth: the stand-in tower records no
    layers; a real one repeats this per layer).

    vllm/model_executor/models/paddleocr_vl.py, SiglipEncoder.forward:
    ``cu_seqlens = cu_seqlens.to(device=device, non_blocking=True)``, then for
    FLASH_ATTN (the ViT backend on CUDA sm80+) ``max_seqlen = (cu_seqlens[1:] -
    cu_seqlens[:-1]).max()``, read per layer in vllm/v1/attention/ops/
    vit_attn_wrappers.py, flash_attn_maxseqlen_wrapper: ``max_seqlen.item()``;
    on the CPU (TORCH_SDPA) torch_sdpa_wrapper:
    ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()``."""
    attention_reads(output["cu_seqlens"])
