"""Inputs of ``async_tensor_h2d(data, device, dtype)``: as vllm's callers pass
them (``caller``), and everything a caller *could* pass (``wide``).

``caller`` follows the 0.28.0 callers (docs/verdicts.md#contracts): host ints as
a list, an int64 numpy array or an int64 CPU tensor, the target dtype given or
not. ``wide`` adds every source dtype into every target dtype (floats into
integer dtypes, values out of the target's range, NaN and +-inf), 0-d and empty
data, nested and ragged lists and bare Python scalars, non-contiguous views
(transposed, step-sliced, expanded, offset, negative numpy strides), pinned and
device tensors when the device is CUDA, the positional call of nixl / rocm
callers and 0.30's ``out=`` keyword (which neither copy accepts).

Specs are plain JSON: NaN and infinities travel as the strings ``"nan"``,
``"inf"`` and ``"-inf"``; ``materialize`` builds the arrays and tensors. Values
of numpy and tensor sources are drawn inside their source dtype's range, so
building them never fails; what is out of range is out of range for the
*target* dtype, inside the call.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import Impl
from strategies.common import FLOAT_DTYPES, INT_DTYPES, devices, fixed_dict, seeded_ints

CALLER_DTYPES_BY_NAME = {**INT_DTYPES, **FLOAT_DTYPES}
"""Target dtypes of the caller model (the 0.28.0 callers pass int32/int64/float32)."""

TORCH_DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint64": torch.uint64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float32": torch.float32, "float64": torch.float64,
}
"""Wide: every target dtype, and every dtype a source tensor can have."""
NUMPY_DTYPES = ("bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                "float16", "float32", "float64")
"""Wide: every dtype a source numpy array can have (numpy has no bfloat16)."""
SPECIAL_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
"""Non-finite floats, spelled as strings in the (JSON) spec."""

WIDE_FORMS = ("list", "numpy", "cpu_tensor", "pinned_tensor", "device_tensor")
"""Sources: a list (a bare Python scalar when the shape is ``[]``), a numpy
array, a CPU tensor; on CUDA also a pinned CPU tensor and a device tensor."""
CUDA_ONLY_FORMS = ("pinned_tensor", "device_tensor")
LIST_LAYOUTS = ("nested", "ragged")
ARRAY_LAYOUTS = ("contiguous", "transposed", "strided", "expanded", "offset", "negative")
"""``strided``: every other element of the last dimension; ``expanded``: stride
0 along the first; ``offset``: a contiguous view that starts one element into
its buffer; ``negative``: numpy only, reversed along the first dimension
(torch.from_numpy rejects negative strides)."""
CALLS = ("keywords", "positional", "device_object", "out")
"""``keywords``: ``f(data, device=..., dtype=...)`` (most callers);
``positional``: ``f(data, device, dtype)`` (nixl, rocm_aiter_fa);
``device_object``: a ``torch.device`` for ``device``; ``out``: 0.30's
``f(data, dtype=..., out=buffer)``, which neither copy's signature accepts."""

_DIMS = (1, 2, 3, 4) * 3 + (0,)  # one dimension in 13 is empty

# Most callers pass keywords; `out` raises TypeError on both copies, so it is drawn rarely.
_CALL_WEIGHTS = ("keywords",) * 4 + ("positional",) * 2 + ("device_object", "out")

_INT_EDGES = (0, 1, -1, 127, 128, -128, -129, 255, 256, 32767, 32768, -32769, 65504, 65505, 65536, 2**24 + 1,
              2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**53 + 1, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64 - 1,
              2**64)
_FLOAT_EDGES = (0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 127.5, 255.5, 256.0, -129.0, 65504.0, 65520.0, 2.0**31,
                -(2.0**31) - 2048, 2.0**63, -(2.0**63), 2.0**64, 3.4e38, 3.5e38, 1e300, 1e-8, 5e-324,
                "nan", "inf", "-inf")


@lru_cache(maxsize=None)
def _ints(name: str | None = None) -> st.SearchStrategy[int]:
    """Ints for a source of dtype ``name`` (its whole range; a list: beyond int64 and uint64 too)."""
    lo, hi = (int(np.iinfo(name).min), int(np.iinfo(name).max)) if name else (-(2**65), 2**65)
    edges = [v for v in _INT_EDGES if lo <= v <= hi]
    return st.one_of(st.integers(max(lo, -1000), min(hi, 1000)), st.sampled_from(edges), st.integers(lo, hi))


_FLOATS = st.one_of(st.floats(-1000, 1000, allow_nan=False), st.sampled_from(_FLOAT_EDGES),
                    st.floats(allow_nan=False, allow_infinity=False))


@lru_cache(maxsize=None)
def _elements(name: str | None, kind: str | None) -> st.SearchStrategy[Any]:
    if name is not None:
        kind = "bool" if name == "bool" else "float" if name.startswith(("float", "bfloat")) else "int"
    if kind == "int":
        return _ints(name)
    if kind == "mixed":
        return st.one_of(_ints(), _FLOATS, st.booleans())
    return _FLOATS if kind == "float" else st.booleans()


@lru_cache(maxsize=None)
def _choice(options: tuple) -> st.SearchStrategy[Any]:
    """``sampled_from``, built once per option list (building strategies per draw is slow)."""
    return st.sampled_from(options)


@lru_cache(maxsize=None)
def _values(name: str | None, kind: str | None, count: int) -> st.SearchStrategy[list]:
    return st.lists(_elements(name, kind), min_size=count, max_size=count)


# The wide model's fixed choices, built once (strategies/common.py says why).
_NDIMS = _choice((1, 2, 0, 3))
_DIM_SIZES = _choice(_DIMS)
_LIST_KINDS = _choice(("int", "float", "bool", "mixed"))
_NUMPY_SOURCE_DTYPES = _choice(NUMPY_DTYPES)
_TORCH_SOURCE_DTYPES = _choice(tuple(TORCH_DTYPES))
_TARGET_DTYPES = _choice((None, *TORCH_DTYPES))
_CALL_CHOICES = _choice(_CALL_WEIGHTS)


# The caller model's values: host ints in [-1000, 1000] that nothing branches on
# (every caller dtype holds them; both copies convert them the same way), so a
# drawn length and one drawn seed, expanded by ``seeded_ints``, instead of two
# Hypothesis choices per element (a list's "one more?" and the value): 17.7 -> 4-5
# choices a spec. Seed 0, where the seed shrinks, is all zeros; the extremes and
# +-1 come up about one element in eight. The spec still holds the values (the
# oracles and saved repros read ``spec["values"]``). The wide model keeps drawing
# each value: there its edges (NaN, out of the target's range) are the point.
_CALLER_EDGES = (-1000, -1, 0, 1, 1000)
_CALLER_VALUES = st.tuples(st.integers(0, 16), st.integers(0, 2**31 - 1)).map(
    lambda drawn: seeded_ints(drawn[0], drawn[1], -1000, 1000, _CALLER_EDGES))
_CALLER_FORMS = _choice(("list", "numpy", "cpu_tensor"))
_CALLER_DTYPE_CHOICES = _choice((None, *CALLER_DTYPES_BY_NAME))


@st.composite
def _wide_specs(draw: st.DrawFn, available: Sequence[str]) -> dict:
    device = draw(_choice(tuple(available)))
    on_cuda = device.startswith("cuda")
    form = draw(_choice(tuple(f for f in WIDE_FORMS if on_cuda or f not in CUDA_ONLY_FORMS)))
    # 1-D first (it shrinks there); 0-d is a bare scalar or a 0-d array; a 0 makes it empty.
    ndim = draw(_NDIMS)
    shape = [draw(_DIM_SIZES) for _ in range(ndim)]
    if form == "list":
        src_dtype, kind = None, draw(_LIST_KINDS)
        ragged = ndim >= 2 and shape[0] >= 2 and shape[1] >= 1
        layouts = [lay for lay in LIST_LAYOUTS if lay == "nested" or ragged]
    else:
        src_dtype, kind = draw(_NUMPY_SOURCE_DTYPES if form == "numpy" else _TORCH_SOURCE_DTYPES), None
        layouts = ["contiguous", "offset"] + (["transposed"] if ndim >= 2 else [])
        layouts += (["strided", "expanded"] if ndim >= 1 else []) + (["negative"] if form == "numpy" and ndim else [])
    count = int(np.prod(shape, dtype=np.int64))
    return {
        "device": device,
        "form": form,
        "src_dtype": src_dtype,
        "shape": shape,
        "layout": draw(_choice(tuple(layouts))),
        "values": draw(_values(src_dtype, kind, count)),
        "dtype": draw(_TARGET_DTYPES),
        "call": draw(_CALL_CHOICES),
    }


def _decode(value: Any) -> Any:
    return SPECIAL_FLOATS[value] if isinstance(value, str) else value


def _zero(name: str) -> Any:
    return False if name == "bool" else 0.0 if name.startswith(("float", "bfloat")) else 0


def _nest(flat: list, shape: Sequence[int]) -> Any:
    """``flat`` as nested lists of ``shape`` (a bare scalar for ``[]``)."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = int(np.prod(shape[1:], dtype=np.int64))
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _torch_buffer(values: list, shape: Sequence[int], name: str) -> torch.Tensor:
    dtype = TORCH_DTYPES[name]
    if dtype.is_floating_point:  # through float64: out-of-range values become inf, as a cast does
        return torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)
    return torch.tensor(values, dtype=dtype).reshape(shape)


def _numpy_buffer(values: list, shape: Sequence[int], name: str) -> np.ndarray:
    if name.startswith("float"):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(values, dtype=np.float64).astype(name).reshape(shape)
    return np.asarray(values, dtype=name).reshape(shape)


def _arranged(values: list, shape: list[int], name: str, layout: str, buffer: Callable, place: Callable) -> Any:
    """``values`` in ``shape`` and ``layout``: built as a host buffer, ``place``d
    (pinned, moved to the device), then viewed -- so the view's strides are
    the layout's, wherever the buffer lives."""
    rank, count = len(shape), len(values)
    if layout == "transposed":
        return _permute(place(buffer(values, shape[::-1])), rank)
    if layout == "strided":
        full = buffer([_zero(name)] * (2 * count), [*shape[:-1], 2 * shape[-1]])
        full[..., ::2] = buffer(values, shape)
        return place(full)[..., ::2]
    if layout == "expanded":
        row = int(np.prod(shape[1:], dtype=np.int64))
        first = place(buffer((values + [_zero(name)] * row)[:row], [1, *shape[1:]]))
        if isinstance(first, np.ndarray):
            return np.lib.stride_tricks.as_strided(first, tuple(shape), (0, *first.strides[1:]))
        return first.expand(*shape)
    if layout == "offset":
        return place(buffer([_zero(name), *values], [count + 1]))[1:].reshape(shape)
    if layout == "negative":
        return place(buffer(values, shape))[::-1]
    return place(buffer(values, shape))


def _permute(data: Any, rank: int) -> Any:
    order = tuple(reversed(range(rank)))
    return data.transpose(order) if isinstance(data, np.ndarray) else data.permute(order)


def build_source(spec: dict) -> Any:
    """The ``data`` argument a wide spec describes, fresh for each side."""
    values, shape, layout, name = [_decode(v) for v in spec["values"]], list(spec["shape"]), spec["layout"], \
        spec["src_dtype"]
    form = spec["form"]
    if form == "list":
        nested = _nest(values, shape)
        if layout == "ragged":
            nested[-1] = nested[-1][:-1]
        return nested
    if form == "numpy":
        return _arranged(values, shape, name, layout, lambda v, s: _numpy_buffer(v, s, name), lambda a: a)
    place = {"cpu_tensor": lambda t: t, "pinned_tensor": lambda t: t.pin_memory(),
             "device_tensor": lambda t: t.to(spec["device"])}[form]
    return _arranged(values, shape, name, layout, lambda v, s: _torch_buffer(v, s, name), place)


class AsyncH2DInputs:
    """``caller``: host ints as a list, an int64 numpy array or an int64 CPU
    tensor, dtype given or not. ``wide``: everything a caller can pass (module
    docstring); a spec with a ``"shape"`` is a wide one."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        if contract == "wide":
            return _wide_specs(available)
        return fixed_dict({
            "device": devices(available),
            "values": _CALLER_VALUES,
            "form": _CALLER_FORMS,
            "dtype": _CALLER_DTYPE_CHOICES,
        })

    def runs_on(self, spec: dict, device: str) -> bool:
        """A pinned or device-tensor source needs CUDA (``_wide_specs`` draws it for cuda only)."""
        return device.startswith("cuda") or spec["form"] not in CUDA_ONLY_FORMS

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        device, function = spec["device"], impl.function
        if "shape" not in spec:
            return _caller_call(spec, function)
        data = build_source(spec)
        dtype = TORCH_DTYPES[spec["dtype"]] if spec["dtype"] else None
        call = spec["call"]
        if call == "positional":
            return lambda: function(data, device, dtype)
        if call == "device_object":
            where = torch.device(device)
            return lambda: function(data, device=where, dtype=dtype)
        if call == "out":
            out = torch.empty(spec["shape"], dtype=dtype or torch.int64, device=device)
            return lambda: function(data, dtype=dtype, out=out)
        return lambda: function(data, device=device, dtype=dtype)


def _caller_call(spec: dict, function: Callable[..., Any]) -> Callable[[], Any]:
    values = list(spec["values"])
    data: Any = values
    if spec["form"] == "numpy":
        data = np.asarray(values, dtype=np.int64)
    elif spec["form"] == "cpu_tensor":
        data = torch.tensor(values, dtype=torch.int64)
    dtype = CALLER_DTYPES_BY_NAME[spec["dtype"]] if spec["dtype"] else None
    device = spec["device"]
    return lambda: function(data, device=device, dtype=dtype)
