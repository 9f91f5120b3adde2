"""Oracles of ``async_tensor_h2d(data, device, dtype=None)`` (vllm/utils/torch_utils.py).

Its docstring: "Copy list/numpy array/tensor async from host to device." So the
result is a tensor on ``device`` holding ``data``'s values, in ``dtype`` when one
is given, else in the dtype the data has (a tensor's or array's own; for a list,
torch's inference: bool, else int64, else the default float dtype). The copies
convert with ``torch.tensor(..., dtype=dtype)`` / ``.to(dtype=dtype)``, i.e. a C
cast: the values invariant checks only the conversions a cast defines exactly
(value representable in the target dtype, booleans, integral floats in range,
NaN and infinities into floating dtypes); an out-of-range float -> int cast is
undefined behaviour and differs between CPU and CUDA, so it is not judged.

Consumers: the callers stage host metadata for device kernels and never read the
result back (e.g. glm4_1v ``Glm4vVisionEmbeddings.forward``: ``target_h``/``target_w``
enter device arithmetic; ``pos_embeds_interpolate``: the coordinates go to the
embeddings module), so the target declares no consumer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from strategies.torch_utils.inputs import CALLER_DTYPES_BY_NAME, SPECIAL_FLOATS, TORCH_DTYPES, build_source


def _requested(spec: dict) -> torch.dtype | None:
    """The dtype the call asks for (caller specs name theirs in ``CALLER_DTYPES_BY_NAME``, wide ones in
    ``TORCH_DTYPES``)."""
    name = spec["dtype"]
    if name is None:
        return None
    return TORCH_DTYPES[name] if "shape" in spec else CALLER_DTYPES_BY_NAME[name]


def _source(spec: dict) -> Any:
    """The ``data`` argument, as the input model builds it (on the CPU for the comparison)."""
    if "shape" not in spec:
        values = list(spec["values"])
        if spec["form"] == "numpy":
            return np.asarray(values, dtype=np.int64)
        if spec["form"] == "cpu_tensor":
            return torch.tensor(values, dtype=torch.int64)
        return values
    if spec["form"] in ("pinned_tensor", "device_tensor"):
        spec = {**spec, "form": "cpu_tensor"}  # the same values, built where the comparison runs
    return build_source(spec)


def _flatten(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _flatten(item)]
    return [value]


def _shape_of(data: Any) -> tuple[int, ...] | None:
    """The shape ``data`` has (None for a ragged list, which the call rejects)."""
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return tuple(data.shape)
    if not isinstance(data, (list, tuple)):
        return ()
    inner = [_shape_of(item) for item in data]
    if any(s is None for s in inner) or len(set(inner)) > 1:
        return None
    return (len(data), *(inner[0] if inner else ()))


def _natural_dtype(data: Any) -> torch.dtype:
    """The dtype ``data`` has with no ``dtype=`` (torch.tensor's inference for lists)."""
    if isinstance(data, torch.Tensor):
        return data.dtype
    if isinstance(data, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(data)).dtype
    flat = _flatten(data)
    if any(isinstance(x, float) for x in flat):
        return torch.get_default_dtype()
    if any(isinstance(x, int) and not isinstance(x, bool) for x in flat):
        return torch.int64
    return torch.bool if flat else torch.get_default_dtype()  # torch.tensor([]) is a float tensor


def _elements(data: Any) -> list:
    if isinstance(data, torch.Tensor):
        return _flatten(data.tolist())
    if isinstance(data, np.ndarray):
        return _flatten(data.tolist())
    return [SPECIAL_FLOATS[x] if isinstance(x, str) else x for x in _flatten(data)]


def _integer_range(dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


def _converted(x: Any, dtype: torch.dtype) -> tuple[bool, Any]:
    """``(defined, value)``: ``x`` cast to ``dtype`` where the cast is exact or defined."""
    if dtype == torch.bool:
        return True, bool(x)  # nonzero (NaN included) is True
    if dtype.is_floating_point:
        if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
            return True, x
        as_float = float(x)
        if as_float != x:  # an int float64 cannot hold: not judged
            return False, None
        back = torch.tensor(as_float, dtype=torch.float64).to(dtype).item()
        return back == as_float, as_float
    low, high = _integer_range(dtype)
    if isinstance(x, float):
        if not x.is_integer():
            return False, None
        x = int(x)
    value = int(x)
    return low <= value <= high, value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def h2d_lands_on_the_device(spec: dict, output: Any) -> str | None:
    """The result is a tensor on ``device`` ("Copy ... from host to device")."""
    if not isinstance(output, torch.Tensor):
        return f"output is a {type(output).__name__}, not a tensor"
    want = torch.device(spec["device"])
    if output.device.type != want.type or (want.index is not None and output.device.index != want.index):
        return f"output is on {output.device}, asked for {spec['device']}"
    return None


def h2d_dtype_and_shape(spec: dict, output: Any) -> str | None:
    """The result has ``data``'s shape and the requested dtype, or ``data``'s own
    dtype when none is requested (a copy changes where data lives, not what it is)."""
    if not isinstance(output, torch.Tensor):
        return f"output is a {type(output).__name__}, not a tensor"
    data = _source(spec)
    shape = _shape_of(data)
    if shape is None:
        return None  # a ragged list: no shape to keep (torch.tensor rejects it)
    if tuple(output.shape) != shape:
        return f"output has shape {tuple(output.shape)}, data {shape}"
    want = _requested(spec) or _natural_dtype(data)
    if output.dtype != want:
        return f"output has dtype {output.dtype}, expected {want} (requested {spec['dtype']})"
    return None


def h2d_keeps_the_values(spec: dict, output: Any) -> str | None:
    """The result holds ``data``'s values, converted to the result's dtype where the
    conversion is defined exactly (see the module docstring; other elements are not judged)."""
    if not isinstance(output, torch.Tensor):
        return f"output is a {type(output).__name__}, not a tensor"
    data = _source(spec)
    if _shape_of(data) is None:
        return None
    dtype = _requested(spec) or _natural_dtype(data)
    if output.dtype != dtype:
        return None  # h2d_dtype_and_shape reports it
    got = _flatten(output.detach().cpu().tolist())
    given = _elements(data)
    if len(got) != len(given):
        return f"output has {len(got)} elements, data {len(given)}"
    for index, (x, y) in enumerate(zip(given, got)):
        defined, want = _converted(x, dtype)
        if defined and not _equal(want, y):
            return f"element {index}: data {x!r} became {y!r} in {dtype}, expected {want!r}"
    return None
