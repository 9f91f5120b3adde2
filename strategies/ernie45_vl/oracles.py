"""Oracles for ernie45_vl's vision tower metadata and resampler (docs/design.md rows 6-8).

Written from what the outputs *mean* in vllm 0.28.0's
``vllm/model_executor/models/ernie45_vl.py`` (sources/vllm-0.28.0/), not from
either copy:

* ``rot_pos_emb(grid_thw)`` -- one rotary row per patch token, the token's
  ``(h, w)`` position ids looked up in ``Ernie4_5_VisionRotaryEmbedding``'s
  table (``outer(arange(seqlen), inv_freq)``, ``inv_freq[j] =
  theta ** (-2j / dim)``, ``dim = head_dim // 2``, ``theta = 10000``) and the
  h and w halves concatenated. The tokens come in the order the patch merger
  consumes them: ``spatial_conv_reshape`` folds every ``m * m`` consecutive
  rows (``m = spatial_merge_size``) into one merged token, and the merged
  tokens of a frame are the LM's ``(h / m) x (w / m)`` grid in row-major order
  (``get_mrope_input_positions``), so each frame is its ``m x m`` windows in
  row-major order, each window's cells row-major.
* ``prepare_encoder_metadata`` -- ``cu_seqlens`` are the varlen-attention
  offsets of the frames (``repeat_interleave(h * w, t)`` then a running sum
  from 0; ``num_pad`` adds one trailing sequence of that many tokens);
  ``max_seqlen`` is the longest of those sequences for the flash-style
  backends ("Only used for Flash Attention", ``Ernie4_5_VisionAttention``),
  None for the others. The CUDA-graph parameters (docstring):
  ``max_batch_size`` pads ``cu_seqlens`` to ``max_batch_size + 1`` entries by
  repeating the last offset (empty sequences), ``max_seqlen_override``
  replaces ``max_seqlen``, which the graph paths keep on the CPU ("consumed
  via .item()", avoiding a captured D2H copy).
* ``VariableResolutionResamplerModel.forward`` -- one output row per LM token:
  ``_process_image_input`` splits the output by ``t * h * w // m // m`` per
  image, ``_process_video_input`` by ``t * h * w // temporal_conv_size // m
  // m`` per video; ``fwd_placeholder`` pairs frames ``(0, 1), (2, 3), ...``
  side by side for the temporal layer, a one-frame image with itself.

Every check reads the output on the host (``.tolist()``, ``.cpu()``): the
engine runs invariants and references outside the sync counting.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference

THETA = 10000.0  # Ernie4_5_VisionRotaryEmbedding's default; the tower passes none
# compute_attn_mask_seqlen's backends: the ones handed a max_seqlen.
FLASH_STYLE = ("FLASH_ATTN", "ROCM_AITER_FA", "TRITON_ATTN")
TEMPORAL_CONV_SIZE = 2  # Ernie 4.5 VL's config.temporal_conv_size
ROTARY_ATOL = ROTARY_RTOL = 1e-5  # float32 table entries against float64 arithmetic


# -- what the grid says --------------------------------------------------------

def _grid(spec: dict) -> list[tuple[int, int, int]]:
    return [(int(t), int(h), int(w)) for t, h, w in spec["grid_thw"]]


def _merge_applies(spec: dict) -> bool:
    """The rotary ordering is defined for non-empty grids whose ``h`` and ``w``
    are multiples of the merge size (what the patch merger requires)."""
    m = spec["merge"]
    grid = _grid(spec)
    return bool(grid) and all(t >= 1 and h % m == 0 and w % m == 0 for t, h, w in grid)


def _frames(spec: dict) -> list[tuple[int, int]]:
    """``(h, w)`` of every frame: item ``[t, h, w]`` is ``t`` frames."""
    return [(h, w) for t, h, w in _grid(spec) for _ in range(t)]


def _segments(spec: dict) -> list[int]:
    """The sequences attention sees: one per frame, then the ``num_pad`` one."""
    segments = [h * w for h, w in _frames(spec)]
    if spec.get("num_pad", 0) > 0:
        segments.append(spec["num_pad"])
    return segments


def _running_sum(segments: list[int]) -> list[int]:
    offsets = [0]
    for length in segments:
        offsets.append(offsets[-1] + length)
    return offsets


def _inv_freq(head_dim: int) -> list[float]:
    """``Ernie4_5_VisionRotaryEmbedding(head_dim // 2).inv_freq``: ``theta ** (-k / dim)``
    for ``k = 0, 2, 4, ... < dim``."""
    dim = head_dim // 2
    return [1.0 / THETA ** (k / dim) for k in range(0, dim, 2)]


def _token_positions(spec: dict) -> list[tuple[int, int]]:
    """Every token's ``(h, w)`` position id, in the merger's order: per frame,
    the ``m x m`` windows row-major, each window's cells row-major."""
    m = spec["merge"]
    positions = []
    for h, w in _frames(spec):
        for gh in range(h // m):
            for gw in range(w // m):
                for ih in range(m):
                    for iw in range(m):
                        positions.append((gh * m + ih, gw * m + iw))
    return positions


def _on(tensor: torch.Tensor, device: str) -> bool:
    wanted = torch.device(device)
    return tensor.device.type == wanted.type and (wanted.index is None or tensor.device.index == wanted.index)


def _same_device(tensor: torch.Tensor, device: str) -> str | None:
    return None if _on(tensor, device) else f"on {tensor.device}, not on {device}"


# -- rotary rows ---------------------------------------------------------------

def _rotary_shape(spec: dict, rotary: Any) -> str | None:
    if not isinstance(rotary, torch.Tensor):
        return f"rotary_pos_emb is a {type(rotary).__name__}, not a tensor"
    rows = sum(t * h * w for t, h, w in _grid(spec))
    cols = 2 * len(_inv_freq(spec["head_dim"]))
    if tuple(rotary.shape) != (rows, cols):
        return (f"rotary_pos_emb has shape {tuple(rotary.shape)}, want ({rows}, {cols}): one row per token "
                f"(sum t*h*w) and the h and w halves of {cols // 2} frequencies (head_dim {spec['head_dim']})")
    return None


def _rotary_positions(spec: dict, rotary: torch.Tensor) -> tuple[list[tuple[int, int]] | None, str | None]:
    """The ``(h, w)`` position ids read off the rows: ``inv_freq[0] == 1``, so
    column 0 is the h position and the first column of the w half is the w one."""
    half = len(_inv_freq(spec["head_dim"]))
    table = rotary.detach().to("cpu", torch.float64)
    hpos, wpos = table[:, 0].tolist(), table[:, half].tolist()
    positions = []
    for row, (hp, wp) in enumerate(zip(hpos, wpos)):
        if not (float(hp).is_integer() and float(wp).is_integer()) or hp < 0 or wp < 0:
            return None, f"row {row} holds positions ({hp}, {wp}), not non-negative integers (inv_freq[0] is 1)"
        positions.append((int(hp), int(wp)))
    return positions, None


def _rows_are_table_rows(spec: dict, rotary: torch.Tensor) -> str | None:
    positions, problem = _rotary_positions(spec, rotary)
    if problem:
        return problem
    inv = torch.tensor(_inv_freq(spec["head_dim"]), dtype=torch.float64)
    pos = torch.tensor(positions, dtype=torch.float64).reshape(-1, 2)
    want = torch.cat([torch.outer(pos[:, 0], inv), torch.outer(pos[:, 1], inv)], dim=1)
    got = rotary.detach().to("cpu", torch.float64)
    bad = (got - want).abs() > ROTARY_ATOL + ROTARY_RTOL * want.abs()
    if bad.any():
        row, col = (int(i) for i in bad.nonzero()[0])
        return (f"row {row} column {col} is {got[row, col].item():.7g}, but the table row of position "
                f"{positions[row]} holds {want[row, col].item():.7g} there")
    return None


def _frame_slices(spec: dict) -> list[tuple[int, int, int, int]]:
    """``(start, stop, h, w)`` of every frame's rows."""
    out, start = [], 0
    for h, w in _frames(spec):
        out.append((start, start + h * w, h, w))
        start += h * w
    return out


def _positions_cover_frames(spec: dict, positions: list[tuple[int, int]]) -> str | None:
    for frame, (start, stop, h, w) in enumerate(_frame_slices(spec)):
        cells = positions[start:stop]
        outside = [p for p in cells if not (p[0] < h and p[1] < w)]
        if outside:
            return f"frame {frame} (h={h}, w={w}, rows {start}..{stop - 1}): position {outside[0]} is outside its grid"
        if len(set(cells)) != h * w:
            return f"frame {frame} (h={h}, w={w}): its {h * w} rows cover {len(set(cells))} distinct cells"
    return None


def _positions_follow_windows(spec: dict, positions: list[tuple[int, int]]) -> str | None:
    m = spec["merge"]
    for frame, (start, _, h, w) in enumerate(_frame_slices(spec)):
        for window in range(h * w // (m * m)):
            first = start + window * m * m
            cells = positions[first:first + m * m]
            want = divmod(window, w // m)
            found = {(hp // m, wp // m) for hp, wp in cells}
            if found != {want} or len(set(cells)) != m * m:
                return (f"frame {frame} (h={h}, w={w}): rows {first}..{first + m * m - 1} hold {cells}, "
                        f"not the {m}x{m} window {want} (merged token {window}, row-major)")
    return None


def _rotary_problem(spec: dict, rotary: Any) -> str | None:
    """Shape, table rows, coverage and merge windows, the first that fails."""
    if not _merge_applies(spec):
        return None
    problem = _rotary_shape(spec, rotary)
    if problem:
        return problem
    positions, problem = _rotary_positions(spec, rotary)
    return (problem or _rows_are_table_rows(spec, rotary) or _positions_cover_frames(spec, positions)
            or _positions_follow_windows(spec, positions))


def rot_pos_emb_shape(spec: dict, output: Any) -> str | None:
    """rot_pos_emb has one row per patch token (sum of t*h*w, the tokens cu_seqlens counts) and
    head_dim // 2 columns, the h and w halves of Ernie4_5_VisionRotaryEmbedding(head_dim // 2)'s
    frequencies (Ernie4_5_VisionAttention takes its .cos()/.sin() for the head)."""
    if not _merge_applies(spec):
        return None
    return _rotary_shape(spec, output)


def rot_pos_emb_rows_are_table_rows(spec: dict, output: Any) -> str | None:
    """Every row is the rotary table's row of one (h, w) position: columns 0 and head_dim // 4 hold
    the integer position ids (inv_freq[0] is 1) and column j of each half is the position times
    inv_freq[j] = 10000 ** (-2j / (head_dim // 2)) (Ernie4_5_VisionRotaryEmbedding.forward)."""
    if not _merge_applies(spec) or _rotary_shape(spec, output):
        return None  # rot_pos_emb_shape says what is wrong
    return _rows_are_table_rows(spec, output)


def rot_pos_emb_covers_every_frame(spec: dict, output: Any) -> str | None:
    """Each frame's h*w rows (an item [t, h, w] is t frames, repeated) hold every position of its
    h x w grid exactly once: the rotary table covers every position id the grid produces
    (0.28.0 sizes it max(h, w) over the grid) and no token is dropped or doubled."""
    if not _merge_applies(spec) or _rotary_shape(spec, output):
        return None
    positions, problem = _rotary_positions(spec, output)
    return problem or _positions_cover_frames(spec, positions)


def rot_pos_emb_follows_merge_windows(spec: dict, output: Any) -> str | None:
    """Each run of m*m consecutive rows of a frame (m = spatial_merge_size) is one m-aligned m x m
    window, the windows in row-major order: the patch merger (spatial_conv_reshape) folds every
    m*m consecutive rows into the merged token at that row-major LM grid position."""
    if not _merge_applies(spec) or _rotary_shape(spec, output):
        return None
    positions, problem = _rotary_positions(spec, output)
    return problem or _positions_follow_windows(spec, positions)


# -- encoder metadata (eager path) ----------------------------------------------

def _field(output: Any, key: str) -> Any:
    if not isinstance(output, dict) or key not in output:
        raise KeyError(f"output has no {key!r}")  # the engine reports an unreadable output as a violation
    return output[key]


def _offsets_problem(cu_seqlens: Any, segments: list[int], padded_to: int | None) -> str | None:
    """What is wrong with ``cu_seqlens`` as the offsets of ``segments``
    (then empty sequences up to ``padded_to`` sequences), or None."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.ndim != 1:
        return f"cu_seqlens is not a 1-D tensor: {cu_seqlens!r}"
    offsets = [int(v) for v in cu_seqlens.tolist()]
    want = _running_sum(segments)
    if padded_to is not None and padded_to > len(segments):
        want += [want[-1]] * (padded_to - len(segments))
    if not offsets or offsets[0] != 0:
        return f"cu_seqlens {offsets} does not start at 0"
    drops = [i for i in range(1, len(offsets)) if offsets[i] < offsets[i - 1]]
    if drops:
        return f"cu_seqlens {offsets} decreases at index {drops[0]}"
    if len(offsets) != len(want):
        return f"cu_seqlens has {len(offsets)} entries, want {len(want)} ({offsets} vs {want})"
    if offsets[-1] != want[-1]:
        return f"cu_seqlens ends at {offsets[-1]}, not at the token total {want[-1]} ({offsets} vs {want})"
    if offsets != want:
        at = next(i for i, (a, b) in enumerate(zip(offsets, want)) if a != b)
        return f"cu_seqlens {offsets} is not the running sum {want} of the sequence lengths (first at index {at})"
    return None


def _max_seqlen_value(max_seqlen: Any) -> tuple[int | None, str | None]:
    if not isinstance(max_seqlen, torch.Tensor) or max_seqlen.ndim != 0:
        return None, f"max_seqlen is {max_seqlen!r}, not a 0-d tensor (attention calls .item() on it)"
    if max_seqlen.dtype.is_floating_point or max_seqlen.dtype == torch.bool:
        return None, f"max_seqlen has dtype {max_seqlen.dtype}, not an integer dtype"
    return int(max_seqlen.item()), None


def _longest_problem(spec: dict, max_seqlen: Any, segments: list[int]) -> str | None:
    if spec["backend"] not in FLASH_STYLE:
        if max_seqlen is not None:
            return f"max_seqlen is {max_seqlen!r} for backend {spec['backend']}, which gets None"
        return None
    value, problem = _max_seqlen_value(max_seqlen)
    if problem:
        return problem
    if value != max(segments):
        return f"max_seqlen is {value}, but the longest sequence of {segments} has {max(segments)} tokens"
    return None


def metadata_cu_seqlens_running_sum(spec: dict, output: Any) -> str | None:
    """cu_seqlens starts at 0, never decreases and is the running sum of the per-frame h*w (each item
    [t, h, w] repeated t times; then one num_pad sequence when num_pad > 0), ending at the token
    total: the varlen offsets forward hands every block's attention (cu_seqlens_q/k)."""
    segments = _segments(spec)
    if not segments:
        return None
    return _offsets_problem(_field(output, "cu_seqlens"), segments, None)


def metadata_max_seqlen_is_longest(spec: dict, output: Any) -> str | None:
    """For the flash-style backends (FLASH_ATTN, ROCM_AITER_FA, TRITON_ATTN) max_seqlen is an integer
    0-d tensor equal to the longest sequence cu_seqlens describes (the num_pad one included), which
    vit_flash_attn_wrapper passes as max_seqlen_q/k; for the others it is None ("Only used for
    Flash Attention", Ernie4_5_VisionAttention.forward)."""
    segments = _segments(spec)
    if not segments:
        return None
    return _longest_problem(spec, _field(output, "max_seqlen"), segments)


def metadata_on_attention_device(spec: dict, output: Any) -> str | None:
    """rotary_pos_emb is on forward's hidden_states.device (the device= argument), and cu_seqlens is
    int32 (flash_attn_varlen_func's offsets) and, with the eager caller's device grid, on that
    device too; 0.27.1's inline block left cu_seqlens where the grid was, so a CPU grid (wide
    contract only) says nothing about its device."""
    rotary, cu_seqlens = _field(output, "rotary_pos_emb"), _field(output, "cu_seqlens")
    if not isinstance(rotary, torch.Tensor) or not isinstance(cu_seqlens, torch.Tensor):
        return "rotary_pos_emb or cu_seqlens is not a tensor"
    if cu_seqlens.dtype != torch.int32:
        return f"cu_seqlens has dtype {cu_seqlens.dtype}, not torch.int32"
    problem = _same_device(rotary, spec["device"])
    if problem:
        return "rotary_pos_emb is " + problem
    if spec["grid_form"] == "device_tensor":
        problem = _same_device(cu_seqlens, spec["device"])
        if problem:
            return "cu_seqlens is " + problem
    return None


def encoder_rotary_follows_grid(spec: dict, output: Any) -> str | None:
    """The metadata's rotary_pos_emb is rot_pos_emb of the grid: one row per token, each the table row
    of its (h, w) position, every frame's positions covered once, in m x m merge windows
    (rot_pos_emb_* above); the rows are the real tokens only, num_pad and graph padding add none."""
    return _rotary_problem(spec, _field(output, "rotary_pos_emb"))


# -- encoder metadata (CUDA-graph paths) -----------------------------------------

def graph_cu_seqlens_padded(spec: dict, output: Any) -> str | None:
    """With max_batch_size given, cu_seqlens has max(max_batch_size, sequences) + 1 entries: the running
    sum of the sequence lengths from 0 to the token total, then the last offset repeated (empty
    sequences), so the graph's fixed buffer changes neither attention nor max_seqlen
    (prepare_encoder_metadata's docstring: "pad cu_seqlens to max_batch_size + 1 entries")."""
    segments = _segments(spec)
    if not segments:
        return None
    return _offsets_problem(_field(output, "cu_seqlens"), segments, spec["max_batch_size"])


def graph_max_seqlen_on_host(spec: dict, output: Any) -> str | None:
    """max_seqlen equals max_seqlen_override when one is given (an int32 0-d tensor), else the longest
    sequence for the flash-style backends (None for the others); either way it is on the CPU: the
    graph paths build the metadata from a host list and "keep it on CPU (consumed via .item()),
    avoiding a captured D2H copy" (prepare_encoder_metadata, 0.28.0)."""
    max_seqlen = _field(output, "max_seqlen")
    if isinstance(max_seqlen, torch.Tensor) and max_seqlen.device.type != "cpu":
        return f"max_seqlen is on {max_seqlen.device}: each block's .item() would copy it back inside the graph"
    override = spec["max_seqlen_override"]
    if override is None:
        segments = _segments(spec)
        return _longest_problem(spec, max_seqlen, segments) if segments else None
    value, problem = _max_seqlen_value(max_seqlen)
    if not problem and (value != override or max_seqlen.dtype != torch.int32):
        problem = f"max_seqlen is {value} ({max_seqlen.dtype}), not the override {override} as int32"
    return problem


def graph_buffers_on_device(spec: dict, output: Any) -> str | None:
    """cu_seqlens (int32) and rotary_pos_emb are on the graph's device: the device capture passes, the
    tower's own device at replay (prepare_encoder_metadata: "Defaults to self.device"); the
    encoder CUDA-graph manager copies them into the captured device buffers."""
    rotary, cu_seqlens = _field(output, "rotary_pos_emb"), _field(output, "cu_seqlens")
    if not isinstance(rotary, torch.Tensor) or not isinstance(cu_seqlens, torch.Tensor):
        return "rotary_pos_emb or cu_seqlens is not a tensor"
    if cu_seqlens.dtype != torch.int32:
        return f"cu_seqlens has dtype {cu_seqlens.dtype}, not torch.int32"
    for name, tensor in (("cu_seqlens", cu_seqlens), ("rotary_pos_emb", rotary)):
        problem = _same_device(tensor, spec["device"])
        if problem:
            return f"{name} is {problem}"
    return None


# -- references --------------------------------------------------------------------

def _expected_rotary(spec: dict) -> torch.Tensor:
    inv = _inv_freq(spec["head_dim"])
    rows = [[hp * f for f in inv] + [wp * f for f in inv] for hp, wp in _token_positions(spec)]
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, 2 * len(inv))


def _expected_rot_pos_emb(spec: dict) -> torch.Tensor | None:
    return _expected_rotary(spec) if _merge_applies(spec) else None


def _expected_metadata(spec: dict, *, graph: bool) -> dict[str, Any] | None:
    if not _merge_applies(spec):
        return None  # empty grids raise; h, w off the merge size have no merge order
    segments = _segments(spec)
    offsets = _running_sum(segments)
    override = spec.get("max_seqlen_override") if graph else None
    batch = spec.get("max_batch_size") if graph else None
    if batch is not None and batch > len(segments):
        offsets += [offsets[-1]] * (batch - len(segments))
    if override is not None:
        max_seqlen = override
    else:
        max_seqlen = max(segments) if spec["backend"] in FLASH_STYLE else None
    return {"rotary_pos_emb": _expected_rotary(spec), "cu_seqlens": offsets, "max_seqlen": max_seqlen}


def _observed_metadata(output: Any) -> dict[str, Any]:
    max_seqlen = output["max_seqlen"]
    return {
        "rotary_pos_emb": output["rotary_pos_emb"].detach().cpu(),
        "cu_seqlens": [int(v) for v in output["cu_seqlens"].tolist()],
        "max_seqlen": None if max_seqlen is None else int(max_seqlen.item()),
    }


def _observed_rotary(output: Any) -> torch.Tensor:
    return output.detach().cpu()


ROT_POS_EMB_REFERENCE = Reference(expected=_expected_rot_pos_emb, observed=_observed_rotary, floats="close")
METADATA_REFERENCE = Reference(expected=lambda spec: _expected_metadata(spec, graph=False),
                               observed=_observed_metadata, floats="close")
GRAPH_METADATA_REFERENCE = Reference(expected=lambda spec: _expected_metadata(spec, graph=True),
                                     observed=_observed_metadata, floats="close")


# -- consumers -----------------------------------------------------------------------

def _one_block_attention_reads(spec: dict, metadata: dict[str, Any]) -> None:
    """What one vision block's MMEncoderAttention reads of the metadata on the host.

    forward_cuda dispatches on the backend (forward_cpu always takes _forward_sdpa):
    ``_forward_fa`` (FLASH_ATTN, ROCM_AITER_FA) -> vit_flash_attn_wrapper ->
    flash_attn_maxseqlen_wrapper and ``_forward_triton`` -> vit_triton_attn_wrapper ->
    triton_attn_wrapper both do ``max_seqlen = q_len if max_seqlen is None else
    max_seqlen.item()``; ``_forward_sdpa`` -> vit_torch_sdpa_wrapper -> torch_sdpa_wrapper does
    ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()``. cu_seqlens goes to the flash/Triton
    kernels as a device tensor (no host read); rotary_pos_emb only to .cos()/.sin()."""
    cu_seqlens, max_seqlen = metadata["cu_seqlens"], metadata["max_seqlen"]
    if torch.device(spec["device"]).type == "cpu" or spec["backend"] not in FLASH_STYLE:
        (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    elif max_seqlen is not None:  # None would trip _forward_fa's assert before any read
        max_seqlen.item()


def encoder_blocks_read_metadata(spec: dict, output: Any) -> None:
    """The host reads the eager tower makes of prepare_encoder_metadata's output, for ONE vision block.

    vllm/model_executor/models/ernie45_vl.py (0.28.0) Ernie4_5_VisionTransformer.forward hands the
    dict's tensors unchanged to every block (``for blk in self.blocks: hidden_states = blk(...,
    cu_seqlens=cu_seqlens, rotary_pos_emb=rotary_pos_emb, max_seqlen=max_seqlen)``), exactly as
    0.27.1's forward did with its inline metadata: ``max_seqlen`` is the 0-d tensor
    compute_attn_mask_seqlen made, on the grid's device, never an int. Each block's
    Ernie4_5_VisionAttention passes it to MMEncoderAttention
    (vllm/model_executor/layers/attention/mm_encoder_attention.py, _forward_fa / _forward_triton /
    _forward_sdpa), whose wrapper in vllm/v1/attention/ops/vit_attn_wrappers.py reads it:
    flash_attn_maxseqlen_wrapper and triton_attn_wrapper
    ``max_seqlen = q_len if max_seqlen is None else max_seqlen.item()``, torch_sdpa_wrapper
    ``lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()``.

    The stand-in tower has no blocks and the spec no depth (upstream: vision_config.depth blocks),
    so this makes one block's reads: the consumer syncs reported are per block, and a forward pays
    them depth times. With the eager caller's device grid both releases leave max_seqlen (and
    cu_seqlens) on the device, so each block's read is a sync in 0.27.1 and 0.28.0 alike.
    """
    _one_block_attention_reads(spec, output)


def graph_forward_reads_metadata(spec: dict, output: Any) -> None:
    """The host reads the encoder CUDA-graph paths make of prepare_encoder_metadata's output.

    Capture (vllm/v1/worker/encoder_cudagraph.py, EncoderCudaGraphManager._capture_budget_graph)
    runs ``self.model.encoder_cudagraph_forward({**values})`` twice, a warm-up and the captured run
    under ``torch.cuda.graph``; each is Ernie4_5_VisionTransformer.forward with
    ``encoder_metadata=values`` (vllm/model_executor/models/ernie45_vl.py, 0.28.0), so each makes
    every block's attention reads: ``max_seqlen.item()`` (vllm/v1/attention/ops/vit_attn_wrappers.py
    flash_attn_maxseqlen_wrapper / triton_attn_wrapper) or ``(cu_seqlens[1:] -
    cu_seqlens[:-1]).tolist()`` (torch_sdpa_wrapper). Depth is not in the spec: one block per run.

    Replay (EncoderCudaGraphManager._run_budget_graph) runs no Python forward: it copies the values
    into the buffers recorded at capture -- ``if src.ndim == 0: buf.copy_(src)`` for max_seqlen,
    whose buffer is capture's host tensor (``torch.tensor(max_seqlen_override, dtype=torch.int32)``),
    and ``dst.zero_(); dst[: src.shape[0]].copy_(src)`` (_copy_padded_buffer) for cu_seqlens into
    its device buffer -- then ``graph.replay()``. A host max_seqlen makes all of it sync-free.
    """
    if spec["path"] == "capture":
        for _ in range(2):  # warm-up, then the captured forward
            _one_block_attention_reads(spec, output)
        return
    max_seqlen, cu_seqlens = output["max_seqlen"], output["cu_seqlens"]
    if max_seqlen is not None:
        torch.zeros((), dtype=torch.int32).copy_(max_seqlen)
    buffer = torch.empty(cu_seqlens.shape, dtype=cu_seqlens.dtype, device=spec["device"])
    buffer.zero_()
    buffer[: cu_seqlens.shape[0]].copy_(cu_seqlens)


# -- resampler -------------------------------------------------------------------------

def _resampler_tokens(spec: dict) -> list[int] | None:
    """Output rows per item, as _process_image_input / _process_video_input split them; None
    where fwd_placeholder pairs nothing (odd t > 1 raises, h*w off the merge size)."""
    m2 = spec["spatial_conv_size"] ** 2
    tokens = []
    for t, h, w in _grid(spec):
        if (h * w) % m2:
            return None
        if not spec["use_temporal_conv"]:
            tokens.append(t * h * w // m2)
        elif t == 1 or t % TEMPORAL_CONV_SIZE == 0:
            tokens.append(max(t // TEMPORAL_CONV_SIZE, 1) * h * w // m2)
        else:
            return None
    return tokens or None


def resampler_output_follows_grid(spec: dict, output: Any) -> str | None:
    """The resampler returns one out_dim row of the float dtype per LM token: t*h*w // m // m per image
    and t*h*w // temporal_conv_size // m // m per video (the sizes _process_image_input /
    _process_video_input split it by, m = spatial_merge_size), t*h*w // m // m without the temporal
    conv."""
    tokens = _resampler_tokens(spec)
    if tokens is None:
        return None
    result = _field(output, "output")
    if not isinstance(result, torch.Tensor):
        return f"output is a {type(result).__name__}, not a tensor"
    want = (sum(tokens), spec["out_dim"])
    if tuple(result.shape) != want:
        return f"output has shape {tuple(result.shape)}, want {want} (tokens per item {tokens})"
    if str(result.dtype).removeprefix("torch.") != spec["float_dtype"]:
        return f"output has dtype {result.dtype}, not {spec['float_dtype']}"
    return None


def resampler_pairs_frames(spec: dict, output: Any) -> str | None:
    """With the temporal conv, the temporal layer gets one row per LM token holding two merged frames side
    by side (2 * in_dim * m * m = temporal_dim columns), frames (0, 1), (2, 3), ... of each item; a
    one-frame image is paired with itself, so its rows' two halves are equal (fwd_placeholder)."""
    tokens = _resampler_tokens(spec)
    if tokens is None or not spec["use_temporal_conv"]:
        return None
    gathered = _field(output, "placeholder")
    if not isinstance(gathered, torch.Tensor):
        return f"the temporal layer's input is a {type(gathered).__name__}, not a tensor"
    half = spec["in_dim"] * spec["spatial_conv_size"] ** 2
    if tuple(gathered.shape) != (sum(tokens), 2 * half):
        return f"the temporal layer got shape {tuple(gathered.shape)}, want {(sum(tokens), 2 * half)}"
    start = 0
    for item, ((t, h, w), count) in enumerate(zip(_grid(spec), tokens)):
        rows = gathered[start:start + count].detach().cpu()
        if t == 1 and not torch.equal(rows[:, :half], rows[:, half:]):
            return f"image {item} (rows {start}..{start + count - 1}) is not paired with itself"
        start += count
    return None



# --- ernie-encoder-output ------------------------------------------------------------------------


def output_one_piece_per_item(spec: dict, output: Any) -> str | None:
    """One embedding per image, in the items' own order, each with the image's LM tokens as rows
    (``t * h * w // m // m``, ``get_encoder_cudagraph_item_specs``' ``output_tokens``, what the LM's
    placeholder run for the image holds) and the LM's hidden size as columns, on the encoder's device."""
    merge = spec["merge"]
    expected = [t * h * w // merge // merge for t, h, w in spec["grid_thw"]]
    if not isinstance(output, list) or len(output) != len(expected):
        return f"expected one embedding per item ({len(expected)}), got {type(output).__name__}"
    for index, (piece, rows) in enumerate(zip(output, expected)):
        if tuple(piece.shape) != (rows, spec["out_dim"]):
            return f"item {index}: shape {tuple(piece.shape)}, expected {(rows, spec['out_dim'])}"
        problem = _same_device(piece, spec["device"])
        if problem:
            return f"item {index}: {problem}"
    return None


def output_pieces_are_own_copies(spec: dict, output: Any) -> str | None:
    """Each item's embedding owns its memory, as the manager's ``clone=True`` asks
    (``EncoderCudaGraphManager._execute_local``): the encoder cache keeps and frees the pieces one by
    one, and for models that scatter the graph's output buffer itself the next replay overwrites it.
    (Ernie scatters the resampler's fresh output, so a dropped clone would cost memory, not values: the
    differential check cannot see it, this invariant does; tests/unit/test_oracles_ernie.py.)"""
    if not isinstance(output, list):
        return f"expected a list, got {type(output).__name__}"
    seen: dict[int, int] = {}
    for index, piece in enumerate(output):
        if piece.numel() == 0:
            continue
        pointer = piece.untyped_storage().data_ptr()
        if pointer in seen:
            return f"items {seen[pointer]} and {index} share one storage"
        if piece.untyped_storage().nbytes() != piece.numel() * piece.element_size():
            return f"item {index} is a view into a larger buffer"
        seen[pointer] = index
    return None
