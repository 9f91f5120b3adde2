"""docs/design.md rows 6-8: ernie45_vl's rotary gather, encoder metadata and resampler."""

from fuzz.targets import Comparison, Target

DESIGN_ROWS = (6, 7, 8)
_ERNIE = "vllm/model_executor/models/ernie45_vl.py"

# Sync counts (optimized side, CUDA, per call), read off the code; fuzz.syncs
# counts torch-flagged syncs plus non-blocking H2D copies from pageable memory
# too large for the driver to stage without waiting (> 2 MiB; none here).
# * rot_pos_emb iterates grid_thw; with the eager caller's *device* grid every
#   row costs 9 syncs (torch.arange(h), arange(w), two expand()s, two
#   reshape()s with two tensor sizes each, repeat(t)), plus 1 for sizing the
#   rotary table from the device max. The staged pos_ids copy is a small
#   pageable table, which the driver stages without waiting (measured; F4
#   corrected). The input model draws at most 6 rows
#   (strategies.ernie45_vl.CALLER_MAX_ROWS): 9 * 6 + 1. A CPU grid (the
#   CUDA-graph paths) leaves none.
# * prepare_encoder_metadata adds 1 for repeat_interleave without output_size
#   and 1 for compute_attn_mask_seqlen's read of the device cu_seqlens.
# * fwd_placeholder keeps one deliberate read, grid_thw.cpu() under
#   gpu_sync_allowed; both index tables go over async_tensor_h2d (pinned).
TARGETS = [
    Target(
        name="ernie-rot-pos-emb",
        upstream=(f"{_ERNIE}::Ernie4_5_VisionTransformer.rot_pos_emb",),
        legacy="legacy.ernie45_vl:Ernie4_5_VisionTransformer.rot_pos_emb",
        optimized="optimized.ernie45_vl:Ernie4_5_VisionTransformer.rot_pos_emb",
        inputs="strategies.ernie45_vl:ErnieRotPosEmbInputs",
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=55,
        description="host-built pos_ids staged to the rotary table's device (non-blocking) before the gather",
    ),
    Target(
        name="ernie-encoder-metadata",
        upstream=(
            f"{_ERNIE}::Ernie4_5_VisionTransformer.prepare_encoder_metadata",
            f"{_ERNIE}::Ernie4_5_VisionTransformer.forward",
        ),
        legacy="legacy.ernie45_vl:Ernie4_5_VisionTransformer.prepare_encoder_metadata",
        optimized="optimized.ernie45_vl:Ernie4_5_VisionTransformer.prepare_encoder_metadata",
        inputs="strategies.ernie45_vl:ErnieEncoderMetadataInputs",
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=57,
        description="0.27.1's inline forward metadata vs 0.28.0's prepare_encoder_metadata (cu_seqlens staging)",
    ),
    Target(
        name="ernie-encoder-metadata-graph",
        upstream=(
            f"{_ERNIE}::Ernie4_5_VisionTransformer.prepare_encoder_metadata",
            f"{_ERNIE}::Ernie4_5_VLMoeForConditionalGeneration.prepare_encoder_cudagraph_capture_inputs",
            f"{_ERNIE}::Ernie4_5_VLMoeForConditionalGeneration.prepare_encoder_cudagraph_replay_buffers",
        ),
        legacy="legacy.ernie45_vl:Ernie4_5_VisionTransformer.prepare_encoder_metadata",
        optimized="optimized.ernie45_vl:Ernie4_5_VisionTransformer.prepare_encoder_metadata",
        inputs="strategies.ernie45_vl:ErnieGraphMetadataInputs",
        comparison=Comparison(floats="exact", layout=True),
        # The graph paths hand a host list: the table size, cu_seqlens and
        # max_seqlen are all computed on the CPU, and the small staged copies
        # stage without waiting (F4 corrected) -- nothing may sync, since these
        # buffers feed a captured graph.
        expected_optimized_syncs=0,
        description="0.28.0-only CUDA-graph parameters (max_batch_size padding, max_seqlen_override) "
        "against 0.27.1's metadata plus their documented meaning",
    ),
    Target(
        name="ernie-resampler-placeholder",
        upstream=(f"{_ERNIE}::VariableResolutionResamplerModel.forward",),
        legacy="legacy.ernie45_vl:VariableResolutionResamplerModel.forward",
        optimized="optimized.ernie45_vl:VariableResolutionResamplerModel.forward",
        inputs="strategies.ernie45_vl:ErnieResamplerInputs",
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=1,
        description="fwd_placeholder's numpy slice offsets staged via async_tensor_h2d",
    ),
]
