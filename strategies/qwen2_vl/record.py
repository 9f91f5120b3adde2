"""qwen2-vl-rot-pos-emb: ``Qwen2VisionTransformer.rot_pos_emb`` (vllm/model_executor/models/qwen2_vl.py),
vllm 0.28.0 -> 0.29.0.

0.28.0 built the 2-D position ids of every image on the host (``torch.arange(h)``/``(w)``, the
merge-block permute, ``repeat(t, 1)``, ``torch.cat``) and moved them with
``pos_ids.to(cos.device, non_blocking=True)``, a copy from pageable memory; 0.29.0 builds them
with ``torch.arange(..., device=self.device)`` on the model's device and indexes the rope cache
with them directly: no H2D copy at all (issue #43: where vLLM's sync removal went next). The
device the ids are built on changed from the cache's (``cos.device``) to the weights'
(``self.device``); in a loaded model both are the same device.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.29.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="qwen2-vl-rot-pos-emb",
        upstream=(
            "vllm/model_executor/models/qwen2_vl.py::Qwen2VisionTransformer.rot_pos_emb",
        ),
        legacy="legacy.qwen2_vl:Qwen2VisionTransformer.rot_pos_emb",
        optimized="optimized.qwen2_vl:Qwen2VisionTransformer.rot_pos_emb",
        upstream_impl="vllm.model_executor.models.qwen2_vl:Qwen2VisionTransformer.rot_pos_emb",
        inputs="strategies.qwen2_vl.inputs:Qwen2RotPosEmbInputs",
        # A gather of cache rows: bitwise. Layout too: the pair goes straight to the rotary kernels
        # (and into the encoder CUDA graph's buffers).
        comparison=Comparison(floats="exact", layout=True),
        # By design none: arange/reshape/permute/stack/cat and the gather all run on the device;
        # the host only loops over the Python grid list. To be confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="rot_pos_emb builds the position ids on the device, no pageable H2D copy (0.28.0 -> 0.29.0)",
        invariants=(
            "strategies.qwen2_vl.oracles:rot_pos_emb_shape_follows_grids",
            "strategies.qwen2_vl.oracles:rot_pos_emb_frames_repeat",
            "strategies.qwen2_vl.oracles:rot_pos_emb_rows_follow_the_patches",
        ),
        reference="strategies.qwen2_vl.oracles:ROT_POS_EMB_REFERENCE",
        # No consumer: prepare_encoder_metadata stores the pair as metadata["rotary_pos_emb_cos"/"_sin"]
        # and the vision blocks apply it on the device; no host read.
    ),
]
