"""docs/design.md row 11: flash-linear-attention index helpers."""

from fuzz.api import Comparison, Target

# The optimized copies' gpu_sync_allowed() regions: syncs inside them are upstream's deliberate ones.
ALLOW_REGION = "optimized.gpu_sync_debug:sync_allowed_depth"

DESIGN_ROWS = (11,)
_FLA = "vllm/third_party/flash_linear_attention/ops/index.py"

TARGETS = [
    Target(
        name="fla-chunk-indices",
        upstream=(f"{_FLA}::prepare_chunk_indices", f"{_FLA}::prepare_lens"),
        legacy="legacy.fla_index:prepare_chunk_indices",
        optimized="optimized.fla_index:prepare_chunk_indices",
        upstream_impl="vllm.third_party.flash_linear_attention.ops.index:prepare_chunk_indices",
        inputs="strategies.fla_index.inputs:ChunkIndexInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact", layout=True),
        # The chunk-count `.tolist()` kept on purpose under gpu_sync_allowed. The
        # final `.to(..., non_blocking=True)` stages a small pageable table, which
        # the driver does without waiting for the GPU (measured on the H200;
        # docs/findings F4, corrected 2026-11-29).
        expected_optimized_syncs=1,
        description="(chunk id, offset) table built on the host, staged non-blocking",
        invariants=(
            "strategies.fla_index.oracles:chunk_indices_cover_every_chunk",
            "strategies.fla_index.oracles:chunk_indices_name_their_sequence",
            "strategies.fla_index.oracles:chunk_indices_follow_cu_seqlens",
        ),
        reference="strategies.fla_index.oracles:INDICES_REFERENCE",
        # No consumer: no upstream reader of the table reads it on the host. The wrappers take
        # shapes only -- chunk_scaled_dot_kkt.py chunk_scaled_dot_kkt_fwd `NT = ... len(chunk_indices)`,
        # chunk_delta_h.py chunk_gated_delta_rule_fwd_h `N, NT = len(cu_seqlens) - 1, len(chunk_indices)`
        # -- and the Triton kernels load its rows on the device.
    ),
    Target(
        name="fla-chunk-offsets",
        upstream=(f"{_FLA}::prepare_chunk_offsets",),
        legacy="legacy.fla_index:prepare_chunk_offsets",
        optimized="optimized.fla_index:prepare_chunk_offsets",
        upstream_impl="vllm.third_party.flash_linear_attention.ops.index:prepare_chunk_offsets",
        inputs="strategies.fla_index.inputs:ChunkIndexInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=0,
        description="new_zeros(1) instead of new_tensor([0])",
        invariants=(
            "strategies.fla_index.oracles:chunk_offsets_running_sum",
            "strategies.fla_index.oracles:chunk_offsets_on_cu_seqlens_device",
        ),
        reference="strategies.fla_index.oracles:OFFSETS_REFERENCE",
        # No consumer: chunk_delta_h.py chunk_gated_delta_rule_fwd_h passes the offsets straight to
        # chunk_gated_delta_rule_fwd_kernel_h_blockdim64, which loads `chunk_offsets + i_n` on the
        # device; nothing reads them on the host.
    ),
]
