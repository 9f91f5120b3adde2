"""Inputs of ``tensor_data(tensor)`` (vllm/v1/utils.py, 0.33.0 / 0.34.0): a tensor's raw bytes as a uint8
memoryview, "useful for serializing and hashing".

Caller (0.34.0): vllm/v1/serial_utils.py ``MsgpackEncoder._encode_tensor``, for every tensor a message
carries (multimodal kwargs, pooling outputs, ...): a CPU tensor under ``size_threshold`` bytes is inlined,
``msgpack.Ext(CUSTOM_TYPE_RAW_VIEW, tensor_data(obj))``; any other (a CUDA one too, without an out-of-band
consumer) goes to ``aux_buffers`` and is sent zero-copy later, so the memoryview's bytes, its format and
whether it still reads the tensor's memory are what the caller sees. The encoder takes whatever tensor the
message holds: any dtype it decodes (``str(obj.dtype)``: bool, ints, floats, bfloat16), 0-d, empty, and views
of a batch (a slice with a storage offset, a transposed or step-sliced view, a broadcast ``expand``).

Wide, beyond that: a tensor that requires grad (``.numpy()`` refuses it: both copies raise), which inference
callers never pass, and a 1-D view of at most one element whose stride is not 1 (0.33.0 raises, F23), which
no caller we read sends.

A spec is JSON: ``device``, ``dtype``, ``shape``, ``form`` (``contiguous`` | ``offset`` | ``transposed`` |
``strided`` | ``expanded``), ``grad`` and ``seed``.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import choice_of, devices, fixed_dict

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint16": torch.uint16, "uint32": torch.uint32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
FORMS = ("contiguous", "offset", "transposed", "strided", "expanded")
"""``offset``: a contiguous view one row into a bigger buffer; ``transposed``: the last two dimensions
swapped; ``strided``: every other element of the last dimension; ``expanded``: stride 0 along a new first
dimension of size 2."""
SHAPES = ((), (0,), (1,), (5,), (2, 3), (3, 1), (2, 0), (2, 2, 3), (1, 4, 2))


def _as_a_caller_has_it(spec: dict) -> dict:
    """No 1-D view of at most one element with a stride other than 1 (``x[:, 0]`` of a one-row or empty 2-D
    tensor, a step slice of a short one): torch calls it contiguous, so 0.33.0's ``.contiguous()`` keeps the
    stride and its ``.view(torch.uint8)`` raises (docs/findings/README.md F23). No caller we read sends one
    (an item's tensors are processor outputs and first-dimension slices of them); wide draws them."""
    if spec["form"] == "strided" and len(spec["shape"]) == 1 and spec["shape"][0] <= 1:
        return {**spec, "form": "contiguous"}
    return spec


@lru_cache(maxsize=None)
def _specs(available: tuple[str, ...], wide: bool) -> st.SearchStrategy[dict]:
    specs = fixed_dict({
        "device": devices(available),
        "dtype": choice_of(tuple(DTYPES)),
        "shape": choice_of(SHAPES).map(list),
        "form": choice_of(FORMS),
        "grad": st.booleans() if wide else st.just(False),
        "seed": st.integers(0, 2**31 - 1),
    })
    return specs if wide else specs.map(_as_a_caller_has_it)


def _values(shape: Sequence[int], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Seeded values of ``dtype`` (never all zeros): signed and fractional where the dtype has them."""
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 251, tuple(shape), generator=generator, dtype=torch.int64) - 125
    if dtype == torch.bool:
        return raw > 0
    if dtype.is_floating_point:
        return (raw.to(torch.float64) / 8).to(dtype)
    if not dtype.is_signed:
        return raw.abs().to(dtype)
    return raw.to(dtype)


def tensor_of(spec: dict) -> torch.Tensor:
    """The input tensor: ``shape`` in ``form`` on ``device``, its values from ``seed``."""
    shape, dtype, form = list(spec["shape"]), DTYPES[spec["dtype"]], spec["form"]
    device = torch.device(spec["device"])
    if form == "offset":
        base = _values([1 + (shape[0] if shape else 1), *shape[1:]], dtype, spec["seed"]).to(device)
        tensor = base[1:] if shape else base.reshape(-1)[1]
    elif form == "transposed" and len(shape) >= 2:
        tensor = _values([*shape[:-2], shape[-1], shape[-2]], dtype, spec["seed"]).to(device).transpose(-1, -2)
    elif form == "strided" and shape:
        tensor = _values([*shape[:-1], 2 * shape[-1]], dtype, spec["seed"]).to(device)[..., ::2]
    elif form == "expanded":
        tensor = _values(shape, dtype, spec["seed"]).to(device).expand(2, *shape)
    else:  # contiguous, and the forms a shape has no room for (a transposed 1-D tensor is itself)
        tensor = _values(shape, dtype, spec["seed"]).to(device)
    if spec["grad"] and dtype.is_floating_point:
        tensor = tensor.detach().requires_grad_(True)
    return tensor


def storage_bytes(tensor: torch.Tensor) -> tuple[int, int]:
    """[first, last) host address of the tensor's storage (0, 0 off the CPU)."""
    if not tensor.is_cpu:
        return 0, 0
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def describe(view: Any, tensor: torch.Tensor) -> dict[str, Any]:
    """What a caller of tensor_data can see of its result: the bytes (a uint8 tensor), the buffer's format,
    shape, item size, writability and C-contiguity, and whether it reads the input tensor's memory (the
    encoder sends aux buffers zero-copy later: a write to the tensor in between shows)."""
    if not isinstance(view, memoryview):
        return {"type": type(view).__name__}
    array = np.frombuffer(view, dtype=np.uint8) if view.c_contiguous and view.format in ("B", "b", "c") else None
    data = (bytes(view) if view.c_contiguous else view.tobytes())
    lo, hi = storage_bytes(tensor)
    address = array.ctypes.data if array is not None and array.size else None
    return {
        "bytes": torch.tensor(list(data), dtype=torch.uint8),
        "format": view.format,
        "shape": list(view.shape),
        "itemsize": view.itemsize,
        "readonly": view.readonly,
        "c_contiguous": view.c_contiguous,
        "aliases_input": address is not None and lo <= address < hi,
    }


def element_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's elements in row-major order, each as its own bytes (one element at a time: independent of
    how either side flattens)."""
    host = tensor.detach().cpu()
    out = bytearray()
    for index in itertools.product(*(range(n) for n in host.shape)):
        out += bytes(host[index].clone().reshape(1).view(torch.uint8).tolist())
    return bytes(out)


class V1TensorDataInputs:
    """A fresh tensor of the spec for each side; the thunk calls ``tensor_data`` and returns what the
    encoder can see of the memoryview, and the tensor after the call."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _specs(tuple(available), contract == "wide")

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        tensor = tensor_of(spec)
        function = impl.function

        def call() -> dict[str, Any]:
            view = function(tensor)
            return {"view": describe(view, tensor), "tensor": tensor.detach()}

        return call
