"""Oracles of ``GDNAttentionMetadataBuilder.build_for_cudagraph_capture`` (vllm/v1/attention/backends/
gdn_attn.py, 0.29.0 / 0.30.0).

Upstream meaning: "builds the metadata for full cudagraph capture. Currently, only decode is
supported for full cudagraphs with Mamba." A request with ``k >= 0`` draft tokens
(``query_len - 1``) is a spec decode when speculative decoding is on and the batch has any
draft token (0.29.0..0.31.0), or any real request at all (0.32.0 on: "A batch whose rows all drafted
nothing still has to run the speculative path", docs/findings/drift.md F22); the others are plain
decodes; zero-length requests are padding ("padded sequences
are always at the back"). Under FULL graphs the per-request metadata lives in the builder's
persistent buffers, sliced to ``batch_size = m.num_reqs``: the real requests' state indices
first, ``NULL_BLOCK_ID`` for padding; the query offsets, padded with the total token count;
``num_accepted_tokens`` the accepted counts, 1 for padding. The state indices are the first
``1 + num_spec`` mamba blocks of each request (``mamba_get_block_table_tensor``: the block table
itself for cache modes "all"/"none"; for "align" the ``1 + num_speculative_blocks`` blocks from
``(seq_len - 1) // block_size``).

Each invariant holds for a batch whose device ``query_start_loc`` is its host mirror (every
caller); for a stale device buffer (wide) the batch is not defined and they say nothing.
The thunk (strategies/gdn_attn/inputs.py) returns ``{"metadata": fields, "batch": tensors after}``.
"""

from __future__ import annotations

from typing import Any

import torch

from strategies.gdn_attn.inputs import block_table_of, query_lens, query_start_loc_of, seq_lens_of

NULL_BLOCK_ID = 0  # vllm/v1/attention/backends/utils.py


def _parts(output: Any) -> tuple[dict, str | None]:
    if not isinstance(output, dict) or not {"metadata", "batch"} <= set(output):
        return {}, f"output is {type(output).__name__} without metadata/batch"
    return output["metadata"], None


def _is_spec(spec: dict, md: dict) -> bool:
    """Whether the spec-decode path is the one to take: speculative decoding on and some request with a draft
    token. With speculative decoding on and no draft token anywhere, both releases' rules are upstream's
    meaning (0.29.0..0.31.0: plain decodes; 0.32.0 on: spec decodes): the path the metadata names is checked."""
    if spec["num_spec"] == 0:
        return False
    if any(n >= 2 for n in query_lens(spec)):
        return True
    return bool(md["num_spec_decodes"])


def _defined(spec: dict) -> bool:
    return spec["mirror"] == "same"


def _cpu(t: Any) -> Any:
    return t.detach().cpu() if isinstance(t, torch.Tensor) else t


def capture_is_decode_only(spec: dict, output: Any) -> str | None:
    """No prefill (count, tokens or chunk metadata), and every token of the batch is a decode
    token or a spec-decode token: ``num_decode_tokens + num_spec_decode_tokens ==
    num_actual_tokens``; decodes and spec decodes never both."""
    md, problem = _parts(output)
    if problem:
        return problem
    if not _defined(spec):
        return None
    if md["num_prefills"] or md["num_prefill_tokens"]:
        return f"capture metadata has {md['num_prefills']} prefills / {md['num_prefill_tokens']} prefill tokens"
    for key in ("chunk_indices", "chunk_offsets", "prefill_query_start_loc", "has_initial_state"):
        if md[key] is not None:
            return f"decode-only capture metadata sets {key}"
    if md["num_decode_tokens"] + md["num_spec_decode_tokens"] != spec["num_tokens"]:
        return (f"{md['num_decode_tokens']} decode + {md['num_spec_decode_tokens']} spec tokens, "
                f"batch has {spec['num_tokens']}")
    if md["num_decodes"] and md["num_spec_decodes"]:
        return f"{md['num_decodes']} decodes and {md['num_spec_decodes']} spec decodes at once"
    return None


def capture_query_start_loc_is_the_batch(spec: dict, output: Any) -> str | None:
    """Under FULL graphs the query offsets of the path taken cover all ``m.num_reqs`` requests
    and equal the batch's (padding repeats the total): spec decodes use
    ``spec_query_start_loc``, plain decodes ``non_spec_query_start_loc``."""
    md, problem = _parts(output)
    if problem:
        return problem
    if not _defined(spec) or not spec["full"]:
        return None
    key = "spec_query_start_loc" if _is_spec(spec, md) else "non_spec_query_start_loc"
    got, want = _cpu(md[key]), query_start_loc_of(spec)
    if not isinstance(got, torch.Tensor):
        return f"{key} is {type(got).__name__}, expected the batch's offsets"
    if got.shape != want.shape or not torch.equal(got.to(torch.int64), want.to(torch.int64)):
        return f"{key} is {got.tolist()}, the batch's offsets are {want.tolist()}"
    return None


def _mamba_rows(spec: dict) -> torch.Tensor:
    """The first ``1 + num_spec`` mamba blocks of each request, per cache mode."""
    table, width = block_table_of(spec), 1 + spec["num_spec"]
    if spec["cache_mode"] in ("all", "none"):
        return table[:, :width]
    start = ((seq_lens_of(spec) - 1) // spec["block_size"]).clamp(min=0)
    return torch.stack([table[r, int(s):int(s) + width] for r, s in enumerate(start.tolist())])


def capture_state_indices_are_the_block_rows(spec: dict, output: Any) -> str | None:
    """Under FULL graphs: spec decodes' ``spec_state_indices_tensor`` rows are the real requests'
    first ``1 + num_spec`` mamba blocks, then ``NULL_BLOCK_ID``; plain decodes'
    ``non_spec_state_indices_tensor`` is each request's first mamba block."""
    md, problem = _parts(output)
    if problem:
        return problem
    if not _defined(spec) or not spec["full"]:
        return None
    rows, lens = _mamba_rows(spec), query_lens(spec)
    real = sum(1 for n in lens if n)
    if _is_spec(spec, md):
        got = _cpu(md["spec_state_indices_tensor"])
        want = torch.full((len(lens), rows.shape[1]), NULL_BLOCK_ID, dtype=torch.int32)
        want[:real] = rows[:real]
        key = "spec_state_indices_tensor"
    else:
        got, want, key = _cpu(md["non_spec_state_indices_tensor"]), rows[:, 0], "non_spec_state_indices_tensor"
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.equal(got.to(torch.int64),
                                                                                       want.to(torch.int64)):
        shown = got.tolist() if isinstance(got, torch.Tensor) else got
        return f"{key} is {shown}, expected {want.tolist()}"
    return None


def capture_accepted_tokens_are_the_query_lens(spec: dict, output: Any) -> str | None:
    """Spec decodes under FULL graphs: ``num_accepted_tokens`` holds each real request's query
    length (``torch.diff(query_start_loc)``), 1 for padding; plain decodes carry none."""
    md, problem = _parts(output)
    if problem:
        return problem
    if not _defined(spec):
        return None
    got = _cpu(md["num_accepted_tokens"])
    if not _is_spec(spec, md):
        return None if got is None else "plain-decode capture metadata carries num_accepted_tokens"
    if not spec["full"]:
        return None
    lens = query_lens(spec)
    want = torch.tensor([n if n else 1 for n in lens])
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.equal(got.to(torch.int64), want):
        shown = got.tolist() if isinstance(got, torch.Tensor) else got
        return f"num_accepted_tokens is {shown}, expected {want.tolist()}"
    return None


def capture_leaves_the_batch_alone(spec: dict, output: Any) -> str | None:
    """The batch (query offsets, host mirror, block table, seq lens) is only read."""
    _, problem = _parts(output)
    if problem:
        return problem
    batch = {k: _cpu(v) for k, v in output["batch"].items()}
    want = {"query_start_loc_cpu": query_start_loc_of(spec), "block_table_tensor": block_table_of(spec),
            "seq_lens": seq_lens_of(spec)}
    if _defined(spec):
        want["query_start_loc"] = query_start_loc_of(spec)
    for key, value in want.items():
        if not torch.equal(batch[key], value):
            return f"{key} changed by build_for_cudagraph_capture"
    return None


