"""Planted bugs and benign refactors of the fla_index targets, collected by tests/planted (fuzz/plants.py).

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

_INDICES_RETURN = (
    "return chunk_indices.to(\n"
    "        device=cu_seqlens.device, dtype=cu_seqlens.dtype, non_blocking=True\n"
    "    )"
)


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the line is shared text of both releases."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


BUGS = [
    Plant("planted-offsets-off-by-one", "fla-chunk-offsets", "optimized.fla_index",
          "cu_seqlens.new_zeros(1)", "cu_seqlens.new_ones(1)",
          "every chunk offset shifted by one"),
    Plant("planted-indices-dropped-dtype", "fla-chunk-indices", "optimized.fla_index",
          "device=cu_seqlens.device, dtype=cu_seqlens.dtype, non_blocking=True",
          "device=cu_seqlens.device, non_blocking=True",
          "int32 cu_seqlens give an int64 table"),
    Plant("planted-indices-off-by-one", "fla-chunk-indices", "optimized.fla_index",
          "indices.eq(0).cumsum(0) - 1", "indices.eq(0).cumsum(0)",
          "sequence ids start at 1"),
    # from tests/planted/layout.py (Planted layout changes: the same values in another memory layout.)
    Plant("planted-layout-indices-column-major", "fla-chunk-indices", "optimized.fla_index",
          _INDICES_RETURN, _INDICES_RETURN + ".t().contiguous().t()",
          "the (chunks, 2) table comes back column-major: same values, but the Triton kernels "
          "read it as chunk_indices + i_t * 2"),
]

BENIGN = [
    Plant("benign-offsets-explicit-zeros", "fla-chunk-offsets", "optimized.fla_index",
          "cu_seqlens.new_zeros(1)", "torch.zeros(1, dtype=cu_seqlens.dtype, device=cu_seqlens.device)",
          "the same zero, spelled out"),
    Plant("benign-indices-to-like", "fla-chunk-indices", "optimized.fla_index",
          "return chunk_indices.to(\n        device=cu_seqlens.device, dtype=cu_seqlens.dtype, non_blocking=True\n"
          "    )",
          "return chunk_indices.to(cu_seqlens)",
          "the legacy spelling of the same copy"),
    # from tests/planted/layout.py (Planted layout changes: the same values in another memory layout.)
    Plant("benign-layout-indices-contiguous", "fla-chunk-indices", "optimized.fla_index",
          _INDICES_RETURN, _INDICES_RETURN + ".contiguous()",
          "contiguous() of a contiguous table: the same tensor"),
]

# Same values, one extra GPU<->CPU sync: only the CUDA sync oracle can see it.
SYNC_BUGS = [
    Plant("planted-offsets-extra-sync", "fla-chunk-offsets", "optimized.fla_index",
          "cu_seqlens.new_zeros(1)", "cu_seqlens.new_zeros(1) * int(cu_seqlens[:1].sum().item() == 0)",
          "reads cu_seqlens[0] back to the host (always 0, so values are unchanged)"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-fla-indices-ids-from-one",
        base_target="fla-chunk-indices",
        **_both("fla_index", "indices.eq(0).cumsum(0) - 1", "indices.eq(0).cumsum(0)"),
        why="sequence ids counted from 1: every chunk names the sequence after its own, so the kernels "
        "read the next sequence's bounds from cu_seqlens (and past its end for the last one)",
    ),
    SharedPlant(
        name="shared-fla-offsets-floor-division",
        base_target="fla-chunk-offsets",
        legacy=("legacy.fla_index",
                "[cu_seqlens.new_tensor([0]), triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]",
                "[cu_seqlens.new_tensor([0]), prepare_lens(cu_seqlens) // chunk_size]"),
        optimized=("optimized.fla_index",
                   "[cu_seqlens.new_zeros(1), triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]",
                   "[cu_seqlens.new_zeros(1), prepare_lens(cu_seqlens) // chunk_size]"),
        why="chunks per sequence rounded down: a sequence whose length is not a multiple of the chunk "
        "size loses its last, partial chunk, so every later sequence's state slots start one too early",
    ),
]
