"""Oracles for keye's targets (strategies/keye/record.py; docs/design.md rows 2-4).

What the outputs mean upstream (vllm/model_executor/models/keye.py, 0.28.0):

* ``BaseKeyeModule._process_image_input`` / ``_process_video_embeds`` build,
  per grid row ``(t, h, w)``, ``t*h*w`` patches: ``cu_seqlens`` is the int32
  running sum of ``t*h*w`` from 0 ("cu_seqlens.append(cu_seqlens[-1] +
  numel)"), the packing position ids count ``arange(h*w)`` once per frame and
  ``sample_indices`` name the row each patch belongs to. They hand the tower
  ``image_grid_thw`` as a list of ``(t, h, w)`` tuples of host ints, which
  0.28.0's tower sizes its output split and rope table from.
* ``KeyeSiglipEncoder.forward(use_rope=True)`` builds SigLIP's 2-D rope: per
  image, per frame, the ``(h index, w index)`` of each patch in row-major
  order, a table ``SigLIPRotaryEmbedding(head_dim // 2)(size)`` of
  ``position * inv_freq`` rows (``inv_freq = 1 / 10000 ** (arange(0, dim, 2) /
  dim)``) that must have a row for every id ("The ids are built from the grids
  above, so `h`/`w` bound them"), the rows gathered per token, flattened and
  repeated twice, then ``(cos, sin)``. Every encoder layer is handed the same
  ``cu_seqlens`` and rope; KeyeSiglipAttention reads
  ``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()`` from it.
* ``KeyeSiglipVisionTransformer.forward`` returns one ``[t*h*w, hidden]``
  piece of the normalized tower output per flattened grid ("`cu_seqlens` is
  the running sum of the per-image `t * h * w`, so the split sizes are known
  on the host").

The SigLIP helpers here (grid positions, rope angles, running sums) are also
used by strategies/paddleocr_vl/oracles.py: paddleocr's encoder is the same SigLIP
rope. Everything is computed in plain Python from the spec, never by calling
either copy.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES, seeded_floats

ROPE_THETA = 10000.0  # SigLIPRotaryEmbedding(dim, theta=10000.0)
LAYER_NORM_EPS = 1e-6  # strategies.keye.inputs._config: the tower's post_layernorm eps
Grid = tuple[int, int, int]


# --- SigLIP grid arithmetic, shared with strategies/paddleocr_vl/oracles.py ------------


def running_sum(sizes: Sequence[int]) -> list[int]:
    """``[0, s0, s0 + s1, ...]``: cu_seqlens of sequences of these sizes."""
    out = [0]
    for size in sizes:
        out.append(out[-1] + int(size))
    return out


def numels(grids: Sequence[Grid]) -> list[int]:
    """Patches per grid row: ``t * h * w``."""
    return [t * h * w for t, h, w in grids]


def patch_positions(grids: Sequence[Grid]) -> list[tuple[int, int]]:
    """The ``(h index, w index)`` of every patch: per image, per frame, row-major."""
    return [(i, j) for t, h, w in grids for _ in range(t) for i in range(h) for j in range(w)]


def packing_ids(grids: Sequence[Grid]) -> list[int]:
    """The packing position id of every patch: ``i * w + j`` within its frame."""
    return [i * w + j for t, h, w in grids for _ in range(t) for i in range(h) for j in range(w)]


def row_indices(grids: Sequence[Grid]) -> list[int]:
    """The grid row each patch belongs to (keye's ``sample_indices``)."""
    return [k for k, size in enumerate(numels(grids)) for _ in range(size)]


def inv_freqs(head_dim: int) -> list[float]:
    """``SigLIPRotaryEmbedding(head_dim // 2).inv_freq``: ``1 / theta ** (k / dim)``, k = 0, 2, ..."""
    dim = head_dim // 2
    return [1.0 / ROPE_THETA ** (k / dim) for k in range(0, dim, 2)]


def rope_angles(positions: Sequence[tuple[int, int]], head_dim: int) -> list[list[float]]:
    """Per token the gathered, flattened rope row: ``[h * f for f in inv_freq] + [w * f ...]``."""
    freqs = inv_freqs(head_dim)
    return [[h * f for f in freqs] + [w * f for f in freqs] for h, w in positions]


def float_rows(rows: list[list[float]], width: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``rows`` as a CPU ``[len(rows), width]`` tensor, rounded once from float64."""
    return torch.tensor(rows, dtype=torch.float64).reshape(len(rows), width).to(dtype)


def device_type(spec: dict) -> str:
    return torch.device(spec["device"]).type


def describe(values: Any, limit: int = 12) -> str:
    """A short rendering of a list for a one-line message."""
    values = list(values)
    return str(values) if len(values) <= limit else f"{values[:limit]}... ({len(values)} values)"


def tensor_problem(value: Any, name: str, *, device: str | None = None, dtype: torch.dtype | None = None,
                   integer: bool = False, ndim: int | None = None) -> str | None:
    """What is wrong with ``value`` as a tensor of this kind, or None."""
    if not isinstance(value, torch.Tensor):
        return f"{name} is a {type(value).__name__}, not a tensor"
    if ndim is not None and value.dim() != ndim:
        return f"{name} has shape {tuple(value.shape)}, expected {ndim}-D"
    if integer and (value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool):
        return f"{name} has dtype {value.dtype}, expected an integer dtype"
    if dtype is not None and value.dtype != dtype:
        return f"{name} has dtype {value.dtype}, expected {dtype}"
    if device is not None and value.device.type != device:
        return f"{name} is on {value.device}, expected {device} (where the attention kernels read it)"
    return None


def recorded_calls(output: Any, layers: int) -> tuple[list[dict], str | None]:
    """The single recorded call of each of the ``layers`` stand-in layers, or what is wrong.

    The encoder hands every layer its inputs exactly once per forward (``for
    encoder_layer in self.layers``)."""
    if not isinstance(output, dict) or not isinstance(output.get("layers"), (list, tuple)):
        return [], f"output is a {type(output).__name__}, not {{hidden_states, layers}}"
    recorded = output["layers"]
    if len(recorded) != layers:
        return [], f"{len(recorded)} layers recorded, the encoder has {layers}"
    calls = []
    for k, layer in enumerate(recorded):
        if not isinstance(layer, (list, tuple)) or len(layer) != 1 or not isinstance(layer[0], dict):
            count = len(layer) if isinstance(layer, (list, tuple)) else "?"
            return [], f"layer {k} was called {count} times in one forward, expected once"
        calls.append(layer[0])
    return calls, None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
                and torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return a == b


def layers_share(output: Any, layers: int, keys: Sequence[str]) -> str | None:
    """Every layer received the same ``keys`` as layer 0, or the first that did not."""
    calls, problem = recorded_calls(output, layers)
    if problem:
        return problem
    for k, call in enumerate(calls[1:], start=1):
        for key in keys:
            if key not in call or key not in calls[0]:
                return f"layer {k} or layer 0 received no {key}"
            if not _same(call[key], calls[0][key]):
                return f"layer {k} received another {key} than layer 0: {_brief(call[key])} vs {_brief(calls[0][key])}"
    return None


def _brief(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shown = describe(value.flatten().tolist(), 6)
        return f"tensor{tuple(value.shape)} {value.dtype} on {value.device} {shown}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_brief(v) for v in value) + ")"
    return repr(value)


def position_partition_problem(rows: torch.Tensor, positions: Sequence[tuple[int, int]], name: str) -> str | None:
    """Tokens carry the same rope rows exactly when they share an (h, w) position.

    A row is gathered from the table by the token's position ids alone, so
    equal positions give bitwise-equal rows; distinct positions give distinct
    angles (integer ids below 44 never meet modulo 2*pi)."""
    if rows.dim() < 1 or rows.shape[0] != len(positions):
        return f"{name} has {rows.shape[0] if rows.dim() else 0} rows for {len(positions)} patches of the grids"
    if not positions:
        return None  # no patch, no pair of patches
    by_row: dict[tuple, tuple[int, tuple[int, int]]] = {}
    by_position: dict[tuple[int, int], tuple[int, tuple]] = {}
    for token, (key, position) in enumerate(zip(map(tuple, rows.reshape(len(positions), -1).tolist()), positions)):
        if key in by_row and by_row[key][1] != position:
            first, other = by_row[key]
            return (f"{name}: tokens {first} at (h, w)={other} and {token} at {position} carry the same rope row "
                    f"(positions collapsed)")
        if position in by_position and by_position[position][1] != key:
            return (f"{name}: tokens {by_position[position][0]} and {token} share position (h, w)={position} "
                    f"but carry different rope rows (ids not per frame / per image)")
        by_row.setdefault(key, (token, position))
        by_position.setdefault(position, (token, key))
    return None


# --- keye-encoder-rope: KeyeSiglipEncoder.forward ------------------------------------


def flat_grids(spec: dict) -> list[Grid]:
    """The grids in ``flatten_list`` order: nested groups unpacked, in place."""
    grids = [tuple(int(x) for x in g) for g in spec["grids"]]
    nesting = spec.get("nesting", list(range(len(grids))))
    out: list[Grid] = []
    for entry in nesting:
        out.extend([grids[entry]] if isinstance(entry, int) else [grids[i] for i in entry])
    return out


def _head_dim(spec: dict) -> int:
    return spec["hidden_size"] // spec["heads"]


def _grid_built_ids(spec: dict) -> bool:
    """The ids are the grids' own (computed inside, or passed in built from the
    grids): the documented meaning ties them to the grids. Random ids (wide) are not."""
    return spec["position_ids"]["kind"] in ("computed", "grid")


def _encoder_positions(spec: dict) -> list[tuple[int, int]]:
    if _grid_built_ids(spec):
        return patch_positions(flat_grids(spec))
    from strategies.keye.inputs import passed_position_ids  # the wide input itself: random ids drawn from the seed

    hids, wids = passed_position_ids(spec)
    return list(zip(hids.tolist(), wids.tolist()))


def keye_layers_share_metadata(spec: dict, output: Any) -> str | None:
    """Every encoder layer is called once per forward and handed the same
    ``cu_seqlens`` and rope ``(cos, sin)``: KeyeSiglipEncoder.forward computes
    them once and passes them to each of ``self.layers`` (keye.py, ``for
    encoder_layer in self.layers: ... cu_seqlens=attn_cu_seqlens, rope_emb=rope_emb``)."""
    return layers_share(output, spec["layers"], ("cu_seqlens", "rope_emb"))


def keye_cu_seqlens_running_sum(spec: dict, output: Any) -> str | None:
    """The ``cu_seqlens`` each layer receives is the int32 running sum from 0 of
    ``t*h*w`` over the flattened grids and ends at the token count: it is what
    the caller (_process_image_input) staged, passed through, and varlen
    attention reads it as sequence boundaries (KeyeSiglipAttention:
    ``(cu_seqlens[1:] - cu_seqlens[:-1]).max()``). With random ids (wide) the
    token count is the ids' length, so only the running sum is checked."""
    calls, problem = recorded_calls(output, spec["layers"])
    if problem:
        return problem
    expected = running_sum(numels(flat_grids(spec)))
    for k, call in enumerate(calls):
        cu = call.get("cu_seqlens")
        problem = tensor_problem(cu, f"layer {k} cu_seqlens", device=device_type(spec), dtype=torch.int32, ndim=1)
        if problem:
            return problem
        if cu.tolist() != expected:
            return f"layer {k} cu_seqlens {describe(cu.tolist())} is not the running sum of t*h*w {describe(expected)}"
        tokens = _tokens(call)
        if _grid_built_ids(spec) and tokens is not None and expected[-1] != tokens:
            return f"layer {k} cu_seqlens ends at {expected[-1]}, the layer got {tokens} tokens"
    return None


def _tokens(call: dict) -> int | None:
    hidden = call.get("hidden_states")
    return hidden.shape[1] if isinstance(hidden, torch.Tensor) and hidden.dim() == 3 else None


def keye_rope_rows_follow_tokens(spec: dict, output: Any) -> str | None:
    """The rope ``(cos, sin)`` each layer receives are two float32 tensors of one
    row per token and ``2 * 2 * len(inv_freq)`` columns (the (h, w) rows of
    the ``SigLIPRotaryEmbedding(head_dim // 2)`` table, flattened, then
    ``.repeat(1, 2)``), on the device of the hidden states: that is the shape
    apply_rotary_pos_emb_flashatt chunks in two and rotates q/k with."""
    calls, problem = recorded_calls(output, spec["layers"])
    if problem:
        return problem
    width = 4 * len(inv_freqs(_head_dim(spec)))
    for k, call in enumerate(calls):
        rope = call.get("rope_emb")
        if not isinstance(rope, tuple) or len(rope) != 2:
            return f"layer {k} rope_emb is {type(rope).__name__}, expected the (cos, sin) pair"
        tokens = _tokens(call)
        for name, table in zip(("cos", "sin"), rope):
            problem = tensor_problem(table, f"layer {k} rope {name}", device=device_type(spec), dtype=torch.float32,
                                     ndim=2)
            if problem:
                return problem
            if tuple(table.shape) != (tokens, width):
                return f"layer {k} rope {name} has shape {tuple(table.shape)}, expected ({tokens}, {width})"
    return None


def keye_rope_depends_only_on_position(spec: dict, output: Any) -> str | None:
    """Two patches carry the same rope rows exactly when they share an (h, w)
    position: per image, per frame, row-major ids (``arange(t*h*w) % (h*w)``
    then ``// w``, ``% w``) gathered from one table, so every frame and every
    image restarts at (0, 0). Random ids (wide) have no grid meaning: None."""
    if not _grid_built_ids(spec):
        return None
    calls, problem = recorded_calls(output, spec["layers"])
    if problem:
        return problem
    positions = patch_positions(flat_grids(spec))
    for k, call in enumerate(calls):
        rope = call.get("rope_emb")
        if not isinstance(rope, tuple) or len(rope) != 2 or not all(isinstance(t, torch.Tensor) for t in rope):
            return f"layer {k} rope_emb is not a (cos, sin) pair of tensors"
        cos, sin = rope
        if cos.shape != sin.shape or cos.dim() != 2:
            return f"layer {k} rope cos {tuple(cos.shape)} and sin {tuple(sin.shape)} are not one [tokens, width] shape"
        problem = position_partition_problem(torch.cat([cos, sin], dim=1), positions, f"layer {k} rope")
        if problem:
            return problem
    return None


def _encoder_expected(spec: dict) -> list[dict] | None:
    head_dim = _head_dim(spec)
    angles = [row + row for row in rope_angles(_encoder_positions(spec), head_dim)]  # .repeat(1, 2)
    width = 4 * len(inv_freqs(head_dim))
    # cos/sin of the float64 angles in one call, rounded once to float32 (torch's float64
    # cos/sin agree with math's to 1 ulp of float64: the float32 results were identical on
    # 100,000 angles in [0, 60), and math per element cost more than the calls under test).
    table = torch.tensor(angles, dtype=torch.float64).reshape(len(angles), width)
    cos, sin = table.cos().float(), table.sin().float()
    cu = running_sum(numels(flat_grids(spec)))
    return [{"cu_seqlens": cu, "cos": cos, "sin": sin} for _ in range(spec["layers"])]


def _encoder_observed(output: Any) -> list[dict]:
    return [{"cu_seqlens": call["cu_seqlens"].tolist(), "cos": call["rope_emb"][0].cpu(),
             "sin": call["rope_emb"][1].cpu()} for layer in output["layers"] for call in layer]


KEYE_ENCODER_ROPE = Reference(expected=_encoder_expected, observed=_encoder_observed, floats="close")
"""Per layer call: the cu_seqlens handed on and the rope ``(cos, sin)`` of every
token, computed in float64 from SigLIP's definition (position ids per image,
per frame, row-major; ``angle = id * 10000 ** (-k / dim)``), compared with the
float32 tables within torch's float32 tolerance."""


def attention_reads(cu_seqlens: torch.Tensor) -> None:
    """One MMEncoderAttention call's host reads of ``cu_seqlens`` (see the consumers)."""
    max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()
    if cu_seqlens.is_cuda:
        # flash_attn_maxseqlen_wrapper / triton_attn_wrapper: FLASH_ATTN, else TRITON_ATTN,
        # is what vllm/platforms/cuda.py get_vit_attn_backend picks on CUDA.
        max_seqlen.item()
    else:
        (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # torch_sdpa_wrapper (MMEncoderAttention.forward_cpu)


def keye_encoder_layer_reads(spec: dict, output: Any) -> None:
    """The host reads each encoder layer's attention makes of what it was handed.

    vllm/model_executor/models/keye.py, KeyeSiglipAttention.forward (0.27.1 and
    0.28.0 alike): ``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()``,
    then ``self.attn(..., cu_seqlens=cu_seqlens, max_seqlen=max_seqlen)``.
    vllm/model_executor/layers/attention/mm_encoder_attention.py,
    MMEncoderAttention.forward_cuda -> _forward_fa (FLASH_ATTN, which
    vllm/platforms/cuda.py get_vit_attn_backend picks first; TRITON_ATTN reads
    the same in triton_attn_wrapper) -> vit_flash_attn_wrapper;
    vllm/v1/attention/ops/vit_attn_wrappers.py, flash_attn_maxseqlen_wrapper:
    ``max_seqlen = q_len if max_seqlen is None else max_seqlen.item()``. On the
    CPU, forward_cpu -> _forward_sdpa -> torch_sdpa_wrapper:
    ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()``. One read per
    recorded layer call."""
    for layer in output["layers"]:
        for call in layer:
            attention_reads(call["cu_seqlens"])


# --- keye-vision-split: KeyeSiglipVisionTransformer.forward --------------------------


def _split_applies(spec: dict) -> bool:
    """``cu_seqlens`` is the running sum of the grids: the premise of 0.28.0's
    host split and what callers pass. A wide ``cu_seqlens`` that is not (a
    stale table, padding) gives the split no documented meaning."""
    return list(spec["cu_seqlens"]) == running_sum(numels(flat_grids(spec)))


def _pieces(output: Any) -> tuple[list[torch.Tensor], str | None]:
    if not isinstance(output, (list, tuple)) or not all(isinstance(p, torch.Tensor) for p in output):
        return [], f"output is a {type(output).__name__}, expected a list of per-image tensors"
    return list(output), None


def keye_split_covers_sequence(spec: dict, output: Any) -> str | None:
    """The per-image pieces are ``[n, hidden]`` tensors whose lengths add up to
    the sequence length ``sum(t*h*w)``: the tower output split at the image
    boundaries (KeyeSiglipVisionTransformer.forward: ``last_hidden_state.split(
    split_sizes, dim=1)`` then ``squeeze(0)``), which Projector.forward
    rearranges per image as ``(t h p1 w p2) d``. None when ``cu_seqlens`` is not
    the grids' running sum (wide)."""
    if not _split_applies(spec):
        return None
    pieces, problem = _pieces(output)
    if problem:
        return problem
    for k, piece in enumerate(pieces):
        if piece.dim() != 2 or piece.shape[1] != spec["hidden_size"]:
            return f"piece {k} has shape {tuple(piece.shape)}, expected [tokens, {spec['hidden_size']}]"
    total = sum(numels(flat_grids(spec)))
    covered = sum(piece.shape[0] for piece in pieces)
    if covered != total:
        return f"the pieces hold {covered} tokens, the sequence has {total}"
    return None


def keye_split_sizes_follow_grids(spec: dict, output: Any) -> str | None:
    """One piece per flattened grid, piece ``i`` with ``t_i*h_i*w_i`` rows: the
    split sizes are ``int(np.prod(thw)) for thw in flatten_list(image_grid_thw)``
    ("`cu_seqlens` is the running sum of the per-image `t * h * w`"). None when
    ``cu_seqlens`` is not the grids' running sum (wide)."""
    if not _split_applies(spec):
        return None
    pieces, problem = _pieces(output)
    if problem:
        return problem
    expected = numels(flat_grids(spec))
    got = [piece.shape[0] if piece.dim() else None for piece in pieces]
    if len(pieces) != len(expected) or got != expected:
        return f"piece sizes {describe(got)}, the flattened grids give t*h*w {describe(expected)}"
    return None


def _split_expected(spec: dict) -> list[torch.Tensor] | None:
    if not _split_applies(spec):
        return None
    sizes, hidden = numels(flat_grids(spec)), spec["hidden_size"]
    # The stand-in embeddings and layers pass the features through, so the
    # tower output is post_layernorm(features), features as the input model
    # draws them. The norm is torch's own (a fresh nn.LayerNorm: weight 1, bias
    # 0) -- it is not what changed, and float32 rows of near-equal values make
    # a hand-written one differ past float32 tolerance; the split is by hand.
    # On the example's device: the CPU and CUDA kernels round bfloat16 rows of
    # near-equal values differently (H200 nightly 2026-12-01: 2e-5 against an
    # atol of 1e-5, a false alarm), and the norm is not what is under test.
    features = seeded_floats((1, sum(sizes), hidden), spec["dtype"], spec["seed"], spec["device"])
    normed = torch.nn.functional.layer_norm(features, (hidden,), eps=LAYER_NORM_EPS)[0].cpu()
    bounds = running_sum(sizes)
    return [normed[start:end].clone() for start, end in zip(bounds, bounds[1:])]


def _split_observed(output: Any) -> list[torch.Tensor]:
    return [piece.cpu() for piece in output]


KEYE_VISION_SPLIT = Reference(expected=_split_expected, observed=_split_observed, floats="close")
"""The per-image pieces: rows ``[cu_i, cu_i+1)``, cut at the running sum of the
flattened grids' ``t*h*w``, of the layer-normed tower output."""


# --- keye-process-image / keye-process-video: BaseKeyeModule metadata -----------------


def _metadata_grids(spec: dict) -> list[Grid]:
    return [tuple(int(x) for x in g) for g in spec["grids"]]


def _tower_kwargs(output: Any) -> tuple[dict, str | None]:
    """What the (recording) vision tower was handed: the first item the projector got."""
    if not isinstance(output, (list, tuple)) or len(output) != 2 or not isinstance(output[0], dict):
        return {}, f"output is a {type(output).__name__}, expected [tower inputs, grid] from the projector"
    return output[0], None


def keye_metadata_cu_seqlens_running_sum(spec: dict, output: Any) -> str | None:
    """The ``cu_seqlens`` handed to the vision tower is an int32 tensor on the
    pixels' device, the running sum from 0 of ``t*h*w`` per grid row, ending at
    the number of patch rows (``cu_seqlens.append(cu_seqlens[-1] + numel)``;
    the tower hands it to varlen attention as sequence boundaries)."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    cu = kwargs.get("cu_seqlens")
    problem = tensor_problem(cu, "cu_seqlens", device=device_type(spec), dtype=torch.int32, ndim=1)
    if problem:
        return problem
    expected = running_sum(numels(_metadata_grids(spec)))
    if cu.tolist() != expected:
        return f"cu_seqlens {describe(cu.tolist())} is not the running sum of t*h*w {describe(expected)}"
    pixels = kwargs.get("pixel_values")
    if isinstance(pixels, torch.Tensor) and pixels.dim() >= 1 and pixels.shape[0] != expected[-1]:
        return f"cu_seqlens ends at {expected[-1]}, the tower got {pixels.shape[0]} patch rows"
    return None


def keye_metadata_position_ids_follow_grid(spec: dict, output: Any) -> str | None:
    """The packing position ids handed to the tower count ``0 .. h*w - 1``
    row-major in every frame of every grid row (``torch.arange(numel) %
    np.prod(thw_tuple[1:])``), one per patch, an integer tensor on the pixels'
    device (the embeddings' ``packing_position_embedding(position_ids)``)."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    ids = kwargs.get("position_ids")
    problem = tensor_problem(ids, "position_ids", device=device_type(spec), integer=True, ndim=1)
    if problem:
        return problem
    expected = packing_ids(_metadata_grids(spec))
    if ids.tolist() != expected:
        return f"position_ids {describe(ids.tolist())}, the grids give {describe(expected)}"
    return None


def keye_metadata_sample_indices_name_rows(spec: dict, output: Any) -> str | None:
    """``sample_indices`` names, for every patch, the grid row it belongs to
    (``torch.full((numel,), idx)`` per row ``idx``, in order): an integer
    tensor on the pixels' device, one entry per patch."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    indices = kwargs.get("sample_indices")
    problem = tensor_problem(indices, "sample_indices", device=device_type(spec), integer=True, ndim=1)
    if problem:
        return problem
    expected = row_indices(_metadata_grids(spec))
    if indices.tolist() != expected:
        return f"sample_indices {describe(indices.tolist())}, the grid rows give {describe(expected)}"
    return None


def keye_metadata_grids_are_host_ints(spec: dict, output: Any) -> str | None:
    """The tower gets ``image_grid_thw`` as a list of ``(t, h, w)`` tuples of
    Python ints equal to the grid rows, and the pixels in the tower's dtype
    with one row per patch: 0.28.0's tower takes its split sizes
    (``int(np.prod(thw))``) and rope table size (``max(max(h, w) ...)``) from
    these on the host, and its embeddings unpack ``t, h, w = image_grid``."""
    kwargs, problem = _tower_kwargs(output)
    if problem:
        return problem
    grids = kwargs.get("image_grid_thw")
    expected = _metadata_grids(spec)
    if not isinstance(grids, list) or not all(isinstance(g, tuple) for g in grids):
        return f"image_grid_thw is {type(grids).__name__} of {describe(map(type, grids or []), 3)}, not tuples"
    for k, grid in enumerate(grids):
        if not all(type(x) is int for x in grid):
            return f"image_grid_thw[{k}] holds {[type(x).__name__ for x in grid]}, not Python ints"
    if grids != expected:
        return f"image_grid_thw {describe(grids, 6)}, the grid rows are {describe(expected, 6)}"
    pixels = kwargs.get("pixel_values")
    problem = tensor_problem(pixels, "pixel_values", dtype=FLOAT_DTYPES[spec["tower_dtype"]])
    if problem:
        return problem
    if pixels.shape[0] != sum(numels(expected)):
        return f"pixel_values has {pixels.shape[0]} rows for {sum(numels(expected))} patches"
    return None


def _metadata_expected(spec: dict) -> dict:
    grids = _metadata_grids(spec)
    return {"cu_seqlens": running_sum(numels(grids)), "position_ids": packing_ids(grids),
            "sample_indices": row_indices(grids), "image_grid_thw": [list(g) for g in grids]}


def _metadata_observed(output: Any) -> dict:
    kwargs = output[0]
    return {"cu_seqlens": kwargs["cu_seqlens"].tolist(), "position_ids": kwargs["position_ids"].tolist(),
            "sample_indices": kwargs["sample_indices"].tolist(),
            "image_grid_thw": [[int(x) for x in g] for g in kwargs["image_grid_thw"]]}


KEYE_METADATA = Reference(expected=_metadata_expected, observed=_metadata_observed)
"""The metadata handed to the tower, built by plain loops over the grid rows:
cu_seqlens, packing position ids, sample indices and the host grid tuples."""


def keye_tower_reads(spec: dict, output: Any) -> None:
    """The host reads the vision tower's attention makes of the ``cu_seqlens``
    these methods stage for it (one layer's worth: the stand-in tower records
    no layers; a real one repeats this per layer, num_hidden_layers times).

    vllm/model_executor/models/keye.py, KeyeSiglipAttention.forward:
    ``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()``;
    vllm/v1/attention/ops/vit_attn_wrappers.py, flash_attn_maxseqlen_wrapper
    (MMEncoderAttention._forward_fa, FLASH_ATTN on CUDA):
    ``max_seqlen = q_len if max_seqlen is None else max_seqlen.item()``; on the
    CPU torch_sdpa_wrapper: ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()``.
    The 0.28.0 tower no longer reads ``cu_seqlens[i]`` for its split (0.27.1's
    ``start = cu_seqlens[i]``), so this is all it reads."""
    attention_reads(output[0]["cu_seqlens"])
