"""idefics2-position-ids: ``Idefics2VisionEmbeddings.get_position_ids``
(vllm/model_executor/models/idefics2_vision_model.py), vllm 0.29.0 -> 0.30.0.

0.29.0 copied the patch mask and ``tgt_sizes`` to the host (inside ``gpu_sync_allowed()``) and
bucketized each image's fractional patch coordinates in a Python loop, writing a pinned host buffer that
it then moved to the weights' device; 0.30.0 computes all images at once on the mask's device
(``i // stride_w``, ``h_idx / nb_h``, one ``bucketize``, ``torch.where(mask, ids, 0)``), copying a host
``tgt_sizes`` up with ``async_tensor_h2d``. The tower of Idefics2/Idefics3/SmolVLM, MiniCPM-V,
Phi-4-multimodal and Aria.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_IDEFICS2 = "vllm/model_executor/models/idefics2_vision_model.py"

TARGETS = [
    Target(
        name="idefics2-position-ids",
        upstream=(f"{_IDEFICS2}::Idefics2VisionEmbeddings.get_position_ids",),
        legacy="legacy.idefics2_vision_model:Idefics2VisionEmbeddings.get_position_ids",
        optimized="optimized.idefics2_vision_model:Idefics2VisionEmbeddings.get_position_ids",
        upstream_impl="vllm.model_executor.models.idefics2_vision_model:Idefics2VisionEmbeddings.get_position_ids",
        inputs="strategies.idefics2_vision_model.inputs:Idefics2PositionIdsInputs",
        # Integer ids: always exact. No layout: the ids only index nn.Embedding.
        comparison=Comparison(floats="exact"),
        # By design none: every step runs on the mask's device; a host tgt_sizes (MiniCPM-V,
        # keep_on_cpu=True) goes up through async_tensor_h2d (pinned, non_blocking). 0.29.0 made two
        # (mask.cpu(), tgt_sizes.cpu()). To be confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="per-image host bucketize loop -> one vectorised bucketize on the device (0.29.0 -> 0.30.0)",
        invariants=(
            "strategies.idefics2_vision_model.oracles:position_ids_shape_follows_the_mask",
            "strategies.idefics2_vision_model.oracles:position_ids_padding_is_zero",
            "strategies.idefics2_vision_model.oracles:position_ids_bucket_each_coordinate",
        ),
        # No reference: at an exact bucket boundary the releases' float arithmetic rounds either way
        # (F20), so the invariant allows either bucket there and states the rest exactly.
        # No consumer: the ids index self.position_embedding on the device; no host read.
    ),
]
