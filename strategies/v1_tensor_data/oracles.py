"""Oracles of ``tensor_data(tensor)`` (vllm/v1/utils.py, 0.33.0 / 0.34.0).

Upstream meaning: "Get the raw data of a tensor as a uint8 memoryview, useful for serializing and hashing.
Returns: A memoryview of the tensor data as uint8." The encoder (vllm/v1/serial_utils.py) sends those bytes
with the tensor's dtype and shape, and the decoder rebuilds the tensor from them row-major
(``torch.frombuffer(...).view(dtype).view(shape)``): so the bytes are the elements in row-major order, each as
its dtype's bytes, and the buffer is flat unsigned bytes. The thunk (strategies/v1_tensor_data/inputs.py)
returns ``{"view": what a caller sees of the memoryview, "tensor": the input after the call}``.
"""

from __future__ import annotations

from typing import Any

import torch

from strategies.v1_tensor_data.inputs import element_bytes, tensor_of


def _view(output: Any) -> tuple[dict, str | None]:
    if not isinstance(output, dict) or not isinstance(output.get("view"), dict):
        return {}, f"output is {type(output).__name__} without a view"
    view = output["view"]
    if "bytes" not in view:
        return {}, f"tensor_data returned a {view.get('type')}, not a memoryview"
    return view, None


def _input(spec: dict) -> torch.Tensor:
    return tensor_of({**spec, "grad": False})


def tensor_data_is_the_elements_in_order(spec: dict, output: Any) -> str | None:
    """The bytes are the tensor's elements in row-major (logical) order, each as its dtype's bytes, whatever
    the tensor's strides, storage offset or device: what the decoder rebuilds the tensor from."""
    view, problem = _view(output)
    if problem:
        return problem
    want = element_bytes(_input(spec))
    got = bytes(view["bytes"].tolist())
    if got != want:
        return f"{len(got)} bytes {got[:16]!r}..., the elements in order are {len(want)} bytes {want[:16]!r}..."
    return None


def tensor_data_is_a_flat_byte_buffer(spec: dict, output: Any) -> str | None:
    """A uint8 memoryview: format ``B``, one dimension of ``numel * element_size`` items of one byte,
    C-contiguous (msgpack and zmq take it as one buffer)."""
    view, problem = _view(output)
    if problem:
        return problem
    tensor = _input(spec)
    nbytes = tensor.numel() * tensor.element_size()
    if view["format"] != "B" or view["itemsize"] != 1:
        return f"format {view['format']!r} of item size {view['itemsize']}, not unsigned bytes ('B')"
    if view["shape"] != [nbytes]:
        return f"shape {view['shape']}, expected [{nbytes}] (numel {tensor.numel()} x {tensor.element_size()})"
    if not view["c_contiguous"]:
        return "the memoryview is not C-contiguous"
    return None


def tensor_data_leaves_the_tensor_alone(spec: dict, output: Any) -> str | None:
    """The tensor is only read: its values after the call are the input's."""
    if not isinstance(output, dict) or not isinstance(output.get("tensor"), torch.Tensor):
        return "output has no tensor"
    after, want = output["tensor"].detach().cpu(), _input(spec).cpu()
    if after.shape != want.shape or after.dtype != want.dtype or not torch.equal(after, want):
        return "tensor_data changed its input"
    return None


def tensor_data_syncs(spec: dict) -> int:
    """The designed syncs of one call: a CUDA tensor's bytes come to the host (``.cpu()``: one device-to-host
    copy the caller waits for, both releases); a CPU tensor's none."""
    return 1 if str(spec["device"]).startswith("cuda") else 0
