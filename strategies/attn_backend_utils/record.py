"""vllm/v1/attention/backends/utils.py, 0.29.0 -> 0.30.0: the two ``CommonAttentionMetadata`` rewriters that
read host mirrors.

``make_local_attention_virtual_batches`` (chunked local attention, Llama-4): 0.29.0 read the request seq lens
through the deprecated ``seq_lens_cpu`` property (the runner's ``_seq_lens_cpu`` host mirror; a D2H ``.to("cpu")``
when unset) inside ``gpu_sync_allowed()`` (added in 0.29.0 around the same read of 0.28.0) and handed back the
caller's ``seq_lens_cpu_upper_bound`` plus new ``_seq_lens_cpu`` / ``_num_computed_tokens_cpu`` mirrors; 0.30.0
removes the deprecated fields, reads ``seq_lens.cpu()`` (an explicit D2H sync, still allowed: "TODO see
vllm-project/vllm#31852") and hands back the virtual batches' own seq lens as ``seq_lens_cpu_upper_bound``.
``make_kv_sharing_fast_prefill_common_attn_metadata`` (Gemma-3n/4 KV-sharing fast prefill): 0.30.0 returns the
batch unchanged where 0.29.0 asserted that fast prefill was armed, and drops the deprecated mirrors; its host
``query_start_loc_cpu`` is a ``non_blocking`` D2H ``.to("cpu")`` in both (0.34.0 replaces it by an arange or a
``.cpu()`` inside ``gpu_sync_allowed()``: a pending copy's destination read early is the bug class there).
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_UTILS = "vllm/v1/attention/backends/utils.py"
_ORACLES = "strategies.attn_backend_utils.oracles"
_INPUTS = "strategies.attn_backend_utils.inputs"
# The copies' gpu_sync_allowed() region (local attention's seq lens read): syncs inside are upstream's own.
ALLOW_REGION = "optimized.attn_backend_utils:sync_allowed_depth"

TARGETS = [
    Target(
        name="make-local-attention-virtual-batches",
        upstream=(f"{_UTILS}::make_local_attention_virtual_batches",),
        legacy="legacy.attn_backend_utils:make_local_attention_virtual_batches",
        optimized="optimized.attn_backend_utils:make_local_attention_virtual_batches",
        upstream_impl="vllm.v1.attention.backends.utils:make_local_attention_virtual_batches",
        inputs=f"{_INPUTS}:LocalAttentionInputs",
        # Integers only: offsets, lengths and block ids handed to the attention kernels.
        comparison=Comparison(floats="exact"),
        # By design one, inside gpu_sync_allowed(): 0.30.0's seq_lens.cpu() (0.29.0 read the runner's
        # _seq_lens_cpu mirror: none). The four async_tensor_h2d uploads are pinned and non_blocking and the
        # block-table gather indexes with device tensors. To be confirmed on CUDA.
        expected_optimized_syncs=1,
        sync_allow_region=ALLOW_REGION,
        versions=VERSIONS,
        description="chunked local attention's virtual batches read seq_lens.cpu(), deprecated mirrors gone "
                    "(0.29.0 -> 0.30.0)",
        invariants=(
            f"{_ORACLES}:local_virtual_batches_partition_each_request",
            f"{_ORACLES}:local_seq_lens_are_the_chunk_windows",
            f"{_ORACLES}:local_block_table_rows_point_into_the_original_rows",
            f"{_ORACLES}:local_device_tensors_mirror_the_host",
            f"{_ORACLES}:local_leaves_the_batch_alone",
        ),
        # No consumer: the attention builder hands the virtual batch to its kernels; its host reads
        # (query_start_loc_cpu, the seq lens mirror) are of host tensors.
    ),
    Target(
        name="make-kv-sharing-fast-prefill-metadata",
        upstream=(f"{_UTILS}::make_kv_sharing_fast_prefill_common_attn_metadata",),
        legacy="legacy.attn_backend_utils:make_kv_sharing_fast_prefill_common_attn_metadata",
        optimized="optimized.attn_backend_utils:make_kv_sharing_fast_prefill_common_attn_metadata",
        upstream_impl="vllm.v1.attention.backends.utils:make_kv_sharing_fast_prefill_common_attn_metadata",
        inputs=f"{_INPUTS}:FastPrefillInputs",
        comparison=Comparison(floats="exact"),
        # By design none: bucketize / scatter_add_ / cumsum stay on the device, the totals come from the host
        # ints the runner passes (num_logits_indices, max_logits_per_req) and the host offsets are a
        # non_blocking D2H copy (0.34.0's gpu_sync_allowed() .cpu() is one allowed sync). To be confirmed on CUDA.
        expected_optimized_syncs=0,
        sync_allow_region=ALLOW_REGION,
        versions=VERSIONS,
        description="KV-sharing fast prefill metadata: unarmed batches pass through, deprecated mirrors gone "
                    "(0.29.0 -> 0.30.0)",
        invariants=(
            f"{_ORACLES}:kv_offsets_count_the_logits",
            f"{_ORACLES}:kv_host_offsets_mirror_the_device",
            f"{_ORACLES}:kv_keeps_the_batch",
        ),
    ),
]
