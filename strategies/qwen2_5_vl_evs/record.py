"""Qwen2.5-VL's EVS post-processing (vllm/model_executor/models/qwen2_5_vl.py), vllm 0.29.0 -> 0.30.0.

``Qwen2_5_VLForConditionalGeneration._postprocess_image_embeds_evs`` and ``._postprocess_video_embeds_evs``
append to each item's embeddings the mrope positions built on the host (``compute_mrope_for_media``); the video
one first prunes the tokens with Efficient Video Sampling. 0.30.0 copies the positions to the device with
``async_tensor_h2d`` (a pinned staging buffer, then a non-blocking copy) instead of a pageable
``.to(emb.device, non_blocking=True)``. The text of both methods is the same in 0.28.0 and 0.29.0, and in
0.30.0 .. 0.34.0 up to docstrings, comments and an added ``assert self.video_pruning_rate is not None`` (0.31.0),
so ``--legacy vllm==0.28.0 --optimized vllm==0.34.0`` fuzzes the same change.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_QWEN25 = "vllm/model_executor/models/qwen2_5_vl.py::Qwen2_5_VLForConditionalGeneration"
_ORACLES = "strategies.qwen2_5_vl_evs.oracles"
_UPSTREAM_CLASS = "vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VLForConditionalGeneration"
_INPUTS = "strategies.qwen2_5_vl_evs.inputs"
# The copies' gpu_sync_allowed() region (video: the two boolean-mask gathers): syncs inside are upstream's own.
ALLOW_REGION = "optimized.qwen2_5_vl_evs:sync_allowed_depth"

TARGETS = [
    Target(
        name="qwen25-vl-image-evs",
        upstream=(f"{_QWEN25}._postprocess_image_embeds_evs",),
        legacy="legacy.qwen2_5_vl_evs:Qwen2_5_VLForConditionalGeneration._postprocess_image_embeds_evs",
        optimized="optimized.qwen2_5_vl_evs:Qwen2_5_VLForConditionalGeneration._postprocess_image_embeds_evs",
        upstream_impl=f"{_UPSTREAM_CLASS}._postprocess_image_embeds_evs",
        inputs=f"{_INPUTS}:Qwen25ImageEvsInputs",
        # A concatenation of the embeddings and integer positions: bitwise, and fresh contiguous tensors.
        comparison=Comparison(floats="exact", layout=True),
        # By design none: the grid is on the host (keep_on_cpu), the positions go up pinned and non_blocking.
        # Not measured on CUDA (no GPU in this session). Wide: a device grid's .tolist().
        expected_optimized_syncs=0,
        sync_budget=f"{_INPUTS}:image_sync_budget",
        versions=VERSIONS,
        description="EVS image mrope positions staged with async_tensor_h2d (0.29.0 -> 0.30.0)",
        invariants=(f"{_ORACLES}:evs_items_have_their_shape",
                    f"{_ORACLES}:evs_rows_are_input_rows_with_their_positions"),
        reference=f"{_ORACLES}:IMAGE_EVS_REFERENCE",
        # No consumer: embed_multimodal returns the items; the model runner scatters them into inputs_embeds
        # on the device (recompute_mrope_positions reads the position channels of the device tensors).
    ),
    Target(
        name="qwen25-vl-video-evs",
        upstream=(f"{_QWEN25}._postprocess_video_embeds_evs",),
        legacy="legacy.qwen2_5_vl_evs:Qwen2_5_VLForConditionalGeneration._postprocess_video_embeds_evs",
        optimized="optimized.qwen2_5_vl_evs:Qwen2_5_VLForConditionalGeneration._postprocess_video_embeds_evs",
        upstream_impl=f"{_UPSTREAM_CLASS}._postprocess_video_embeds_evs",
        inputs=f"{_INPUTS}:Qwen25VideoEvsInputs",
        comparison=Comparison(floats="exact", layout=True),
        # By design none outside the allow region: grid and seconds on the host (keep_on_cpu), positions up
        # pinned and non_blocking; the two boolean-mask gathers sync inside gpu_sync_allowed() (allowed).
        # Not measured on CUDA (no GPU in this session). Wide: a device grid's .tolist(), device seconds' .item().
        expected_optimized_syncs=0,
        sync_budget=f"{_INPUTS}:video_sync_budget",
        sync_allow_region=ALLOW_REGION,
        versions=VERSIONS,
        description="EVS video pruning + mrope positions staged with async_tensor_h2d (0.29.0 -> 0.30.0)",
        invariants=(f"{_ORACLES}:evs_items_have_their_shape",
                    f"{_ORACLES}:evs_rows_are_input_rows_with_their_positions"),
        # No reference: strategies/qwen2_5_vl_evs/oracles.py says why.
    ),
]
