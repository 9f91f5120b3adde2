"""Inputs of ``SamplingMaskTensors.to_cpu_nonblocking`` then ``.tolists(num_sampled)``
(vllm/v1/worker/gpu/sample/output.py), and the scheduler's and output processor's reads of the result.

The caller (vllm/v1/worker/gpu/async_utils.py ``AsyncOutput``, the same call forms in 0.28.0 and 0.34.0):
``__init__`` enqueues ``sampler_output.sampling_mask_tensors.to_cpu_nonblocking()`` and
``self.num_sampled_tokens_np = async_copy_to_np(num_sampled_tokens)`` on the copy stream and records
``copy_event``; ``get_output`` calls ``self.copy_event.synchronize()`` and then
``self.sampling_mask_tensors.tolists(self.num_sampled_tokens_np)``. Then, per request with new tokens, the
scheduler (vllm/v1/core/sched/scheduler.py) takes ``sampling_masks.slice_request(req_index,
len(new_token_ids))`` and the output processor (vllm/v1/engine/output_processor.py) reads
``chunk.to_nested_list()``. The thunk plays all three on the current stream: copy, wait on the copy's event
(CUDA only), ``tolists``, then each sampled request's slice and nested list.

What the sampler hands in (``SamplingMaskTensors.from_logits``, a Triton kernel the input model stands in
for by writing what it writes): per request row, the finite-logit support (``counts``) and its bitmask
(``packed_mask``, little bit order); 0.30.0+ also the first ``max_num_kept`` ids of each row (``token_ids``,
``max_num_kept = min(batch max top_k, vocab_size, 2048)``): rows past it (ties, a huge top_k) fall back to the
bitmask. A request that sampled nothing (chunked prefill) has count 0; 0.34.0's kernel leaves that row's
``token_ids`` and bitmask unwritten (``torch.empty``: garbage here), 0.28.0's wrote a zero bitmask. One row
per request (``rows_per_request=1``, the plain sampler), ``num_sampled_tokens`` 0 or 1 int32: the one
layout both releases have (0.28.0's rejection sampler returned no masks; 0.34.0's multi-position rows are
not drawn). ``caller``: every sampled request's support holds at least one id (the sampled one); ``wide``
allows an empty one.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import devices
from strategies.outputs.inputs import SamplerOutputs, host_view, wait_for_copies


@st.composite
def _mask_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    device = draw(devices(available))
    vocab_size = draw(st.integers(1, 80))
    num_reqs = draw(st.integers(1, 5))
    sampled = draw(st.lists(st.integers(0, 1), min_size=num_reqs, max_size=num_reqs))
    low = 0 if contract == "wide" else 1
    support_sizes = [draw(st.integers(low, vocab_size)) if n else 0 for n in sampled]
    return {
        "device": device,
        "vocab_size": vocab_size,
        "num_sampled": sampled,
        "support_sizes": support_sizes,
        "max_num_kept": draw(st.integers(1, vocab_size)),  # the batch's max top_k (validated: 1..vocab)
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def supports_of(spec: dict) -> list[list[int]]:
    """Each request's finite-logit token ids, ascending (the kernel scans the vocabulary in order); empty for a
    request that sampled nothing."""
    rng = np.random.default_rng(spec["seed"])
    return [sorted(rng.choice(spec["vocab_size"], size, replace=False).tolist())
            for size in spec["support_sizes"]]


def _kernel_rows(spec: dict, compact: bool) -> dict[str, torch.Tensor]:
    """What ``from_logits``' kernel leaves in its host-visible outputs, on the CPU (unwritten rows are garbage
    drawn from the seed)."""
    vocab, supports = spec["vocab_size"], supports_of(spec)
    rng = np.random.default_rng(spec["seed"] + 1)
    rows, width = len(supports), min(spec["max_num_kept"], vocab, 2048)
    bits = np.zeros((rows, vocab), dtype=np.uint8)
    for row, ids in enumerate(supports):
        bits[row, ids] = 1
    packed = np.packbits(bits, axis=1, bitorder="little")
    counts = np.array([len(ids) for ids in supports], dtype=np.int32)
    out = {"packed_mask": torch.from_numpy(packed), "counts": torch.from_numpy(counts)}
    if compact:  # 0.30.0+: unwritten rows of inactive requests and columns past a row's ids hold garbage
        token_ids = rng.integers(-2**31, 2**31 - 1, size=(rows, width), dtype=np.int32)
        for row, (ids, n) in enumerate(zip(supports, spec["num_sampled"])):
            token_ids[row, : min(len(ids), width)] = ids[:width]
            if not n:
                packed[row] = rng.integers(0, 256, size=packed.shape[1], dtype=np.uint8)
        out["token_ids"] = torch.from_numpy(token_ids)
        out["packed_mask"] = torch.from_numpy(packed)
    return out


class SamplingMaskToHostInputs:
    """Device ``SamplingMaskTensors`` as ``from_logits`` leaves them; the thunk copies them to the host, waits for
    the copy, converts them and reads each sampled request's mask as the scheduler and output processor do."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _mask_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        tensors_class = impl.owner  # the side's SamplingMaskTensors (a copy, a mutant, a release's or vllm's)
        device = spec["device"]
        compact = "token_ids" in tensors_class._fields  # 0.30.0+ layout
        fields = {name: t.to(device) for name, t in _kernel_rows(spec, compact).items()}
        # async_copy_to_np(num_sampled_tokens): like the masks, a fresh per-step output (SamplerOutputs says why)
        held = SamplerOutputs(tensors=tensors_class(**fields, vocab_size=spec["vocab_size"]),
                              num_sampled=np.array(spec["num_sampled"], dtype=np.int32))
        to_cpu_nonblocking = impl.function

        def call() -> dict[str, Any]:
            host, num_sampled_np = to_cpu_nonblocking(held.tensors), held.num_sampled
            wait_for_copies(device)
            lists = host.tolists(num_sampled_np)
            requests = []
            for req_index, num_new in enumerate(num_sampled_np.tolist()):
                if num_new:  # the scheduler slices only requests with new tokens
                    chunk = lists.slice_request(req_index, num_new)
                    requests.append({"token_ids": chunk.token_ids, "positions": chunk.to_nested_list()})
            active = torch.from_numpy(np.flatnonzero(num_sampled_np))
            return {
                "counts": host.counts,
                # Rows of requests that sampled nothing hold garbage in 0.34.0 (unwritten) and zeros in 0.28.0.
                "packed_mask_of_sampled": host.packed_mask[active],
                "where": {"counts": host_view(host.counts), "packed_mask": host_view(host.packed_mask)},
                "token_ids": lists.token_ids,
                "requests": requests,
            }

        return call
