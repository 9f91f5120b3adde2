"""docs/design.md row 11: flash-linear-attention index helpers."""

from fuzz.targets import Comparison, Target

DESIGN_ROWS = (11,)
_FLA = "vllm/third_party/flash_linear_attention/ops/index.py"

TARGETS = [
    Target(
        name="fla-chunk-indices",
        upstream=(f"{_FLA}::prepare_chunk_indices", f"{_FLA}::prepare_lens"),
        legacy="legacy.fla_index:prepare_chunk_indices",
        optimized="optimized.fla_index:prepare_chunk_indices",
        upstream_impl="vllm.third_party.flash_linear_attention.ops.index:prepare_chunk_indices",
        inputs="strategies.fla_index:ChunkIndexInputs",
        comparison=Comparison(floats="exact", layout=True),
        # The chunk-count `.tolist()` kept on purpose under gpu_sync_allowed. The
        # final `.to(..., non_blocking=True)` stages a small pageable table, which
        # the driver does without waiting for the GPU (measured on the H200;
        # docs/findings F4, corrected 2026-11-29).
        expected_optimized_syncs=1,
        description="(chunk id, offset) table built on the host, staged non-blocking",
    ),
    Target(
        name="fla-chunk-offsets",
        upstream=(f"{_FLA}::prepare_chunk_offsets",),
        legacy="legacy.fla_index:prepare_chunk_offsets",
        optimized="optimized.fla_index:prepare_chunk_offsets",
        upstream_impl="vllm.third_party.flash_linear_attention.ops.index:prepare_chunk_offsets",
        inputs="strategies.fla_index:ChunkIndexInputs",
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=0,
        description="new_zeros(1) instead of new_tensor([0])",
    ),
]
