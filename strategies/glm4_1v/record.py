"""docs/design.md row 1: glm4_1v vision embeddings and the coordinates built for them."""

from fuzz.api import Comparison, Target

DESIGN_ROWS = (1,)
_GLM = "vllm/model_executor/models/glm4_1v.py"

TARGETS = [
    Target(
        name="glm4v-embeddings",
        upstream=(f"{_GLM}::Glm4vVisionEmbeddings.forward",),
        legacy="legacy.glm4_1v:Glm4vVisionEmbeddings.forward",
        optimized="optimized.glm4_1v:Glm4vVisionEmbeddings.forward",
        upstream_impl="vllm.model_executor.models.glm4_1v:Glm4vVisionEmbeddings.forward",
        inputs="strategies.glm4_1v.inputs:Glm4EmbeddingsInputs",
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=0,
        description="lengths/image_shapes expanded with numpy + one async H2D, DP cycling by modulo",
        invariants=(
            "strategies.glm4_1v.oracles:embeddings_shape_follows_tokens",
            "strategies.glm4_1v.oracles:embeddings_cycle_image_shapes",
            "strategies.glm4_1v.oracles:embeddings_identity_grid_reads_the_table",
        ),
        reference="strategies.glm4_1v.oracles:EMBEDDINGS_REFERENCE",
        # No consumer: the only caller, pos_embeds_interpolate, torch.cat()s the results on the
        # device; nothing reads them on the host.
    ),
    Target(
        name="glm4v-pos-embeds",
        upstream=(f"{_GLM}::Glm4vVisionTransformer.pos_embeds_interpolate",),
        legacy="legacy.glm4_1v:Glm4vVisionTransformer.pos_embeds_interpolate",
        optimized="optimized.glm4_1v:Glm4vVisionTransformer.pos_embeds_interpolate",
        inputs="strategies.glm4_1v.inputs:Glm4PosEmbedsInputs",
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=0,
        description="host-built coordinates staged pinned + non-blocking",
        invariants=(
            "strategies.glm4_1v.oracles:pos_embeds_shape_follows_grids",
            "strategies.glm4_1v.oracles:pos_embeds_frames_repeat",
            "strategies.glm4_1v.oracles:pos_embeds_identity_grid_reads_the_table",
        ),
        reference="strategies.glm4_1v.oracles:POS_EMBEDS_REFERENCE",
        # No consumer: prepare_encoder_metadata caches it as metadata["pos_embeds"], the encoder
        # CUDA graph copies it into its buffers (buffer_keys), and Glm4vVisionTransformer.forward
        # adds it on the device (`x = x + pos_embeds`); no host read.
    ),
]
