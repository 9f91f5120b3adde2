"""docs/design.md row 1: glm4_1v vision embeddings and the coordinates built for them."""

from fuzz.targets import Comparison, Target

DESIGN_ROWS = (1,)
_GLM = "vllm/model_executor/models/glm4_1v.py"

TARGETS = [
    Target(
        name="glm4v-embeddings",
        upstream=(f"{_GLM}::Glm4vVisionEmbeddings.forward",),
        legacy="legacy.glm4_1v:Glm4vVisionEmbeddings.forward",
        optimized="optimized.glm4_1v:Glm4vVisionEmbeddings.forward",
        upstream_impl="vllm.model_executor.models.glm4_1v:Glm4vVisionEmbeddings.forward",
        inputs="strategies.glm4_1v:Glm4EmbeddingsInputs",
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=0,
        description="lengths/image_shapes expanded with numpy + one async H2D, DP cycling by modulo",
    ),
    Target(
        name="glm4v-pos-embeds",
        upstream=(f"{_GLM}::Glm4vVisionTransformer.pos_embeds_interpolate",),
        legacy="legacy.glm4_1v:Glm4vVisionTransformer.pos_embeds_interpolate",
        optimized="optimized.glm4_1v:Glm4vVisionTransformer.pos_embeds_interpolate",
        inputs="strategies.glm4_1v:Glm4PosEmbedsInputs",
        comparison=Comparison(floats="close", layout=True),
        expected_optimized_syncs=0,
        description="host-built coordinates staged pinned + non-blocking",
    ),
]
