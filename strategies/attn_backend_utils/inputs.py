"""Inputs of two ``CommonAttentionMetadata`` rewriters of vllm/v1/attention/backends/utils.py (0.29.0 / 0.30.0).

``make_local_attention_virtual_batches(attn_chunk_size, common_attn_metadata, block_size)``. Caller (0.34.0, as
0.30.0): vllm/model_executor/layers/attention/chunked_local_attention.py
``create_chunked_local_attention_backend.<locals>.ChunkedLocalAttentionBuilder.build`` (Llama-4 style chunked
local attention) passes ``attention_chunk_size`` (a multiple of the KV block size), the batch's metadata and
``self.kv_cache_spec.block_size``; its ``update_block_table`` later calls the returned ``make_block_table`` on a
new block table of the same layout. The metadata is built by vllm/v1/worker/gpu_model_runner.py
``_build_attention_metadata`` (``cm_base``): ``query_start_loc`` = ``self.query_start_loc.gpu[:n + 1]`` and
``query_start_loc_cpu`` = ``self.query_start_loc.cpu[:n + 1]`` (one ``CpuGpuBuffer``: the two agree, int32),
``seq_lens`` = ``self.seq_lens[:n]`` (device, int32), ``seq_lens_cpu_upper_bound`` =
``self.optimistic_seq_lens_cpu[:n]`` (precise outside async spec decode, which chunked local attention models do
not run), the block table of KV group 0 (int32, one row per request, ``cdiv(max_model_len, block_size)`` columns),
``slot_mapping`` (int64, ``num_tokens_padded`` long) and ``num_actual_tokens = num_tokens_padded``; 0.29.0's runner
also set the deprecated ``_seq_lens_cpu = optimistic_seq_lens_cpu[:n]`` and ``_num_computed_tokens_cpu``, which
0.29.0's function read through ``seq_lens_cpu`` where 0.30.0 reads ``seq_lens.cpu()``. Every request has at least
one query token (the function's own comment: "we assume q_seqlens > 0").

``make_kv_sharing_fast_prefill_common_attn_metadata(common_attn_metadata)``. Caller (0.34.0):
vllm/v1/attention/backends/utils.py ``create_fast_prefill_custom_backend.<locals>.FastPrefillAttentionBuilder.build``
(the KV-sharing layers of Gemma-3n / Gemma-4, ``kv_sharing_fast_prefill``). The runner arms it with
vllm/v1/worker/gpu/attn_utils.py ``FastPrefillHelper.prepare`` and ``build_attn_metadata``: only on a step with a
prefill (else ``logits_indices_padded`` / ``num_logits_indices`` / ``max_logits_per_req`` stay None and the batch
is decode-only, ``max_query_len == 1``); ``logits_indices_padded`` is an int32 device buffer whose first
``num_logits_indices`` entries are the logits indices (the last ``1 + drafts`` tokens of each request, at least its
last token) and whose padding up to the cudagraph size repeats the last index; ``max_logits_per_req`` =
``int(np.diff(cu_num_logits_np).max())``. A step with a prefill that does not arm it (FULL cudagraphs, ubatches,
LoRA) reaches the function with ``max_query_len > 1`` and no logits indices: 0.29.0 asserts there, 0.30.0 returns
the batch -- the two releases are not meant to agree on it, so neither contract draws it.

Wide contract. Local attention: the deprecated ``_seq_lens_cpu`` left unset (0.29.0's property then reads
``seq_lens.to("cpu")``), ``seq_lens_cpu_upper_bound`` None, block tables narrower than the sequences (the
function clips the page index), block sizes that do not divide the chunk (both releases assert) and no block
size at all (its default, 0: both releases divide by zero). Fast prefill:
logits indices anywhere in the batch, in any order, some requests with none, int64 indices, a decode-only batch
that is armed anyway. The host mirrors always agree with the device tensors: a disagreeing mirror is a caller bug
neither release is written for (0.29.0's ``_seq_lens_cpu`` under async spec decode is an optimistic bound where
0.30.0 reads the device, a change of meaning that is not the sync change).

A spec is JSON: ``kind`` ("local" | "kv"), ``device``, the requests' ``query_lens`` and ``context_lens``, ``pad``
(padded tokens), ``cols`` (block table columns), ``seed`` (block ids), ``mirror`` ("set" | "unset": the legacy
side's deprecated ``_seq_lens_cpu``), ``upper_bound`` (bool), and per kind: ``block_size``, ``chunk``,
``pass_block_size`` / ``logits`` (per request, the token offsets within it), ``logits_pad``, ``logits_dtype``,
``shuffle`` (a seed, or None: the caller's order).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import choice_of, devices

BLOCK_SIZES = (1, 2, 4, 8, 16)
LOGITS_DTYPES = {"int32": torch.int32, "int64": torch.int64}

# The fields of the returned CommonAttentionMetadata a caller reads, compared on both sides.
LOCAL_FIELDS = ("query_start_loc", "query_start_loc_cpu", "seq_lens", "num_reqs", "num_actual_tokens",
                "max_query_len", "max_seq_len", "block_table_tensor", "slot_mapping", "causal")
KV_FIELDS = (*LOCAL_FIELDS, "seq_lens_cpu_upper_bound", "logits_indices_padded", "num_logits_indices",
             "max_logits_per_req")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- specs

# The host seq lens mirrors a batch carries. The 0.28.0/0.29.0 runner set both the deprecated _seq_lens_cpu and
# seq_lens_cpu_upper_bound, the 0.30.0+ runner the bound alone (which the legacy side then reads through the
# seq_lens_cpu property, a D2H copy); wide adds a batch with neither. A batch with the deprecated mirror and no
# bound is left out: 0.30.0 has no field to carry it, so the sides could not be handed the same batch.
_CALLER_MIRRORS = st.just({"mirror": "set", "upper_bound": True})
_MIRRORS = st.sampled_from([{"mirror": "set", "upper_bound": True}, {"mirror": "unset", "upper_bound": True},
                            {"mirror": "unset", "upper_bound": False}])

@st.composite
def _requests(draw: st.DrawFn, max_query: int, max_context: int) -> tuple[list[int], list[int]]:
    num_reqs = draw(st.integers(1, 5))
    query = draw(st.lists(st.integers(1, max_query), min_size=num_reqs, max_size=num_reqs))
    context = draw(st.lists(st.integers(0, max_context), min_size=num_reqs, max_size=num_reqs))
    return query, context


@st.composite
def _local_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    block_size = draw(choice_of(BLOCK_SIZES))
    pages = draw(st.integers(1, 4))
    chunk = block_size * pages
    if wide and draw(st.integers(0, 9)) == 0:
        chunk += 1  # not a multiple of the block size: both releases assert
    query, context = draw(_requests(3 * chunk + 2, 3 * chunk + 2))
    need = max(cdiv(q + c, block_size) for q, c in zip(query, context))
    cols = draw(st.integers(1, need + 2)) if wide else draw(st.integers(need, need + 2))
    return {
        "kind": "local",
        "device": draw(devices(available)),
        "block_size": block_size,
        "chunk": chunk,
        "query_lens": query,
        "context_lens": context,
        "cols": cols,
        "pad": draw(st.integers(0, 3)),
        # Wide: block_size left to its default, 0 (both releases then divide by zero).
        "pass_block_size": draw(st.integers(0, 9)) > 0 if wide else True,
        **draw(_MIRRORS if wide else _CALLER_MIRRORS),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@st.composite
def _kv_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    query, context = draw(_requests(6, 8))
    armed = max(query) > 1 or (wide and draw(st.booleans()))
    logits: list[list[int]] | None = None
    if armed and not wide:  # the last 1 + drafts tokens of each request
        logits = [list(range(q - draw(st.integers(1, min(q, 3))), q)) for q in query]
    elif armed:  # any tokens of the request, in any order, some requests with none
        logits = [draw(st.lists(st.integers(0, q - 1), max_size=q)) for q in query]
        if not any(logits):
            logits[0] = [query[0] - 1]
    return {
        "kind": "kv",
        "device": draw(devices(available)),
        "query_lens": query,
        "context_lens": context,
        "cols": draw(st.integers(1, 4)),
        "pad": draw(st.integers(0, 3)),
        "logits": logits,
        "logits_pad": draw(st.integers(0, 3)) if armed else 0,
        "logits_dtype": draw(choice_of(tuple(LOGITS_DTYPES))) if wide else "int32",
        "shuffle": draw(st.integers(0, 2**31 - 1)) if wide and armed else None,
        **draw(_MIRRORS if wide else _CALLER_MIRRORS),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


# --------------------------------------------------------------------------- host values, shared with the oracles

def query_start_loc_of(spec: dict) -> list[int]:
    out = [0]
    for q in spec["query_lens"]:
        out.append(out[-1] + q)
    return out


def seq_lens_of(spec: dict) -> list[int]:
    return [q + c for q, c in zip(spec["query_lens"], spec["context_lens"])]


def num_tokens_of(spec: dict) -> int:
    """``num_actual_tokens``: the scheduled tokens plus the cudagraph padding (``num_tokens_padded``)."""
    return sum(spec["query_lens"]) + spec["pad"]


def block_table_of(spec: dict, salt: int = 0) -> torch.Tensor:
    """Distinct positive block ids, one row per request (int32, as the runner's BlockTable); ``salt`` draws the
    other table a later ``update_block_table`` hands ``make_block_table``."""
    rows, cols = len(spec["query_lens"]), spec["cols"]
    generator = torch.Generator().manual_seed(spec["seed"] + salt)
    ids = torch.randperm(rows * cols + 16, generator=generator)[: rows * cols] + 1
    return ids.to(torch.int32).view(rows, cols)


def slot_mapping_of(spec: dict) -> torch.Tensor:
    generator = torch.Generator().manual_seed(spec["seed"] + 7)
    return torch.randint(0, 1 << 20, (num_tokens_of(spec),), generator=generator, dtype=torch.int64)


def logits_indices_of(spec: dict) -> list[int]:
    """The batch-global logits indices, in the caller's order (request by request; wide: shuffled)."""
    starts = query_start_loc_of(spec)
    flat = [starts[r] + t for r, offsets in enumerate(spec["logits"]) for t in offsets]
    if spec.get("shuffle") is not None:
        order = torch.randperm(len(flat), generator=torch.Generator().manual_seed(spec["shuffle"])).tolist()
        flat = [flat[i] for i in order]
    return flat


def max_logits_per_req_of(spec: dict) -> int:
    return max(len(offsets) for offsets in spec["logits"])


# --------------------------------------------------------------------------- metadata

def _common_metadata(spec: dict, impl: Impl, device: torch.device) -> tuple[Any, dict[str, Any]]:
    """A fresh CommonAttentionMetadata of the side's class, and the host copies of what went in."""
    cls = getattr(impl.module, "CommonAttentionMetadata", None)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise HarnessError(f"{impl.path}: the side's module has no CommonAttentionMetadata dataclass")
    names = {f.name for f in dataclasses.fields(cls)}
    qsl = torch.tensor(query_start_loc_of(spec), dtype=torch.int32)
    seq = torch.tensor(seq_lens_of(spec), dtype=torch.int32)
    query_lens = max(spec["query_lens"])
    fields: dict[str, Any] = {
        "query_start_loc": qsl.to(device),
        "query_start_loc_cpu": qsl.clone(),
        "seq_lens": seq.to(device),
        "num_reqs": len(spec["query_lens"]),
        "num_actual_tokens": num_tokens_of(spec),
        "max_query_len": query_lens,
        "max_seq_len": int(seq.max()),
        "block_table_tensor": block_table_of(spec).to(device),
        "slot_mapping": slot_mapping_of(spec).to(device),
        "causal": True,
        "seq_lens_cpu_upper_bound": seq.clone() if spec["upper_bound"] else None,
    }
    if spec["mirror"] == "set" and "_seq_lens_cpu" in names:  # the 0.28.0/0.29.0 runner's deprecated mirrors
        fields["_seq_lens_cpu"] = seq.clone()
        fields["_num_computed_tokens_cpu"] = torch.tensor(spec["context_lens"], dtype=torch.int32)
    if spec["kind"] == "kv" and spec["logits"] is not None:
        flat = logits_indices_of(spec)
        padded = flat + [flat[-1]] * spec["logits_pad"]  # FastPrefillHelper: padding repeats the last index
        fields["logits_indices_padded"] = torch.tensor(padded, dtype=LOGITS_DTYPES[spec["logits_dtype"]],
                                                       device=device)
        fields["num_logits_indices"] = len(flat)
        fields["max_logits_per_req"] = max_logits_per_req_of(spec)
    missing = [name for name in fields if name not in names]
    if missing:
        raise HarnessError(f"{impl.path}: this side's CommonAttentionMetadata lacks {missing}")
    host = {name: (value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value)
            for name, value in fields.items()}
    return cls(**fields), host


def host_seq_lens(metadata: Any) -> Any:
    """The host mirror of ``seq_lens`` the release hands its consumers: 0.28.0/0.29.0's deprecated
    ``_seq_lens_cpu`` (read through the ``seq_lens_cpu`` property) where set, else ``seq_lens_cpu_upper_bound``
    (0.30.0+ removed the former; the local-attention metadata's bound is its exact seq lens)."""
    mirror = getattr(metadata, "_seq_lens_cpu", None)
    return mirror if mirror is not None else metadata.seq_lens_cpu_upper_bound


def metadata_view(metadata: Any, names: Sequence[str]) -> dict[str, Any]:
    view = {name: getattr(metadata, name) for name in names}
    view["seq_lens_host"] = host_seq_lens(metadata)
    return view


class LocalAttentionInputs:
    """A fresh batch of the side's ``CommonAttentionMetadata``; the thunk calls
    ``make_local_attention_virtual_batches(chunk, metadata, block_size)``, then, as ``update_block_table`` does,
    the returned ``make_block_table`` on another block table of the same layout, and returns the new metadata's
    fields, that second table's rows and the input batch after the call."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _local_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        device = torch.device(spec["device"])
        metadata, _ = _common_metadata(spec, impl, device)
        other = block_table_of(spec, salt=1).to(device)
        function = impl.function

        def call() -> dict[str, Any]:
            if spec.get("pass_block_size", True):
                local, make_block_table = function(spec["chunk"], metadata, spec["block_size"])
            else:
                local, make_block_table = function(spec["chunk"], metadata)
            return {
                "metadata": metadata_view(local, LOCAL_FIELDS),
                "update_block_table": make_block_table(other),
                "batch_after": {"query_start_loc": metadata.query_start_loc,
                                "query_start_loc_cpu": metadata.query_start_loc_cpu,
                                "seq_lens": metadata.seq_lens, "block_table_tensor": metadata.block_table_tensor},
            }

        return call


class FastPrefillInputs:
    """A fresh batch of the side's ``CommonAttentionMetadata`` (armed for fast prefill or decode-only); the thunk
    calls ``make_kv_sharing_fast_prefill_common_attn_metadata(metadata)`` and returns the returned fields and
    whether the batch came back as it went in.

    The wrapped builder's ``split_decodes_and_prefills`` reads the returned ``query_start_loc_cpu`` on the host at
    once; up to 0.33.0 that is the destination of a ``non_blocking`` D2H copy, so such a read may come before the
    copy. The thunk does not read it early: whether an unheld copy has landed by then is timing (a plain CUDA run
    would pass or fail by luck). The fields are compared after the harness's sync."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _kv_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        device = torch.device(spec["device"])
        metadata, _ = _common_metadata(spec, impl, device)
        function = impl.function

        def call() -> dict[str, Any]:
            out = function(metadata)
            return {"same_object": out is metadata, "metadata": metadata_view(out, KV_FIELDS)}

        return call
