"""docs/design.md rows 6-8: ernie45_vl's rotary gather, encoder metadata and resampler."""

from fuzz.api import Comparison, Target

# The optimized copies' gpu_sync_allowed() regions: syncs inside them are upstream's deliberate ones.
ALLOW_REGION = "optimized.gpu_sync_debug:sync_allowed_depth"

DESIGN_ROWS = (6, 7, 8)
_ERNIE = "vllm/model_executor/models/ernie45_vl.py"
_ORACLES = "strategies.ernie45_vl.oracles"
_ROTARY_INVARIANTS = tuple(
    f"{_ORACLES}:{name}"
    for name in ("rot_pos_emb_shape", "rot_pos_emb_rows_are_table_rows", "rot_pos_emb_covers_every_frame",
                 "rot_pos_emb_follows_merge_windows")
)

# Sync counts (optimized side, CUDA, per call), read off the code; fuzz.oracles.syncs
# counts torch-flagged syncs plus non-blocking H2D copies from pageable memory
# too large for the driver to stage without waiting (> 2 MiB; none here).
# * rot_pos_emb iterates grid_thw; with the eager caller's *device* grid every
#   row costs 9 syncs (torch.arange(h), arange(w), two expand()s, two
#   reshape()s with two tensor sizes each, repeat(t)), plus 1 for sizing the
#   rotary table from the device max. The staged pos_ids copy is a small
#   pageable table, which the driver stages without waiting (measured; F4
#   corrected). The input model draws at most 6 rows
#   (strategies.ernie45_vl.inputs.CALLER_MAX_ROWS): 9 * 6 + 1. A CPU grid (the
#   CUDA-graph paths) leaves none.
# * prepare_encoder_metadata adds 1 for repeat_interleave without output_size
#   and 1 for compute_attn_mask_seqlen's read of the device cu_seqlens.
# * fwd_placeholder keeps one deliberate read, grid_thw.cpu() under
#   gpu_sync_allowed; both index tables go over async_tensor_h2d (pinned).
# Oracles (strategies/ernie45_vl/oracles.py): the consumers count what the metadata
# costs the vision blocks after the call. With the eager caller's device grid,
# max_seqlen is compute_attn_mask_seqlen's 0-d *device* tensor in 0.27.1 and
# 0.28.0 alike, and every block's attention calls .item() on it: one sync per
# block, vision_config.depth per forward, which the PR left in place. The graph
# paths' host list keeps it on the CPU: no consumer sync.
TARGETS = [
    Target(
        name="ernie-rot-pos-emb",
        upstream=(f"{_ERNIE}::Ernie4_5_VisionTransformer.rot_pos_emb",),
        legacy="legacy.ernie45_vl:Ernie4_5_VisionTransformer.rot_pos_emb",
        optimized="optimized.ernie45_vl:Ernie4_5_VisionTransformer.rot_pos_emb",
        inputs="strategies.ernie45_vl.inputs:ErnieRotPosEmbInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=55,
        description="host-built pos_ids staged to the rotary table's device (non-blocking) before the gather",
        invariants=_ROTARY_INVARIANTS,
        reference=f"{_ORACLES}:ROT_POS_EMB_REFERENCE",
        # No host-reading consumer: prepare_encoder_metadata moves the table with .to(device) and
        # Ernie4_5_VisionAttention.forward only takes rotary_pos_emb.cos()/.sin() on the device.
    ),
    Target(
        name="ernie-encoder-metadata",
        upstream=(
            f"{_ERNIE}::Ernie4_5_VisionTransformer.prepare_encoder_metadata",
            f"{_ERNIE}::Ernie4_5_VisionTransformer.forward",
        ),
        legacy="legacy.ernie45_vl:Ernie4_5_VisionTransformer.prepare_encoder_metadata",
        optimized="optimized.ernie45_vl:Ernie4_5_VisionTransformer.prepare_encoder_metadata",
        inputs="strategies.ernie45_vl.inputs:ErnieEncoderMetadataInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=57,
        description="0.27.1's inline forward metadata vs 0.28.0's prepare_encoder_metadata (cu_seqlens staging)",
        invariants=(
            f"{_ORACLES}:metadata_cu_seqlens_running_sum",
            f"{_ORACLES}:metadata_max_seqlen_is_longest",
            f"{_ORACLES}:metadata_on_attention_device",
            f"{_ORACLES}:encoder_rotary_follows_grid",
        ),
        reference=f"{_ORACLES}:METADATA_REFERENCE",
        # Every vision block's attention reads max_seqlen.item() (or cu_seqlens .tolist() for
        # TORCH_SDPA); the spec has no depth, so the consumer makes one block's reads.
        consumer=f"{_ORACLES}:encoder_blocks_read_metadata",
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
        inputs="strategies.ernie45_vl.inputs:ErnieGraphMetadataInputs",
        sync_allow_region=ALLOW_REGION,
        # The runs call both hooks as EncoderCudaGraphManager does (capture once per budget, then the
        # batch's replay buffers copied into capture's), on the optimized side's stand-in model class
        # (optimized/ernie45_vl.py); 0.27.1 has neither, its side is its metadata plus the parameters'
        # meaning (strategies.ernie45_vl.inputs.ErnieGraphMetadataInputs).
        comparison=Comparison(floats="exact", layout=True),
        # The graph paths hand a host list: the table size, cu_seqlens and
        # max_seqlen are all computed on the CPU, and the small staged copies
        # stage without waiting (F4 corrected) -- nothing in the metadata may
        # sync, since these buffers feed a captured graph. Replay makes one
        # deliberate read, mm_kwargs["image_grid_thw"].tolist() of the batch's
        # device grid under gpu_sync_allowed (prepare_encoder_cudagraph_replay_buffers);
        # capture none.
        expected_optimized_syncs=1,
        description="0.28.0-only encoder CUDA-graph hooks (capture inputs, replay buffers) and their "
        "prepare_encoder_metadata parameters (max_batch_size padding, max_seqlen_override) against "
        "0.27.1's metadata plus their documented meaning",
        invariants=(
            f"{_ORACLES}:graph_cu_seqlens_padded",
            f"{_ORACLES}:graph_max_seqlen_on_host",
            f"{_ORACLES}:graph_buffers_on_device",
            f"{_ORACLES}:encoder_rotary_follows_grid",
        ),
        reference=f"{_ORACLES}:GRAPH_METADATA_REFERENCE",
        # Capture runs the forward twice (warm-up, captured) with every block reading max_seqlen;
        # replay only copies the values into the captured buffers.
        consumer=f"{_ORACLES}:graph_forward_reads_metadata",
    ),
    Target(
        name="ernie-resampler-placeholder",
        upstream=(f"{_ERNIE}::VariableResolutionResamplerModel.forward",),
        legacy="legacy.ernie45_vl:VariableResolutionResamplerModel.forward",
        optimized="optimized.ernie45_vl:VariableResolutionResamplerModel.forward",
        inputs="strategies.ernie45_vl.inputs:ErnieResamplerInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=1,
        description="fwd_placeholder's numpy slice offsets staged via async_tensor_h2d",
        invariants=(f"{_ORACLES}:resampler_output_follows_grid", f"{_ORACLES}:resampler_pairs_frames"),
        # No host-reading consumer of the output: _process_image_input / _process_video_input split it
        # by sizes computed from grid_thw (sizes.tolist() reads the grid, not this output), and the
        # CUDA-graph path's postprocess_encoder_output scatters it with host per_item_out_tokens.
    ),
]

# ernie-encoder-output: the embeddings the encoder CUDA-graph manager gets back for a batch of images,
# by the graph path (capture inputs, replay buffers, encoder_cudagraph_forward, postprocess_encoder_output)
# or the eager fallback (encoder_eager_forward, then the same postprocess_encoder_output call). The input
# model drives the model class's methods as EncoderCudaGraphManager does
# (strategies.ernie45_vl.inputs.ErnieEncoderOutputInputs), and 0.27.1's side is its _process_image_input
# path. Sync count (optimized side, CUDA, per call), read off the 0.28.0 code, unverified on a GPU:
# * graph path: replay's image_grid_thw.tolist() (gpu_sync_allowed), postprocess's num_valid int()
#   (gpu_sync_allowed, on the device grid it moved) and fwd_placeholder's grid_thw.cpu() (gpu_sync_allowed);
#   the metadata is built from the host list: 3;
# * eager path (device grid): rot_pos_emb iterates the device grid, 9 per row (at most 4 rows) + 1, the
#   repeat_interleave 1, fwd_placeholder 1, then postprocess 1 + its resampler's fwd_placeholder 1: 41.
#   (0.28.0's eager path raises in the second resampler call; see known-issues.json.)
TARGETS.append(
    Target(
        name="ernie-encoder-output",
        upstream=(
            f"{_ERNIE}::Ernie4_5_VLMoeForConditionalGeneration.encoder_eager_forward",
            f"{_ERNIE}::Ernie4_5_VLMoeForConditionalGeneration.postprocess_encoder_output",
        ),
        # 0.27.1 has neither method: legacy/ernie45_vl.py holds its _process_image_input (the images'
        # eager path) under the name encoder_eager_forward. The entry is named for selftest and provenance;
        # the input model drives the methods as the manager does.
        legacy="legacy.ernie45_vl:Ernie4_5_VLMoeForConditionalGeneration.encoder_eager_forward",
        optimized="optimized.ernie45_vl:Ernie4_5_VLMoeForConditionalGeneration.encoder_eager_forward",
        inputs="strategies.ernie45_vl.inputs:ErnieEncoderOutputInputs",
        sync_allow_region=ALLOW_REGION,
        # The two sides run the resampler's matmuls on different batch shapes: close, not bitwise (the
        # stand-in tower's sequence means are summed in float64, so its atomics' order does not show).
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=41,
        description="per-image embeddings from the encoder CUDA-graph path and the eager fallback "
        "(postprocess_encoder_output's resampler and scatter) against 0.27.1's _process_image_input",
        invariants=(
            f"{_ORACLES}:output_one_piece_per_item",
            f"{_ORACLES}:output_pieces_are_own_copies",
        ),
        # No independent reference: the embeddings are the stand-in tower's and the resampler copy's; the
        # legacy side is 0.27.1's own path to them. No host-reading consumer: the model runner
        # (gpu_model_runner's encoder cache) keeps the pieces on the device for embed_input_ids.
    )
)
