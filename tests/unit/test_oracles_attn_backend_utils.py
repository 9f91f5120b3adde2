"""Each oracle of make-local-attention-virtual-batches and make-kv-sharing-fast-prefill-metadata, broken by
hand (strategies/attn_backend_utils/oracles.py)."""

from __future__ import annotations

import torch

from fuzz.api import Impl
from strategies.attn_backend_utils import oracles
from strategies.attn_backend_utils.inputs import FastPrefillInputs, LocalAttentionInputs

# The docstring example of make_local_attention_virtual_batches: chunk 4, q_seqlens [4, 10, 5], k_seqlens
# [6, 17, 9] (contexts 2, 7, 4), block size 2.
_LOCAL = {"kind": "local", "device": "cpu", "block_size": 2, "chunk": 4, "query_lens": [4, 10, 5],
          "context_lens": [2, 7, 4], "cols": 10, "pad": 2, "mirror": "set", "upper_bound": True, "seed": 5}
# Its fast-prefill example: query_start_loc [0, 15, 20, 28], logits indices [14, 18, 19, 27].
_KV = {"kind": "kv", "device": "cpu", "query_lens": [15, 5, 8], "context_lens": [26, 26, 32], "cols": 3, "pad": 1,
       "logits": [[14], [3, 4], [7]], "logits_pad": 2, "logits_dtype": "int32", "shuffle": None, "mirror": "set",
       "upper_bound": True, "seed": 9}
_DECODE = {**_KV, "query_lens": [1, 1], "context_lens": [3, 4], "logits": None, "logits_pad": 0}


def _impl(name: str, side: str = "optimized") -> Impl:
    import legacy.attn_backend_utils as legacy_module
    import optimized.attn_backend_utils as optimized_module

    module = {"legacy": legacy_module, "optimized": optimized_module}[side]
    return Impl(path=f"{side}.attn_backend_utils:{name}", function=getattr(module, name), owner=None, module=module)


def _local(spec: dict = _LOCAL, side: str = "optimized") -> dict:
    return LocalAttentionInputs().materialize(spec, _impl("make_local_attention_virtual_batches", side), side)()


def _kv(spec: dict = _KV, side: str = "optimized") -> dict:
    impl = _impl("make_kv_sharing_fast_prefill_common_attn_metadata", side)
    return FastPrefillInputs().materialize(spec, impl, side)()


_LOCAL_CHECKS = (oracles.local_virtual_batches_partition_each_request, oracles.local_seq_lens_are_the_chunk_windows,
                 oracles.local_block_table_rows_point_into_the_original_rows,
                 oracles.local_device_tensors_mirror_the_host, oracles.local_leaves_the_batch_alone)
_KV_CHECKS = (oracles.kv_offsets_count_the_logits, oracles.kv_host_offsets_mirror_the_device,
              oracles.kv_keeps_the_batch)


def test_the_docstring_example():
    assert oracles.local_windows(_LOCAL) == [(0, 2, 4, 0), (0, 2, 2, 4), (1, 1, 4, 4), (1, 4, 4, 8), (1, 4, 4, 12),
                                              (1, 1, 1, 16), (2, 4, 4, 4), (2, 1, 1, 8)]
    output = _local()
    assert output["metadata"]["query_start_loc_cpu"].tolist() == [0, 2, 4, 5, 9, 13, 14, 18, 19]
    assert oracles.kv_expected_offsets(_KV) == [0, 1, 3, 4]


def test_the_real_copies_pass_every_oracle():
    for side in ("legacy", "optimized"):
        for spec in (_LOCAL, {**_LOCAL, "cols": 3, "mirror": "unset"}):
            output = _local(spec, side)
            assert [check(spec, output) for check in _LOCAL_CHECKS] == [None] * len(_LOCAL_CHECKS)
        for spec in (_KV, _DECODE):
            output = _kv(spec, side)
            assert [check(spec, output) for check in _KV_CHECKS] == [None] * len(_KV_CHECKS)


def _bump(tensor: torch.Tensor, index: int, by: int = 1) -> torch.Tensor:
    out = tensor.clone()
    out[index] += by
    return out


def test_partition_catches_a_moved_boundary_and_a_wrong_count():
    output = _local()
    output["metadata"]["query_start_loc_cpu"] = _bump(output["metadata"]["query_start_loc_cpu"], 3)
    assert "chunk split" in oracles.local_virtual_batches_partition_each_request(_LOCAL, output)
    output = _local()
    output["metadata"]["num_reqs"] = 3
    assert "virtual requests" in oracles.local_virtual_batches_partition_each_request(_LOCAL, output)
    output = _local()
    output["metadata"]["num_actual_tokens"] = 19
    assert "num_actual_tokens" in oracles.local_virtual_batches_partition_each_request(_LOCAL, output)


def test_seq_lens_catch_a_short_window_and_a_wrong_max():
    output = _local()
    output["metadata"]["seq_lens_host"] = _bump(output["metadata"]["seq_lens_host"], -1, -1)
    assert "chunk windows" in oracles.local_seq_lens_are_the_chunk_windows(_LOCAL, output)
    output = _local()
    output["metadata"]["max_seq_len"] = 5
    assert "max_seq_len" in oracles.local_seq_lens_are_the_chunk_windows(_LOCAL, output)


def test_block_table_catches_a_wrong_page_and_a_wrong_update():
    output = _local()
    output["metadata"]["block_table_tensor"] = output["metadata"]["block_table_tensor"].flip(0)
    assert "pages" in oracles.local_block_table_rows_point_into_the_original_rows(_LOCAL, output)
    output = _local()
    output["update_block_table"] = output["metadata"]["block_table_tensor"]  # the old table, not the new one
    assert "update_block_table" in oracles.local_block_table_rows_point_into_the_original_rows(_LOCAL, output)


def test_mirrors_catch_disagreement_dtype_and_device():
    output = _local()
    output["metadata"]["seq_lens"] = _bump(output["metadata"]["seq_lens"], 0)
    assert "disagrees" in oracles.local_device_tensors_mirror_the_host(_LOCAL, output)
    output = _local()
    output["metadata"]["query_start_loc"] = output["metadata"]["query_start_loc"].long()
    assert "int32" in oracles.local_device_tensors_mirror_the_host(_LOCAL, output)
    output = _local()
    output["metadata"]["seq_lens_host"] = output["metadata"]["seq_lens_host"].to("meta")
    assert "expected" in oracles.local_device_tensors_mirror_the_host(_LOCAL, output)


def test_batch_alone_catches_a_written_input():
    output = _local()
    output["batch_after"]["block_table_tensor"] = output["batch_after"]["block_table_tensor"] + 1
    assert "block_table_tensor" in oracles.local_leaves_the_batch_alone(_LOCAL, output)


def test_kv_offsets_catch_wrong_counts_and_a_passed_through_batch():
    output = _kv()
    output["metadata"]["query_start_loc"] = _bump(output["metadata"]["query_start_loc"], 1)
    assert "logits per request" in oracles.kv_offsets_count_the_logits(_KV, output)
    output = _kv()
    output["metadata"]["num_actual_tokens"] = 6
    assert "num_actual_tokens" in oracles.kv_offsets_count_the_logits(_KV, output)
    output = _kv()
    output["metadata"]["max_query_len"] = 15
    assert "max_query_len" in oracles.kv_offsets_count_the_logits(_KV, output)
    output = _kv()
    output["same_object"] = True
    assert "unchanged" in oracles.kv_offsets_count_the_logits(_KV, output)
    decode = _kv(_DECODE)
    decode["same_object"] = False
    assert "decode-only" in oracles.kv_offsets_count_the_logits(_DECODE, decode)


def test_kv_host_offsets_catch_a_stale_or_widened_mirror():
    output = _kv()
    output["metadata"]["query_start_loc_cpu"] = torch.zeros_like(output["metadata"]["query_start_loc_cpu"])
    problem = oracles.kv_host_offsets_mirror_the_device(_KV, output)  # a stale mirror: zeros, the device's not
    assert problem is not None and problem.startswith("query_start_loc_cpu [0, 0"), problem
    output = _kv()
    output["metadata"]["query_start_loc_cpu"] = output["metadata"]["query_start_loc_cpu"].long()
    assert "int32" in oracles.kv_host_offsets_mirror_the_device(_KV, output)


def test_kv_keeps_the_batch_catches_a_changed_field():
    output = _kv()
    output["metadata"]["seq_lens_host"] = _bump(output["metadata"]["seq_lens_host"], 0)
    assert "host seq lens" in oracles.kv_keeps_the_batch(_KV, output)
    output = _kv()
    output["metadata"]["slot_mapping"] = output["metadata"]["slot_mapping"][:-1]
    assert "slot_mapping" in oracles.kv_keeps_the_batch(_KV, output)
    output = _kv()
    output["metadata"]["causal"] = False
    assert "causal" in oracles.kv_keeps_the_batch(_KV, output)
