"""vllm/model_executor/layers/attention/mm_encoder_attention.py, 0.28.0 -> 0.29.0:
``MMEncoderAttention.maybe_compute_seq_lens`` (vLLM #54292).

For the FlashInfer ViT backend it turns the host ``cu_seqlens`` into per-sequence lengths padded
to FlashInfer's batch buckets and sends them to the device. 0.28.0 did
``torch.from_numpy(lengths).to(device, non_blocking=True)``: a "non-blocking" copy from pageable
memory, which CUDA stages synchronously. 0.29.0 calls ``async_tensor_h2d(lengths, device=device)``
(vllm/utils/torch_utils.py), which pins the host tensor first (``PIN_MEMORY``), so the copy is
truly asynchronous. Every ViT with FlashInfer passes here once or twice per encoder forward
(qwen2.5-vl, qwen3-vl, glm4.1v, pixtral, ultravox, kimi-k2.5, ...).
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.29.0")
DESIGN_ROWS = (99,)
_ORACLES = "strategies.mm_encoder_attention.oracles"

TARGETS = [
    Target(
        name="mm-encoder-seq-lens",
        upstream=(
            "vllm/model_executor/layers/attention/mm_encoder_attention.py::MMEncoderAttention.maybe_compute_seq_lens",
        ),
        legacy="legacy.mm_encoder_attention:MMEncoderAttention.maybe_compute_seq_lens",
        optimized="optimized.mm_encoder_attention:MMEncoderAttention.maybe_compute_seq_lens",
        upstream_impl="vllm.model_executor.layers.attention.mm_encoder_attention:MMEncoderAttention.maybe_compute_seq_lens",
        inputs="strategies.mm_encoder_attention.inputs:SeqLensInputs",
        # Integers only; the lengths go to FlashInfer's cuDNN prefill as a contiguous int32 buffer.
        comparison=Comparison(floats="exact", layout=True),
        # By design none: a pinned host copy (pin_memory() is a host copy) and a non_blocking H2D
        # copy; cu_seqlens never leaves the host. To be confirmed on CUDA.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="#54292: FlashInfer ViT seq lens go up pinned via async_tensor_h2d (0.28.0 -> 0.29.0)",
        invariants=(
            f"{_ORACLES}:seq_lens_only_for_flashinfer",
            f"{_ORACLES}:seq_lens_on_the_device_in_the_input_dtype",
            f"{_ORACLES}:seq_lens_leave_cu_seqlens_alone",
        ),
        reference=f"{_ORACLES}:SEQ_LENS_REFERENCE",
        # No consumer: the lengths go to FlashInfer's cuDNN prefill on the device
        # (vit_attn_wrappers.vit_flashinfer_wrapper); nothing reads them on the host.
    ),
]
