"""Inputs of ``LogprobsTensors.to_cpu_nonblocking`` then ``.tolists()`` (vllm/v1/outputs.py), as the engine
calls them.

The caller (vllm 0.34.0, vllm/v1/worker/gpu/async_utils.py, ``AsyncOutput``): ``__init__`` enqueues, on the
copy stream, ``sampler_output.logprobs_tensors.to_cpu_nonblocking()`` and records ``self.copy_event`` behind
the copies; ``get_output`` calls ``self.copy_event.synchronize()`` and only then
``self.logprobs_tensors.tolists()`` (no argument). 0.28.0's v1 runner did the same
(vllm/v1/worker/gpu_model_runner.py, ``AsyncGPUModelRunnerOutput``: ``to_cpu_nonblocking()``, then
``async_copy_ready_event.synchronize()``, then ``tolists()``). The thunk plays that caller, on the current
stream (so the race oracle's held stream carries the copies): copy, wait on the copy's event (CUDA only: on
the CPU ``to_cpu_nonblocking`` returns ``self`` and there is no copy to wait for), ``tolists``.

What the sampler hands in (0.34.0, vllm/v1/worker/gpu/sample/logprob.py ``compute_topk_scores``):
``logprob_token_ids`` [positions, 1 + num_logprobs] int64 (the sampled id then the top-k ids),
``logprobs`` float32 of the same shape (``-inf`` where masked), ``selected_token_ranks`` int64, and the
request boundaries ``cu_num_logits`` either as a host list (``cu_num_generated_tokens``; None with one
position per request) or, under adaptive verification (vLLM PR #52242, 0.29.0), as a device tensor
(``cu_num_generated_tokens_tensor``), which rides along on the D2H copy. A side whose ``LogprobsTensors``
has no such field (0.28.0) gets the same boundaries as the host list: what its caller held.

``wide`` adds int32 ids and ranks (0.28.0's v1 sampler) and 0.28.0's rejection sampler call form
``tolists(cu_num_tokens)`` (vllm/v1/sample/rejection_sampler.py), the boundaries passed in.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import choice_of, devices

BOUNDARY_FORMS = ("none", "list", "tensor")
"""``none``: one position per request, no boundaries (the plain sampler); ``list``: host boundaries (spec
decode); ``tensor``: device boundaries (adaptive verification, 0.29.0+)."""
CALLER_DTYPES = ("int64",)
WIDE_DTYPES = ("int64", "int32")
_TORCH = {"int32": torch.int32, "int64": torch.int64}
TENSOR_FIELDS = ("logprob_token_ids", "logprobs", "selected_token_ranks")


@st.composite
def _logprobs_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    device = draw(devices(available))
    form = draw(choice_of(BOUNDARY_FORMS))
    num_reqs = draw(st.integers(0 if contract == "wide" else 1, 5))
    if form == "none":
        positions = [1] * num_reqs
    else:  # spec decode: 1 + accepted draft tokens per request; a request may sample none (chunked prefill)
        positions = draw(st.lists(st.integers(0, 4), min_size=num_reqs, max_size=num_reqs))
    dtypes = WIDE_DTYPES if contract == "wide" else CALLER_DTYPES
    return {
        "device": device,
        "boundaries": form,
        "positions": positions,
        "num_logprobs": draw(st.integers(0, 5)),
        "id_dtype": draw(choice_of(dtypes)),
        "rank_dtype": draw(choice_of(dtypes)),
        "tolists_arg": contract == "wide" and form != "none" and draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def boundaries_of(spec: dict) -> list[int] | None:
    """The request boundaries ``[0, n_0, n_0 + n_1, ...]`` the caller holds (None for one position each)."""
    if spec["boundaries"] == "none":
        return None
    return np.concatenate(([0], np.cumsum(spec["positions"], dtype=np.int64))).tolist()


def logprobs_values(spec: dict) -> dict[str, torch.Tensor]:
    """The sampler's three tensors on the host, deterministic from ``seed``: ids in [0, 50000), scores that
    are log-probabilities (<= 0) with some ``-inf`` (masked columns), ranks >= 1."""
    rows, cols = sum(spec["positions"]), 1 + spec["num_logprobs"]
    rng = np.random.default_rng(spec["seed"])
    ids = torch.from_numpy(rng.integers(0, 50_000, size=(rows, cols))).to(_TORCH[spec["id_dtype"]])
    scores = -torch.from_numpy(rng.exponential(2.0, size=(rows, cols)).astype(np.float32))
    scores[torch.from_numpy(rng.random((rows, cols)) < 0.1)] = float("-inf")
    ranks = torch.from_numpy(rng.integers(1, 50_000, size=rows)).to(_TORCH[spec["rank_dtype"]])
    return {"logprob_token_ids": ids, "logprobs": scores, "selected_token_ranks": ranks}


class SamplerOutputs:
    """The sampler's fresh per-step outputs a thunk passes on, held where ``--stress`` does not look
    (fuzz/oracles/stress.py walks a thunk's closure, its tensors, arrays, lists, tuples and dicts, for host memory
    the caller rewrites). Nothing rewrites these after the call: ``AsyncOutput`` keeps the sampler output until
    its copy is done and the next step builds new ones. So an output that aliases them -- ``to_cpu_nonblocking``
    returns ``self`` on the CPU and ``tolists`` hands back the boundaries list, by upstream design in both
    releases -- is no hazard, and poisoning them would report one."""

    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)


def wait_for_copies(device: str) -> None:
    """What ``AsyncOutput`` does between the copy and the read: record an event behind the copies on the
    stream that carries them, and wait for it (CUDA only; a CPU copy is done when it returns)."""
    if torch.device(device).type == "cuda":
        copied = torch.cuda.Event(blocking=True)
        copied.record()
        copied.synchronize()


def host_view(tensor: torch.Tensor) -> dict[str, Any]:
    """What a caller of the host copy can tell about one tensor besides its values: where it lives and whether
    it is pinned (the engine keeps them only until ``tolists``; pinnedness is what makes the copy async)."""
    return {"device": str(tensor.device), "pinned": tensor.is_pinned()}


class LogprobsToHostInputs:
    """Device ``LogprobsTensors`` as the sampler builds them; the thunk copies them to the host, waits for the
    copy and converts them (module docstring). It returns the host tensors, where they live and the lists."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _logprobs_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        tensors_class = impl.owner  # the side's LogprobsTensors (a copy, a mutant, a release's or vllm's)
        device = spec["device"]
        values = {name: t.to(device) for name, t in logprobs_values(spec).items()}
        cu = boundaries_of(spec)
        if spec["boundaries"] == "tensor" and "cu_num_generated_tokens_tensor" in tensors_class._fields:
            boundaries = {"cu_num_generated_tokens_tensor": torch.tensor(cu, dtype=torch.int32, device=device)}
        else:  # a release before adaptive verification held the boundaries on the host
            boundaries = {"cu_num_generated_tokens": cu}
        held = SamplerOutputs(tensors=tensors_class(**values, **boundaries),
                              explicit=cu if spec["tolists_arg"] else None)
        to_cpu_nonblocking = impl.function

        def call() -> dict[str, Any]:
            host = to_cpu_nonblocking(held.tensors)
            wait_for_copies(device)
            lists = host.tolists() if held.explicit is None else host.tolists(held.explicit)
            return {
                "host": {name: getattr(host, name) for name in TENSOR_FIELDS},
                "where": {name: host_view(getattr(host, name)) for name in TENSOR_FIELDS},
                "lists": dict(lists._asdict()),  # a dict: the two sides' LogprobsLists are different classes
            }

        return call


@st.composite
def _mask_slice_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    device = draw(devices(available))
    spec_decode = draw(st.booleans())
    num_reqs = draw(st.integers(1, 4))
    top = 3 if spec_decode else 1
    positions = draw(st.lists(st.integers(1, top), min_size=num_reqs, max_size=num_reqs))
    return {
        "device": device,
        "spec_decode": spec_decode,
        "positions": positions,
        "request": draw(st.integers(0, num_reqs - 1)),
        "vocab_size": draw(st.integers(1, 60)),
        "min_support": 0 if contract == "wide" else 1,
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def mask_rows_of(spec: dict) -> list[list[list[int]]]:
    """Each request's positions, each position's kept token ids ascending (at least ``min_support``)."""
    rng = np.random.default_rng(spec["seed"])
    vocab, low = spec["vocab_size"], spec["min_support"]
    return [[sorted(rng.choice(vocab, int(rng.integers(low, vocab + 1)), replace=False).tolist())
             for _ in range(n)] for n in spec["positions"]]


class MaskSliceNestedListInputs:
    """One request's slice of the step's sampling masks, as the output processor holds it, for
    ``SamplingMaskLists.to_nested_list`` (vllm/v1/outputs.py).

    Callers: ``SamplingMaskTensors.tolists`` builds the step's CSR (0.34.0: ``offsets`` over every position,
    ``cu_num_generated_tokens`` only with several positions per request, spec decode; 0.28.0 always gave it);
    the scheduler takes ``slice_request(req_index, len(new_token_ids))`` (vllm/v1/core/sched/scheduler.py);
    the output processor reads ``chunk.to_nested_list()`` per chunk (0.34.0 vllm/v1/engine/output_processor.py;
    0.28.0 read it from ``SamplingMaskLists.merge(chunks)``, a CSR of the same form). The slice is made with
    the side's own ``slice_request`` (a one-position slice has ``offsets=None`` from 0.30.0 on), outside the
    call; the thunk makes only the ``to_nested_list`` call. The device plays no part (host numpy arrays): a
    CUDA run runs the same host code.
    """

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _mask_slice_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        lists_class = impl.owner  # the side's SamplingMaskLists
        rows = [ids for request in mask_rows_of(spec) for ids in request]
        token_ids = np.array([i for ids in rows for i in ids], dtype=np.int32)
        offsets = np.concatenate(([0], np.cumsum([len(ids) for ids in rows]))).astype(np.int64)
        cu = np.concatenate(([0], np.cumsum(spec["positions"]))).tolist() if spec["spec_decode"] else None
        step = lists_class(token_ids, offsets, cu)
        chunk = step.slice_request(spec["request"], spec["positions"][spec["request"]])
        to_nested_list = impl.function
        return lambda: to_nested_list(chunk)


@st.composite
def _prompt_logprobs_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    device = draw(devices(available))
    num_prompt_tokens = draw(st.integers(1, 12))
    rows = num_prompt_tokens - 1
    # Chunked prefill: the prompt's rows arrive in consecutive chunks, one per step.
    cuts = sorted(set(draw(st.lists(st.integers(1, max(rows - 1, 1)), max_size=3)))) if rows > 1 else []
    return {
        "device": device,
        "num_prompt_tokens": num_prompt_tokens,
        "num_prompt_logprobs": draw(st.integers(0, 5)),
        "chunks": [b - a for a, b in zip([0, *cuts], [*cuts, rows])] if rows else [],
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def prompt_logprobs_values(spec: dict) -> dict[str, torch.Tensor]:
    """What ``Sampler.gather_logprobs`` gives for the whole prompt (0.28.0 vllm/v1/sample/sampler.py): int32 ids,
    float32 log-probabilities, int64 ranks; deterministic from ``seed``."""
    as_logprobs = {**spec, "positions": [spec["num_prompt_tokens"] - 1], "num_logprobs": spec["num_prompt_logprobs"],
                   "id_dtype": "int32", "rank_dtype": "int64"}
    return logprobs_values(as_logprobs)


class PromptLogprobsInputs:
    """``LogprobsTensors.empty_cpu`` as its caller used it: 0.28.0's v1 runner, ``_get_prompt_logprobs_dict``
    (vllm/v1/worker/gpu_model_runner.py), allocates ``LogprobsTensors.empty_cpu(num_prompt_tokens - 1,
    num_prompt_logprobs + 1)`` once per request, copies each prefill chunk's rows in with
    ``logprobs_tensors.logprob_token_ids[chunk_slice].copy_(token_ids, non_blocking=True)`` (and the same for
    ``logprobs`` and ``selected_token_ranks``), and once a request's prompt is done, "Must synchronize the
    non-blocking GPU->CPU transfers": ``self._sync_device()`` (``torch.cuda.synchronize()``); the scheduler then
    reads ``tolists()``. The thunk makes all of it: the one sync per call is the caller's, by design. 0.34.0
    has no caller left (the v1 runner is gone); the contract is 0.28.0's, under both contracts.
    """

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _prompt_logprobs_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        device = spec["device"]
        computed = {name: t.to(device) for name, t in prompt_logprobs_values(spec).items()}
        empty_cpu = impl.function  # a staticmethod: a plain function of the class
        rows, cols = spec["num_prompt_tokens"] - 1, spec["num_prompt_logprobs"] + 1

        def call() -> dict[str, Any]:
            tensors = empty_cpu(rows, cols)
            start = 0
            for length in spec["chunks"]:
                chunk_slice = slice(start, start + length)
                for name in TENSOR_FIELDS:
                    getattr(tensors, name)[chunk_slice].copy_(computed[name][chunk_slice], non_blocking=True)
                start += length
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize()  # the runner's _sync_device()
            return {"host": {name: getattr(tensors, name) for name in TENSOR_FIELDS},
                    "lists": dict(tensors.tolists()._asdict())}

        return call
