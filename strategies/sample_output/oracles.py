"""Oracles of sampling-mask-tensors-to-cpu: ``SamplingMaskTensors.to_cpu_nonblocking()``, then after the copy's
event ``.tolists(num_sampled)``, then each sampled request's ``slice_request(...).to_nested_list()``
(vllm/v1/worker/gpu/sample/output.py and vllm/v1/outputs.py, 0.28.0 / 0.34.0).

Meaning (upstream): the sampling mask of a position is the set of token ids whose processed logit is finite
("Capture the finite-logit support"), which the engine returns to the user as ``SamplingMask`` (a list of
positions, each a list of ids); ``tolists`` converts the masks "to the scheduler's CSR representation", and
the scheduler slices each request's own positions out of it. The thunk (strategies/sample_output/inputs.py)
returns ``{"counts", "packed_mask_of_sampled", "where", "token_ids", "requests"}``; the supports were drawn
from ``seed`` (``supports_of``), so every invariant compares with the drawn truth (no separate
``Reference``). No consumer: the output processor's ``to_nested_list`` is in the thunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from strategies.sample_output.inputs import supports_of

_KEYS = {"counts", "packed_mask_of_sampled", "where", "token_ids", "requests"}


def _parts(output: Any) -> tuple[dict, str | None]:
    if not isinstance(output, dict) or not _KEYS <= set(output):
        return {}, f"output is {type(output).__name__} without {sorted(_KEYS)}"
    return output, None


def each_sampled_request_gets_its_support(spec: dict, output: Any) -> str | None:
    """Every request that sampled a token gets, in request order, one position whose ids are its finite-logit
    support, ascending: as ``to_nested_list`` a list of Python ints, as the slice's ``token_ids`` an int32 array."""
    parts, problem = _parts(output)
    if problem:
        return problem
    want = [ids for ids, n in zip(supports_of(spec), spec["num_sampled"]) if n]
    got = parts["requests"]
    if not isinstance(got, list) or len(got) != len(want):
        return f"{len(got) if isinstance(got, list) else got!r} request masks for {len(want)} sampled requests"
    for i, (request, ids) in enumerate(zip(got, want)):
        positions = request.get("positions")
        if positions != [ids] or not all(type(v) is int for v in (positions[0] if positions else [])):
            return f"sampled request {i}: mask {positions!r}, its support [{ids!r}]"
        token_ids = request.get("token_ids")
        if not isinstance(token_ids, np.ndarray) or token_ids.dtype != np.int32 or token_ids.tolist() != ids:
            return f"sampled request {i}: token_ids {token_ids!r}, its support {ids} as int32"
    return None


def flat_ids_are_the_sampled_supports_in_order(spec: dict, output: Any) -> str | None:
    """The CSR's flat ``token_ids`` are the sampled requests' supports one after the other (a request that
    sampled nothing contributes none), int32."""
    parts, problem = _parts(output)
    if problem:
        return problem
    want = [i for ids, n in zip(supports_of(spec), spec["num_sampled"]) if n for i in ids]
    got = parts["token_ids"]
    if not isinstance(got, np.ndarray) or got.dtype != np.int32 or got.tolist() != want:
        return f"flat token_ids {got!r}, the sampled supports {want} as int32"
    return None


def host_copy_keeps_counts_and_bitmask(spec: dict, output: Any) -> str | None:
    """The host copy holds each row's support size (0 for a request that sampled nothing) as int32 and each
    sampled row's bitmask (bit ``t % 8`` of byte ``t // 8`` set for each kept id ``t``), on the CPU; copied
    from CUDA, pinned (a ``non_blocking`` D2H ``.to("cpu")`` allocates pinned memory)."""
    parts, problem = _parts(output)
    if problem:
        return problem
    supports = supports_of(spec)
    counts = parts["counts"]
    if not isinstance(counts, torch.Tensor) or counts.device.type != "cpu" or counts.dtype != torch.int32:
        return f"host counts are {getattr(counts, 'device', None)} {getattr(counts, 'dtype', type(counts))}"
    if counts.tolist() != [len(ids) for ids in supports]:
        return f"host counts {counts.tolist()}, the support sizes {[len(ids) for ids in supports]}"
    bits = np.zeros((len(supports), spec["vocab_size"]), dtype=np.uint8)
    for row, ids in enumerate(supports):
        bits[row, ids] = 1
    sampled = np.flatnonzero(spec["num_sampled"])
    want = torch.from_numpy(np.packbits(bits, axis=1, bitorder="little")[sampled])
    got = parts["packed_mask_of_sampled"]
    if not isinstance(got, torch.Tensor) or got.dtype != torch.uint8 or not torch.equal(got.cpu(), want):
        return "the host bitmask of the sampled rows is not their supports' bits"
    if torch.device(spec["device"]).type == "cuda":
        for name, where in parts["where"].items():
            if where.get("device") != "cpu" or not where.get("pinned"):
                return f"host {name} copied from CUDA is {where}: not pinned host memory"
    return None
