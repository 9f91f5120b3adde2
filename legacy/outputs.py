# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0: vllm/v1/outputs.py :: LogprobsTensors.to_cpu_nonblocking,
LogprobsTensors.tolists, LogprobsTensors.empty_cpu, LogprobsLists.slice_request,
SamplingMaskLists.to_nested_list, SamplingMaskLists.slice_request (definitions verbatim; each class's own
lines verbatim; the rest of the file left out). Scaffolded by `python -m fuzz new-target`; every line that
departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).

The release before the sync-relevant changes optimized/outputs.py (0.34.0) describes: the request boundaries
of ``LogprobsTensors`` are a host list only, and ``empty_cpu`` allocates pageable host tensors.
"""

from typing import TYPE_CHECKING, NamedTuple, TypeAlias
import numpy as np
import torch


class LogprobsLists(NamedTuple):
    # [num_reqs x num_generated_tokens, max_num_logprobs + 1]
    logprob_token_ids: np.ndarray
    # [num_reqs x num_generated_tokens, max_num_logprobs + 1]
    logprobs: np.ndarray
    # [num_reqs x num_generated_tokens]
    sampled_token_ranks: np.ndarray
    # [num_reqs]
    # Used for slicing the logprobs in cases like speculative
    # decoding where the number of generated tokens may be
    # different for each request.
    cu_num_generated_tokens: list[int] | None = None

    def slice_request(self, req_idx: int, num_positions: int):
        if self.cu_num_generated_tokens is not None:
            req_idx = self.cu_num_generated_tokens[req_idx]
        end_idx = req_idx + num_positions
        return LogprobsLists(
            self.logprob_token_ids[req_idx:end_idx],
            self.logprobs[req_idx:end_idx],
            self.sampled_token_ranks[req_idx:end_idx],
            None,
        )


class SamplingMaskLists(NamedTuple):
    # [num_kept_tokens]
    token_ids: np.ndarray
    # [num_generated_tokens + 1]
    offsets: np.ndarray
    # [num_reqs + 1]
    cu_num_generated_tokens: list[int] | None = None

    def slice_request(self, req_idx: int, num_positions: int) -> "SamplingMaskLists":
        if self.cu_num_generated_tokens is None:
            start_idx = req_idx
        else:
            start_idx = self.cu_num_generated_tokens[req_idx]
        end_idx = start_idx + num_positions
        flat_start = self.offsets[start_idx]
        flat_end = self.offsets[end_idx]
        return SamplingMaskLists(
            self.token_ids[flat_start:flat_end],
            self.offsets[start_idx : end_idx + 1] - flat_start,
            None,
        )

    def to_nested_list(self) -> list[list[int]]:
        """Convert CSR representation to ``list[list[int]]``."""
        return [
            self.token_ids[int(self.offsets[i]) : int(self.offsets[i + 1])].tolist()
            for i in range(len(self.offsets) - 1)
        ]


class LogprobsTensors(NamedTuple):
    # [num_reqs x num_generated_tokens, max_num_logprobs + 1]
    logprob_token_ids: torch.Tensor
    # [num_reqs x num_generated_tokens, max_num_logprobs + 1]
    logprobs: torch.Tensor
    # [num_reqs x num_generated_tokens]
    selected_token_ranks: torch.Tensor
    # [num_reqs]
    cu_num_generated_tokens: list[int] | None = None

    def tolists(self, cu_num_generated_tokens: list[int] | None = None):
        return LogprobsLists(
            self.logprob_token_ids.cpu().numpy(),
            self.logprobs.cpu().numpy(),
            self.selected_token_ranks.cpu().numpy(),
            cu_num_generated_tokens
            if cu_num_generated_tokens is not None
            else self.cu_num_generated_tokens,
        )

    def to_cpu_nonblocking(self) -> "LogprobsTensors":
        if self.logprob_token_ids.device.type == "cpu":
            return self
        return LogprobsTensors(
            self.logprob_token_ids.to("cpu", non_blocking=True),
            self.logprobs.to("cpu", non_blocking=True),
            self.selected_token_ranks.to("cpu", non_blocking=True),
            self.cu_num_generated_tokens,
        )

    @staticmethod
    def empty_cpu(
        num_positions: int, num_tokens_per_position: int
    ) -> "LogprobsTensors":
        """Create empty LogprobsTensors on CPU."""

        logprob_token_ids = torch.empty(
            (num_positions, num_tokens_per_position), dtype=torch.int32, device="cpu"
        )
        logprobs = torch.empty_like(logprob_token_ids, dtype=torch.float32)
        selected_token_ranks = torch.empty(
            num_positions, dtype=torch.int32, device="cpu"
        )
        return LogprobsTensors(
            logprob_token_ids=logprob_token_ids,
            logprobs=logprobs,
            selected_token_ranks=selected_token_ranks,
        )
