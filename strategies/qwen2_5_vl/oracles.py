"""Oracles of ``Qwen2_5_VisionTransformer.get_rope_by_thw(t, h, w)`` (vllm/model_executor/models/qwen2_5_vl.py,
0.28.0 / 0.30.0), written from what the result means, not from either copy.

For one ``[t, h, w]`` item ``prepare_encoder_metadata`` needs, in window-attention order:

* ``window_index_thw``: the merged tokens (``t * (h // m) * (w // m)``, ``m = spatial_merge_size``,
  numbered frame by frame, row-major) regrouped window by window: per frame, the
  ``window x window`` windows row by row, inside each window its tokens row-major (windows at the
  right and bottom edge are cut off). It goes ``+ window_index_id`` into ``window_index`` and
  ``invert_permutation`` on the host, so it is a host int64 permutation;
* ``cu_seqlens_window_thw``: the running sum of every non-empty window's patch count
  (tokens ``* m * m``), int32, without the leading 0 (the caller prepends it and shifts by the last
  offset);
* ``cos_thw``/``sin_thw``: the 2-D rope rows (``[table[row], table[column]]``) of every patch, the
  patches in window order (each merged token's ``m x m`` patches row by row), on the model's device;
* ``cu_seqlens_thw``: ``[h * w] * t`` int32 on the host (full attention is per frame).

The thunk (strategies/qwen2_5_vl/inputs.py) returns one such 5-tuple per call, the calls being
``strategies.qwen2_5_vl.inputs.rope_calls(spec)`` (repeats included: the method is a function of
``(t, h, w)`` for a given tower, whatever its cache holds).

No consumer: ``prepare_encoder_metadata`` concatenates the parts (``torch.cat``, ``unique_consecutive``,
``cumsum``) and reads ``cu_seqlens_window_thw[-1]`` as a host tensor; the cos/sin rows go to the
vision blocks on the device.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import FLOAT_DTYPES
from strategies.qwen2_5_vl.inputs import rope_calls
from strategies.qwen2_vl.oracles import rope_rows

_NAMES = ("cos_thw", "sin_thw", "window_index_thw", "cu_seqlens_window_thw", "cu_seqlens_thw")


def window_order(t: int, h: int, w: int, merge: int, window: int) -> tuple[list[int], list[int]]:
    """The merged tokens in window order, and the patch count of every non-empty window."""
    lh, lw = h // merge, w // merge
    order, sizes = [], []
    for frame in range(t):
        for top in range(0, lh, window):
            for left in range(0, lw, window):
                tokens = [frame * lh * lw + r * lw + c
                          for r in range(top, min(top + window, lh)) for c in range(left, min(left + window, lw))]
                order.extend(tokens)
                sizes.append(len(tokens) * merge * merge)
    return order, sizes


def window_patches(t: int, h: int, w: int, merge: int, window: int) -> list[tuple[int, int]]:
    """Every patch ``(row, column)`` in window order: each merged token's ``merge x merge`` patches row by row."""
    lh, lw = h // merge, w // merge
    order, _ = window_order(t, h, w, merge, window)
    patches = []
    for token in order:
        r, c = divmod(token % (lh * lw), lw)
        patches.extend((r * merge + i, c * merge + j) for i in range(merge) for j in range(merge))
    return patches


def _results(spec: dict, output: Any) -> tuple[list[tuple], str | None]:
    calls = rope_calls(spec)
    if not isinstance(output, list) or len(output) != len(calls):
        return [], f"output is not a list of {len(calls)} results (one per call)"
    for index, result in enumerate(output):
        if not isinstance(result, tuple) or len(result) != 5 or not all(isinstance(x, torch.Tensor) for x in result):
            return [], f"call {index} returned {type(result).__name__}, not a 5-tuple of tensors"
    return output, None


def rope_by_thw_parts_have_their_shapes(spec: dict, output: Any) -> str | None:
    """Per call ``(t, h, w)``: cos/sin ``[t*h*w, rotary_dim]`` in the cache's dtype on the model's device;
    ``window_index_thw`` ``t*(h//m)*(w//m)`` int64 on the host; ``cu_seqlens_window_thw`` int32 on the
    host; ``cu_seqlens_thw`` ``[h*w] * t`` int32 on the host."""
    results, problem = _results(spec, output)
    if problem:
        return problem
    dtype, device = FLOAT_DTYPES[spec["dtype"]], torch.device(spec["device"]).type
    merge = spec["merge"]
    for index, ((t, h, w), result) in enumerate(zip(rope_calls(spec), results)):
        cos, sin, window_index, cu_window, cu_full = result
        for name, tensor in (("cos_thw", cos), ("sin_thw", sin)):
            if tuple(tensor.shape) != (t * h * w, 2 * spec["rotary_half"]) or tensor.dtype != dtype:
                return f"call {index} {[t, h, w]}: {name} is {tuple(tensor.shape)} {tensor.dtype}"
            if tensor.device.type != device:
                return f"call {index} {[t, h, w]}: {name} is on {tensor.device}, the model on {spec['device']}"
        if tuple(window_index.shape) != (t * (h // merge) * (w // merge),) or window_index.dtype != torch.int64:
            return f"call {index} {[t, h, w]}: window_index_thw is {tuple(window_index.shape)} {window_index.dtype}"
        for name, tensor in (("window_index_thw", window_index), ("cu_seqlens_window_thw", cu_window),
                             ("cu_seqlens_thw", cu_full)):
            if tensor.device.type != "cpu":
                return f"call {index} {[t, h, w]}: {name} is on {tensor.device}; the caller builds host metadata"
        if cu_window.dtype != torch.int32 or cu_full.dtype != torch.int32:
            return f"call {index} {[t, h, w]}: cu_seqlens are {cu_window.dtype} / {cu_full.dtype}, not int32"
        if cu_full.tolist() != [h * w] * t:
            return f"call {index} {[t, h, w]}: cu_seqlens_thw is {cu_full.tolist()}, expected {[h * w] * t}"
    return None


def rope_by_thw_windows_partition_the_tokens(spec: dict, output: Any) -> str | None:
    """``window_index_thw`` lists every merged token once, window by window (per frame, windows row by
    row, tokens row-major inside); ``cu_seqlens_window_thw`` is the running sum of the non-empty
    windows' patch counts, so it is strictly increasing and ends at ``t*h*w``."""
    results, problem = _results(spec, output)
    if problem or rope_by_thw_parts_have_their_shapes(spec, output):
        return problem
    for index, ((t, h, w), result) in enumerate(zip(rope_calls(spec), results)):
        order, sizes = window_order(t, h, w, spec["merge"], spec["window"])
        got = result[2].tolist()
        if sorted(got) != list(range(len(order))):
            return f"call {index} {[t, h, w]}: window_index_thw is not a permutation of the merged tokens"
        if got != order:
            bad = next(i for i, (a, b) in enumerate(zip(got, order)) if a != b)
            return (f"call {index} {[t, h, w]}: window_index_thw[{bad}] is token {got[bad]}, "
                    f"window order has {order[bad]}")
        running, total = [], 0
        for size in sizes:
            total += size
            running.append(total)
        if result[3].tolist() != running:
            return f"call {index} {[t, h, w]}: cu_seqlens_window_thw is {result[3].tolist()}, expected {running}"
    return None


def rope_by_thw_rows_follow_the_windows(spec: dict, output: Any) -> str | None:
    """Row ``j`` of cos/sin is the rope of the ``j``-th patch in window order: ``[table[row],
    table[column]]`` of that patch (a gather, so bitwise)."""
    results, problem = _results(spec, output)
    if problem or rope_by_thw_parts_have_their_shapes(spec, output):
        return problem
    for index, ((t, h, w), result) in enumerate(zip(rope_calls(spec), results)):
        patches = window_patches(t, h, w, spec["merge"], spec["window"])
        for name, got, want in zip(_NAMES, result[:2], rope_rows(spec, patches)):
            got = got.cpu()
            if not torch.equal(got, want):
                bad = int((got != want).any(dim=1).nonzero()[0])
                return f"call {index} {[t, h, w]}: {name} row {bad} is not the rope of patch {patches[bad]}"
    return None


def rope_by_thw_repeats_agree(spec: dict, output: Any) -> str | None:
    """The method is a function of ``(t, h, w)`` for one tower: a repeated call returns what the
    first call with those arguments returned (a cache may hand back the same tensors, never
    another item's)."""
    results, problem = _results(spec, output)
    if problem:
        return problem
    first: dict[tuple, tuple] = {}
    for index, (call, result) in enumerate(zip(rope_calls(spec), results)):
        key = tuple(call)
        if key not in first:
            first[key] = result
            continue
        for name, a, b in zip(_NAMES, first[key], result):
            if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.cpu(), b.cpu()):
                return f"call {index} {call}: {name} differs from the first call with the same (t, h, w)"
    return None


def _expected(spec: dict) -> list[list] | None:
    expected = []
    for t, h, w in rope_calls(spec):
        order, sizes = window_order(t, h, w, spec["merge"], spec["window"])
        cos, sin = rope_rows(spec, window_patches(t, h, w, spec["merge"], spec["window"]))
        running = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32)
        expected.append([cos, sin, torch.tensor(order, dtype=torch.int64), running,
                         torch.full((t,), h * w, dtype=torch.int32)])
    return expected


def _observed(output: Any) -> list[list]:
    return [[part.detach().cpu() for part in result] for result in output]


ROPE_BY_THW_REFERENCE = Reference(expected=_expected, observed=_observed, floats="exact")
"""Per call: the window-ordered rope rows, the window order of the merged tokens, the running
window sizes and ``[h*w] * t``, from plain loops over the grid."""


# --- qwen25-vl-encoder-metadata: prepare_encoder_metadata -------------------------------------------------
#
# What the metadata means to Qwen2_5_VisionTransformer.forward (vllm 0.30.0): the patch embeddings are
# regrouped by ``window_index`` (merged tokens in window order, items in grid order, numbered across the
# batch) and put back by ``reverse_indices`` (its inverse); ``rotary_pos_emb_cos``/``_sin`` are the rope
# rows of every patch in that window order; window-attention blocks read ``cu_window_seqlens`` /
# ``max_seqlen_window`` (one sequence per non-empty window), full-attention blocks ``cu_seqlens`` /
# ``max_seqlen_full`` (one sequence per frame); both boundary lists are padded with their last value to the
# CUDA graph's budgets (``max_frames_per_batch`` else ``max_batch_size``; ``max_window_seqs_per_batch``).
# MMEncoderAttention shapes them per backend (mm_encoder_attention.py): FLASHINFER gets its
# Q/K/O-then-V element offsets (scaled by ``hidden_size // tp_size`` -- V three times -- or by the FP8
# padded size for both halves, each half padded to a batch bucket) and per-sequence lengths, the
# flash-style backends the longest sequence (FLASHINFER bucketed to >= 1024), others 0; the max
# seqlens are host int32 scalars (the wrappers' ``.item()``).

_METADATA_KEYS = ("rotary_pos_emb_cos", "rotary_pos_emb_sin", "window_index", "reverse_indices", "cu_seqlens",
                  "cu_window_seqlens", "max_seqlen_full", "max_seqlen_window", "sequence_lengths_full",
                  "sequence_lengths_window")
_FLASH_STYLE = ("FLASH_ATTN", "ROCM_AITER_FA", "TRITON_ATTN", "FLASHINFER")  # compute_max_seqlen's set
_BATCH_BUCKETS = (8, 16, 32, 64)
_SEQLEN_BUCKETS = tuple(k * 1024 for k in (1, 2, 4, 8, 16, 32, 64, 128))


def _padded(bounds: list[int], sequences: int | None) -> list[int]:
    """Boundaries padded with the last one up to ``sequences`` sequences (none below)."""
    if sequences is not None and len(bounds) - 1 < sequences:
        bounds = bounds + [bounds[-1]] * (sequences - (len(bounds) - 1))
    return bounds


def _bucketed(values: list[int], count: int, fill: int) -> list[int]:
    """FlashInfer's batch buckets: ``count`` entries padded with ``fill`` to the next of 8/16/32/64 (else a
    multiple of 8)."""
    target = next((b for b in _BATCH_BUCKETS if b >= count), -(-count // 8) * 8)
    return values + [fill] * (target - count)


def _backend_cu_seqlens(spec: dict, bounds: list[int]) -> list[int]:
    if spec["backend"] != "FLASHINFER":
        return bounds
    count = len(bounds) - 1
    if spec["fp8_padded_hidden_size"] is not None:
        half = _bucketed([b * (spec["fp8_padded_hidden_size"] // spec["tp_size"]) for b in bounds], count,
                         bounds[-1] * (spec["fp8_padded_hidden_size"] // spec["tp_size"]))
        return half + half
    scale = spec["hidden_size"] // spec["tp_size"]
    qko = [b * scale for b in bounds]
    v = [b * 3 * scale for b in bounds]
    return _bucketed(qko, count, qko[-1]) + _bucketed(v, count, v[-1])


def _max_seqlen(spec: dict, bounds: list[int], override: int | None) -> int:
    if override is not None:
        return override
    longest = 0
    if spec["backend"] in _FLASH_STYLE and len(bounds) >= 2:
        longest = max(b - a for a, b in zip(bounds, bounds[1:]))
    if spec["backend"] == "FLASHINFER":
        top = _SEQLEN_BUCKETS[-1]
        longest = next((s for s in _SEQLEN_BUCKETS if s >= longest), -(-longest // top) * top) if longest > 0 \
            else _SEQLEN_BUCKETS[0]
    return longest


def _seq_lens(spec: dict, bounds: list[int]) -> list[int] | None:
    if spec["backend"] != "FLASHINFER":
        return None
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    return _bucketed(lengths, len(lengths), 0)


def expected_metadata(spec: dict) -> dict[str, Any] | None:
    """The whole metadata of a spec, from the window geometry and the rope table (CPU tensors, upstream's
    dtypes); None for an empty grid (both releases raise in ``torch.cat``)."""
    grid = spec["grid_thw"]
    if not grid:
        return None
    merge, window, kwargs = spec["merge"], spec["window"], spec["kwargs"]
    index, patches, window_bounds, frame_bounds = [], [], [0], [0]
    for t, h, w in grid:
        order, sizes = window_order(t, h, w, merge, window)
        offset = len(index)  # merged tokens of the items before (upstream's window_index_id)
        index.extend(token + offset for token in order)
        patches.extend(window_patches(t, h, w, merge, window))
        for size in sizes:
            window_bounds.append(window_bounds[-1] + size)
        for _ in range(t):
            frame_bounds.append(frame_bounds[-1] + h * w)
    sequences = kwargs.get("max_frames_per_batch")
    if sequences is None:
        sequences = kwargs.get("max_batch_size")
    frame_bounds = _padded(frame_bounds, sequences)
    window_bounds = _padded(window_bounds, kwargs.get("max_window_seqs_per_batch"))
    cos, sin = rope_rows(spec, patches)
    window_index = torch.tensor(index, dtype=torch.int64)
    lengths_full, lengths_window = _seq_lens(spec, frame_bounds), _seq_lens(spec, window_bounds)
    return {
        "rotary_pos_emb_cos": cos,
        "rotary_pos_emb_sin": sin,
        "window_index": window_index,
        "reverse_indices": torch.argsort(window_index),
        "cu_seqlens": torch.tensor(_backend_cu_seqlens(spec, frame_bounds), dtype=torch.int32),
        "cu_window_seqlens": torch.tensor(_backend_cu_seqlens(spec, window_bounds), dtype=torch.int32),
        "max_seqlen_full": torch.tensor(_max_seqlen(spec, frame_bounds, kwargs.get("max_seqlen_override")),
                                        dtype=torch.int32),
        "max_seqlen_window": torch.tensor(
            _max_seqlen(spec, window_bounds, kwargs.get("max_seqlen_window_override")), dtype=torch.int32),
        "sequence_lengths_full": None if lengths_full is None else torch.tensor(lengths_full, dtype=torch.int32),
        "sequence_lengths_window": None if lengths_window is None else torch.tensor(lengths_window, dtype=torch.int32),
    }


def _metadata(spec: dict, output: Any) -> tuple[dict | None, dict | None, str | None]:
    """The output and what it should be, or why it is not a metadata dict; (None, None, None) for an empty grid."""
    if not isinstance(output, dict) or set(output) != set(_METADATA_KEYS):
        keys = sorted(output) if isinstance(output, dict) else type(output).__name__
        return None, None, f"metadata is {keys}, not the keys {list(_METADATA_KEYS)}"
    return output, expected_metadata(spec), None


def _differs(name: str, got: Any, want: torch.Tensor | None, *, where: str) -> str | None:
    """Why ``got`` is not ``want`` (values, dtype, shape), or that it sits off ``where``."""
    if want is None:
        return None if got is None else f"{name} is {type(got).__name__}, expected None for this backend"
    if not isinstance(got, torch.Tensor):
        return f"{name} is {type(got).__name__}, not a tensor"
    if got.device.type != torch.device(where).type:
        return f"{name} is on {got.device}, expected {where}"
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return f"{name} is {got.dtype} {tuple(got.shape)}, expected {want.dtype} {tuple(want.shape)}"
    got = got.detach().cpu()
    if not torch.equal(got, want):
        if got.dim() == 0:
            return f"{name} is {got.item()}, expected {want.item()}"
        bad = int((got != want).reshape(got.shape[0], -1).any(dim=1).nonzero()[0])
        return f"{name}[{bad}] is {got[bad].tolist()}, expected {want[bad].tolist()}"
    return None


def metadata_windows_are_a_permutation_and_its_inverse(spec: dict, output: Any) -> str | None:
    """``window_index`` lists every merged token of the batch once, window by window (items in grid order,
    numbered across the batch), and ``reverse_indices`` is its inverse permutation; both int64 on the
    attention's device."""
    got, want, problem = _metadata(spec, output)
    if problem or want is None:
        return problem
    for name in ("window_index", "reverse_indices"):
        problem = _differs(name, got[name], want[name], where=spec["device"])
        if problem:
            return problem
    return None


def metadata_seqlens_follow_frames_and_windows(spec: dict, output: Any) -> str | None:
    """``cu_seqlens`` are the frame boundaries and ``cu_window_seqlens`` the window boundaries, each padded
    with its last value to the graph's budget and laid out as the backend reads them (FLASHINFER: element
    offsets, batch-bucketed, with its per-sequence lengths); int32 on the attention's device."""
    got, want, problem = _metadata(spec, output)
    if problem or want is None:
        return problem
    for name in ("cu_seqlens", "cu_window_seqlens", "sequence_lengths_full", "sequence_lengths_window"):
        problem = _differs(name, got[name], want[name], where=spec["device"])
        if problem:
            return problem
    return None


def metadata_max_seqlens_stay_on_the_host(spec: dict, output: Any) -> str | None:
    """``max_seqlen_full`` / ``max_seqlen_window`` are host int32 scalars: capture's overrides, else the
    longest frame / window for the flash-style backends (FlashInfer's bucketed), 0 for the others."""
    got, want, problem = _metadata(spec, output)
    if problem or want is None:
        return problem
    for name in ("max_seqlen_full", "max_seqlen_window"):
        problem = _differs(name, got[name], want[name], where="cpu")
        if problem:
            return problem
    return None


def metadata_rows_follow_the_windows(spec: dict, output: Any) -> str | None:
    """Row ``j`` of ``rotary_pos_emb_cos`` / ``_sin`` is the rope (``[table[row], table[column]]``) of the
    ``j``-th patch in window order, in the cache's dtype on the model's device."""
    got, want, problem = _metadata(spec, output)
    if problem or want is None:
        return problem
    for name in ("rotary_pos_emb_cos", "rotary_pos_emb_sin"):
        if isinstance(got[name], torch.Tensor) and got[name].dtype != FLOAT_DTYPES[spec["dtype"]]:
            return f"{name} is {got[name].dtype}, the rope cache is {spec['dtype']}"
        problem = _differs(name, got[name], want[name], where=spec["device"])
        if problem:
            return problem
    return None


def _observed_metadata(output: Any) -> dict[str, Any]:
    return {key: value.detach().cpu() if isinstance(value, torch.Tensor) else value for key, value in output.items()}


METADATA_REFERENCE = Reference(expected=expected_metadata, observed=_observed_metadata, floats="exact")
"""The window order, frame and window boundaries, backend layouts and rope rows, rebuilt from the geometry."""
