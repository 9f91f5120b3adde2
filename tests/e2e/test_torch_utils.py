"""The async_tensor_h2d input model: the wide contract draws every form a caller
can pass (strategies/torch_utils/inputs.py), as plain JSON, and builds what it says."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings

from fuzz.targets import Impl, lookup
from strategies.torch_utils.inputs import NUMPY_DTYPES, TORCH_DTYPES, AsyncH2DInputs, build_source
from tests.support import fuzz

MODEL = AsyncH2DInputs()
WIDE = MODEL.specs(("cpu", "cuda"), "wide")  # specs only: a cuda spec needs no GPU
# The first drawn spec that has the form, not shrunk: deterministic, no timing.
FIRST = settings(database=None, derandomize=True, phases=[Phase.generate], max_examples=20_000,
                 suppress_health_check=list(HealthCheck))


def _drawn(predicate) -> dict:
    return find(WIDE, predicate, settings=FIRST)  # raises NoSuchExample if never drawn


def _kind(name: str | None) -> str | None:
    if name is None:
        return None
    return "bool" if name == "bool" else "float" if "float" in name else "int"


def _range(name: str) -> tuple[float, float]:
    if name == "bool":
        return 0, 1
    if _kind(name) == "int":
        return int(np.iinfo(name).min), int(np.iinfo(name).max)
    return -float(torch.finfo(TORCH_DTYPES[name]).max), float(torch.finfo(TORCH_DTYPES[name]).max)


def _numbers(spec: dict) -> list:
    return [float(v) if isinstance(v, str) else v for v in spec["values"]]


def _out_of_range(spec: dict) -> bool:
    if not spec["dtype"] or spec["dtype"] == "bool":
        return False
    lo, hi = _range(spec["dtype"])
    return any(not isinstance(v, bool) and v == v and abs(v) != float("inf") and not lo <= v <= hi
               for v in _numbers(spec))


def _float_values(spec: dict) -> bool:
    return _kind(spec["src_dtype"]) == "float" or any(isinstance(v, (float, str)) for v in spec["values"])


FORMS = {
    "python scalar": lambda s: s["form"] == "list" and s["shape"] == [],
    "flat list": lambda s: s["form"] == "list" and len(s["shape"]) == 1,
    "nested list": lambda s: s["form"] == "list" and len(s["shape"]) >= 2,
    "ragged list": lambda s: s["layout"] == "ragged",
    "mixed bool/int/float list": lambda s: s["form"] == "list" and len({type(v) for v in s["values"]} - {str}) == 3,
    "numpy array": lambda s: s["form"] == "numpy",
    "cpu tensor": lambda s: s["form"] == "cpu_tensor",
    "pinned tensor on cuda": lambda s: s["form"] == "pinned_tensor" and s["device"] == "cuda",
    "device tensor on cuda": lambda s: s["form"] == "device_tensor" and s["device"] == "cuda",
    "0-d array": lambda s: s["form"] != "list" and s["shape"] == [],
    "empty data": lambda s: 0 in s["shape"],
    "transposed": lambda s: s["layout"] == "transposed" and min(s["shape"]) >= 2,
    "step-sliced": lambda s: s["layout"] == "strided" and s["shape"][-1] >= 2,
    "expanded (stride 0)": lambda s: s["layout"] == "expanded" and s["shape"][0] >= 2,
    "offset view": lambda s: s["layout"] == "offset",
    "negative numpy strides": lambda s: s["layout"] == "negative",
    "float into an integer dtype": lambda s: _float_values(s) and _kind(s["dtype"]) == "int",
    "float into bool": lambda s: _float_values(s) and s["dtype"] == "bool",
    "int into a float dtype": lambda s: _kind(s["src_dtype"]) == "int" and _kind(s["dtype"]) == "float",
    "bool into an integer dtype": lambda s: s["src_dtype"] == "bool" and _kind(s["dtype"]) == "int",
    "out of the target dtype's range": _out_of_range,
    "NaN": lambda s: "nan" in s["values"],
    "+inf": lambda s: "inf" in s["values"],
    "-inf": lambda s: "-inf" in s["values"],
    "int beyond uint64 in a list": lambda s: any(isinstance(v, int) and not isinstance(v, bool) and v >= 2**64
                                                 for v in s["values"]),
    "no dtype": lambda s: s["dtype"] is None,
    "positional call": lambda s: s["call"] == "positional",
    "torch.device argument": lambda s: s["call"] == "device_object",
    "out= (0.30)": lambda s: s["call"] == "out",
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_wide_model_draws(form):
    _drawn(FORMS[form])


KINDS = ("bool", "int", "float")


@pytest.mark.parametrize("pair", [f"{a}->{b}" for a in KINDS for b in KINDS])
def test_every_kind_of_source_goes_into_every_kind_of_target(pair):
    source, target = pair.split("->")
    _drawn(lambda s: _kind(s["src_dtype"]) == source and _kind(s["dtype"]) == target)


@pytest.mark.parametrize("name", sorted(set(NUMPY_DTYPES) | set(TORCH_DTYPES)))
def test_every_dtype_is_drawn_as_a_source(name):
    forms = ("numpy",) if name in NUMPY_DTYPES else ()
    forms += ("cpu_tensor", "pinned_tensor", "device_tensor") if name in TORCH_DTYPES else ()
    assert _drawn(lambda s: s["src_dtype"] == name)["form"] in forms


@pytest.mark.parametrize("name", sorted(TORCH_DTYPES))
def test_every_dtype_is_drawn_as_a_target(name):
    _drawn(lambda s: s["dtype"] == name)


@settings(max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(MODEL.specs(("cpu", "cuda"), "wide"))
def test_wide_specs_are_plain_json_and_cuda_forms_stay_on_cuda(spec):
    assert json.loads(json.dumps(spec, allow_nan=False)) == spec
    if spec["device"] == "cpu":
        assert spec["form"] not in ("pinned_tensor", "device_tensor")
        source = build_source(spec)
        if spec["form"] in ("numpy", "cpu_tensor"):
            assert list(source.shape) == spec["shape"]


def _spec(**fields) -> dict:
    spec = {"device": "cpu", "form": "cpu_tensor", "src_dtype": "int64", "shape": [2, 3], "layout": "contiguous",
            "values": [1, 2, 3, 4, 5, 6], "dtype": None, "call": "keywords"}
    return {**spec, **fields}


def test_layouts_are_built_as_named():
    assert build_source(_spec()).is_contiguous()
    transposed = build_source(_spec(layout="transposed"))
    assert transposed.shape == (2, 3) and transposed.stride() == (1, 2)
    assert build_source(_spec(layout="strided")).stride() == (6, 2)
    assert build_source(_spec(layout="expanded")).stride() == (0, 1)
    offset = build_source(_spec(layout="offset"))
    assert offset.is_contiguous() and offset.storage_offset() == 1 and offset.tolist() == [[1, 2, 3], [4, 5, 6]]
    negative = build_source(_spec(form="numpy", layout="negative"))
    assert isinstance(negative, np.ndarray) and negative.strides[0] < 0 and negative.tolist() == [[4, 5, 6], [1, 2, 3]]
    assert build_source(_spec(form="numpy", layout="transposed")).flags.f_contiguous


def test_lists_scalars_and_special_floats():
    assert build_source(_spec(form="list", src_dtype=None, layout="nested")) == [[1, 2, 3], [4, 5, 6]]
    assert build_source(_spec(form="list", src_dtype=None, layout="ragged")) == [[1, 2, 3], [4, 5]]
    assert build_source(_spec(form="list", src_dtype=None, shape=[], values=[True], layout="nested")) is True
    values = build_source(_spec(src_dtype="float16", shape=[4], values=["nan", "inf", "-inf", 1e300]))
    assert values.dtype == torch.float16 and values.isnan()[0] and values[1:].isinf().all()
    assert build_source(_spec(src_dtype="uint64", shape=[1], values=[2**64 - 1])).dtype == torch.uint64


def _recorder():
    calls = []

    def function(*args, **kwargs):
        calls.append((args, kwargs))

    return Impl("test:recorder", function, None, None), calls  # type: ignore[arg-type]


def test_call_forms():
    impl, calls = _recorder()
    for call in ("keywords", "positional", "device_object", "out"):
        MODEL.materialize(_spec(call=call, dtype="int32"), impl, "optimized")()
    (_, keywords), (positional, _), (_, device_object), (_, out) = calls
    assert keywords["device"] == "cpu" and keywords["dtype"] is torch.int32
    assert positional[1:] == ("cpu", torch.int32)
    assert device_object["device"] == torch.device("cpu")
    assert "device" not in out and out["out"].shape == (2, 3) and out["out"].dtype == torch.int32


def test_caller_specs_keep_their_format():
    impl, calls = _recorder()
    spec = {"device": "cpu", "values": [1, 2], "form": "numpy", "dtype": "int32"}
    MODEL.materialize(spec, impl, "legacy")()
    ((data,), kwargs), = calls
    assert isinstance(data, np.ndarray) and data.dtype == np.int64 and kwargs == {"device": "cpu", "dtype": torch.int32}


def test_wide_contract_agrees_on_cpu():
    (target,) = lookup(["async-tensor-h2d"])
    outcome = fuzz(target, contract="wide", max_examples=300)
    assert outcome.examples == 300 and not outcome.failures, [(f.spec, f.mismatches) for f in outcome.failures]
