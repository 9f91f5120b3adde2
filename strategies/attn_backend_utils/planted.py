"""Planted bugs and benign refactors of the make-local-attention-virtual-batches and
make-kv-sharing-fast-prefill-metadata targets (optimized/attn_backend_utils.py).

Each is a one-edit mutant of the optimized copy: Plant(name, base_target, module, old, new, why); ``old`` occurs
once in the copy. The bugs are the slips a sync removal invites: a size taken from the wrong host value, a host
mirror that is stale, an upload from the wrong host array, padding not cut off, a pageable non_blocking copy.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.attn_backend_utils"
_LEG = "legacy.attn_backend_utils"
_LOCAL = "make-local-attention-virtual-batches"
_KV = "make-kv-sharing-fast-prefill-metadata"

BUGS = [
    Plant("planted-local-stale-upper-bound", _LOCAL, _OPT,
          "seq_lens_cpu_upper_bound=seq_lens_cpu,",
          "seq_lens_cpu_upper_bound=common_attn_metadata.seq_lens_cpu_upper_bound,",
          "stale mirror: the original batch's host seq lens handed on as the virtual batches' (0.29.0's slip)"),
    Plant("planted-local-num-reqs-of-the-batch", _LOCAL, _OPT,
          "num_reqs=len(seq_lens_cpu),", "num_reqs=actual_batch_size,",
          "host-derived size from the wrong count: the original requests, not the virtual ones"),
    Plant("planted-local-uploads-the-query-lens", _LOCAL, _OPT,
          "seq_lens=async_tensor_h2d(seq_lens_cpu, device=device),",
          "seq_lens=async_tensor_h2d(seqlens_q_local, device=device),",
          "the device seq lens uploaded from the wrong host array: its mirror says otherwise"),
    Plant("planted-local-query-lens-for-seq-lens", _LOCAL, _OPT,
          "seq_lens_np = common_attn_metadata.seq_lens.cpu().numpy()",
          "seq_lens_np = np.diff(common_attn_metadata.query_start_loc_cpu.numpy())",
          "the D2H read replaced by the wrong host mirror: query lens, which forget the context"),
    Plant("planted-local-host-offsets-one-short", _LOCAL, _OPT,
          "query_start_loc_cpu = torch.from_numpy(cu_seqlens_q_local)",
          "query_start_loc_cpu = torch.from_numpy(cu_seqlens_q_local[:-1])",
          "off by one: the host offsets lose their last entry (the device copy is made from the short one)"),
    Plant("planted-kv-padded-token-count", _KV, _OPT,
          "total_num_decode_tokens = num_logits_indices",
          "total_num_decode_tokens = logits_indices_padded.shape[0]",
          "host-derived size off by the padding: the cudagraph-padded count taken for the logits count"),
    Plant("planted-kv-stale-host-offsets", _KV, _OPT,
          'query_start_loc_cpu=decode_query_start_loc.to("cpu", non_blocking=True),',
          "query_start_loc_cpu=common_attn_metadata.query_start_loc_cpu,",
          "stale mirror: the D2H copy avoided by handing on the batch's own host offsets"),
    Plant("planted-kv-padding-kept", _KV, _OPT,
          "logits_indices = logits_indices_padded[:num_logits_indices]",
          "logits_indices = logits_indices_padded",
          "cudagraph padding not cut off: the repeated last index counted again"),
    Plant("planted-kv-prefill-max-query-len", _KV, _OPT,
          "decode_max_query_len = common_attn_metadata.max_logits_per_req",
          "decode_max_query_len = common_attn_metadata.max_query_len",
          "host max from the wrong field: the batch's longest query, not its most logits per request"),
]

BENIGN = [
    Plant("benign-local-max-seq-len-from-numpy", _LOCAL, _OPT,
          "max_seq_len = int(seq_lens_cpu.max())", "max_seq_len = int(seqlens_k_local.max())",
          "seq_lens_cpu is a view of seqlens_k_local: the same maximum, read off the array"),
    Plant("benign-kv-ones-spelled-out", _KV, _OPT,
          "0, request_ids.to(num_decode_tokens.dtype), torch.ones_like(request_ids)",
          "0, request_ids.to(num_decode_tokens.dtype),\n"
          "        torch.ones(request_ids.shape, dtype=request_ids.dtype, device=request_ids.device)",
          "ones_like spelled out: the same tensor"),
]

# Only the CUDA sync oracle sees these: the values are the same, a sync is added.
SYNC_BUGS = [
    Plant("planted-sync-kv-counts-summed-on-device", _KV, _OPT,
          "total_num_decode_tokens = num_logits_indices",
          "total_num_decode_tokens = int(num_decode_tokens.sum().item())",
          "0.27.1's count: the histogram summed on the device and read back (a sync per call)"),
]

# vLLM's CI copy check (CUDA) rejects these: a non_blocking upload from pageable memory.
POLICY_BUGS = [
    Plant("planted-policy-local-index-upload-unpinned", _LOCAL, _OPT,
          "batch_indices_torch = async_tensor_h2d(batch_indices, device=device)",
          "batch_indices_torch = torch.from_numpy(batch_indices).to(device, non_blocking=True)",
          "async_tensor_h2d's pinned staging skipped: a non_blocking copy from a pageable numpy buffer"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-local-last-window-one-short",
        base_target=_LOCAL,
        legacy=(_LEG, "seqlens_k_local[cu_num_blocks - 1] = tokens_in_last_block",
                "seqlens_k_local[cu_num_blocks - 1] = tokens_in_last_block - 1"),
        optimized=(_OPT, "seqlens_k_local[cu_num_blocks - 1] = tokens_in_last_block",
                   "seqlens_k_local[cu_num_blocks - 1] = tokens_in_last_block - 1"),
        why="each request's last window one key short: its last query token cannot see itself",
    ),
    SharedPlant(
        name="shared-kv-boundary-token-to-next-request",
        base_target=_KV,
        legacy=(_LEG, "torch.bucketize(logits_indices, query_start_loc[1:], right=True)",
                "torch.bucketize(logits_indices, query_start_loc[1:], right=False)"),
        optimized=(_OPT, "torch.bucketize(logits_indices, query_start_loc[1:], right=True)",
                   "torch.bucketize(logits_indices, query_start_loc[1:], right=False)"),
        why="a request's first token counted as the previous request's logits index",
    ),
]
