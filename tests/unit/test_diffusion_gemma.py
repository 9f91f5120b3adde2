"""diffusion_gemma targets: the input models, and the wide-contract findings as specifications.

Each finding is pinned to a minimal spec (what the fuzzer shrinks to), so a
change in either copy or in the harness shows up here by name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fuzz.engine.execute import run_example
from fuzz.errors import HarnessError
from fuzz.records.verdicts import Verdict
from fuzz.targets import lookup
from strategies.diffusion_gemma.inputs import (
    STATE_TENSORS,
    index_in_form,
    sampler_sync_budget,
    slot_in_form,
    state_dims,
)

STATES, SAMPLER = lookup(["diffusion-gemma-states", "diffusion-gemma-sampler"])
DIMS = {"device": "cpu", "max_num_reqs": 3, "canvas_length": 2, "vocab_size": 5, "hidden_size": 2,
        "stability_threshold": 2, "max_denoising_steps": 4, "seed": 11}


def states_spec(*ops: dict) -> dict:
    return {**DIMS, "ops": list(ops)}


def sampler_spec(counts: list[float], cu_dtype: str = "int32", **overrides) -> dict:
    requests = [{"logits": c, "prompt_len": 4, "computed": 4, "chunk": DIMS["canvas_length"], "slot": i}
                for i, c in enumerate(counts)]
    spec = {**DIMS, "requests": requests, "num_draft_tokens": int(sum(counts)), "tile": 1,
            "top_k": [DIMS["vocab_size"]] * 3, "top_p": [1.0] * 3, "num_logprobs": [-1] * 3,
            "logits_dtype": "float32", "cu_dtype": cu_dtype, "idx_dtype": "int64", "t_min": 0.5, "t_max": 1.0,
            "confidence_threshold": 0.5, "entropy_bound": 1.0}
    spec.update(overrides)
    return spec


# -- the input models --------------------------------------------------------


@pytest.mark.parametrize("target", [STATES, SAMPLER], ids=lambda t: t.name)
@pytest.mark.parametrize("contract", ["caller", "wide"])
def test_specs_are_plain_json(target, contract):
    @settings(max_examples=30, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(target.input_model().specs(["cpu"], contract))
    def check(spec):
        assert json.loads(json.dumps(spec)) == spec

    check()


def test_state_dims_rejects_empty_sizes():
    with pytest.raises(HarnessError, match="max_reqs"):
        state_dims(max_reqs=0)


@pytest.mark.parametrize("form", ["bogus"])
def test_unknown_forms_name_the_choices(form):
    with pytest.raises(HarnessError, match="expected one of"):
        slot_in_form(0, form, "cpu")
    with pytest.raises(HarnessError, match="expected one of"):
        index_in_form([0], form, "int64", "cpu")


def test_replay_returns_every_state_tensor_and_the_op_log():
    result = run_example(STATES, states_spec({"op": "states_add", "slot": 1, "slot_form": "int"}))
    value = result.legacy.value
    assert set(value["state"]) == set(STATE_TENSORS)
    assert value["errors"] == [None]


def test_init_canvas_draws_the_same_tokens_on_both_sides():
    spec = states_spec({"op": "init_canvas", "slots": [0, 2], "form": "device_tensor", "dtype": "int64"})
    result = run_example(STATES, spec)
    assert result.verdict is Verdict.AGREE
    untouched = run_example(STATES, states_spec({"op": "model_remove", "req_id": "req-0"}))
    # The seeded draw really replaced the pre-populated canvas rows.
    before = untouched.legacy.value["state"]["canvas"]
    after = result.legacy.value["state"]["canvas"]
    assert not after[[0, 2]].equal(before[[0, 2]]) and after[1].equal(before[1])


def test_sampler_records_the_expansion_it_built():
    spec = sampler_spec([2, 1, 2], top_k=[1, 5, 5])
    result = run_example(SAMPLER, spec)
    assert result.verdict is Verdict.AGREE
    (call,) = result.optimized.value["top_k_top_p_calls"]
    assert call["expanded_idx_mapping"].tolist() == np.repeat([0, 1, 2], [2, 1, 2]).tolist()


def test_caller_draws_requests_asking_for_logprobs():
    # SamplingStates.add_request stores a request's logprobs per slot (-1 for
    # none, the vocabulary for logprobs=-1); the sampler keeps stashes across calls.
    seen: dict[str, set] = {"k": set(), "mode": set(), "stash": set()}

    @settings(max_examples=120, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(SAMPLER.input_model().specs(["cpu"], "caller"))
    def check(spec):
        vocab = spec["vocab_size"]
        assert set(spec["num_logprobs"]) <= {-1, 0, 1, 3, vocab}
        seen["k"].update("vocab" if k == vocab else k for k in spec["num_logprobs"])
        seen["mode"].add(spec["logprobs_mode"])
        prefilling = {r["slot"] for r in spec["requests"] if r["logits"] == 0}
        assert not prefilling & set(spec["stashed_logprobs"])  # add_request purged those
        if max(spec["num_logprobs"]) < 0:
            assert spec["stashed_logprobs"] == []
        seen["stash"].add(bool(spec["stashed_logprobs"]))

    check()
    assert {-1, 0, 1, 3, "vocab"} <= seen["k"]
    assert seen["mode"] == {"raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"}
    assert seen["stash"] == {True, False}


@pytest.mark.parametrize("mode", ["raw_logprobs", "raw_logits"])
def test_caller_logprobs_commit_the_stash_and_agree(mode):
    # Slot 1 asks for 2 logprobs; stashes from the converging step are emitted at commit.
    spec = sampler_spec([2, 2, 2], num_logprobs=[-1, 2, -1], logprobs_mode=mode, stashed_logprobs=[0, 1, 2])
    result = run_example(SAMPLER, spec)
    assert result.verdict is Verdict.AGREE
    logprobs = result.optimized.value["logprobs"]
    assert logprobs is not None and logprobs["logprobs"].shape[1] == 3  # the sampled token and the top 2
    assert sampler_sync_budget(spec) > 0 and sampler_sync_budget(sampler_spec([2, 2, 2])) == 0


# -- wide-contract findings ---------------------------------------------------


@pytest.mark.parametrize("form", ["list", "cpu_tensor1"])
def test_one_element_slot_sequence_loses_the_optimized_store(form):
    # 0.27.1: `t[[s]] = v` writes through advanced indexing. 0.28.0:
    # `t[[s]].fill_(v)` fills a copy, so the reset never lands. Callers pass ints.
    result = run_example(STATES, states_spec({"op": "states_remove", "slot": 0, "slot_form": form}))
    assert result.verdict is Verdict.DIVERGENCE
    assert ("['state']['accepted_canvas_history_len']", "values") in [(m.path, m.what) for m in result.mismatches]


INT_SLOTS = [(form, slot, error) for form in ("int", "numpy_int32")
             for slot, error in ((-1, None), (-3, None), (3, "IndexError"), (-4, "IndexError"))]


@pytest.mark.parametrize("form,slot,error", INT_SLOTS + [("cpu_scalar", -2, None), ("device_scalar", -1, None)])
def test_negative_and_out_of_range_int_slots_agree(form, slot, error):
    ops = [{"op": "model_add", "slot": slot, "slot_form": form, "req_id": "req-1", "prompt_len": 7},
           {"op": "states_add", "slot": slot, "slot_form": form},
           {"op": "model_remove", "req_id": "req-1"}]
    result = run_example(STATES, states_spec(*ops))
    assert result.verdict is Verdict.AGREE
    assert result.legacy.value["errors"] == [error, error, error]


@pytest.mark.parametrize("prompt_len", [2**31, 2**32])
def test_prompt_len_past_int32_fails_the_same_way(prompt_len):
    op = {"op": "model_add", "slot": 1, "slot_form": "int", "req_id": "req-2", "prompt_len": prompt_len}
    result = run_example(STATES, states_spec(op))
    assert result.verdict is Verdict.AGREE
    assert result.legacy.value["errors"] == ["RuntimeError"]


def test_repeated_adds_of_one_request_agree():
    add = {"op": "model_add", "slot": 2, "slot_form": "int", "req_id": "req-0", "prompt_len": 3}
    again = {**add, "slot": 0, "prompt_len": 9}
    result = run_example(STATES, states_spec(add, again, add, {"op": "model_remove", "req_id": "req-0"}))
    assert result.verdict is Verdict.AGREE


def test_half_token_counts_break_output_size():
    # float64 cu_num_logits_np: the device copy truncates 1.5 -> 1, the host
    # sum does not, so 0.28.0's output_size is wrong (legacy never reads it).
    result = run_example(SAMPLER, sampler_spec([1.5, 1.5], cu_dtype="float64"))
    assert result.verdict is Verdict.DIVERGENCE
    assert result.legacy.raised is None
    assert result.optimized.raised.type_name == "RuntimeError"


def test_half_token_count_hidden_by_int_truncation():
    # int(1.5) == 1 == the device sum: the host/device disagreement is invisible here.
    assert run_example(SAMPLER, sampler_spec([1.5], cu_dtype="float64")).verdict is Verdict.AGREE


def test_zero_count_on_device_only():
    # 0.5 logits: the host calls it a decode request, the device repeats it 0
    # times; host sum 2.0, device sum 0 + 1.
    result = run_example(SAMPLER, sampler_spec([0.5, 1.5], cu_dtype="float64"))
    assert result.verdict is Verdict.DIVERGENCE
    assert result.optimized.raised.type_name == "RuntimeError"
