"""The sampling-mask-tensors-to-cpu invariants, each broken by a hand-made output
(strategies/sample_output/oracles.py), and kept by the copies' own output."""

from __future__ import annotations

import numpy as np
import torch

from fuzz.api import Impl
from legacy import sample_output as legacy_sample_output
from optimized import sample_output as optimized_sample_output
from strategies.sample_output.inputs import SamplingMaskToHostInputs, supports_of
from strategies.sample_output.oracles import (
    each_sampled_request_gets_its_support,
    flat_ids_are_the_sampled_supports_in_order,
    host_copy_keeps_counts_and_bitmask,
)

# Request 0 wider than the compact buffer (bitmask fallback), 1 sampled nothing, 2 within it.
SPEC = {"device": "cpu", "vocab_size": 21, "num_sampled": [1, 0, 1], "support_sizes": [9, 0, 2],
        "max_num_kept": 4, "seed": 11}
INVARIANTS = (each_sampled_request_gets_its_support, flat_ids_are_the_sampled_supports_in_order,
              host_copy_keeps_counts_and_bitmask)


def _output(module) -> dict:  # noqa: ANN001
    owner = module.SamplingMaskTensors
    impl = Impl(path=f"{module.__name__}:SamplingMaskTensors.to_cpu_nonblocking",
                function=owner.to_cpu_nonblocking, owner=owner, module=module)
    return SamplingMaskToHostInputs().materialize(dict(SPEC), impl, "optimized")()


def test_the_copies_keep_every_invariant():
    for module in (legacy_sample_output, optimized_sample_output):
        output = _output(module)
        assert [inv(SPEC, output) for inv in INVARIANTS] == [None] * 3, module.__name__


def test_a_request_mask_broken():
    output = _output(optimized_sample_output)
    output["requests"][0]["positions"] = [supports_of(SPEC)[0][:-1]]
    assert "sampled request 0" in each_sampled_request_gets_its_support(SPEC, output)
    output = _output(optimized_sample_output)
    output["requests"][1]["token_ids"] = output["requests"][1]["token_ids"].astype(np.int64)
    assert "as int32" in each_sampled_request_gets_its_support(SPEC, output)
    output["requests"].append(output["requests"][0])
    assert "3 request masks for 2" in each_sampled_request_gets_its_support(SPEC, output)


def test_flat_ids_broken():
    output = _output(optimized_sample_output)
    output["token_ids"] = output["token_ids"][::-1].copy()
    assert "flat token_ids" in flat_ids_are_the_sampled_supports_in_order(SPEC, output)
    output = _output(optimized_sample_output)
    output["token_ids"] = output["token_ids"].astype(np.float64)
    assert flat_ids_are_the_sampled_supports_in_order(SPEC, output) is not None


def test_host_copy_broken():
    output = _output(optimized_sample_output)
    output["counts"] = torch.tensor([9, 1, 2], dtype=torch.int32)
    assert "support sizes" in host_copy_keeps_counts_and_bitmask(SPEC, output)
    output = _output(optimized_sample_output)
    output["packed_mask_of_sampled"] = output["packed_mask_of_sampled"].flip(1)
    assert "bitmask" in host_copy_keeps_counts_and_bitmask(SPEC, output)
    output = _output(optimized_sample_output)
    assert "not pinned" in host_copy_keeps_counts_and_bitmask({**SPEC, "device": "cuda"}, output)
