"""Inputs of ``GDNAttentionMetadataBuilder.build_for_cudagraph_capture(common_attn_metadata)``
(vllm/v1/attention/backends/gdn_attn.py, 0.29.0 / 0.30.0): the metadata Qwen3-Next / Qwen3.5's
GatedDeltaNet layers are captured with under FULL CUDA graphs.

Callers (0.30.0): vllm/v1/worker/gpu_model_runner.py:_build_attention_metadata (``for_cudagraph_capture``,
from ``_dummy_run(..., uniform_decode=True)`` during capture) and vllm/v1/worker/gpu/attn_utils.py
(the v2 runner's capture). The dummy batch is a uniform decode: ``num_reqs = cdiv(num_tokens,
max_query_len)`` requests of ``max_query_len = uniform_decode_query_len = 1 + num_spec`` tokens, the
last one holding the remainder ``num_tokens % max_query_len``, then padded requests of zero tokens up
to ``num_reqs_padded`` (``query_start_loc.np[num_reqs + 1 : num_reqs_padded + 1].fill(...)``);
``query_start_loc`` is ``self.query_start_loc.copy_to_gpu()`` of that host array, so the device
buffer and ``query_start_loc_cpu`` hold the same numbers; ``seq_lens`` is ``max_query_len`` per real
request and 0 for padding; the block table has one row per (padded) request, as the mamba cache mode
lays it out ("none": 1 + num_speculative_blocks columns, "all": cdiv(max_model_len, block_size) +
num_speculative_blocks, "align": cdiv(max_model_len, block_size)). The builder comes from the
engine's config: ``max_num_seqs``, ``max_cudagraph_capture_size``, ``num_speculative_tokens``, a
FULL cudagraph mode (capture is only asked for under it). ``num_reqs_padded`` and ``num_tokens``
never exceed ``decode_cudagraph_max_bs`` (the method asserts it).

Wide contract, beyond that: a cudagraph mode without FULL graphs, and a device ``query_start_loc``
that is not the host mirror: the offsets of a larger uniform batch (every row ``1 + num_spec``
tokens, padding included), left in the device buffer -- what 0.29.0 read, where 0.30.0 reads the
mirror.

A spec is JSON: ``num_spec``, ``max_num_seqs``, ``capture_size`` (or None), ``num_tokens``,
``pad_reqs``, ``cache_mode``, ``block_size``, ``blocks`` (cdiv(max_model_len, block_size)),
``full`` (FULL cudagraphs), ``mirror`` ("same" | "stale") and ``seed`` (block ids).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import devices

CACHE_MODES = st.sampled_from(["none", "all", "align"])
MIRRORS = st.sampled_from(["same", "stale"])


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def max_bs(spec: dict) -> int:
    """``decode_cudagraph_max_bs`` as the builder's ``__init__`` computes it."""
    bs = spec["max_num_seqs"] * (spec["num_spec"] + 1)
    return bs if spec["capture_size"] is None else min(bs, spec["capture_size"])


@st.composite
def _specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    num_spec = draw(st.integers(0, 3))
    q = 1 + num_spec
    max_num_seqs = draw(st.integers(1, 12))
    capture_size = draw(st.none() | st.integers(1, 48))
    bs = max_num_seqs * q if capture_size is None else min(max_num_seqs * q, capture_size)
    num_tokens = draw(st.integers(1, min(bs, max_num_seqs * q)))
    num_reqs = _cdiv(num_tokens, q)
    pad_reqs = draw(st.integers(0, max(0, min(3, bs - num_reqs))))
    block_size = draw(st.sampled_from([4, 8, 16]))
    return {
        "device": draw(devices(available)),
        "num_spec": num_spec,
        "max_num_seqs": max_num_seqs,
        "capture_size": capture_size,
        "num_tokens": num_tokens,
        "pad_reqs": pad_reqs,
        "cache_mode": draw(CACHE_MODES),
        "block_size": block_size,
        "blocks": draw(st.integers(num_spec + 1, num_spec + 4)),  # align gathers 1 + num_spec columns
        "full": draw(st.booleans()) if wide else True,
        "mirror": draw(MIRRORS) if wide else "same",
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def query_lens(spec: dict) -> list[int]:
    """The dummy batch's query lengths: uniform ``1 + num_spec``, the remainder last, then padding."""
    q = 1 + spec["num_spec"]
    lens = [q] * (spec["num_tokens"] // q)
    if spec["num_tokens"] % q:
        lens.append(spec["num_tokens"] % q)
    return lens + [0] * spec["pad_reqs"]


def query_start_loc_of(spec: dict) -> torch.Tensor:
    lens = torch.tensor([0, *query_lens(spec)], dtype=torch.int32)
    return torch.cumsum(lens, 0, dtype=torch.int32)


def block_table_of(spec: dict) -> torch.Tensor:
    """Distinct nonzero block ids, one row per (padded) request, laid out per cache mode."""
    cols = {"none": 1 + spec["num_spec"], "all": spec["blocks"] + spec["num_spec"],
            "align": spec["blocks"]}[spec["cache_mode"]]
    generator = torch.Generator().manual_seed(spec["seed"])
    rows = len(query_lens(spec))
    return (torch.randperm(rows * cols + 8, generator=generator)[: rows * cols] + 1).to(torch.int32).view(rows, cols)


def seq_lens_of(spec: dict) -> torch.Tensor:
    """``max_query_len`` per real request, 0 for padding, as _dummy_run fills ``seq_lens``."""
    q = 1 + spec["num_spec"]
    return torch.tensor([q if n else 0 for n in query_lens(spec)], dtype=torch.int32)


# GDNAttentionMetadata's fields in 0.28.0..0.30.0 (the copies'), all still there in 0.34.0. Later releases add
# fields no earlier side has a counterpart for (0.31.0: spec_sequence_masks_cpu, uniform_spec_sequence_length;
# 0.32.0: checkpoint, aiter_prefill_metadata; 0.33.0: flashinfer_checkpoint_plan): two sides are compared on
# these, the fields every release the target builds from defines.
COMPARED_FIELDS = (
    "num_prefills", "num_prefill_tokens", "num_decodes", "num_decode_tokens", "num_spec_decodes",
    "num_spec_decode_tokens", "num_actual_tokens", "has_initial_state", "spec_query_start_loc",
    "non_spec_query_start_loc", "spec_state_indices_tensor", "non_spec_state_indices_tensor",
    "spec_sequence_masks", "spec_token_indx", "non_spec_token_indx", "num_accepted_tokens", "chunk_indices",
    "chunk_offsets", "prefill_query_start_loc", "prefill_state_indices", "prefill_has_initial_state", "nums_dict",
    "batch_ptr", "token_chunk_offset_ptr",
)


def metadata_fields(metadata: Any) -> dict[str, Any]:
    """A side's GDNAttentionMetadata as a dict of ``COMPARED_FIELDS`` (the two sides' dataclasses are distinct
    types, and a later release's has more fields)."""
    if not dataclasses.is_dataclass(metadata):
        raise HarnessError(f"build_for_cudagraph_capture returned {type(metadata).__name__}")
    names = {f.name for f in dataclasses.fields(metadata)}
    missing = [name for name in COMPARED_FIELDS if name not in names]
    if missing:
        raise HarnessError(f"this side's GDNAttentionMetadata lacks {missing}: the input model needs its form")
    return {name: getattr(metadata, name) for name in COMPARED_FIELDS}


class CommonAttentionMetadataStandIn(SimpleNamespace):
    """The fields of vllm/v1/attention/backend.py's ``CommonAttentionMetadata`` that build reads, and its
    ``replace(**kwargs)`` (``dataclasses.replace``: a new object, the others' fields shared), which 0.31.0+'s
    build calls."""

    def replace(self, **kwargs: Any) -> "CommonAttentionMetadataStandIn":
        return type(self)(**{**vars(self), **kwargs})


class CaptureInputs:
    """A fresh builder of the side's class from a SimpleNamespace config and a fresh
    CommonAttentionMetadata stand-in of the dummy capture batch; the thunk calls
    ``build_for_cudagraph_capture`` and returns the metadata's fields and the batch tensors
    after the call (only read)."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        device = torch.device(spec["device"])
        full = spec["full"]
        num_spec = spec["num_spec"]
        vllm_config = SimpleNamespace(
            compilation_config=SimpleNamespace(
                cudagraph_mode=SimpleNamespace(has_full_cudagraphs=lambda: full),
                max_cudagraph_capture_size=spec["capture_size"]),
            # enable_adaptive_verification: read by 0.34.0's __init__ (SpeculativeConfig's default, False).
            speculative_config=(SimpleNamespace(num_speculative_tokens=num_spec, parallel_drafting=False,
                                                enable_adaptive_verification=False)
                                if num_spec else None),
            # Read by 0.31.0..0.33.0's __init__ (which runner builds the metadata); 0.34.0 has only the v2 runner.
            use_v2_model_runner=spec.get("v2_runner", True),
            scheduler_config=SimpleNamespace(max_num_seqs=spec["max_num_seqs"]),
            cache_config=SimpleNamespace(mamba_cache_mode=spec["cache_mode"]),
            parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        )
        # prefill_checkpoint_alignment: read by 0.33.0+'s __init__ (MambaSpec's default, None: no FlashInfer
        # prefill checkpoints).
        kv_cache_spec = SimpleNamespace(block_size=spec["block_size"], num_speculative_blocks=num_spec,
                                        prefill_checkpoint_alignment=None)
        builder = impl.owner(kv_cache_spec, ["model.layers.0.linear_attn"], vllm_config, device)
        query_start_loc_cpu = query_start_loc_of(spec)
        query_start_loc = query_start_loc_cpu.to(device)
        if spec["mirror"] == "stale":  # the device buffer still holds a larger uniform batch's offsets
            query_start_loc = torch.arange(query_start_loc.numel(), dtype=torch.int32, device=device) * (1 + num_spec)
        m = CommonAttentionMetadataStandIn(
            query_start_loc=query_start_loc,
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=seq_lens_of(spec).to(device),
            block_table_tensor=block_table_of(spec).to(device),
            num_reqs=len(query_lens(spec)),
            num_actual_tokens=spec["num_tokens"],
            max_query_len=1 + num_spec,
            # 0.31.0+ runners pass both (the v2 runner's capture: is_prefilling all False over the padded rows,
            # mamba_hybrid.py; the v1 runner's: optimistic_seq_lens_cpu[:num_reqs_padded], the dummy seq_lens);
            # 0.31.0+'s build reads them on the non-spec path, earlier releases never.
            is_prefilling=torch.zeros(len(query_lens(spec)), dtype=torch.bool),
            seq_lens_cpu_upper_bound=seq_lens_of(spec),
        )
        capture = impl.function

        def call() -> dict[str, Any]:
            metadata = capture(builder, m)
            return {"metadata": metadata_fields(metadata),
                    "batch": {"query_start_loc": m.query_start_loc, "query_start_loc_cpu": m.query_start_loc_cpu,
                              "block_table_tensor": m.block_table_tensor, "seq_lens": m.seq_lens}}

        return call
