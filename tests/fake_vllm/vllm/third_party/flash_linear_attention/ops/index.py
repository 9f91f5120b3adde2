"""Fake upstream: our optimized copies, or (FAKE_VLLM_DRIFT=1) an upstream whose
offsets drifted by one, so tests can show an upstream-divergence."""

import os

import torch

from optimized.fla_index import prepare_chunk_indices, prepare_lens  # noqa: F401
from optimized.fla_index import prepare_chunk_offsets as _offsets


def prepare_chunk_offsets(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    result = _offsets(cu_seqlens, chunk_size)
    return result + 1 if os.environ.get("FAKE_VLLM_DRIFT") else result
