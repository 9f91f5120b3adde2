"""vllm/v1/attention/backends/gdn_attn.py, 0.29.0 -> 0.30.0 (vLLM #55404):
``GDNAttentionMetadataBuilder.build_for_cudagraph_capture``.

Capturing FULL CUDA graphs for GatedDeltaNet (Qwen3-Next, Qwen3.5) builds the decode metadata of a
dummy uniform batch. 0.29.0 derived the per-request draft-token counts from the device
``query_start_loc``: ``(torch.diff(m.query_start_loc) - 1).cpu()``, a device-to-host read (a sync)
per capture size. 0.30.0 reads the host mirror instead: ``torch.diff(m.query_start_loc_cpu).sub_(1)``,
asserting the shapes agree. Both pass the counts to ``build``, which picks the spec-decode path
from them. 0.30.0 also makes ``__init__`` call the base class's (same attributes) and changes
``async_tensor_h2d`` (pinned staging of an unpinned tensor; the spec mask goes through it).
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_GDN = "vllm/v1/attention/backends/gdn_attn.py"
_ORACLES = "strategies.gdn_attn.oracles"

TARGETS = [
    Target(
        name="gdn-cudagraph-capture-metadata",
        upstream=(
            f"{_GDN}::GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
            f"{_GDN}::GDNAttentionMetadataBuilder.build",
        ),
        legacy="legacy.gdn_attn:GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
        optimized="optimized.gdn_attn:GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
        upstream_impl="vllm.v1.attention.backends.gdn_attn:GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
        inputs="strategies.gdn_attn.inputs:CaptureInputs",
        # Integers and masks only; the metadata goes to the GDN kernels inside the graph.
        comparison=Comparison(floats="exact", layout=True),
        # By design none: the draft counts come from the host mirror, the spec mask goes up with
        # async_tensor_h2d (pinned, non_blocking), the copies into the persistent buffers are
        # non_blocking device copies, and every .item() is of a host tensor; 0.29.0's .cpu() of
        # the device diff was one sync per call. To be confirmed on CUDA.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="#55404: capture reads draft counts off the host query_start_loc mirror (0.29.0 -> 0.30.0)",
        invariants=(
            f"{_ORACLES}:capture_is_decode_only",
            f"{_ORACLES}:capture_query_start_loc_is_the_batch",
            f"{_ORACLES}:capture_state_indices_are_the_block_rows",
            f"{_ORACLES}:capture_accepted_tokens_are_the_query_lens",
            f"{_ORACLES}:capture_leaves_the_batch_alone",
        ),
        # No consumer: the metadata is consumed inside the captured graph by the GDN kernels.
    ),
]
