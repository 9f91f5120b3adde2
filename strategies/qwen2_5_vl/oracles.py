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
