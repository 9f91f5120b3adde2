"""The logprobs-tensors-to-cpu invariants, each broken by a hand-made output (strategies/outputs/oracles.py),
and kept by the copies' own output."""

from __future__ import annotations

import numpy as np
import torch

from fuzz.api import Impl
from legacy import outputs as legacy_outputs
from optimized import outputs as optimized_outputs
from strategies.outputs.inputs import LogprobsToHostInputs
from strategies.outputs.oracles import (
    host_copy_is_on_the_host,
    lists_carry_the_request_boundaries,
    lists_hold_the_sampled_values,
)

SPEC = {"device": "cpu", "boundaries": "tensor", "positions": [2, 0, 3], "num_logprobs": 2,
        "id_dtype": "int64", "rank_dtype": "int64", "tolists_arg": False, "seed": 7}
INVARIANTS = (lists_hold_the_sampled_values, lists_carry_the_request_boundaries, host_copy_is_on_the_host)


def _output(module, spec=SPEC) -> dict:  # noqa: ANN001
    owner = module.LogprobsTensors
    impl = Impl(path=f"{module.__name__}:LogprobsTensors.to_cpu_nonblocking", function=owner.to_cpu_nonblocking,
                owner=owner, module=module)
    return LogprobsToHostInputs().materialize(dict(spec), impl, "optimized")()


def test_the_copies_keep_every_invariant():
    for module in (legacy_outputs, optimized_outputs):
        for boundaries in ("none", "list", "tensor"):
            spec = {**SPEC, "boundaries": boundaries, "positions": [1, 1, 1] if boundaries == "none" else [2, 0, 3]}
            output = _output(module, spec)
            assert [inv(spec, output) for inv in INVARIANTS] == [None] * 3, (module.__name__, boundaries)


def test_values_broken():
    output = _output(optimized_outputs)
    output["lists"]["logprobs"] = output["lists"]["logprobs"].copy()
    output["lists"]["logprobs"][0, 0] = 1.0
    assert "differs" in lists_hold_the_sampled_values(SPEC, output)
    output = _output(optimized_outputs)
    output["lists"]["sampled_token_ranks"] = output["lists"]["sampled_token_ranks"].astype("int32")
    assert "int32" in lists_hold_the_sampled_values(SPEC, output)


def test_boundaries_broken():
    output = _output(optimized_outputs)
    output["lists"]["cu_num_generated_tokens"] = None
    assert lists_carry_the_request_boundaries(SPEC, output) is not None
    output["lists"]["cu_num_generated_tokens"] = [0, 2, 2, 4]
    assert "the sampler's [0, 2, 2, 5]" in lists_carry_the_request_boundaries(SPEC, output)
    output["lists"]["cu_num_generated_tokens"] = [0.0, 2.0, 2.0, 5.0]
    assert "not a list of ints" in lists_carry_the_request_boundaries(SPEC, output)


def test_host_copy_broken():
    output = _output(optimized_outputs)
    output["host"]["logprobs"] = output["host"]["logprobs"].double()
    assert "float64" in host_copy_is_on_the_host(SPEC, output)
    output = _output(optimized_outputs)
    output["where"]["logprobs"] = {"device": "cpu", "pinned": False}
    cuda_spec = {**SPEC, "device": "cuda"}  # copied from CUDA: pinned is required
    assert "pageable" in host_copy_is_on_the_host(cuda_spec, output)
    output["host"]["logprobs"] = torch.empty(0)
    assert host_copy_is_on_the_host(SPEC, output) is not None


# ---- sampling-mask-lists-to-nested-list

from strategies.outputs.inputs import MaskSliceNestedListInputs, mask_rows_of  # noqa: E402
from strategies.outputs.oracles import nested_list_holds_python_ints, nested_list_is_the_requests_masks  # noqa: E402

SLICE_SPEC = {"device": "cpu", "spec_decode": True, "positions": [2, 3, 1], "request": 1, "vocab_size": 30,
              "min_support": 1, "seed": 5}


def _nested(module, spec=SLICE_SPEC):  # noqa: ANN001, ANN202
    owner = module.SamplingMaskLists
    impl = Impl(path=f"{module.__name__}:SamplingMaskLists.to_nested_list", function=owner.to_nested_list,
                owner=owner, module=module)
    return MaskSliceNestedListInputs().materialize(dict(spec), impl, "optimized")()


def test_the_copies_keep_the_nested_list_invariants():
    for module in (legacy_outputs, optimized_outputs):
        for spec in (SLICE_SPEC, {**SLICE_SPEC, "spec_decode": False, "positions": [1, 1, 1]}):
            output = _nested(module, spec)
            assert output == mask_rows_of(spec)[1]
            assert nested_list_is_the_requests_masks(spec, output) is None
            assert nested_list_holds_python_ints(spec, output) is None


def test_the_nested_list_invariants_broken():
    output = _nested(optimized_outputs)
    assert nested_list_is_the_requests_masks(SLICE_SPEC, output[:-1]) is not None
    assert nested_list_holds_python_ints(SLICE_SPEC, output[0]) is not None  # flat: ids, not positions
    as_numpy = [[np.int32(v) for v in position] for position in output]
    assert "int32" in nested_list_holds_python_ints(SLICE_SPEC, as_numpy)


# ---- logprobs-tensors-empty-cpu

from strategies.outputs.inputs import PromptLogprobsInputs  # noqa: E402
from strategies.outputs.oracles import (  # noqa: E402
    prompt_logprobs_have_the_promised_layout,
    prompt_logprobs_hold_every_chunk,
)

PROMPT_SPEC = {"device": "cpu", "num_prompt_tokens": 8, "num_prompt_logprobs": 3, "chunks": [2, 4, 1], "seed": 3}


def _prompt(module):  # noqa: ANN001, ANN202
    owner = module.LogprobsTensors
    impl = Impl(path=f"{module.__name__}:LogprobsTensors.empty_cpu", function=owner.empty_cpu, owner=owner,
                module=module)
    return PromptLogprobsInputs().materialize(dict(PROMPT_SPEC), impl, "optimized")()


def test_the_copies_keep_the_prompt_logprobs_invariants():
    for module in (legacy_outputs, optimized_outputs):
        output = _prompt(module)
        assert prompt_logprobs_have_the_promised_layout(PROMPT_SPEC, output) is None
        assert prompt_logprobs_hold_every_chunk(PROMPT_SPEC, output) is None


def test_the_prompt_logprobs_invariants_broken():
    output = _prompt(optimized_outputs)
    output["host"]["selected_token_ranks"] = output["host"]["selected_token_ranks"].long()
    assert "int64" in prompt_logprobs_have_the_promised_layout(PROMPT_SPEC, output)
    output = _prompt(optimized_outputs)
    output["host"]["logprobs"] = output["host"]["logprobs"].t()
    assert prompt_logprobs_have_the_promised_layout(PROMPT_SPEC, output) is not None
    output = _prompt(optimized_outputs)
    output["lists"]["logprobs"] = output["lists"]["logprobs"].copy()
    output["lists"]["logprobs"][-1] = 0.5  # the last chunk never copied in
    assert "logprobs" in prompt_logprobs_hold_every_chunk(PROMPT_SPEC, output)
