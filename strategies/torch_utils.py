"""Inputs of ``async_tensor_h2d(data, device, dtype)`` as vllm's callers pass them."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.targets import Impl
from strategies.common import FLOAT_DTYPES, INT_DTYPES, devices

_DTYPES = {**INT_DTYPES, **FLOAT_DTYPES}


class AsyncH2DInputs:
    """Host data as a list, a numpy array or a CPU tensor; dtype given or not."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return st.fixed_dictionaries({
            "device": devices(available),
            "values": st.lists(st.integers(-1000, 1000), max_size=16),
            "form": st.sampled_from(["list", "numpy", "cpu_tensor"]),
            "dtype": st.sampled_from([None, *_DTYPES]),
        })

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        values = list(spec["values"])
        data: Any = values
        if spec["form"] == "numpy":
            data = np.asarray(values, dtype=np.int64)
        elif spec["form"] == "cpu_tensor":
            data = torch.tensor(values, dtype=torch.int64)
        dtype = _DTYPES[spec["dtype"]] if spec["dtype"] else None
        device = spec["device"]
        return lambda: impl.function(data, device=device, dtype=dtype)
