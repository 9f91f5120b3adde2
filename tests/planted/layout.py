"""Planted layout changes: the same values in another memory layout.

Only a target that declares ``Comparison(layout=True)`` reports them
(docs/verdicts.md#layout). ``BUGS`` show under the caller contract;
``WIDE_BUGS`` only on inputs the caller model never draws (2-D data for
``async_tensor_h2d``), so tests/e2e/test_layout.py fuzzes them under ``wide``.
"""

from tests.planted.plant import Plant

_INDICES_RETURN = (
    "return chunk_indices.to(\n"
    "        device=cu_seqlens.device, dtype=cu_seqlens.dtype, non_blocking=True\n"
    "    )"
)
_H2D_RETURN = "return t.to(device=device, dtype=dtype, non_blocking=True)"

BUGS = [
    Plant("planted-layout-indices-column-major", "fla-chunk-indices", "optimized.fla_index",
          _INDICES_RETURN, _INDICES_RETURN + ".t().contiguous().t()",
          "the (chunks, 2) table comes back column-major: same values, but the Triton kernels "
          "read it as chunk_indices + i_t * 2"),
]

BENIGN = [
    Plant("benign-layout-indices-contiguous", "fla-chunk-indices", "optimized.fla_index",
          _INDICES_RETURN, _INDICES_RETURN + ".contiguous()",
          "contiguous() of a contiguous table: the same tensor"),
]

WIDE_BUGS = [
    Plant("planted-layout-shim-column-major", "async-tensor-h2d", "optimized.torch_utils",
          _H2D_RETURN,
          "out = t.to(device=device, dtype=dtype, non_blocking=True)\n"
          "    return out.t().contiguous().t() if out.dim() == 2 else out",
          "2-D data comes back column-major: same values, another layout for the caller's .view() or kernel"),
]
