"""docs/design.md row 5: paddleocr_vl's SigLIP encoder and the inputs encode_image stages for it."""

from fuzz.api import Comparison, Target

DESIGN_ROWS = (5,)
_PADDLE = "vllm/model_executor/models/paddleocr_vl.py"

TARGETS = [
    Target(
        name="paddleocr-encoder",
        upstream=(f"{_PADDLE}::SiglipEncoder.forward",),
        legacy="legacy.paddleocr_vl:SiglipEncoder.forward",
        optimized="optimized.paddleocr_vl:SiglipEncoder.forward",
        inputs="strategies.paddleocr_vl.inputs:PaddleOCREncoderInputs",
        # The rope rows are elementwise products: the same bits whatever the table size.
        comparison=Comparison(floats="exact", layout=True),
        # Caller: ids built on the device from host grids, table size from the
        # host grids, cu_seqlens already on the device -- nothing reads back.
        expected_optimized_syncs=0,
        description="rope table size max(h, w) from the host grids instead of pids.max() + 1; "
        "cu_seqlens staged with async_tensor_h2d / non_blocking",
        invariants=(
            "strategies.paddleocr_vl.oracles:paddleocr_layers_share_metadata",
            "strategies.paddleocr_vl.oracles:paddleocr_cu_seqlens_running_sum",
            "strategies.paddleocr_vl.oracles:paddleocr_max_seqlen_is_longest_image",
            "strategies.paddleocr_vl.oracles:paddleocr_rope_rows_follow_tokens",
            "strategies.paddleocr_vl.oracles:paddleocr_rope_depends_only_on_position",
        ),
        reference="strategies.paddleocr_vl.oracles:PADDLEOCR_ENCODER",
        # Each layer's attention: max_seqlen.item() (flash / triton wrappers) or
        # (cu_seqlens[1:] - cu_seqlens[:-1]).tolist() (torch SDPA wrapper).
        consumer="strategies.paddleocr_vl.oracles:paddleocr_encoder_layer_reads",
    ),
    Target(
        name="paddleocr-encode-image",
        upstream=(f"{_PADDLE}::PaddleOCRVLForConditionalGeneration.encode_image",),
        legacy="legacy.paddleocr_vl:PaddleOCRVLForConditionalGeneration.encode_image",
        optimized="optimized.paddleocr_vl:PaddleOCRVLForConditionalGeneration.encode_image",
        inputs="strategies.paddleocr_vl.inputs:PaddleOCREncodeImageInputs",
        comparison=Comparison(floats="exact", layout=True),
        # The kept `image_grid_thw.tolist()` of the device grid row (a D2H copy).
        # The position ids cross `.to(device, non_blocking=True)` from a small
        # pageable tensor, which the driver stages without waiting (F4
        # corrected); cu_seqlens go pinned.
        expected_optimized_syncs=1,
        description="host-built position ids and cu_seqlens staged non-blocking / async_tensor_h2d",
        invariants=(
            "strategies.paddleocr_vl.oracles:paddleocr_image_cu_seqlens_running_sum",
            "strategies.paddleocr_vl.oracles:paddleocr_image_position_ids_follow_grid",
            "strategies.paddleocr_vl.oracles:paddleocr_image_grid_is_host_ints",
        ),
        reference="strategies.paddleocr_vl.oracles:PADDLEOCR_ENCODE_IMAGE",
        # The tower's encoder reads the staged cu_seqlens (one layer's worth).
        consumer="strategies.paddleocr_vl.oracles:paddleocr_tower_reads",
    ),
]
