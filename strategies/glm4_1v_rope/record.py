"""glm4v-rot-pos-emb: ``Glm4vVisionTransformer.rot_pos_emb`` (vllm/model_executor/models/glm4_1v.py),
vllm 0.28.0 -> 0.29.0.

0.28.0 built the 2-D position ids of every image on the host (``torch.arange(h)``/``(w)``, the
merge-block permute, ``repeat(t, 1)``, ``torch.cat``) and moved them with
``pos_ids.to(cos.device, non_blocking=True)``, a copy from pageable memory; 0.29.0 builds them with
``torch.arange(..., device=self.device)`` on the model's device and indexes the rope cache with them
directly: no H2D copy (issue #43). The same change as qwen2-vl-rot-pos-emb, in GLM-4.1V's tower, which
also returns the ids. Its own copy module (glm4_1v_rope): the glm4_1v module holds the 0.27.1/0.28.0 pair.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.29.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="glm4v-rot-pos-emb",
        upstream=(
            "vllm/model_executor/models/glm4_1v.py::Glm4vVisionTransformer.rot_pos_emb",
        ),
        legacy="legacy.glm4_1v_rope:Glm4vVisionTransformer.rot_pos_emb",
        optimized="optimized.glm4_1v_rope:Glm4vVisionTransformer.rot_pos_emb",
        upstream_impl="vllm.model_executor.models.glm4_1v:Glm4vVisionTransformer.rot_pos_emb",
        inputs="strategies.glm4_1v_rope.inputs:Glm4vRotPosEmbInputs",
        # A gather of cache rows and integer ids: bitwise. Layout too: cos/sin go straight to the rotary
        # kernels (and into the encoder CUDA graph's buffers).
        comparison=Comparison(floats="exact", layout=True),
        # By design none: arange/reshape/permute/stack/cat and the gather all run on the device; the
        # host only loops over the Python grid list. Unverified on CUDA here.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="rot_pos_emb builds the position ids on the device, no pageable H2D copy (0.28.0 -> 0.29.0)",
        invariants=(
            "strategies.glm4_1v_rope.oracles:glm_rot_pos_emb_rope_is_qwen2_vl_rope",
            "strategies.glm4_1v_rope.oracles:glm_rot_pos_emb_pos_ids_are_the_patch_positions",
        ),
        reference="strategies.glm4_1v_rope.oracles:ROT_POS_EMB_REFERENCE",
        # No consumer: prepare_encoder_metadata stores cos/sin as metadata["rotary_pos_emb_cos"/"_sin"]
        # (applied on the device by the vision blocks) and discards pos_ids; no host read.
    ),
]
