"""qwen2-vl-encoder-metadata: ``Qwen2VisionTransformer.prepare_encoder_metadata``
(vllm/model_executor/models/qwen2_vl.py), vllm 0.29.0 -> 0.30.0.

0.29.0 copied the host-built ``cu_seqlens`` to the attention's device with
``cu_seqlens.to(device=device, non_blocking=True)``: a "non-blocking" copy from pageable memory, which
the driver stages synchronously; 0.30.0 copies it with ``async_tensor_h2d(cu_seqlens, device)``, staged
through a pinned buffer (issue #43). ``rot_pos_emb``, ``compute_attn_mask_seqlen`` and ``device`` are
the same text in both releases (rot_pos_emb changed 0.28.0 -> 0.29.0: qwen2-vl-rot-pos-emb). A copy
module of its own (qwen2_vl_meta): the qwen2_vl module holds the 0.28.0/0.29.0 pair, in which this
method does not change.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="qwen2-vl-encoder-metadata",
        upstream=(
            "vllm/model_executor/models/qwen2_vl.py::Qwen2VisionTransformer.prepare_encoder_metadata",
        ),
        legacy="legacy.qwen2_vl_meta:Qwen2VisionTransformer.prepare_encoder_metadata",
        optimized="optimized.qwen2_vl_meta:Qwen2VisionTransformer.prepare_encoder_metadata",
        upstream_impl="vllm.model_executor.models.qwen2_vl:Qwen2VisionTransformer.prepare_encoder_metadata",
        inputs="strategies.qwen2_vl_meta.inputs:Qwen2EncoderMetadataInputs",
        # Gathers of cache rows and integer boundaries: bitwise. Layout too: the tensors go straight to the
        # attention kernels, and the encoder CUDA graph copies them into its buffers.
        comparison=Comparison(floats="exact", layout=True),
        # By design none: rot_pos_emb runs on the device, cu_seqlens and max_seqlen are built on the host
        # (numpy, a host max), and the one H2D copy is staged through pinned memory, non-blocking.
        # Unverified on CUDA here.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="cu_seqlens copied to the device through pinned memory (async_tensor_h2d) (0.29.0 -> 0.30.0)",
        invariants=(
            "strategies.qwen2_vl_meta.oracles:metadata_cu_seqlens_are_frame_boundaries",
            "strategies.qwen2_vl_meta.oracles:metadata_max_seqlen_follows_backend",
            "strategies.qwen2_vl_meta.oracles:metadata_rotary_rows_follow_the_patches",
        ),
        reference="strategies.qwen2_vl_meta.oracles:METADATA_REFERENCE",
        consumer="strategies.qwen2_vl_meta.oracles:encoder_blocks_read_metadata",
    ),
]
