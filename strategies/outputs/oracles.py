"""Oracles of logprobs-tensors-to-cpu: ``LogprobsTensors.to_cpu_nonblocking()`` then, after the copy's event,
``.tolists()`` (vllm/v1/outputs.py, 0.28.0 / 0.34.0).

Meaning (upstream): ``to_cpu_nonblocking`` starts the copy of the sampler's device tensors to the host;
``tolists`` hands the scheduler a ``LogprobsLists`` of numpy arrays, the same values, and the request
boundaries ``cu_num_generated_tokens`` as a host list, wherever the sampler kept them (vLLM PR #52242: "The
tensor rides along on the existing async D2H copy in AsyncOutput and is materialized as a list in tolists()
after the copy event"). The scheduler then slices each request's rows by those boundaries
(``LogprobsLists.slice_request``, vllm/v1/core/sched/scheduler.py). The thunk (strategies/outputs/inputs.py)
returns ``{"host", "where", "lists"}``; the values were drawn from ``seed`` (``logprobs_values``).

No ``Reference``: the invariants compare every value with the drawn data, which is what a reference would
compute. No consumer: ``tolists`` *is* the host read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from strategies.outputs.inputs import (
    TENSOR_FIELDS,
    boundaries_of,
    logprobs_values,
    mask_rows_of,
    prompt_logprobs_values,
)

_LIST_FIELDS = {"logprob_token_ids": "logprob_token_ids", "logprobs": "logprobs",
                "selected_token_ranks": "sampled_token_ranks"}


def _parts(output: Any) -> tuple[dict, str | None]:
    if not isinstance(output, dict) or not {"host", "where", "lists"} <= set(output):
        return {}, f"output is {type(output).__name__} without host/where/lists"
    return output, None


def lists_hold_the_sampled_values(spec: dict, output: Any) -> str | None:
    """``tolists()`` gives the sampler's ids, scores and ranks, every value, as numpy arrays of the tensors'
    dtypes (the scheduler slices and serializes them as they are)."""
    parts, problem = _parts(output)
    if problem:
        return problem
    for name, want in logprobs_values(spec).items():
        got = parts["lists"].get(_LIST_FIELDS[name])
        if not isinstance(got, np.ndarray):
            return f"lists.{_LIST_FIELDS[name]} is a {type(got).__name__}, not a numpy array"
        got_tensor = torch.from_numpy(got)
        if got_tensor.dtype != want.dtype or got_tensor.shape != want.shape:
            return (f"lists.{_LIST_FIELDS[name]} is {tuple(got.shape)} {got.dtype}, "
                    f"the sampler's {tuple(want.shape)} {want.dtype}")
        if not torch.equal(got_tensor, want):
            return f"lists.{_LIST_FIELDS[name]} differs from the sampler's {name}"
    return None


def lists_carry_the_request_boundaries(spec: dict, output: Any) -> str | None:
    """``cu_num_generated_tokens`` of the lists is the request boundaries as a host list of Python ints, whether
    the sampler kept them on the host or on the device (None where it kept none), so each request's slice
    ``[cu[i], cu[i + 1])`` holds its own rows."""
    parts, problem = _parts(output)
    if problem:
        return problem
    got, want = parts["lists"].get("cu_num_generated_tokens"), boundaries_of(spec)
    if want is None:
        return None if got is None else f"boundaries {got!r} where the sampler gave none"
    if not isinstance(got, list) or not all(type(v) is int for v in got):
        return f"boundaries are {type(got).__name__} {got!r}, not a list of ints"
    if got != want:
        return f"boundaries {got}, the sampler's {want}"
    return None


def host_copy_is_on_the_host(spec: dict, output: Any) -> str | None:
    """``to_cpu_nonblocking`` returns tensors on the CPU with the device tensors' shapes and dtypes; copied from
    CUDA they are pinned (a ``non_blocking`` D2H ``.to("cpu")`` allocates pinned memory, what lets the copy run
    behind the next step); on the CPU they are the sampler's own tensors."""
    parts, problem = _parts(output)
    if problem:
        return problem
    want = logprobs_values(spec)
    for name in TENSOR_FIELDS:
        host, where = parts["host"].get(name), parts["where"].get(name, {})
        if not isinstance(host, torch.Tensor):
            return f"host.{name} is a {type(host).__name__}"
        if host.device.type != "cpu" or where.get("device") != "cpu":
            return f"host.{name} is on {host.device}, not the CPU"
        if host.dtype != want[name].dtype or host.shape != want[name].shape:
            return f"host.{name} is {tuple(host.shape)} {host.dtype}, the sampler's {tuple(want[name].shape)}"
        copied = torch.device(spec["device"]).type == "cuda"
        if copied and host.numel() and not where.get("pinned"):
            return f"host.{name} copied from CUDA into pageable memory: the non_blocking copy would not overlap"
    return None


# ---- sampling-mask-lists-to-nested-list: SamplingMaskLists.to_nested_list of one request's slice

def nested_list_is_the_requests_masks(spec: dict, output: Any) -> str | None:
    """``to_nested_list`` of a request's slice is that request's positions in order, each the list of its kept
    token ids (the ``SamplingMask`` the engine returns to the user)."""
    want = mask_rows_of(spec)[spec["request"]]
    if output != want:
        return f"nested list {output!r}, the request's masks {want!r}"
    return None


def nested_list_holds_python_ints(spec: dict, output: Any) -> str | None:
    """The result is a ``list[list[int]]`` of Python ints (``-> list[list[int]]``; the output processor hands it
    to the user and serializes it): no numpy scalars, no arrays."""
    if not isinstance(output, list) or not all(isinstance(p, list) for p in output):
        kinds = sorted({type(p).__name__ for p in output}) if isinstance(output, list) else []
        return f"result is a {type(output).__name__} of {kinds}, not a list of lists"
    odd = {type(v).__name__ for p in output for v in p if type(v) is not int}
    return f"ids of type {sorted(odd)}, not Python int" if odd else None


# ---- logprobs-tensors-empty-cpu: LogprobsTensors.empty_cpu filled chunk by chunk, as 0.28.0's runner did

def prompt_logprobs_have_the_promised_layout(spec: dict, output: Any) -> str | None:
    """``empty_cpu(num_positions, num_tokens_per_position)`` ("Create empty LogprobsTensors on CPU") gives int32
    ids and float32 logprobs of ``[num_positions, num_tokens_per_position]`` and int32 ranks of
    ``[num_positions]``, on the CPU, contiguous (the runner copies row slices into them)."""
    rows, cols = spec["num_prompt_tokens"] - 1, spec["num_prompt_logprobs"] + 1
    want = {"logprob_token_ids": ((rows, cols), torch.int32), "logprobs": ((rows, cols), torch.float32),
            "selected_token_ranks": ((rows,), torch.int32)}
    host = output.get("host", {}) if isinstance(output, dict) else {}
    for name, (shape, dtype) in want.items():
        tensor = host.get(name)
        if not isinstance(tensor, torch.Tensor):
            return f"host.{name} is a {type(tensor).__name__}"
        if tuple(tensor.shape) != shape or tensor.dtype != dtype or tensor.device.type != "cpu":
            return f"host.{name} is {tuple(tensor.shape)} {tensor.dtype} on {tensor.device}, promised {shape} {dtype}"
        if not tensor.is_contiguous():
            return f"host.{name} is not contiguous"
    return None


def prompt_logprobs_hold_every_chunk(spec: dict, output: Any) -> str | None:
    """Once the runner's chunks are copied in and it synchronized, ``tolists()`` holds the whole prompt's ids,
    log-probabilities and ranks (ranks cast to int32 by the copy), row for row."""
    lists = output.get("lists", {}) if isinstance(output, dict) else {}
    for name, want in prompt_logprobs_values(spec).items():
        got = lists.get(_LIST_FIELDS[name])
        if not isinstance(got, np.ndarray):
            return f"lists.{_LIST_FIELDS[name]} is a {type(got).__name__}"
        expected = want.to(torch.int32) if name == "selected_token_ranks" else want
        if not torch.equal(torch.from_numpy(got), expected):
            return f"lists.{_LIST_FIELDS[name]} is not the prompt's {name}"
    return None
