# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.34.0: vllm/v1/outputs.py :: LogprobsTensors.to_cpu_nonblocking,
LogprobsTensors.tolists, LogprobsTensors.empty_cpu, LogprobsLists.slice_request,
SamplingMaskLists.to_nested_list, SamplingMaskLists.slice_request (definitions verbatim; each class's own
lines verbatim; the rest of the file left out). Scaffolded by `python -m fuzz new-target`; every line that
departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).

What changed since 0.28.0 (legacy/outputs.py), sync-relevant:
* 0.29.0 (vLLM PR #52242, logprobs with adaptive verification): ``LogprobsTensors`` gained
  ``cu_num_generated_tokens_tensor``, the request boundaries that only exist on the device; it rides along on
  ``to_cpu_nonblocking``'s ``non_blocking`` D2H copy and ``tolists`` reads it (``.tolist()`` of the pinned
  host copy), which is right only after the caller waited for the copy's event (AsyncOutput.get_output).
  ``empty_cpu`` allocates its three host tensors pinned (``pin_memory=PIN_MEMORY``), so the runner's
  ``non_blocking`` D2H copies into them become truly asynchronous.
* 0.30.0 / 0.32.0: ``SamplingMaskLists`` lost ``merge``; ``to_nested_list`` converts once with
  ``.tolist()`` and takes ``offsets=None`` (one position); ``slice_request`` returns such one-position slices.

``PIN_MEMORY`` stands in for vllm/utils/torch_utils.py's ``PIN_MEMORY = is_pin_memory_available()`` (true
when CUDA is available), as optimized/v1_utils.py does.
"""

from typing import TYPE_CHECKING, NamedTuple, TypeAlias
import numpy as np
import torch

# Upstream: from vllm.utils.torch_utils import PIN_MEMORY (is_pin_memory_available(): true on CUDA).
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer


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
    """CSR sampling masks; a request slice may contain multiple positions."""

    # [num_kept_tokens]
    token_ids: np.ndarray
    # [num_positions + 1], or None for a single position
    offsets: np.ndarray | None = None
    # [num_requests + 1] for multi-position request batches.
    cu_num_generated_tokens: list[int] | None = None

    def slice_request(self, req_idx: int, num_positions: int) -> "SamplingMaskLists":
        assert self.offsets is not None
        cu = self.cu_num_generated_tokens
        start = req_idx if cu is None else cu[req_idx]
        end = start + num_positions
        lo, hi = self.offsets[start], self.offsets[end]
        if num_positions == 1:
            return SamplingMaskLists(self.token_ids[lo:hi])
        return SamplingMaskLists(
            self.token_ids[lo:hi], self.offsets[start : end + 1] - lo
        )

    def to_nested_list(self) -> list[list[int]]:
        token_ids = self.token_ids.tolist()
        if self.offsets is None:
            return [token_ids]
        offsets = self.offsets.tolist()
        return [token_ids[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


class LogprobsTensors(NamedTuple):
    # [num_reqs x num_generated_tokens, max_num_logprobs + 1]
    logprob_token_ids: torch.Tensor
    # [num_reqs x num_generated_tokens, max_num_logprobs + 1]
    logprobs: torch.Tensor
    # [num_reqs x num_generated_tokens]
    selected_token_ranks: torch.Tensor
    # [num_reqs + 1]
    cu_num_generated_tokens: list[int] | None = None
    # [num_reqs + 1]. Set instead of cu_num_generated_tokens when the
    # boundaries only exist on device (adaptive verification); rides along on
    # the async D2H copy.
    cu_num_generated_tokens_tensor: torch.Tensor | None = None

    def tolists(self, cu_num_generated_tokens: list[int] | None = None):
        if cu_num_generated_tokens is None:
            if self.cu_num_generated_tokens_tensor is not None:
                cu_num_generated_tokens = self.cu_num_generated_tokens_tensor.tolist()
            else:
                cu_num_generated_tokens = self.cu_num_generated_tokens
        return LogprobsLists(
            self.logprob_token_ids.cpu().numpy(),
            self.logprobs.cpu().numpy(),
            self.selected_token_ranks.cpu().numpy(),
            cu_num_generated_tokens,
        )

    def to_cpu_nonblocking(self) -> "LogprobsTensors":
        if self.logprob_token_ids.device.type == "cpu":
            return self
        cu_tensor = self.cu_num_generated_tokens_tensor
        if cu_tensor is not None:
            cu_tensor = cu_tensor.to("cpu", non_blocking=True)
        return LogprobsTensors(
            self.logprob_token_ids.to("cpu", non_blocking=True),
            self.logprobs.to("cpu", non_blocking=True),
            self.selected_token_ranks.to("cpu", non_blocking=True),
            self.cu_num_generated_tokens,
            cu_tensor,
        )

    @staticmethod
    def empty_cpu(
        num_positions: int, num_tokens_per_position: int
    ) -> "LogprobsTensors":
        """Create empty LogprobsTensors on CPU."""
        logprob_token_ids = torch.empty(
            (num_positions, num_tokens_per_position),
            dtype=torch.int32,
            device="cpu",
            pin_memory=PIN_MEMORY,
        )
        logprobs = logprob_token_ids.new_empty(
            (num_positions, num_tokens_per_position),
            dtype=torch.float32,
            pin_memory=PIN_MEMORY,
        )
        selected_token_ranks = logprob_token_ids.new_empty(
            num_positions, pin_memory=PIN_MEMORY
        )
        return LogprobsTensors(
            logprob_token_ids=logprob_token_ids,
            logprobs=logprobs,
            selected_token_ranks=selected_token_ranks,
        )
