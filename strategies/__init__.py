"""Hypothesis strategies shared by the targets.

Strategies draw *specs*: plain JSON data (ints, lists, dtype and device names,
seeds). Input models turn a spec into fresh tensors for each side. Specs are
what Hypothesis shrinks, what the example database stores and what a repro
file saves, so a saved failure never needs pickle.
"""

from strategies.common import devices, float_dtypes, int_dtypes, tensor_forms
from strategies.fla_index import chunk_sizes, cu_seqlens
from strategies.grids import grid_thws

__all__ = [
    "chunk_sizes",
    "cu_seqlens",
    "devices",
    "float_dtypes",
    "grid_thws",
    "int_dtypes",
    "tensor_forms",
]
