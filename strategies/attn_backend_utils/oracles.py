"""Oracles of the two ``CommonAttentionMetadata`` rewriters of vllm/v1/attention/backends/utils.py (0.29.0 / 0.30.0).

Written from what the functions mean, not from either copy.

``make_local_attention_virtual_batches`` (its comments and docstring example): chunked local attention lets a
token attend only to the tokens of its own ``attn_chunk_size``-aligned chunk, so each request's query tokens are
split at chunk boundaries into "virtual" requests, in order: a virtual request's query tokens are the request's
query tokens inside one chunk, its seq len (``seqlens_k_local``) the chunk's tokens up to its last query token
(so at most ``attn_chunk_size``), and its block-table row the request's row from the chunk's first page on,
``attn_chunk_size // block_size`` pages ("local-batch 2, (batch 1, starting from k[4])"), the page index clipped
to the table's last column. The returned ``make_block_table`` applies the same gather to a later table
(``update_block_table``). Reference computation: ``local_windows`` below, a loop over each request's chunks.

``make_kv_sharing_fast_prefill_common_attn_metadata``: the KV-sharing layers run only on the tokens whose
logits are computed. The new ``query_start_loc`` offsets count, per request, the logits indices falling in its
query span ("request_ids: [0, 1, 1, 2] ... decode_query_start_loc: [0, 1, 3, 4]"), ``num_actual_tokens`` is their
number and ``max_query_len`` the largest per-request count; seq lens, block table and slot mapping are the
batch's. A decode-only batch (``max_query_len == 1``) and, in 0.30.0, an unarmed one come back unchanged.

In both, a host mirror (``query_start_loc_cpu``, the seq lens mirror) must hold what its device tensor holds:
its consumers (``split_decodes_and_prefills``, the backends' builders) read it on the host in place of the device
tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from strategies.attn_backend_utils.inputs import (
    block_table_of,
    num_tokens_of,
    query_start_loc_of,
    seq_lens_of,
    slot_mapping_of,
)


def _ints(value: Any) -> list[int]:
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.detach().cpu().reshape(-1).tolist()]
    return [int(v) for v in value]


def local_windows(spec: dict) -> list[tuple[int, int, int, int]]:
    """Per virtual request, in order: (request, query tokens, seq len, first absolute key position)."""
    chunk = spec["chunk"]
    out = []
    for request, (query, context) in enumerate(zip(spec["query_lens"], spec["context_lens"])):
        end = query + context
        for k in range(context // chunk, (end - 1) // chunk + 1):
            low, high = k * chunk, min(end, (k + 1) * chunk)
            out.append((request, high - max(context, low), high - low, low))
    return out


def _local(output: Any) -> dict[str, Any]:
    return output["metadata"]


def local_virtual_batches_partition_each_request(spec: dict, output: Any) -> str | None:
    """The virtual requests split every request's query tokens at chunk boundaries, in order, each with at
    least one and at most ``attn_chunk_size`` tokens: ``query_start_loc_cpu`` is the prefix sum of the
    reference's per-window counts, ``num_reqs`` their number, ``max_query_len`` the largest, and
    ``num_actual_tokens`` (padding included) is the batch's."""
    meta = _local(output)
    windows = local_windows(spec)
    want = [0]
    for _, q, _, _ in windows:
        want.append(want[-1] + q)
    got = _ints(meta["query_start_loc_cpu"])
    if got != want:
        return f"query_start_loc_cpu {got} is not the chunk split {want} of query lens {spec['query_lens']}"
    if int(meta["num_reqs"]) != len(windows):
        return f"num_reqs {meta['num_reqs']} for {len(windows)} virtual requests"
    if int(meta["max_query_len"]) != max(q for _, q, _, _ in windows):
        return f"max_query_len {meta['max_query_len']}, largest virtual query {max(q for _, q, _, _ in windows)}"
    if int(meta["num_actual_tokens"]) != num_tokens_of(spec):
        return f"num_actual_tokens {meta['num_actual_tokens']}, the batch has {num_tokens_of(spec)}"
    return None


def local_seq_lens_are_the_chunk_windows(spec: dict, output: Any) -> str | None:
    """Each virtual request's seq len is its chunk's tokens up to its last query token: at most
    ``attn_chunk_size``, at least its query tokens; the host mirror (``seq_lens_host``) and ``max_seq_len`` say
    the same."""
    meta = _local(output)
    want = [k for _, _, k, _ in local_windows(spec)]
    got = _ints(meta["seq_lens_host"])
    if got != want:
        return f"host seq lens {got}, the chunk windows are {want} (chunk {spec['chunk']})"
    if any(k > spec["chunk"] for k in got):
        return f"a virtual seq len exceeds the chunk {spec['chunk']}: {got}"
    if int(meta["max_seq_len"]) != max(want):
        return f"max_seq_len {meta['max_seq_len']}, longest window {max(want)}"
    return None


def _gathered(spec: dict, table: torch.Tensor) -> list[list[int]]:
    """The reference local block table: the request's row from the window's first page, clipped."""
    pages, cols = spec["chunk"] // spec["block_size"], table.shape[1]
    return [[int(table[r, min(start // spec["block_size"] + j, cols - 1)]) for j in range(pages)]
            for r, _, _, start in local_windows(spec)]


def local_block_table_rows_point_into_the_original_rows(spec: dict, output: Any) -> str | None:
    """Row v of the local block table is the pages of v's chunk in its request's row of the original table
    (``attn_chunk_size // block_size`` of them, the column clipped to the last); ``make_block_table`` does the
    same to a later table."""
    for key, table in (("block_table_tensor", output["metadata"]["block_table_tensor"]),
                       ("update_block_table", output["update_block_table"])):
        source = block_table_of(spec, salt=0 if key == "block_table_tensor" else 1)
        want = _gathered(spec, source)
        got = table.detach().cpu().tolist()
        if got != want:
            return f"{key} {got} is not the windows' pages {want}"
        if table.dtype != source.dtype or table.device.type != torch.device(spec["device"]).type:
            return f"{key} is {table.dtype} on {table.device}, the block table is {source.dtype} on {spec['device']}"
    return None


def local_device_tensors_mirror_the_host(spec: dict, output: Any) -> str | None:
    """``query_start_loc`` and ``seq_lens`` are int32 on the batch's device holding what their host mirrors
    hold; the mirrors are on the host; ``slot_mapping`` is the batch's."""
    meta = _local(output)
    device = torch.device(spec["device"]).type
    for dev, host in (("query_start_loc", "query_start_loc_cpu"), ("seq_lens", "seq_lens_host")):
        d, h = meta[dev], meta[host]
        if d.device.type != device or h.device.type != "cpu":
            return f"{dev} on {d.device}, {host} on {h.device}: expected {device} and cpu"
        if d.dtype != torch.int32 or h.dtype != torch.int32:
            return f"{dev} {d.dtype}, {host} {h.dtype}: the batch's offsets are int32"
        if _ints(d) != _ints(h):
            return f"{dev} {_ints(d)} disagrees with its host mirror {host} {_ints(h)}"
    if _ints(meta["slot_mapping"]) != _ints(slot_mapping_of(spec)):
        return "slot_mapping is not the batch's"
    return None


def local_leaves_the_batch_alone(spec: dict, output: Any) -> str | None:
    """The input batch is only read: its offsets, seq lens and block table are what the runner built."""
    batch = output["batch_after"]
    want = {"query_start_loc": query_start_loc_of(spec), "query_start_loc_cpu": query_start_loc_of(spec),
            "seq_lens": seq_lens_of(spec), "block_table_tensor": _ints(block_table_of(spec))}
    for name, values in want.items():
        if _ints(batch[name]) != values:
            return f"the input batch's {name} changed"
    return None


def kv_expected_offsets(spec: dict) -> list[int]:
    """The per-request count of logits indices, as offsets (reference: a loop over the indices)."""
    starts = query_start_loc_of(spec)
    counts = [0] * len(spec["query_lens"])
    for r, offsets in enumerate(spec["logits"]):
        for t in offsets:
            index = starts[r] + t
            owner = max(i for i in range(len(counts)) if starts[i] <= index)
            counts[owner] += 1
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return out


def _armed(spec: dict) -> bool:
    return spec["logits"] is not None and max(spec["query_lens"]) > 1


def kv_offsets_count_the_logits(spec: dict, output: Any) -> str | None:
    """Armed on a batch with a prefill: the new offsets (device and host) count each request's logits indices,
    ``num_actual_tokens`` is their number, ``max_query_len`` the largest count. Otherwise the batch itself comes
    back."""
    if not _armed(spec):
        return None if output["same_object"] else "a decode-only or unarmed batch did not come back unchanged"
    if output["same_object"]:
        return "an armed batch with a prefill came back unchanged"
    meta = output["metadata"]
    want = kv_expected_offsets(spec)
    for name in ("query_start_loc", "query_start_loc_cpu"):
        if _ints(meta[name]) != want:
            return f"{name} {_ints(meta[name])}, the logits per request give {want}"
    if int(meta["num_actual_tokens"]) != want[-1]:
        return f"num_actual_tokens {meta['num_actual_tokens']} for {want[-1]} logits indices"
    counts = [b - a for a, b in zip(want, want[1:])]
    if int(meta["max_query_len"]) != max(counts):
        return f"max_query_len {meta['max_query_len']}, largest per-request count {max(counts)}"
    return None


def kv_host_offsets_mirror_the_device(spec: dict, output: Any) -> str | None:
    """The host offsets hold what the device offsets hold: same dtype as the batch's offsets (int32), on the
    host."""
    meta = output["metadata"]
    device, read = meta["query_start_loc"], meta["query_start_loc_cpu"]
    if read.device.type != "cpu":
        return f"query_start_loc_cpu is on {meta['query_start_loc_cpu'].device}, not the host"
    if device.device.type != torch.device(spec["device"]).type:
        return f"query_start_loc is on {device.device}, the batch on {spec['device']}"
    if read.dtype != torch.int32 or device.dtype != torch.int32:
        return f"offsets {device.dtype} / host {read.dtype}: the batch's are int32"
    if _ints(read) != _ints(device):
        return f"query_start_loc_cpu {_ints(read)}, device {_ints(device)}"
    return None


def kv_keeps_the_batch(spec: dict, output: Any) -> str | None:
    """Seq lens (device and host mirror), block table, slot mapping, ``num_reqs`` and ``max_seq_len`` are the
    batch's; the new metadata is causal."""
    meta = output["metadata"]
    seq = seq_lens_of(spec)
    checks = {"seq_lens": seq, "block_table_tensor": _ints(block_table_of(spec)),
              "slot_mapping": _ints(slot_mapping_of(spec))}
    for name, want in checks.items():
        if _ints(meta[name]) != want:
            return f"{name} is not the batch's"
    host = meta["seq_lens_host"]
    if host is not None and _ints(host) != seq:
        return f"host seq lens {_ints(host)}, the batch's are {seq}"
    if int(meta["num_reqs"]) != len(seq) or int(meta["max_seq_len"]) != max(seq):
        return f"num_reqs {meta['num_reqs']} / max_seq_len {meta['max_seq_len']} are not the batch's"
    if meta["causal"] is not True:
        return f"causal is {meta['causal']!r}"
    return None
