"""Oracles of the flash-linear-attention index helpers (fla-chunk-indices, fla-chunk-offsets).

What the two tables mean comes from the Triton chunk kernels that read them
(vllm/third_party/flash_linear_attention/ops/; index.py itself has no docstring):

* ``chunk_indices`` has one row ``(i_n, i_t)`` per chunk of the varlen batch;
  ``chunk_scaled_dot_kkt_fwd_kernel`` (chunk_scaled_dot_kkt.py) and the other
  per-chunk kernels load ``i_n, i_t = chunk_indices[i * 2], chunk_indices[i * 2 + 1]``
  and then ``bos, eos = cu_seqlens[i_n], cu_seqlens[i_n + 1]``: ``i_n`` is the
  index of the chunk's sequence in ``cu_seqlens`` and ``i_t`` the chunk's
  position inside it, tokens ``bos + i_t*BT .. bos + (i_t+1)*BT``. Their launch
  grids are ``NT = len(chunk_indices)``: one program per chunk, so the table
  must hold every chunk of every sequence exactly once.
* ``chunk_offsets[i_n]`` is where sequence ``i_n``'s chunks start in the
  per-chunk state tensor ``h = k.new_empty(B, NT, H, V, K)`` with
  ``NT = len(chunk_indices)`` (``chunk_gated_delta_rule_fwd_kernel_h_blockdim64``
  in chunk_delta_h.py: ``boh = chunk_offsets[i_n]``, then ``NT = cdiv(T, BT)``
  slots): a running sum of the per-sequence chunk counts, starting at 0, one
  entry per ``cu_seqlens`` entry, its last equal to the total chunk count.
* ``cu_seqlens`` itself is "cumulative sequence lengths of shape [N+1]"
  (chunk.py, ``chunk_gated_delta_rule`` docstring), a running sum from 0.

Neither table is read on the host by a consumer: the wrappers only take
``len(chunk_indices)`` / ``len(cu_seqlens) - 1`` (shape reads, no sync) and hand
the tensors to the kernels.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.common import INT_DTYPES


def _lengths(spec: dict) -> list[int]:
    cu = spec["cu_seqlens"]
    return [b - a for a, b in zip(cu, cu[1:])]


def _counts(spec: dict) -> list[int] | None:
    """ceil(len_i / chunk_size) per sequence; None when some length is negative
    (the wide contract's non-monotone ``cu_seqlens``: the meaning of a running
    sum of lengths says nothing about them)."""
    lengths, size = _lengths(spec), spec["chunk_size"]
    if any(n < 0 for n in lengths):
        return None
    return [-(-n // size) for n in lengths]


def _expected_rows(counts: list[int]) -> list[list[int]]:
    """Every chunk of every sequence, in order: ``[i_n, i_t]`` (plain loops)."""
    rows = []
    for sequence, count in enumerate(counts):
        for chunk in range(count):
            rows.append([sequence, chunk])
    return rows


def _table(output: Any, columns: int | None) -> tuple[list, str | None]:
    """The output as nested Python lists, or why it cannot be one."""
    if not isinstance(output, torch.Tensor):
        return [], f"output is a {type(output).__name__}, not a tensor"
    if columns is None:
        if output.dim() != 1:
            return [], f"chunk offsets have shape {tuple(output.shape)}, expected 1-D"
    elif output.dim() != 2 or output.shape[1] != columns:
        return [], f"chunk indices have shape {tuple(output.shape)}, expected (num_chunks, {columns})"
    if output.dtype.is_floating_point or output.dtype.is_complex or output.dtype == torch.bool:
        return [], f"table has dtype {output.dtype}, expected an integer dtype"
    return output.detach().cpu().tolist(), None


def _same_device(output: torch.Tensor, spec: dict) -> bool:
    want = torch.device(spec["device"])
    return output.device.type == want.type and (want.index is None or output.device.index == want.index)


# -- fla-chunk-indices ----------------------------------------------------------------------------------------


def chunk_indices_cover_every_chunk(spec: dict, output: Any) -> str | None:
    """The table has one row per chunk, ``sum(ceil(len_i / chunk_size))`` rows, and
    column 1 counts 0..ceil(len_i/chunk_size)-1 within each sequence in order (the
    kernels launch ``NT = len(chunk_indices)`` programs and read ``i_t`` as the
    chunk's position in its sequence: chunk_scaled_dot_kkt.py)."""
    counts = _counts(spec)
    if counts is None:
        return None
    rows, problem = _table(output, 2)
    if problem:
        return problem
    if len(rows) != sum(counts):
        return (f"{len(rows)} chunk rows for chunk counts {counts} (sum {sum(counts)}) of "
                f"cu_seqlens={spec['cu_seqlens']}, chunk_size={spec['chunk_size']}")
    positions = [chunk for count in counts for chunk in range(count)]
    got = [row[1] for row in rows]
    if got != positions:
        first = next(i for i, (a, b) in enumerate(zip(got, positions)) if a != b)
        return f"row {first} has chunk position {got[first]}, expected {positions[first]} (chunk counts {counts})"
    return None


def sequence_id_errors(spec: dict, output: Any) -> str | None:
    """Column 0 of every row is the index ``i_n`` of the chunk's sequence in
    ``cu_seqlens`` (the kernels load ``cu_seqlens[i_n]``, ``cu_seqlens[i_n + 1]``
    as its bounds). Strict: also for an empty sequence in front of a non-empty one."""
    counts = _counts(spec)
    if counts is None:
        return None
    rows, problem = _table(output, 2)
    if problem:
        return problem
    expected = [row[0] for row in _expected_rows(counts)]
    got = [row[0] for row in rows]
    if len(got) != len(expected):
        return f"{len(got)} rows, expected {len(expected)} (chunk counts {counts})"
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return (f"row {i} names sequence {a}, but chunk {i} belongs to sequence {b} "
                    f"(cu_seqlens={spec['cu_seqlens']}, chunk_size={spec['chunk_size']})")
    return None


def chunk_indices_name_their_sequence(spec: dict, output: Any) -> str | None:
    """Column 0 of each row is the index of the chunk's sequence in ``cu_seqlens``
    (``bos, eos = cu_seqlens[i_n], cu_seqlens[i_n + 1]`` in the kernels), so the ids
    run 0..N-1 skipping no sequence that has chunks.

    Strict, also where an empty sequence precedes a non-empty one: upstream's
    ``indices.eq(0).cumsum(0) - 1`` is wrong there in both releases (docs/findings
    F16, accepted under the wide contract in known-issues.json: vLLM's batches have
    empty padding requests at the end only, where they shift no id, and the caller
    contract draws them there)."""
    return sequence_id_errors(spec, output)


def chunk_indices_follow_cu_seqlens(spec: dict, output: Any) -> str | None:
    """The table has ``cu_seqlens``' dtype and device (upstream ``.to(cu_seqlens)``
    in 0.27.1, ``.to(device=cu_seqlens.device, dtype=cu_seqlens.dtype)`` in 0.28.0):
    the kernels read it next to ``cu_seqlens``, on that device."""
    if not isinstance(output, torch.Tensor):
        return f"output is a {type(output).__name__}, not a tensor"
    want = INT_DTYPES[spec["dtype"]]
    if output.dtype != want:
        return f"chunk indices have dtype {output.dtype}, cu_seqlens {want}"
    if not _same_device(output, spec):
        return f"chunk indices are on {output.device}, cu_seqlens on {spec['device']}"
    return None


def _indices_expected(spec: dict) -> list[list[int]] | None:
    counts = _counts(spec)
    if counts is None or not counts:
        # No sequence at all: upstream's torch.cat of nothing raises (both releases).
        return None
    # As a tensor: compared in one call, where nested lists were walked leaf by leaf
    # (thousands of rows for short chunks). The dtype is the invariants' to check.
    return torch.tensor(_expected_rows(counts), dtype=torch.int64).reshape(-1, 2)


def _indices_observed(output: Any) -> Any:
    return output.detach().cpu().to(torch.int64)


def _offsets_observed(output: Any) -> list[int]:
    return output.detach().cpu().tolist()


INDICES_REFERENCE = Reference(expected=_indices_expected, observed=_indices_observed)
"""``[[i_n, i_t], ...]``: for each sequence ``i_n`` of ``cu_seqlens``, its chunks
``0..ceil(len/chunk_size)-1`` in order (plain loops over the lengths)."""


# -- fla-chunk-offsets ----------------------------------------------------------------------------------------


def chunk_offsets_running_sum(spec: dict, output: Any) -> str | None:
    """``chunk_offsets`` has ``len(cu_seqlens)`` entries, starts at 0 and steps by
    ``ceil(len_i / chunk_size)``: entry ``i_n`` is where sequence ``i_n``'s chunk
    states start in ``h`` (chunk_delta_h.py: ``boh = chunk_offsets[i_n]``), the last
    the total chunk count, ``len(chunk_indices)``."""
    counts = _counts(spec)
    if counts is None:
        return None
    values, problem = _table(output, None)
    if problem:
        return problem
    if len(values) != len(counts) + 1:
        return f"{len(values)} chunk offsets for {len(spec['cu_seqlens'])} cu_seqlens entries"
    if values[0] != 0:
        return f"chunk offsets start at {values[0]}, not 0"
    for i, count in enumerate(counts):
        if values[i + 1] - values[i] != count:
            return (f"chunk offsets step {values[i + 1] - values[i]} at sequence {i}, which has {count} chunks "
                    f"(length {_lengths(spec)[i]}, chunk_size {spec['chunk_size']})")
    return None


def chunk_offsets_on_cu_seqlens_device(spec: dict, output: Any) -> str | None:
    """The offsets live on ``cu_seqlens``' device: the kernel loads them next to
    ``cu_seqlens`` (``chunk_offsets + i_n``), so a host table would be unusable."""
    if not isinstance(output, torch.Tensor):
        return f"output is a {type(output).__name__}, not a tensor"
    if not _same_device(output, spec):
        return f"chunk offsets are on {output.device}, cu_seqlens on {spec['device']}"
    return None


def _offsets_expected(spec: dict) -> list[int] | None:
    counts = _counts(spec)
    if counts is None:
        return None
    offsets = [0]
    for count in counts:
        offsets.append(offsets[-1] + count)
    return offsets


OFFSETS_REFERENCE = Reference(expected=_offsets_expected, observed=_offsets_observed)
"""``[0, c_0, c_0 + c_1, ...]`` with ``c_i = ceil(len_i / chunk_size)`` (a loop)."""
