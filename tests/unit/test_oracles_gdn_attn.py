"""Each oracle of the gdn-cudagraph-capture-metadata target, broken by hand (strategies/gdn_attn/oracles.py)."""

from __future__ import annotations

import torch

from fuzz.api import Impl
from strategies.gdn_attn import oracles as oracles
from strategies.gdn_attn.inputs import CaptureInputs

_SPEC = {"device": "cpu", "num_spec": 2, "max_num_seqs": 4, "capture_size": None, "num_tokens": 7, "pad_reqs": 2,
         "cache_mode": "align", "block_size": 4, "blocks": 4, "full": True, "mirror": "same", "seed": 3}
_PLAIN = {**_SPEC, "num_spec": 0, "num_tokens": 3, "pad_reqs": 1, "cache_mode": "none"}


def _run(spec: dict) -> dict:
    import optimized.gdn_attn as module

    owner = module.GDNAttentionMetadataBuilder
    impl = Impl(path="optimized.gdn_attn:GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
                function=owner.build_for_cudagraph_capture, owner=owner, module=module)
    return CaptureInputs().materialize(spec, impl, "optimized")()


_CHECKS = (oracles.capture_is_decode_only, oracles.capture_query_start_loc_is_the_batch,
           oracles.capture_state_indices_are_the_block_rows, oracles.capture_accepted_tokens_are_the_query_lens,
           oracles.capture_leaves_the_batch_alone)


def test_the_real_copy_passes_every_oracle():
    for spec in (_SPEC, _PLAIN):
        output = _run(spec)
        assert [check(spec, output) for check in _CHECKS] == [None] * len(_CHECKS)


def test_decode_only_catches_a_prefill_and_lost_tokens():
    output = _run(_SPEC)
    output["metadata"]["num_prefills"] = 1
    assert "prefills" in oracles.capture_is_decode_only(_SPEC, output)
    output = _run(_SPEC)
    output["metadata"]["num_spec_decode_tokens"] -= 1
    assert "batch has 7" in oracles.capture_is_decode_only(_SPEC, output)


def test_query_start_loc_catches_an_unpadded_tail():
    output = _run(_SPEC)
    output["metadata"]["spec_query_start_loc"] = output["metadata"]["spec_query_start_loc"].clone()
    output["metadata"]["spec_query_start_loc"][-1] = 0
    assert "batch's offsets" in oracles.capture_query_start_loc_is_the_batch(_SPEC, output)


def test_state_indices_catch_padding_not_null_and_wrong_block():
    output = _run(_SPEC)
    output["metadata"]["spec_state_indices_tensor"] = output["metadata"]["spec_state_indices_tensor"].clone()
    output["metadata"]["spec_state_indices_tensor"][-1, 0] = 5
    assert "expected" in oracles.capture_state_indices_are_the_block_rows(_SPEC, output)
    plain = _run(_PLAIN)
    plain["metadata"]["non_spec_state_indices_tensor"] = plain["metadata"]["non_spec_state_indices_tensor"] + 1
    assert "expected" in oracles.capture_state_indices_are_the_block_rows(_PLAIN, plain)


def test_accepted_tokens_catch_padding_zero_and_plain_decode_counts():
    output = _run(_SPEC)
    output["metadata"]["num_accepted_tokens"] = torch.zeros_like(output["metadata"]["num_accepted_tokens"])
    assert "expected" in oracles.capture_accepted_tokens_are_the_query_lens(_SPEC, output)
    plain = _run(_PLAIN)
    plain["metadata"]["num_accepted_tokens"] = torch.ones(4, dtype=torch.int32)
    assert "carries" in oracles.capture_accepted_tokens_are_the_query_lens(_PLAIN, plain)


def test_leaves_the_batch_alone_catches_a_write_and_a_malformed_output():
    output = _run(_SPEC)
    output["batch"]["query_start_loc_cpu"][1] += 1
    assert "changed" in oracles.capture_leaves_the_batch_alone(_SPEC, output)
    for check in _CHECKS:
        assert "without" in check(_SPEC, [])
