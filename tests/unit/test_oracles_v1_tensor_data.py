"""The tensor-data target's invariants, each broken by a hand-made output (strategies/v1_tensor_data/oracles.py)."""

from __future__ import annotations

import torch

from legacy.v1_tensor_data import tensor_data
from strategies.v1_tensor_data.inputs import describe, tensor_of
from strategies.v1_tensor_data.oracles import (
    tensor_data_is_a_flat_byte_buffer,
    tensor_data_is_the_elements_in_order,
    tensor_data_leaves_the_tensor_alone,
    tensor_data_syncs,
)

SPEC = {"device": "cpu", "dtype": "float32", "shape": [2, 3], "form": "transposed", "grad": False, "seed": 7}
ORACLES = (tensor_data_is_the_elements_in_order, tensor_data_is_a_flat_byte_buffer,
           tensor_data_leaves_the_tensor_alone)


def _output(spec: dict = SPEC) -> dict:
    tensor = tensor_of(spec)
    return {"view": describe(tensor_data(tensor), tensor), "tensor": tensor}


def test_the_real_copy_passes_every_oracle_in_every_form():
    for form in ("contiguous", "offset", "transposed", "strided", "expanded"):
        for dtype in ("bfloat16", "bool", "int64"):
            spec = {**SPEC, "form": form, "dtype": dtype}
            output = _output(spec)
            assert [oracle(spec, output) for oracle in ORACLES] == [None, None, None], (form, dtype)


def test_elements_in_order_catches_storage_order_bytes():
    # A transposed tensor's bytes in storage order, not row-major: what skipping .contiguous() would give.
    tensor = tensor_of(SPEC)
    output = _output()
    output["view"]["bytes"] = torch.tensor(list(tensor.t().contiguous().view(torch.uint8).flatten().tolist()),
                                           dtype=torch.uint8)
    assert "elements in order" in tensor_data_is_the_elements_in_order(SPEC, output)


def test_flat_byte_buffer_catches_a_typed_view_and_a_signed_one():
    typed = _output()
    typed["view"].update(format="f", itemsize=4, shape=[6])
    assert "unsigned bytes" in tensor_data_is_a_flat_byte_buffer(SPEC, typed)
    signed = _output()
    signed["view"]["format"] = "b"
    assert tensor_data_is_a_flat_byte_buffer(SPEC, signed) is not None
    short = _output()
    short["view"]["shape"] = [20]
    assert "expected [24]" in tensor_data_is_a_flat_byte_buffer(SPEC, short)


def test_leaves_the_tensor_alone_catches_a_write():
    output = _output()
    output["tensor"] = output["tensor"].clone()
    output["tensor"][0, 0] += 1
    assert tensor_data_leaves_the_tensor_alone(SPEC, output) == "tensor_data changed its input"


def test_a_result_that_is_not_a_memoryview_is_reported():
    output = {"view": describe(b"abc", tensor_of(SPEC)), "tensor": tensor_of(SPEC)}
    assert "not a memoryview" in tensor_data_is_the_elements_in_order(SPEC, output)


def test_the_sync_budget_is_one_copy_for_a_cuda_tensor_only():
    assert tensor_data_syncs(SPEC) == 0 and tensor_data_syncs({**SPEC, "device": "cuda"}) == 1
