# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.34.0: vllm/v1/worker/gpu/sample/output.py :: SamplingMaskTensors.to_cpu_nonblocking,
SamplingMaskTensors.tolists (definitions verbatim; the class's own lines verbatim; ``from_logits``, ``cat``
and the Triton kernel left out: the input model writes what the kernel writes). Scaffolded by `python -m fuzz
new-target`; every line that departs from upstream ends with `# ADAPTED: <why>`.

What changed since 0.28.0 (legacy/sample_output.py): 0.30.0 added ``token_ids``, the first ``max_num_kept``
kept ids of each row, copied to the host by ``to_cpu_nonblocking``'s ``non_blocking`` D2H beside the bitmask
(the bitmask is read only for rows wider than that), and ``tolists`` keeps every row (rows without a sampled
token are empty); 0.32.0 added ``rows_per_request`` (several positions per request, spec decode) and made
``num_sampled_tokens`` optional. ``SamplingMaskLists`` comes from the side's copy of vllm/v1/outputs.py
(optimized/outputs.py).
"""

from __future__ import annotations

from typing import NamedTuple
import numpy as np
import torch

from optimized.outputs import SamplingMaskLists  # ADAPTED: upstream imports it from vllm.v1.outputs (copied beside)


class SamplingMaskTensors(NamedTuple):
    """Device-side masks pending async D2H: compact ids, plus the bitmask as
    the exact fallback for rows wider than ``max_num_kept``."""

    # [num_requests * rows_per_request, max_num_kept]
    token_ids: torch.Tensor
    # [num_requests * rows_per_request, ceil(vocab_size / 8)]
    packed_mask: torch.Tensor
    # [num_requests * rows_per_request]
    counts: torch.Tensor
    vocab_size: int
    # Fixed request-major output slots. Ordinary sampling has one slot.
    rows_per_request: int = 1

    def to_cpu_nonblocking(self) -> SamplingMaskTensors:
        if self.token_ids.device.type == "cpu":
            return self
        return SamplingMaskTensors(
            self.token_ids.to("cpu", non_blocking=True),
            self.packed_mask.to("cpu", non_blocking=True),
            self.counts.to("cpu", non_blocking=True),
            self.vocab_size,
            self.rows_per_request,
        )

    def tolists(
        self, num_sampled_tokens: np.ndarray | None = None
    ) -> SamplingMaskLists:
        """Convert fixed output rows to the scheduler's CSR representation."""
        counts = self.counts.cpu().numpy()
        token_ids = self.token_ids.cpu().numpy()
        packed_mask = self.packed_mask.cpu().numpy()
        width = token_ids.shape[1]

        cu_num_generated_tokens = None
        if self.rows_per_request == 1:
            sampled_rows = np.arange(len(counts))
        else:
            assert num_sampled_tokens is not None
            active_slots = (
                np.arange(self.rows_per_request)[None, :] < num_sampled_tokens[:, None]
            )
            sampled_rows = np.flatnonzero(active_slots)
            cu_num_generated_tokens = np.cumsum(
                np.concatenate(([0], num_sampled_tokens))
            ).tolist()

        def support(row: int) -> np.ndarray:
            if counts[row] <= width:
                return token_ids[row, : counts[row]]
            # Wider than the compact row (ties or a huge top_k): use the bitmask.
            bits = np.unpackbits(
                packed_mask[row], count=self.vocab_size, bitorder="little"
            )
            return np.flatnonzero(bits).astype(np.int32, copy=False)

        supports = [support(row) for row in sampled_rows]
        offsets = np.zeros(len(supports) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in supports], out=offsets[1:])
        flat = np.concatenate([np.empty(0, dtype=np.int32), *supports])
        return SamplingMaskLists(flat, offsets, cu_num_generated_tokens)
