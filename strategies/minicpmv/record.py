"""minicpmv-resampler-forward: Resampler2_5.forward, vllm 0.29.0 -> 0.30.0.

0.29.0's forward read the sizes back per call: ``_adjust_pos_cache`` (two ``.item()``), ``patch_len.max().item()``
to size the mask and the positional embedding, and ``tgt_sizes[i].tolist()`` per slice to slice the pos cache
(pad_sequence of the slices). 0.30.0 pinned-copies host sizes to the device (``async_tensor_h2d``), takes the
length from ``x.shape[1]`` instead of ``patch_len.max().item()``, gathers the pos cache with ``seq_idx // tgt_w``
and ``seq_idx % tgt_w`` (clamped to the cache), masks ``seq_idx >= patch_len`` and skips ``_adjust_pos_cache``
under CUDA graph capture.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_INPUTS = "strategies.minicpmv.inputs"

TARGETS = [
    Target(
        name="minicpmv-resampler-forward",
        upstream=(
            "vllm/model_executor/models/minicpmv.py::Resampler2_5.forward",
        ),
        legacy="legacy.minicpmv:Resampler2_5.forward",
        optimized="optimized.minicpmv:Resampler2_5.forward",
        upstream_impl="vllm.model_executor.models.minicpmv:Resampler2_5.forward",
        inputs=f"{_INPUTS}:MinicpmvResamplerInputs",
        # Attention in bf16/fp16: the same ops on both sides, but the padded keys' positional rows come from
        # pad_sequence on one side and torch.where on the other.
        comparison=Comparison(floats="close"),
        # Sizes on the host (every eager caller): none; on the device (the graph's warm-up run):
        # _adjust_pos_cache's two .item() reads; one more where the cache is rebuilt (sync_budget).
        expected_optimized_syncs=0,
        sync_budget=f"{_INPUTS}:resampler_sync_budget",
        versions=VERSIONS,
        description="MiniCPM-V resampler: per-slice pos-embed loop and patch_len.max().item() -> vectorised gather "
                    "sized by x.shape[1], host sizes pinned-copied",
        # Written from the upstream meaning of the result, not from either copy (strategies/minicpmv/oracles.py).
        invariants=(
            "strategies.minicpmv.oracles:resampler_output_has_one_row_per_query",
            "strategies.minicpmv.oracles:resampler_output_is_finite",
        ),
        reference="strategies.minicpmv.oracles:PER_SLICE_REFERENCE",
    ),
]
