"""qwen3vl-rot-pos-emb: Qwen3_VisionTransformer.rot_pos_emb, vllm 0.28.0 -> 0.29.0.

``rot_pos_emb`` is the same text in both releases; what changed is the helper it calls,
``rot_pos_ids``: 0.28.0 a ``@staticmethod`` under a process-wide ``@lru_cache(maxsize=1024)``, 0.29.0 an
instance method with a per-tower ``LRUCache(capacity=1024)`` (built in ``__init__``). Both build the ids on
the host with numpy and copy them through a pinned buffer with ``.to(self.device, non_blocking=True)``.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.29.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="qwen3vl-rot-pos-emb",
        upstream=(
            "vllm/model_executor/models/qwen3_vl.py::Qwen3_VisionTransformer.rot_pos_emb",
            "vllm/model_executor/models/qwen3_vl.py::Qwen3_VisionTransformer.rot_pos_ids",
        ),
        legacy="legacy.qwen3_vl:Qwen3_VisionTransformer.rot_pos_emb",
        optimized="optimized.qwen3_vl:Qwen3_VisionTransformer.rot_pos_emb",
        upstream_impl="vllm.model_executor.models.qwen3_vl:Qwen3_VisionTransformer.rot_pos_emb",
        inputs="strategies.qwen3_vl.inputs:Qwen3RotPosEmbInputs",
        comparison=Comparison(floats="exact", layout=True),
        # By design none: the ids are built on the host and copied from a pinned buffer, non-blocking.
        # Not measured on CUDA (no GPU in this session).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="rot_pos_ids: process-wide lru_cache -> per-tower LRUCache (0.28.0 -> 0.29.0)",
        # Written from the upstream meaning of the result, not from either copy (strategies/qwen3_vl/oracles.py).
        invariants=(
            "strategies.qwen3_vl.oracles:qwen3_rot_pos_emb_shape_follows_grids",
            "strategies.qwen3_vl.oracles:qwen3_rot_pos_emb_frames_repeat",
            "strategies.qwen3_vl.oracles:qwen3_rot_pos_emb_rows_follow_the_patches",
        ),
        reference="strategies.qwen3_vl.oracles:QWEN3_ROT_POS_EMB_REFERENCE",
    ),
]
