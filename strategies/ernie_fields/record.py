"""keep-on-cpu-ernie-grid-thw: ERNIE 4.5-VL's grid field config and the eager vision path that reads the grids,
vllm 0.28.0 -> 0.34.0.

0.29.0 marks ``image_grid_thw`` / ``video_grid_thw`` ``keep_on_cpu=True`` (the grids reach the model on the
host) and ``rot_pos_emb`` builds its position ids on the weights' device from the host grid (no staging copy);
0.30.0/0.31.0 make ``prepare_encoder_metadata`` build ``cu_seqlens`` and ``max_seqlen`` on the grid's device
(now the host) and stage ``cu_seqlens`` with ``async_tensor_h2d``. The consumers in between
(``_process_image_input``, ``_process_video_input``, ``_vision_forward``, the resampler's ``fwd_placeholder``)
are the same text in both releases: the grid's device is their whole difference. The encoder CUDA-graph
methods (``encoder_eager_forward``, ``postprocess_encoder_output``) are another target's (strategies/ernie45_vl/).
"""

from fuzz.api import Comparison, Target

VERSIONS = ("0.28.0", "0.34.0")
DESIGN_ROWS = (99,)
_ERNIE = "vllm/model_executor/models/ernie45_vl.py"
_MODEL = f"{_ERNIE}::Ernie4_5_VLMoeForConditionalGeneration"
ALLOW_REGION = "optimized.ernie_fields:sync_allowed_depth"

TARGETS = [
    Target(
        name="keep-on-cpu-ernie-grid-thw",
        upstream=(
            f"{_ERNIE}::Ernie4_5VLMultiModalProcessor._get_mm_fields_config",
            f"{_ERNIE}::Ernie4_5_VisionTransformer.rot_pos_emb",
            f"{_ERNIE}::Ernie4_5_VisionTransformer.prepare_encoder_metadata",
            f"{_ERNIE}::Ernie4_5_VisionRotaryEmbedding.__init__",
            f"{_MODEL}._parse_and_validate_image_input",
            f"{_MODEL}._parse_and_validate_video_input",
            f"{_MODEL}._parse_and_validate_multimodal_inputs",
            f"{_MODEL}.embed_multimodal",
        ),
        legacy="legacy.ernie_fields:Ernie4_5_VLMoeForConditionalGeneration.embed_multimodal",
        optimized="optimized.ernie_fields:Ernie4_5_VLMoeForConditionalGeneration.embed_multimodal",
        inputs="strategies.ernie_fields.inputs:ErnieGridThwInputs",
        sync_allow_region=ALLOW_REGION,
        # Same math in both releases; the rotary table and position ids are built on another device
        # (0.28.0's plain-attribute inv_freq vs 0.34.0's buffer), the same float32 values.
        comparison=Comparison(floats="exact"),
        # 0.34.0 with the host grids: the rotary loop, cu_seqlens, max_seqlen and the split sizes are host
        # reads of host tensors; cu_seqlens and the resampler's offset tables go up pinned (async_tensor_h2d);
        # fwd_placeholder's grid_thw.cpu() is inside gpu_sync_allowed (and free for a host grid).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="image/video_grid_thw kept on CPU: rotary ids, cu_seqlens, max_seqlen, resampler offsets "
                    "and split sizes from the host grid",
        invariants=(
            "strategies.ernie_fields.oracles:ernie_fields_one_embedding_per_item",
            "strategies.ernie_fields.oracles:ernie_fields_encoder_metadata",
        ),
        # Each vision block's attention reads max_seqlen on the host (flash backends): a device tensor in
        # 0.28.0 (one sync per block), a host one in 0.34.0.
        consumer="strategies.ernie_fields.oracles:ernie_fields_attention_reads",
    ),
]
