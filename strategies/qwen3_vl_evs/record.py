"""Qwen3-VL's EVS host logic (vllm/model_executor/models/qwen3_vl.py), vllm 0.29.0 -> 0.30.0.

``Qwen3VLForConditionalGeneration._get_expanded_positions`` builds the mrope positions of a pruned video's full
replacement sequence from the unpruned one's (``get_mrope_input_positions``, numpy on the host);
``_postprocess_image_embeds_evs`` appends an image's positions (``compute_mrope_for_media``) to its embeddings.
0.30.0 copies those host positions to the device with ``async_tensor_h2d`` (a pinned staging buffer, then a
non-blocking copy) instead of a pageable ``.to(device, non_blocking=True)``. The two methods are the same text in
0.28.0 and 0.29.0; 0.31.0 .. 0.34.0 change only docstrings and, in ``_get_expanded_positions``, the dummy field
of the multimodal element (``field=None  # HACK.`` -> ``MultiModalFieldConfig.batched("video").field``), which
nothing here reads, so ``--legacy vllm==0.28.0 --optimized vllm==0.34.0`` fuzzes the same change. Not the same
pair as strategies/qwen3_vl (0.28.0 -> 0.29.0, the vision tower's rot_pos_ids): hence a copy module of its own.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_QWEN3 = "vllm/model_executor/models/qwen3_vl.py::Qwen3VLForConditionalGeneration"
_ORACLES = "strategies.qwen3_vl_evs.oracles"
_INPUTS = "strategies.qwen3_vl_evs.inputs"
# The copies' gpu_sync_allowed() region (the boolean-mask gathers and scatters): syncs inside are upstream's own.
ALLOW_REGION = "optimized.qwen3_vl_evs:sync_allowed_depth"

TARGETS = [
    Target(
        name="qwen3vl-image-evs",
        upstream=(f"{_QWEN3}._postprocess_image_embeds_evs",),
        legacy="legacy.qwen3_vl_evs:Qwen3VLForConditionalGeneration._postprocess_image_embeds_evs",
        optimized="optimized.qwen3_vl_evs:Qwen3VLForConditionalGeneration._postprocess_image_embeds_evs",
        upstream_impl="vllm.model_executor.models.qwen3_vl:Qwen3VLForConditionalGeneration._postprocess_image_embeds_evs",
        inputs=f"{_INPUTS}:Qwen3ImageEvsInputs",
        # Concatenations of the embeddings and integer positions (or the inputs themselves): bitwise.
        comparison=Comparison(floats="exact", layout=True),
        # By design none: the grid is on the host (keep_on_cpu), the positions go up pinned and non_blocking.
        # Not measured on CUDA (no GPU in this session). Wide: a device grid's .tolist().
        expected_optimized_syncs=0,
        sync_budget=f"{_INPUTS}:image_sync_budget",
        versions=VERSIONS,
        description="Qwen3-VL EVS image mrope positions staged with async_tensor_h2d (0.29.0 -> 0.30.0)",
        invariants=(f"{_ORACLES}:image_evs_items_have_their_shape",
                    f"{_ORACLES}:image_evs_embeddings_come_first_and_unchanged"),
        reference=f"{_ORACLES}:IMAGE_EVS_REFERENCE",
        # No consumer: embed_multimodal returns the items; recompute_mrope_positions reads the position channels
        # of the device tensors later, outside this call.
    ),
    Target(
        name="qwen3vl-expanded-positions",
        upstream=(f"{_QWEN3}._get_expanded_positions",),
        legacy="legacy.qwen3_vl_evs:Qwen3VLForConditionalGeneration._get_expanded_positions",
        optimized="optimized.qwen3_vl_evs:Qwen3VLForConditionalGeneration._get_expanded_positions",
        upstream_impl="vllm.model_executor.models.qwen3_vl:Qwen3VLForConditionalGeneration._get_expanded_positions",
        inputs=f"{_INPUTS}:Qwen3ExpandedPositionsInputs",
        comparison=Comparison(floats="exact", layout=True),
        # By design none outside the allow region: the unpruned mrope goes up pinned and non_blocking; the
        # boolean-mask gathers and scatters sync inside gpu_sync_allowed() (allowed). The token-id tensors are
        # built with torch.tensor(..., device=device) (a pageable copy, unchanged by the PR; _cached_tensor
        # once per device). Not measured on CUDA (no GPU in this session).
        # Measured on an H100 (lab/scripts/evs_sync_counts.py, 2026-12-06): 6 per call, both copies -- the
        # torch.tensor(..., device=) of the unpruned ids and 5 masked reads and writes inside
        # gpu_sync_allowed() -- and 7 on 1 of 20 caller specs; 0.30.0 changed none of them (its change is the
        # pageable copy made async_tensor_h2d). The most seen, as a bound.
        expected_optimized_syncs=7,
        sync_allow_region=ALLOW_REGION,
        versions=VERSIONS,
        description="Qwen3-VL EVS expanded video positions, unpruned mrope via async_tensor_h2d (0.29.0 -> 0.30.0)",
        invariants=(f"{_ORACLES}:expanded_positions_flag_their_tokens",
                    f"{_ORACLES}:expanded_positions_text_counts_up_and_frames_sit_after_it"),
        reference=f"{_ORACLES}:EXPANDED_POSITIONS_REFERENCE",
        # No consumer: the positions are concatenated onto the video's final embeddings on the device.
    ),
]
