"""keep-on-cpu-paddleocr-grid-thw: PaddleOCR-VL's image field config and its consumer, vllm 0.28.0 -> 0.34.0.

Two upstream steps, one target: 0.29.0 marks ``image_grid_thw`` ``keep_on_cpu=True`` (the grid reaches the
model on the host), and 0.33.0 batches the image path (``pixel_values`` ``flat_from_sizes`` instead of
per-image ``batched``; ``_process_image_input`` reads the host grid with ``.tolist()`` and makes one
``encode_image`` call for the whole batch with a multi-segment ``cu_seqlens``; ``Projector.forward`` runs
norm and MLP over the concatenated images). 0.33.0 and 0.34.0 hold the same text for all four.
"""

from fuzz.api import Comparison, Target

VERSIONS = ("0.28.0", "0.34.0")
DESIGN_ROWS = (99,)
_PADDLE = "vllm/model_executor/models/paddleocr_vl.py"

TARGETS = [
    Target(
        name="keep-on-cpu-paddleocr-grid-thw",
        upstream=(
            f"{_PADDLE}::PaddleOCRVLForConditionalGeneration._process_image_input",
            f"{_PADDLE}::PaddleOCRVLMultiModalProcessor._get_mm_fields_config",
            f"{_PADDLE}::PaddleOCRVLForConditionalGeneration.encode_image",
            f"{_PADDLE}::Projector.forward",
        ),
        legacy="legacy.paddleocr_fields:PaddleOCRVLForConditionalGeneration.embed_multimodal",
        optimized="optimized.paddleocr_fields:PaddleOCRVLForConditionalGeneration.embed_multimodal",
        inputs="strategies.paddleocr_fields.inputs:PaddleOCRGridThwInputs",
        # One tower call and one projector matmul for the batch (0.34.0) against one per image (0.28.0):
        # the same per-token math, summed in another blocking. The projector's pre_norm is a LayerNorm over
        # the stand-in tower's 1-4 features: where they nearly agree, x - mean cancels and one rounding of
        # the mean (another CUDA kernel for another row count) is amplified up to 1 / sqrt(eps) = 316x. On
        # an H200, float32, caller input seed 380: 2.67e-5 apart at 9.26 (the default allows 2.2e-5;
        # lab/gpu-runs/2026-12-06g-h200.md). 1e-4 is ~30x that; a wrong grid, id or segment moves O(1).
        # Half types: the projector's matmuls get another row count (batch against image), so another cuBLAS
        # kernel rounds the fp32 sums; where an output is a cancellation of O(1) terms that is an ulp or two
        # *of 1*, which torch's atol of 1e-5 cannot hold. On an H100, float16, --stress seed 3: 2.44e-4 apart at
        # -0.183 (2 ulps there; the default allows 1.9e-4; lab/gpu-runs/2026-12-06h-h100.md). atol = 2 ulps of 1
        # in each half type (bfloat16 by the same rule, not yet seen), rtol torch's for bfloat16, 1e-3 for float16.
        comparison=Comparison(floats="close", tolerances=(("float32", 1e-4, 1e-4), ("float16", 1e-3, 2e-3),
                                                          ("bfloat16", 1.6e-2, 1.6e-2))),
        # 0.34.0: the grid is a host tensor (.tolist(), the projector's t/h/w: no sync); position ids go
        # up from a pinned buffer non-blocking; cu_seqlens stay on the host for the tower (whose
        # stand-in stages them pinned, as SiglipEncoder's async_tensor_h2d does).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="image_grid_thw kept on CPU and the image batch encoded in one tower call: "
                    "grid read on the host for sizes, position ids and cu_seqlens",
        invariants=(
            "strategies.paddleocr_fields.oracles:paddleocr_fields_one_embedding_per_image",
            "strategies.paddleocr_fields.oracles:paddleocr_fields_tower_segments",
        ),
    ),
]
