"""Oracles of the keep-on-cpu targets (strategies/keep_on_cpu/record.py): what the
consumers of the fields PR #52369 keeps on the host must return, whatever
device the field came from.

Each output is what strategies/keep_on_cpu/inputs.py's thunk returns:

* ultravox: one ``(valid frames, d_model)`` tensor per audio chunk (the
  encoder's output trimmed to the chunk's valid frames);
* interns1: ``{"embeddings": one tensor per item, "img_context_token_id",
  "video_context_token_id"}``;
* phi4mm: one ``(tokens, hidden_size)`` tensor per image;
* keye: ``{"embeddings": one tensor per item, "visual_calls": the arguments
  every call of the vision tower stand-in received}``.

Invariants return None when they hold or do not apply, else one line; they
read tensors with ``.tolist()``/``.cpu()`` (outside the sync counting).
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES, seeded_floats

# --------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------


def _items(output: Any, what: str) -> tuple[list[Any] | None, str | None]:
    """``output`` as a list (a tuple or list of anything), else a message."""
    if not isinstance(output, (list, tuple)):
        return None, f"{what} is a {type(output).__name__}, not a list/tuple of per-item tensors"
    return list(output), None


def _shapes_message(pieces: list[Any], want: list[tuple[int, ...]], what: str) -> str | None:
    """Compare per-item tensor shapes with ``want``, in order."""
    if len(pieces) != len(want):
        return f"{what}: {len(pieces)} pieces for {len(want)} items (want shapes {want})"
    for i, (piece, shape) in enumerate(zip(pieces, want)):
        if not isinstance(piece, torch.Tensor):
            return f"{what}[{i}] is a {type(piece).__name__}, not a tensor"
        if tuple(piece.shape) != shape:
            got = [tuple(p.shape) if isinstance(p, torch.Tensor) else None for p in pieces]
            return f"{what}[{i}] has shape {tuple(piece.shape)}, want {shape} (all: {got}, want {want})"
    return None


def _modality_order(spec: dict, image_key: str, video_key: str) -> list[tuple[str, list]]:
    """The present modalities in kwargs order (``images_first``), each with its items.

    The input model passes the image kwargs first iff ``images_first``; upstream
    ``_parse_and_validate_multimodal_inputs`` keeps that order ("Preserve the
    order of modalities if there are multiple of them from the order of kwargs")
    and ``embed_multimodal`` concatenates the per-item embeddings in it."""
    order = [("image", spec[image_key]), ("video", spec[video_key])]
    if not spec["images_first"]:
        order.reverse()
    return [(name, items) for name, items in order if items]


# --------------------------------------------------------------------------
# ultravox: audio_lens
# --------------------------------------------------------------------------


def _ultravox_valid_frames(spec: dict) -> list[int]:
    """Valid encoder frames per chunk: whisper's conv output length
    ``(n - 1) // 2 + 1`` (``_get_feat_extract_output_lengths``) of each
    ``audio_lens`` entry, within the padded sequence (what the thunk keeps)."""
    seq_len = (spec["frames"] - 1) // 2 + 1
    return [min(max((n - 1) // 2 + 1, 0), seq_len) for n in spec["audio_lens"]]


def _ultravox_in_meaning(spec: dict) -> bool:
    """audio_lens the processor can produce: 1..frames mel frames per chunk.

    The wide contract adds 0 and lengths past the padded input (accepted by
    0.27.1, F10 in known-issues.json); upstream says nothing about those:
    0.28.0's ``cu_seqlens`` then runs past the tokens."""
    return all(1 <= n <= spec["frames"] for n in spec["audio_lens"])


def ultravox_one_piece_per_chunk(spec: dict, output: Any) -> str | None:
    """One ``(valid frames, d_model)`` embedding per audio chunk, in chunk order.

    ``_audio_features_to_embeddings`` runs the tower over sub-batches of
    ``_MAX_ENCODER_BATCH_SIZE`` chunks and ``torch.cat``s them back "(Concatenate
    results)": one row per chunk of ``input_features``, each ``seq_len`` frames
    of ``d_model`` features, of which ``_get_feat_extract_output_lengths(audio_lens)``
    are valid (the rows the thunk keeps)."""
    pieces, message = _items(output, "ultravox output")
    if message:
        return message
    want = [(n, spec["d_model"]) for n in _ultravox_valid_frames(spec)]
    return _shapes_message(pieces, want, "chunk embeddings")


def ultravox_valid_frames_finite(spec: dict, output: Any) -> str | None:
    """Every valid frame of every chunk has finite features.

    Upstream's ``_build_chunk_attn_metadata``: "Each padded row contributes up
    to two sequences to cu_seqlens: its valid frames and its padding tail", so
    the segments start at 0 and end at ``B * seq_len``, as the varlen kernels
    require; the varlen stand-in (strategies.keep_on_cpu.inputs.VarlenWhisperLayer)
    turns segments that do not cover the tokens exactly into NaNs, and the
    dense-mask path (0.27.1) never masks a valid query's own frames. Not
    checked for audio_lens outside 1..frames (see ``_ultravox_in_meaning``)."""
    if not _ultravox_in_meaning(spec):
        return None
    pieces, message = _items(output, "ultravox output")
    if message:
        return message
    for b, piece in enumerate(pieces):
        if not isinstance(piece, torch.Tensor):
            return f"chunk {b} is a {type(piece).__name__}, not a tensor"
        bad = (~torch.isfinite(piece.float().cpu())).any(dim=-1).nonzero().flatten().tolist()
        if bad:
            return (f"chunk {b} (audio_len {spec['audio_lens'][b]}): {len(bad)} of {piece.shape[0]} valid "
                    f"frames non-finite, first at frame {bad[0]}")
    return None


def ultravox_attention_reads(spec: dict, output: Any) -> None:
    """The host reads vllm 0.28.0's whisper encoder attention makes of the metadata
    each layer receives. Made by the stand-in layers themselves, during the call
    (strategies/keep_on_cpu/inputs.py ``VarlenWhisperLayer.forward``, inside
    ``fuzz.oracles.syncs.consumer_reads()``): the metadata never reaches the output, which
    holds the trimmed embeddings only. This function, the record's ``consumer``,
    has nothing left to read; naming it makes the engine report the consumer syncs.
    0.27.1's layers (``DenseMaskWhisperLayer``) get a dense mask and read nothing.

    Per layer call, as vllm/model_executor/layers/attention/mm_encoder_attention.py's
    ``MMEncoderAttention.forward_cuda`` dispatches:

    * FLASH_ATTN / ROCM_AITER_FA / TRITON_ATTN: vllm/v1/attention/ops/vit_attn_wrappers.py,
      ``flash_attn_maxseqlen_wrapper``:
      ``max_seqlen = q_len if max_seqlen is None else max_seqlen.item()``.
      0.28.0's ``_build_chunk_attn_metadata`` builds it as
      ``torch.tensor(MMEncoderAttention.compute_max_seqlen(...), dtype=torch.int32)``,
      a host tensor: the read is free.
    * TORCH_SDPA: ``torch_sdpa_wrapper``:
      ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()`` on the ``cu_seqlens``
      that ``maybe_recompute_cu_seqlens`` put on the device
      (``async_tensor_h2d(cu_seqlens, device=device)``): one sync per layer.
    """


# --------------------------------------------------------------------------
# interns1: image/video_num_patches, image/video_token_id
# --------------------------------------------------------------------------

INTERNS1_HIDDEN = 12  # 3 colour channels x 4 after pixel_shuffle(0.5): strategies.keep_on_cpu.inputs.INTERNS1_HIDDEN
_INTERNS1_SALT = {"image": 2, "video": 3}  # the input model's seeds for pixel_values / pixel_values_videos


def _interns1_tokens_per_tile(spec: dict) -> int:
    """Features per tile: the tower's ``grid x grid`` patch tokens (CLS dropped by
    ``extract_feature``'s ``vit_embeds[:, 1:, :]``) after ``pixel_shuffle(0.5)``,
    which merges each 2x2 block into one token."""
    return (spec["grid"] // 2) ** 2


def _interns1_items(spec: dict) -> list[tuple[str, int]]:
    """(modality, tiles) per item, in the order ``embed_multimodal`` returns them."""
    order = _modality_order(spec, "image_tiles", "video_frames")
    return [(name, tiles) for name, items in order for tiles in items]


def _interns1_embeddings(output: Any) -> tuple[list[Any] | None, str | None]:
    if not isinstance(output, dict) or "embeddings" not in output:
        return None, f"interns1 output is a {type(output).__name__} without 'embeddings'"
    return _items(output["embeddings"], "interns1 embeddings")


def interns1_one_piece_per_item(spec: dict, output: Any) -> str | None:
    """One embedding per image / video, in kwargs order, each ``num_patches[i] *
    feature_size`` rows of ``text_config.hidden_size``.

    ``_process_vision_input``: "Image embeddings are split into separate tensors
    for each image by the size of each embedding" -- ``num_patches * feature_size``
    per item, so the pieces add up to every tile's features and come back in
    item order; ``embed_multimodal``: "The result multimodal_embeddings is tuple
    of tensors, with each tensor corresponding to a multimodal data item"."""
    pieces, message = _interns1_embeddings(output)
    if message:
        return message
    per_tile = _interns1_tokens_per_tile(spec)
    want = [(tiles * per_tile, INTERNS1_HIDDEN) for _, tiles in _interns1_items(spec)]
    return _shapes_message(pieces, want, "embeddings")


def interns1_context_token_ids(spec: dict, output: Any) -> str | None:
    """The model's context token ids are the processor's ``image_token_id`` /
    ``video_token_id`` (None for a modality not in the batch).

    ``_parse_and_validate_image_input`` reads the shared field with
    ``image_token_id.flatten().unique().item()`` and stores it as
    ``self.img_context_token_id`` (``..._video_input``: ``self.video_context_token_id``),
    the ids the language model later replaces by these embeddings."""
    if not isinstance(output, dict):
        return f"interns1 output is a {type(output).__name__}, not a dict"
    for key, field, items in (("img_context_token_id", "image_token_id", "image_tiles"),
                              ("video_context_token_id", "video_token_id", "video_frames")):
        want = spec[field] if spec[items] else None
        got = output.get(key)
        if got != want or type(got) is not type(want):
            return f"{key} is {got!r} ({type(got).__name__}), want {want!r} from {field}"
    return None


def _interns1_tile_features(tile: torch.Tensor, grid: int, patch: int) -> list[list[float]]:
    """One tile's expected feature rows, in plain loops: the mean colour of each
    ``patch x patch`` block (the pooling tower stand-in), then InternVL's
    ``pixel_shuffle(scale_factor=0.5)``: token ``(a, b)`` of the half-size grid
    holds, for ``i, j`` in 0..1 and each channel, block ``(2a + i, 2b + j)``'s
    colour at channel index ``(2 i + j) * 3 + c``."""
    # pooled[c][r][s]: the mean of block (r, s) of channel c, in float64 (one
    # reshape, then plain lists: a .item() per block cost more than the calls).
    pooled = tile.double().reshape(3, grid, patch, grid, patch).mean(dim=(2, 4)).tolist()
    rows = []
    for a in range(grid // 2):
        for b in range(grid // 2):
            rows.append([pooled[c][2 * a + i][2 * b + j] for i in range(2) for j in range(2) for c in range(3)])
    return rows


def interns1_expected(spec: dict) -> list[torch.Tensor]:
    """Each item's embedding: its tiles' features, tile after tile, from the
    pixels the input model draws (``seeded_floats(..., seed + 2)`` for images,
    ``seed + 3`` for videos, strategies.keep_on_cpu.inputs.InternS1NumPatchesInputs)."""
    dtype, grid, patch = spec["dtype"], spec["grid"], spec["patch"]
    side = grid * patch
    result: list[torch.Tensor] = []
    for name, items in _modality_order(spec, "image_tiles", "video_frames"):
        pixels = seeded_floats((sum(items), 3, side, side), dtype, spec["seed"] + _INTERNS1_SALT[name], "cpu")
        start = 0
        for tiles in items:
            rows = [row for t in range(start, start + tiles) for row in _interns1_tile_features(pixels[t], grid, patch)]
            result.append(torch.tensor(rows, dtype=torch.float64).to(FLOAT_DTYPES[dtype]))
            start += tiles
    return result


def interns1_observed(output: Any) -> list[torch.Tensor]:
    return [piece.cpu() for piece in output["embeddings"]]


INTERNS1_REFERENCE = Reference(expected=interns1_expected, observed=interns1_observed, floats="close")
"""Per item, the features of its own tiles in order: the pooling tower stand-in
and the identity projector make every row traceable to its pixels, so a split
by the wrong sizes, a swapped item or modality, or a dropped CLS token at the
wrong end shows as different values."""


# --------------------------------------------------------------------------
# phi4mm: image_sizes
# --------------------------------------------------------------------------

PHI4MM_CROP = 448  # Phi4MMImageEncoder.crop_size


def _phi4mm_picked(useful: int, side: int) -> int:
    """How many of the first ``useful`` patch rows (or columns) of the crop grid
    survive ``image_attention_mask[..., 0::2, 0::2]`` (every other patch of each
    ``side``-patch crop, from its first)."""
    return sum(1 for r in range(useful) if (r % side) % 2 == 0)


def _phi4mm_tokens(spec: dict, image: dict) -> int:
    """Tokens of one image in the hd transform ("sub_glb" order).

    Per ``Phi4MMImageEncoder.forward``: ``h, w = image_sizes // crop_size`` crops;
    each crop is a ``G x G`` grid after the 2x2 token compression (``G =
    base_feat_height_target``: half the tower's patch side, rounded up by the
    reflection pad); the sub-crops, cut to the mask's useful ``uh x uw``
    rectangle, get a ``sub_GN`` separator per row (``uh * (uw + 1)``), then one
    ``glb_GN``, then the global crop with a separator per row (``G * (G + 1)``).
    Upstream's own count: ``temp_len = mask_token_count + (useful_height + 1) + G``
    with ``mask_token_count = G * G + uh * uw``."""
    side = spec["side"]
    grid = (side + side % 2) // 2
    uh = _phi4mm_picked(image["useful"][0], side)
    uw = _phi4mm_picked(image["useful"][1], side)
    return uh * (uw + 1) + 1 + grid * (grid + 1)


def phi4mm_one_embedding_per_image(spec: dict, output: Any) -> str | None:
    """One ``(tokens, hidden_size)`` embedding per image, in batch order.

    ``Phi4MMImageEncoder.forward``: "process image and return vision embeddings",
    one ``img_set_tensor`` entry per image (``for _bs in range(bs)``), projected by
    ``img_projection`` to ``hidden_size``."""
    pieces, message = _items(output, "phi4mm output")
    if message:
        return message
    if len(pieces) != len(spec["images"]):
        return f"{len(pieces)} embeddings for {len(spec['images'])} images"
    for i, piece in enumerate(pieces):
        if not isinstance(piece, torch.Tensor) or piece.dim() != 2 or piece.shape[1] != spec["hidden_size"]:
            shape = tuple(piece.shape) if isinstance(piece, torch.Tensor) else type(piece).__name__
            return f"image {i}: embedding {shape}, want (tokens, {spec['hidden_size']})"
    return None


def phi4mm_tokens_follow_crops(spec: dict, output: Any) -> str | None:
    """Per image, the token count follows its crop counts (``image_sizes // 448``)
    and its mask's useful rectangle: ``uh * (uw + 1) + 1 + G * (G + 1)``.

    The count each placeholder in the prompt was sized to (the processor's
    ``num_img_tokens`` per image); see ``_phi4mm_tokens``. Checked for the
    processor's top-left rectangle masks only: a random mask (wide) has no
    useful rectangle, and upstream reads it off the first row/column."""
    if spec["mask"] != "rectangle":
        return None
    pieces, message = _items(output, "phi4mm output")
    if message or len(pieces) != len(spec["images"]):
        return None  # phi4mm_one_embedding_per_image reports it
    for i, (piece, image) in enumerate(zip(pieces, spec["images"])):
        want = _phi4mm_tokens(spec, image)
        got = piece.shape[0] if isinstance(piece, torch.Tensor) and piece.dim() >= 1 else None
        if got != want:
            rows, cols = image["crops"]
            return (f"image {i} ({rows}x{cols} crops of {spec['side']}x{spec['side']} patches, useful "
                    f"{image['useful']}): {got} tokens, want {want}")
    return None


# --------------------------------------------------------------------------
# keye: image/video_grid_thw
# --------------------------------------------------------------------------

KEYE_MERGE = 2 * 2  # Projector.merge_kernel_size = (2, 2): 4 patches per output token


def _keye_parts(output: Any) -> tuple[list[Any] | None, list[Any] | None, str | None]:
    if not isinstance(output, dict) or "embeddings" not in output or "visual_calls" not in output:
        return None, None, f"keye output is a {type(output).__name__} without 'embeddings'/'visual_calls'"
    if output["embeddings"] is None:
        return [], list(output["visual_calls"]), None  # embed_multimodal: None when no modality
    pieces, message = _items(output["embeddings"], "keye embeddings")
    return pieces, list(output["visual_calls"]), message


def keye_embeddings_follow_grid(spec: dict, output: Any) -> str | None:
    """One embedding per image / video in kwargs order, ``t * h * w / 4`` tokens of
    the text hidden size each.

    ``Projector.forward`` rearranges each item's ``t * h * w`` patch features
    ``"(t h p1 w p2) d -> (t h w) (p1 p2 d)"`` with ``h // m1, w // m2`` and
    ``merge_kernel_size = (2, 2)``, then projects to ``text_config.hidden_size``."""
    pieces, _, message = _keye_parts(output)
    if message:
        return message
    order = _modality_order(spec, "image_grid_thw", "video_grid_thw")
    want = [(t * h * w // KEYE_MERGE, spec["text_hidden"]) for _, grids in order for t, h, w in grids]
    return _shapes_message(pieces, want, "embeddings")


def _running_sum(sizes: list[int]) -> list[int]:
    sums = [0]
    for size in sizes:
        sums.append(sums[-1] + size)
    return sums


def keye_tower_cu_seqlens(spec: dict, output: Any) -> str | None:
    """The vision tower is called once per modality present, in kwargs order, and
    each call's ``cu_seqlens`` is the int32 running sum of its items' ``t * h * w``
    from 0, over exactly the ``pixel_values`` rows it received, with the grid as
    host tuples.

    keye.py ``KeyeSiglipVisionTransformer.forward``: "`cu_seqlens` is the running
    sum of the per-image `t * h * w`, so the split sizes are known on the host";
    ``KeyeSiglipAttention.forward`` attends within those segments
    (``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()``)."""
    _, calls, message = _keye_parts(output)
    if message:
        return message
    order = _modality_order(spec, "image_grid_thw", "video_grid_thw")
    if len(calls) != len(order):
        return f"{len(calls)} vision tower calls for {len(order)} modalities ({[name for name, _ in order]})"
    for (name, grids), call in zip(order, calls):
        sizes = [t * h * w for t, h, w in grids]
        cu = call.get("cu_seqlens")
        if not isinstance(cu, torch.Tensor):
            return f"{name} call: cu_seqlens is a {type(cu).__name__}, not a tensor"
        if cu.dtype != torch.int32 or cu.tolist() != _running_sum(sizes):
            return f"{name} call: cu_seqlens {cu.tolist()} ({cu.dtype}), want {_running_sum(sizes)} (int32)"
        if [tuple(g) for g in call.get("image_grid_thw", [])] != [tuple(g) for g in grids]:
            return f"{name} call: image_grid_thw {call.get('image_grid_thw')!r}, want {[tuple(g) for g in grids]}"
        pixels = call.get("pixel_values")
        if not isinstance(pixels, torch.Tensor) or pixels.shape[0] != sum(sizes):
            rows = pixels.shape[0] if isinstance(pixels, torch.Tensor) else None
            return f"{name} call: {rows} pixel rows for {sum(sizes)} patches"
    return None


def keye_tower_position_ids(spec: dict, output: Any) -> str | None:
    """Each tower call's ``position_ids`` restart at 0 every frame of every item
    (``arange(t * h * w) % (h * w)``) and its ``sample_indices`` give every patch
    its item's index within the call.

    keye.py ``_process_image_input`` / ``_process_video_embeds``: the per-item
    ``torch.arange(numel) % np.prod(thw_tuple[1:])`` and
    ``torch.full((numel,), idx)``, which the tower's packed position embedding
    and its per-sample outputs index by."""
    _, calls, message = _keye_parts(output)
    if message:
        return message
    order = _modality_order(spec, "image_grid_thw", "video_grid_thw")
    for (name, grids), call in zip(order, calls):
        want_pos = [p % (h * w) for t, h, w in grids for p in range(t * h * w)]
        want_idx = [i for i, (t, h, w) in enumerate(grids) for _ in range(t * h * w)]
        for key, want in (("position_ids", want_pos), ("sample_indices", want_idx)):
            got = call.get(key)
            got_list = got.tolist() if isinstance(got, torch.Tensor) else got
            if got_list != want:
                first = next((i for i, (a, b) in enumerate(zip(got_list or [], want)) if a != b),
                             min(len(got_list or []), len(want)))
                return f"{name} call: {key} differs from {want[:12]}... first at {first} (grids {grids})"
    return None


def keye_attention_reads(spec: dict, output: Any) -> None:
    """The host read keye's vision tower attention makes of the ``cu_seqlens`` it
    receives, once per recorded tower call (one representative encoder layer:
    upstream repeats it in each of ``config.num_hidden_layers`` layers).

    vllm 0.28.0 keye.py ``KeyeSiglipAttention.forward``:
    ``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()`` (a device tensor,
    as ``cu_seqlens`` is staged to the device by ``_process_image_input``), passed
    to ``MMEncoderAttention``, whose flash path
    (vllm/v1/attention/ops/vit_attn_wrappers.py ``flash_attn_maxseqlen_wrapper``)
    does ``max_seqlen = q_len if max_seqlen is None else max_seqlen.item()``.
    """
    for call in output["visual_calls"]:
        cu_seqlens = call["cu_seqlens"]
        max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()
        max_seqlen.item()


__all__ = [
    "INTERNS1_REFERENCE",
    "interns1_context_token_ids",
    "interns1_one_piece_per_item",
    "keye_attention_reads",
    "keye_embeddings_follow_grid",
    "keye_tower_cu_seqlens",
    "keye_tower_position_ids",
    "phi4mm_one_embedding_per_image",
    "phi4mm_tokens_follow_crops",
    "ultravox_attention_reads",
    "ultravox_one_piece_per_chunk",
    "ultravox_valid_frames_finite",
]
