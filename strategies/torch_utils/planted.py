"""Planted bugs and benign refactors of the torch_utils targets, collected by tests/planted (fuzz/plants.py).

From fla_glm4: Planted bugs and benign refactors for the FLA index helpers and glm4_1v.

From layout: Planted layout changes: the same values in another memory layout.

Only a target that declares ``Comparison(layout=True)`` reports them
(docs/verdicts.md#layout). ``BUGS`` show under the caller contract;
``WIDE_BUGS`` only on inputs the caller model never draws (2-D data for
``async_tensor_h2d``), so tests/e2e/test_layout.py fuzzes them under ``wide``.

From shared_fla_glm4: Bugs planted in both copies at once: the FLA index helpers, glm4_1v, async_tensor_h2d
and CpuGpuBuffer.copy_to_gpu.

The differential check cannot see them (legacy and optimized share the slip);
the invariants and references of strategies/fla_index/oracles.py, glm4_1v.py,
torch_utils.py and v1_utils.py must.
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant

_H2D_RETURN = "return t.to(device=device, dtype=dtype, non_blocking=True)"


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the line is shared text of both releases."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


BUGS = [
    Plant("planted-shim-dropped-dtype", "async-tensor-h2d", "optimized.torch_utils",
          "return t.to(device=device, dtype=dtype, non_blocking=True)",
          "return t.to(device=device, non_blocking=True)",
          "a tensor or array keeps its own dtype when one is asked for"),
]

BENIGN = [
    Plant("benign-shim-keyword-order", "async-tensor-h2d", "optimized.torch_utils",
          "return t.to(device=device, dtype=dtype, non_blocking=True)",
          "return t.to(dtype=dtype, device=device, non_blocking=True)",
          "the same call, keywords reordered"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-h2d-dropped-dtype",
        base_target="async-tensor-h2d",
        **_both("torch_utils", "return t.to(device=device, dtype=dtype, non_blocking=True)",
                "return t.to(device=device, non_blocking=True)"),
        why="a tensor or array source keeps its own dtype when another is asked for",
    ),
]

WIDE_BUGS = [
    Plant("planted-layout-shim-column-major", "async-tensor-h2d", "optimized.torch_utils",
          _H2D_RETURN,
          "out = t.to(device=device, dtype=dtype, non_blocking=True)\n"
          "    return out.t().contiguous().t() if out.dim() == 2 else out",
          "2-D data comes back column-major: same values, another layout for the caller's .view() or kernel"),
]
