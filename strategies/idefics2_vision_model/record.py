"""idefics2-position-ids: ``Idefics2VisionEmbeddings.get_position_ids``, and idefics2-embeddings-forward:
``Idefics2VisionEmbeddings.forward`` (vllm/model_executor/models/idefics2_vision_model.py), vllm 0.29.0 -> 0.30.0.

0.29.0 copied the patch mask and ``tgt_sizes`` to the host (inside ``gpu_sync_allowed()``) and
bucketized each image's fractional patch coordinates in a Python loop, writing a pinned host buffer that
it then moved to the weights' device; 0.30.0 computes all images at once on the mask's device
(``i // stride_w``, ``h_idx / nb_h``, one ``bucketize``, ``torch.where(mask, ids, 0)``), copying a host
``tgt_sizes`` up with ``async_tensor_h2d``. The tower of Idefics2/Idefics3/SmolVLM, MiniCPM-V,
Phi-4-multimodal and Aria.

The forward is the same text in 0.29.0 and 0.30.0 (patch conv + ``position_embedding`` of the ids
``get_position_ids`` makes): its change is the one above. In 0.28.0 the forward held that per-image loop
itself (an unpinned host buffer moved with ``non_blocking=True``); 0.29.0 split it out into
``get_position_ids`` and pinned the buffer. So idefics2-embeddings-forward is the target that builds against
``--legacy vllm==0.28.0`` (where ``get_position_ids`` does not exist and idefics2-position-ids is
cannot-build) and fuzzes the whole 0.28.0 -> 0.34.0 change of the forward, 0.34.0's ``get_position_ids``
included. It claims only ``forward``: a claimed ``get_position_ids`` would make its 0.28.0 side
cannot-build too (docs/sides.md: every claimed definition must build).
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
    Target(
        name="idefics2-embeddings-forward",
        upstream=(f"{_IDEFICS2}::Idefics2VisionEmbeddings.forward",),
        legacy="legacy.idefics2_vision_model:Idefics2VisionEmbeddings.forward",
        optimized="optimized.idefics2_vision_model:Idefics2VisionEmbeddings.forward",
        upstream_impl="vllm.model_executor.models.idefics2_vision_model:Idefics2VisionEmbeddings.forward",
        inputs="strategies.idefics2_vision_model.inputs:Idefics2EmbeddingsForwardInputs",
        # Float embeddings: conv + table row, the same ops on both sides; close, not exact, as a
        # rebuilt side's conv may take another kernel. Layout not compared: the result is a transposed
        # view of the conv output on both sides, and the encoder consumes it as a tensor.
        comparison=Comparison(floats="close"),
        # By design none: the patch conv and the embedding lookup run on the device, and 0.30.0's
        # get_position_ids is sync-free (a host tgt_sizes goes up through async_tensor_h2d). 0.28.0 /
        # 0.29.0 made two (mask.cpu(), tgt_sizes.cpu(), inside gpu_sync_allowed()). To be confirmed on CUDA.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="the embeddings forward: per-image host bucketize loop -> vectorised bucketize on the device "
                    "(0.28.0 in the forward, 0.29.0 in get_position_ids, 0.30.0 vectorised)",
        invariants=(
            "strategies.idefics2_vision_model.oracles:embeddings_shape_follows_the_pixels",
            "strategies.idefics2_vision_model.oracles:embeddings_padding_reads_row_zero",
            "strategies.idefics2_vision_model.oracles:embeddings_patches_read_their_bucket",
        ),
        reference="strategies.idefics2_vision_model.oracles:FORWARD_REFERENCE",
        # No consumer: Idefics2VisionTransformer.forward hands the embeddings to the encoder on the
        # device; nothing reads them on the host.
    ),
]
