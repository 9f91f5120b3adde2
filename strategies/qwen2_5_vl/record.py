"""qwen25-vl-rope-by-thw and qwen25-vl-encoder-metadata.

qwen25-vl-rope-by-thw: ``Qwen2_5_VisionTransformer.get_rope_by_thw`` and ``rotary_pos_emb_thw``
(vllm/model_executor/models/qwen2_5_vl.py), vllm 0.28.0 -> 0.30.0.

0.29.0 builds ``rotary_pos_emb_thw``'s 2-D position ids on the rope cache's device instead of on the
host followed by a pageable ``pos_ids.to(cos.device, non_blocking=True)``, and moves
``get_rope_by_thw``'s memo from ``@lru_cache(maxsize=1024)`` on the method (shared by every tower,
keyed by ``self``) to a per-tower ``LRUCache`` keyed by ``(t, h, w)``; 0.30.0 copies the window index
to the device with ``async_tensor_h2d`` (pinned staging) instead of a pageable non-blocking ``.to``.
The pair spans both releases so that the optimized side is the code every later release
(0.30.0 .. 0.34.0) ships for these methods. ``get_window_index_thw`` (host-only, unchanged) is
copied alongside as a callee.

qwen25-vl-encoder-metadata: ``Qwen2_5_VisionTransformer.prepare_encoder_metadata``, 0.28.0 (= 0.29.0) ->
0.30.0: the batch's window index goes to the device with ``async_tensor_h2d`` (pinned staging) instead of
``window_index.to(device=device, non_blocking=True)`` from pageable memory. Its callees come from the same
releases (get_rope_by_thw above, MMEncoderAttention's compute_max_seqlen / maybe_compute_seq_lens /
maybe_recompute_cu_seqlens), so the optimized side is what 0.30.0 .. 0.34.0 ship.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.30.0")
DESIGN_ROWS = (99,)
_QWEN25 = "vllm/model_executor/models/qwen2_5_vl.py"

TARGETS = [
    Target(
        name="qwen25-vl-rope-by-thw",
        upstream=(
            f"{_QWEN25}::Qwen2_5_VisionTransformer.get_rope_by_thw",
            f"{_QWEN25}::Qwen2_5_VisionTransformer.rotary_pos_emb_thw",
        ),
        legacy="legacy.qwen2_5_vl:Qwen2_5_VisionTransformer.get_rope_by_thw",
        optimized="optimized.qwen2_5_vl:Qwen2_5_VisionTransformer.get_rope_by_thw",
        upstream_impl="vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VisionTransformer.get_rope_by_thw",
        inputs="strategies.qwen2_5_vl.inputs:Qwen25RopeByThwInputs",
        # Gathers of cache rows and integer index arithmetic: bitwise. No layout: the caller
        # torch.cat()s every part before anything reads it.
        comparison=Comparison(floats="exact"),
        # By design none: the ids are built on the device, the window index (host) goes up through a
        # pinned buffer, non_blocking; cu_seqlens stay on the host. A cache hit does no work at all.
        # To be confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="rope ids built on the device, per-tower (t,h,w) cache, pinned window index (0.28.0 -> 0.30.0)",
        invariants=(
            "strategies.qwen2_5_vl.oracles:rope_by_thw_parts_have_their_shapes",
            "strategies.qwen2_5_vl.oracles:rope_by_thw_windows_partition_the_tokens",
            "strategies.qwen2_5_vl.oracles:rope_by_thw_rows_follow_the_windows",
            "strategies.qwen2_5_vl.oracles:rope_by_thw_repeats_agree",
        ),
        reference="strategies.qwen2_5_vl.oracles:ROPE_BY_THW_REFERENCE",
        # No consumer: prepare_encoder_metadata concatenates the parts; its host reads
        # (cu_seqlens_window_thw[-1], invert_permutation) are of host tensors, and the cos/sin rows
        # go to the vision blocks on the device.
    ),
]

TARGETS.append(
    Target(
        name="qwen25-vl-encoder-metadata",
        upstream=(f"{_QWEN25}::Qwen2_5_VisionTransformer.prepare_encoder_metadata",),
        legacy="legacy.qwen2_5_vl:Qwen2_5_VisionTransformer.prepare_encoder_metadata",
        optimized="optimized.qwen2_5_vl:Qwen2_5_VisionTransformer.prepare_encoder_metadata",
        upstream_impl="vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VisionTransformer.prepare_encoder_metadata",
        inputs="strategies.qwen2_5_vl.inputs:Qwen25EncoderMetadataInputs",
        # Gathers of cache rows and integer index/boundary arithmetic: bitwise. Layout too: the tensors go
        # straight to the attention kernels and the encoder CUDA graph copies them into its buffers.
        comparison=Comparison(floats="exact", layout=True),
        # By design none: every piece of metadata is built on the host (numpy/CPU torch) or gathered on the
        # device from a cache, max_seqlen stays a host scalar, and every H2D copy is non-blocking: the window
        # index through pinned memory (the 0.30.0 change), reverse_indices from invert_permutation's pinned
        # buffer, cu_seqlens / sequence lengths through async_tensor_h2d (MMEncoderAttention). The cos/sin
        # ``.to(device)`` is a no-op (they were gathered on the device). Unverified on CUDA here.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="window index copied to the device through pinned memory (async_tensor_h2d) (0.29.0 -> 0.30.0)",
        invariants=(
            "strategies.qwen2_5_vl.oracles:metadata_windows_are_a_permutation_and_its_inverse",
            "strategies.qwen2_5_vl.oracles:metadata_seqlens_follow_frames_and_windows",
            "strategies.qwen2_5_vl.oracles:metadata_max_seqlens_stay_on_the_host",
            "strategies.qwen2_5_vl.oracles:metadata_rows_follow_the_windows",
        ),
        reference="strategies.qwen2_5_vl.oracles:METADATA_REFERENCE",
        # No consumer: the blocks' reads are qwen2-vl-encoder-metadata's (one max_seqlen.item() or a
        # cu_seqlens .tolist() per block), of tensors this change does not touch.
    )
)
