# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Helpers from vllm/utils/math_utils.py, vllm/utils/torch_utils.py.
Copied from vllm 0.30.0:
vllm/v1/attention/backends/utils.py :: make_local_attention_virtual_batches, make_kv_sharing_fast_prefill_common_attn_metadata
(definitions verbatim). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).

``cdiv`` (vllm/utils/math_utils.py) and ``async_tensor_h2d`` (vllm/utils/torch_utils.py, 0.30.0) are copied
verbatim below; ``CommonAttentionMetadata`` (vllm/v1/attention/backend.py) is stood in by a dataclass holding
only the fields these two functions read or set, as in 0.30.0 (its deprecated `_seq_lens_cpu`, `_num_computed_tokens_cpu` and their properties are gone; 0.34.0's are the same for these fields); ``gpu_sync_allowed``
(vllm/utils/gpu_sync_debug.py) is stood in by an allow region of this module (``sync_allowed_depth``), since
the shared ``gpu_sync_debug`` helper serves the 0.27.1/0.28.0 pair and a copy module serves one pair.
"""

from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager  # ADAPTED: for the gpu_sync_allowed stand-in
from contextvars import ContextVar  # ADAPTED: for the gpu_sync_allowed stand-in
from dataclasses import dataclass  # ADAPTED: for the CommonAttentionMetadata stand-in
import numpy as np
import torch

# from vllm.utils.gpu_sync_debug import gpu_sync_allowed  # ADAPTED: stood in below (vllm/utils/gpu_sync_debug.py)
# from vllm.utils.math_utils import cdiv  # ADAPTED: copied below from vllm/utils/math_utils.py
# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py
# from vllm.v1.attention.backend import CommonAttentionMetadata  # ADAPTED: stood in below (vllm/v1/attention/backend.py)

PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: vllm/utils/torch_utils.py's is_pin_memory_available() without the platform layer

# Depth of the open gpu_sync_allowed() regions: the record's sync_allow_region, read by the sync oracle.
sync_allowed_depth: ContextVar[int] = ContextVar("optimized_attn_backend_utils_sync_allow_depth", default=0)  # ADAPTED: this module's allow region


@contextmanager  # ADAPTED: part of the stand-in below
def gpu_sync_allowed(first_only: bool = False):  # ADAPTED: stands in for vllm's gpu_sync_allowed(): always opens the allow region
    token = sync_allowed_depth.set(sync_allowed_depth.get() + 1)  # ADAPTED: upstream _allow_syncs()
    try:  # ADAPTED
        yield  # ADAPTED
    finally:  # ADAPTED
        sync_allowed_depth.reset(token)  # ADAPTED


@dataclass  # ADAPTED: part of the stand-in below
class CommonAttentionMetadata:  # ADAPTED: stands in for vllm/v1/attention/backend.py's dataclass: only the fields these functions read or set
    query_start_loc: torch.Tensor  # ADAPTED
    query_start_loc_cpu: torch.Tensor  # ADAPTED
    seq_lens: torch.Tensor  # ADAPTED
    num_reqs: int  # ADAPTED
    num_actual_tokens: int  # ADAPTED
    max_query_len: int  # ADAPTED
    max_seq_len: int  # ADAPTED
    block_table_tensor: torch.Tensor  # ADAPTED
    slot_mapping: torch.Tensor  # ADAPTED
    causal: bool | torch.Tensor = True  # ADAPTED
    logits_indices_padded: torch.Tensor | None = None  # ADAPTED
    num_logits_indices: int | None = None  # ADAPTED
    max_logits_per_req: int | None = None  # ADAPTED
    seq_lens_cpu_upper_bound: torch.Tensor | None = None  # ADAPTED


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(a // -b)


def async_tensor_h2d(
    data: list | np.ndarray | torch.Tensor,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Copy list/numpy array/tensor async from host to device."""
    if dtype is None and out is not None:
        dtype = out.dtype
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        t = data
        if PIN_MEMORY and not t.is_pinned():
            # Stage in pinned, contiguous buffer to ensure fully async copy.
            t = torch.empty(
                t.shape, dtype=dtype or t.dtype, device="cpu", pin_memory=True
            ).copy_(t)
    else:
        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")
    assert t.is_cpu

    if out is not None:
        assert out.dtype == dtype
        return out.copy_(t, non_blocking=True)
    assert device is not None, "must provide destination tensor or device"
    return t.to(device=device, dtype=dtype, non_blocking=True)


def make_local_attention_virtual_batches(
    attn_chunk_size: int,
    common_attn_metadata: CommonAttentionMetadata,
    block_size: int = 0,
) -> tuple[CommonAttentionMetadata, Callable[[torch.Tensor], torch.Tensor]]:
    query_start_loc_np = common_attn_metadata.query_start_loc_cpu.numpy()
    with gpu_sync_allowed():
        # TODO see https://github.com/vllm-project/vllm/pull/31852
        seq_lens_np = common_attn_metadata.seq_lens.cpu().numpy()
    block_table = common_attn_metadata.block_table_tensor
    device = common_attn_metadata.query_start_loc.device

    q_seqlens = query_start_loc_np[1:] - query_start_loc_np[:-1]
    actual_batch_size = seq_lens_np.shape[0]

    # Handle if we are starting in the middle of a local attention block,
    #  we assume q_seqlens > 0 (for all elements), for each batch idx we compute
    #  the number of tokens that are not in the first local attention block and
    #  then we can simply use a cdiv for the rest.
    # For example if we have:
    #   attn_chunk_size = 4
    #   q_seqlens = [4, 10, 5]
    #   k_seqlens = [6, 17, 9]
    # Then we would get:
    #   new_tokens_in_first_block = [2, 1, 4]
    #   local_blocks = [2, 4, 2]
    q_tokens_in_first_block = np.minimum(
        attn_chunk_size - ((seq_lens_np - q_seqlens) % attn_chunk_size), q_seqlens
    ).astype(np.int32)
    tokens_in_last_block = attn_chunk_size + (seq_lens_np % -attn_chunk_size)
    local_blocks = 1 + cdiv(q_seqlens - q_tokens_in_first_block, attn_chunk_size)

    # Once we know the number of local blocks we can compute the request spans
    #  for each batch idx, we can figure out the number of "virtual" requests we
    #  have to make,
    # For the above example we would get:
    #   seqlens_q_local = [2, 2, 1, 4, 4, 1, 4, 1]
    #
    # First Get batched arange. (E.g., [2, 4, 2] -> [0, 1, 0, 1, 2, 3, 0, 1])
    #   (TODO: make a utility to share this code with _prepare_inputs)
    # arange step 1. [2, 4, 2] -> [2, 6, 8]
    cu_num_blocks = np.cumsum(local_blocks)
    virtual_batches = cu_num_blocks[-1]
    # arange step 2. [2, 6, 8] -> [0, 0, 2, 2, 2, 2, 6, 6]
    block_offsets = np.repeat(cu_num_blocks - local_blocks, local_blocks)
    # arange step 3. [0, 1, 0, 1, 2, 3, 0, 1]
    arange = np.arange(virtual_batches, dtype=np.int32) - block_offsets
    # also compute reverse arange (i.e. [1, 0, 3, 2, 1, 0, 1, 0])
    rarange = np.repeat(local_blocks, local_blocks) - arange - 1
    # Then we can compute the seqlens_q_local, handling the fact that the
    #  first and last blocks could be partial
    seqlens_q_local = np.repeat(q_seqlens - q_tokens_in_first_block, local_blocks)
    # set the first block since this may be a partial block
    seqlens_q_local[arange == 0] = q_tokens_in_first_block
    # set the remaining blocks
    seqlens_q_local[arange > 0] = np.minimum(
        seqlens_q_local - attn_chunk_size * (arange - 1), attn_chunk_size
    )[arange > 0]

    # convert from q_seqlens to cu_seqlens_q
    cu_seqlens_q_local = np.empty(virtual_batches + 1, dtype=np.int32)
    np.cumsum(seqlens_q_local, out=cu_seqlens_q_local[1:])
    cu_seqlens_q_local[0] = 0

    # compute the seqlens_k_local,
    #  basically a full local attention block for all but the last block in each
    #  batch
    # For our example this will be:
    #   seqlens_k_local = [4, 2, 4, 4, 4, 1, 4, 1]
    seqlens_k_local = np.full(cu_num_blocks[-1], attn_chunk_size, dtype=np.int32)
    seqlens_k_local[cu_num_blocks - 1] = tokens_in_last_block
    k_seqstarts_absolute = np.repeat(seq_lens_np, local_blocks) - (
        rarange * attn_chunk_size + np.repeat(tokens_in_last_block, local_blocks)
    )
    # For the example the local attention blocks start at:
    #                           _b0_  _____b1_____  _b2_
    #   k_seqstarts_absolute = [0, 4, 4, 8, 12, 16, 4, 8]
    block_starts = k_seqstarts_absolute // block_size
    assert attn_chunk_size % block_size == 0, (
        f"attn_chunk_size {attn_chunk_size} is not divisible by block_size {block_size}"
    )
    pages_per_local_batch = attn_chunk_size // block_size

    # Create a block_table for the local attention blocks
    # For out example if we have a block-table like (assuming block_size=2):
    #   block_table = [
    #     [ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9],  < batch 0
    #     [10, 11, 12, 13, 14, 15, 16, 17, 18, 19],  < batch 1
    #     [20, 21, 22, 23, 24, 25, 26, 27, 28, 29],  < batch 2
    #   ]
    # Then for the local batches we would want a block-table like
    #   block_table_local = [
    #     [  0,  1 ], < local-batch 0, (batch 0, starting from k[0])
    #     [  2,  3 ], < local-batch 1, (batch 0, starting from k[4])
    #     [ 12, 13 ], < local-batch 2, (batch 1, starting from k[4])
    #     [ 14, 15 ], < local-batch 3, (batch 1, starting from k[8])
    #     [ 16, 17 ], < local-batch 4, (batch 1, starting from k[12])
    #     [ 18, 19 ], < local-batch 5, (batch 1, starting from k[16])
    #     [ 22, 23 ], < local-batch 6, (batch 2, starting from k[4])
    #     [ 24, 25 ], < local-batch 7, (batch 2, starting from k[8])
    #   ]
    block_indices = block_starts[:, None] + np.arange(
        pages_per_local_batch, dtype=np.int32
    )
    block_indices = block_indices.reshape(-1).clip(max=block_table.shape[1] - 1)
    batch_indices = np.repeat(
        np.arange(actual_batch_size, dtype=np.int32),
        local_blocks * pages_per_local_batch,
    )

    # NOTE: https://github.com/pytorch/pytorch/pull/160256 causes performance
    # regression when using numpy arrays (batch and block indices) to index into
    # torch tensor (block_table). As a workaround, convert numpy arrays to torch
    # tensor first, which recovers perf.
    # Upload the index tensors to the block_table's device up-front so that the
    # fancy indexing below doesn't implicitly force a synchronous H2D copy.
    batch_indices_torch = async_tensor_h2d(batch_indices, device=device)
    block_indices_torch = async_tensor_h2d(block_indices, device=device)

    # Save as a lambda so we can return this for update_block_table
    make_block_table = lambda block_table: block_table[
        batch_indices_torch, block_indices_torch
    ].view(virtual_batches, -1)
    block_table_local = make_block_table(block_table)

    query_start_loc_cpu = torch.from_numpy(cu_seqlens_q_local)
    seq_lens_cpu = torch.from_numpy(seqlens_k_local)
    max_seq_len = int(seq_lens_cpu.max())

    return CommonAttentionMetadata(
        query_start_loc_cpu=query_start_loc_cpu,
        query_start_loc=async_tensor_h2d(query_start_loc_cpu, device=device),
        seq_lens=async_tensor_h2d(seq_lens_cpu, device=device),
        num_reqs=len(seq_lens_cpu),
        num_actual_tokens=common_attn_metadata.num_actual_tokens,
        max_query_len=seqlens_q_local.max(),
        max_seq_len=max_seq_len,
        block_table_tensor=block_table_local,
        slot_mapping=common_attn_metadata.slot_mapping,
        causal=True,
        seq_lens_cpu_upper_bound=seq_lens_cpu,
    ), make_block_table


def make_kv_sharing_fast_prefill_common_attn_metadata(
    common_attn_metadata: CommonAttentionMetadata,
) -> CommonAttentionMetadata:
    if common_attn_metadata.max_query_len == 1:
        # All requests are decode (assume 1 token for now)
        # Skip computing fast prefill path
        return common_attn_metadata

    if (
        common_attn_metadata.logits_indices_padded is None
        or common_attn_metadata.num_logits_indices is None
    ):
        # Fast prefill not armed for this step (e.g. cudagraph capture, or a
        # pure-decode step): run the KV-sharing layers on the full batch.
        return common_attn_metadata

    logits_indices_padded = common_attn_metadata.logits_indices_padded
    num_logits_indices = common_attn_metadata.num_logits_indices
    # Get rid of CUDAGraph padding, if any
    logits_indices = logits_indices_padded[:num_logits_indices]
    num_reqs = common_attn_metadata.num_reqs
    query_start_loc = common_attn_metadata.query_start_loc
    # Example inputs
    # num_reqs: 3
    # generation_indices:  [14, 18, 19, 27]
    # query_start_loc: [0, 15, 20, 28]
    # seq_lens:        [41, 31, 40]

    # Find how many decode indices belong to each request
    # request_ids: [0, 1, 1, 2]
    request_ids = torch.bucketize(logits_indices, query_start_loc[1:], right=True)

    # Figure out how many tokens are in each request
    # num_decode_tokens: [1, 2, 1]
    # Avoid `torch.bincount` here — on CUDA it forces a sync to determine
    # the output size (even with `minlength`, the kernel must confirm no
    # value exceeds the bound). `scatter_add_` into a preallocated buffer
    # is equivalent and stays async.
    num_decode_tokens = torch.zeros(
        num_reqs, dtype=request_ids.dtype, device=request_ids.device
    )
    num_decode_tokens.scatter_add_(
        0, request_ids.to(num_decode_tokens.dtype), torch.ones_like(request_ids)
    )

    # Calculate new query_start_loc with tokens in generation_indices
    # decode_query_start_loc: [0, 1, 3, 4]
    decode_query_start_loc = torch.empty(
        num_reqs + 1, device=query_start_loc.device, dtype=query_start_loc.dtype
    )

    decode_query_start_loc[:1].fill_(0)  # Avoid sync from scalar assignment.
    decode_query_start_loc[1:] = torch.cumsum(num_decode_tokens, dim=0)

    # `num_decode_tokens` is a histogram over `logits_indices`, so its total is
    # just how many there were -- already known as a Python int.
    total_num_decode_tokens = num_logits_indices

    # Largest per-request logits count.
    decode_max_query_len = common_attn_metadata.max_logits_per_req
    assert decode_max_query_len is not None

    common_attn_metadata = CommonAttentionMetadata(
        query_start_loc=decode_query_start_loc,
        query_start_loc_cpu=decode_query_start_loc.to("cpu", non_blocking=True),
        seq_lens=common_attn_metadata.seq_lens,
        num_reqs=num_reqs,
        num_actual_tokens=total_num_decode_tokens,
        max_query_len=decode_max_query_len,
        max_seq_len=common_attn_metadata.max_seq_len,
        block_table_tensor=common_attn_metadata.block_table_tensor,
        slot_mapping=common_attn_metadata.slot_mapping,
        causal=True,
        seq_lens_cpu_upper_bound=common_attn_metadata.seq_lens_cpu_upper_bound,
    )
    return common_attn_metadata
