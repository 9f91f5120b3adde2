"""Building blocks every input model uses: devices, dtypes, input forms."""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError

INT_DTYPES = {"int32": torch.int32, "int64": torch.int64}
FLOAT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# How host metadata can reach a function: today's callers pass Python lists;
# the legacy functions also accepted numpy arrays and CPU or device tensors.
TENSOR_FORMS = ("list", "numpy", "cpu_tensor", "device_tensor")


def _nonempty(name: str, values: Sequence[Any]) -> None:
    if not values:
        raise HarnessError(f"{name} must not be empty")


# Why the strategies are built once (lru_cache here, module-level constants in
# the input models): a composite that builds ``st.sampled_from([...])`` or a
# ``.map`` afresh on every draw makes Hypothesis validate the new object and
# compute its properties each time, which was about half of what drawing a spec
# cost (bench part s, issue #17). A strategy object drawn again skips all that;
# the choices drawn, and so every seed's examples, are the same.


def choice_of(values: Sequence[Any]) -> st.SearchStrategy[Any]:
    """``st.sampled_from(values)``, built once per distinct ``values``."""
    # The types are part of the key: True == 1 == 1.0 would otherwise share one strategy.
    return _choice_of(tuple(values), tuple(map(type, values)))


@lru_cache(maxsize=None)
def _choice_of(values: tuple, types: tuple) -> st.SearchStrategy[Any]:
    return st.sampled_from(list(values))


def fixed_dict(mapping: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict]:
    """``st.fixed_dictionaries(mapping)`` with the keys in ``mapping``'s order.

    Hypothesis (6.1xx, its issue #3906) shuffles a fixed dictionary's iteration
    order with one choice per key after the first; a spec is JSON read by key,
    so those choices buy nothing but cost as much as any other (bench part s:
    64-224 us each on the 2-core host). The values are drawn as before, in order.
    """
    keys = tuple(mapping)
    return st.tuples(*mapping.values()).map(lambda values: dict(zip(keys, values)))


def devices(available: Sequence[str]) -> st.SearchStrategy[str]:
    """The device an example runs on: one of ``available`` (cpu first, so it shrinks there)."""
    _nonempty("available devices", available)
    return choice_of(available)


def int_dtypes(names: Sequence[str] = ("int32", "int64")) -> st.SearchStrategy[str]:
    unknown = set(names) - set(INT_DTYPES)
    if unknown:
        raise HarnessError(f"int_dtypes: unknown dtype names {sorted(unknown)}")
    return choice_of(names)


def float_dtypes(names: Sequence[str] = ("float32", "bfloat16", "float16")) -> st.SearchStrategy[str]:
    unknown = set(names) - set(FLOAT_DTYPES)
    if unknown:
        raise HarnessError(f"float_dtypes: unknown dtype names {sorted(unknown)}")
    return choice_of(names)


def tensor_forms(forms: Sequence[str] = TENSOR_FORMS) -> st.SearchStrategy[str]:
    unknown = set(forms) - set(TENSOR_FORMS)
    if unknown:
        raise HarnessError(f"tensor_forms: unknown forms {sorted(unknown)}")
    return choice_of(forms)


def in_form(values: list, form: str, dtype: str, device: str) -> Any:
    """``values`` (nested int lists) in the requested host/device form."""
    if form == "list":
        return copy.deepcopy(values)  # the caller's own list, never the spec's
    if form == "numpy":
        return np.asarray(values, dtype=dtype)
    tensor = torch.tensor(values, dtype=INT_DTYPES[dtype])
    if form == "cpu_tensor":
        return tensor
    if form == "device_tensor":
        return tensor.to(device)
    raise HarnessError(f"unknown tensor form {form!r}")


def seeded_ints(count: int, seed: int, low: int, high: int, edges: Sequence[int] = ()) -> list[int]:
    """``count`` deterministic ints in ``[low, high]`` from one drawn ``seed``, as a plain list.

    For values nothing branches on: one seed instead of a Hypothesis choice per
    element. Seed 0 (where Hypothesis shrinks a seed) gives all zeros; otherwise
    about one element in eight is one of ``edges`` (so the extremes still come
    up), the rest uniform. numpy's PCG64 from the seed alone: no global RNG.
    """
    if seed == 0 or count == 0:
        return [0] * count
    rng = np.random.default_rng(seed)
    values = rng.integers(low, high, size=count, endpoint=True)
    if edges:
        picked = rng.integers(0, 8, size=count) == 0
        values[picked] = rng.choice(np.asarray(edges, dtype=values.dtype), size=int(picked.sum()))
    return [int(v) for v in values]


def seeded_floats(shape: tuple[int, ...], dtype: str, seed: int, device: str) -> torch.Tensor:
    """Deterministic random floats: the same on every host for the same seed.

    Drawn on the CPU in float32 then cast and moved, so a CUDA example and its
    CPU replay start from identical values.
    """
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(FLOAT_DTYPES[dtype]).to(device)


def seed_parameters(module: torch.nn.Module, dtype: str, seed: int, device: str) -> torch.nn.Module:
    """``module`` in ``dtype`` with every parameter from ``seeded_floats`` (never zeros), by sorted name so
    that both sides' stand-ins get the same values; on ``device``, in eval mode."""
    module = module.to(FLOAT_DTYPES[dtype])
    with torch.no_grad():
        for i, (_, param) in enumerate(sorted(module.named_parameters(), key=lambda item: item[0])):
            param.copy_(seeded_floats(tuple(param.shape), dtype, seed + 101 * (i + 1), "cpu"))
    return module.to(device).eval()
