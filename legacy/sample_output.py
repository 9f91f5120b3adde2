# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0: vllm/v1/worker/gpu/sample/output.py :: SamplingMaskTensors.to_cpu_nonblocking,
SamplingMaskTensors.tolists (definitions verbatim; the class's own lines verbatim; ``from_logits`` and its
Triton kernel left out: the input model writes what the kernel writes). Scaffolded by `python -m fuzz
new-target`; every line that departs from upstream ends with `# ADAPTED: <why>`.

0.28.0: a bit-packed mask per request and its count; ``tolists(num_sampled_tokens)`` keeps only the rows of
requests that sampled a token and gives ``cu_num_generated_tokens``. ``SamplingMaskLists`` comes from the
side's copy of vllm/v1/outputs.py (legacy/outputs.py).
"""

from __future__ import annotations

from typing import NamedTuple
import numpy as np
import torch

from legacy.outputs import SamplingMaskLists  # ADAPTED: upstream imports it from vllm.v1.outputs (copied beside)


class SamplingMaskTensors(NamedTuple):
    """Bit-packed device-side sampling mask data pending async D2H."""

    # [num_requests, ceil(vocab_size / 8)]
    packed_mask: torch.Tensor
    # [num_requests]
    counts: torch.Tensor
    vocab_size: int

    def to_cpu_nonblocking(self) -> SamplingMaskTensors:
        if self.packed_mask.device.type == "cpu":
            return self
        return SamplingMaskTensors(
            self.packed_mask.to("cpu", non_blocking=True),
            self.counts.to("cpu", non_blocking=True),
            self.vocab_size,
        )

    def tolists(self, num_sampled_tokens: np.ndarray) -> SamplingMaskLists:
        """Convert the packed masks to the scheduler's CSR representation."""
        sampled_rows = np.flatnonzero(num_sampled_tokens)
        counts = self.counts.cpu().numpy()[sampled_rows]
        offsets = np.empty(len(counts) + 1, dtype=np.int64)
        offsets[0] = 0
        np.cumsum(counts, dtype=np.int64, out=offsets[1:])
        unpacked = np.unpackbits(
            self.packed_mask.cpu().numpy()[sampled_rows],
            axis=1,
            count=self.vocab_size,
            bitorder="little",
        )
        token_ids = np.nonzero(unpacked)[1].astype(np.int32, copy=False)
        return SamplingMaskLists(
            token_ids=token_ids,
            offsets=offsets,
            cu_num_generated_tokens=np.cumsum(
                np.concatenate(([0], num_sampled_tokens))
            ).tolist(),
        )
