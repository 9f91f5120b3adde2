"""The v1 GPU model runner's staging buffers (vllm/v1/worker/gpu/buffer_utils.py), vllm 0.33.0 -> 0.34.0.

0.34.0 makes the round-robin ``UvaBufferPool`` the runner's only host-to-device staging path:
``StagedWriteTensor.apply_write`` (and ``FusedStagedWriter.apply``) used to upload the staged
contents with ``async_tensor_h2d`` (a fresh pinned tensor per call and a ``non_blocking`` copy) and
now concatenate them into a reused pool slot (``UvaBufferPool.copy_chunks_to_uva``, through the
new ``_next_buf``); ``stage_write`` keeps a 1-D ndarray or ``array.array`` by reference (copied only
by ``apply_write``) and packs lists into an ``array.array``; ``NonUvaBuffer`` (no UVA) stages through
pinned host memory where it exists. A host slot rewritten before the copy or kernel that reads it
has run is the classic race (vLLM #24527, #25279, #28706, #31373, #31841).

Earlier changes of the same file, not this pair: 0.29.0 -> 0.30.0 added ``NonUvaBuffer`` and slot
growth (``async_copy_to_gpu`` removed), 0.31.0 -> 0.32.0 made ``NonUvaBuffer.uva`` ``non_blocking``
and the kernel's row index int64, 0.32.0 -> 0.33.0 split long writes over a second grid axis.
``UvaBuffer``, ``UvaBackedTensor`` and ``FusedStagedWriter`` exist in every release from 0.27.1.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.33.0", "0.34.0")
DESIGN_ROWS = (99,)

_B = "vllm/v1/worker/gpu/buffer_utils.py"

TARGETS = [
    Target(
        name="staged-write-tensor-apply-write",
        upstream=(
            f"{_B}::StagedWriteTensor.apply_write",
            f"{_B}::StagedWriteTensor.stage_write",
            f"{_B}::UvaBufferPool.copy_chunks_to_uva",
            f"{_B}::UvaBufferPool._next_buf",
        ),
        legacy="legacy.buffer_utils:StagedWriteTensor.apply_write",
        optimized="optimized.buffer_utils:StagedWriteTensor.apply_write",
        upstream_impl="vllm.v1.worker.gpu.buffer_utils:StagedWriteTensor.apply_write",
        inputs="strategies.buffer_utils.inputs:StagedWriteInputs",
        comparison=Comparison(floats="exact"),
        # By design none per call: the index/start/cu_len lists and (0.34.0) the contents go through
        # UVA pool slots (host writes the kernel reads in place), 0.33.0's contents through a pinned
        # non_blocking copy; the kernel launch does not wait. The thunk's engine waits between steps
        # are the consumer's (strategies/buffer_utils/inputs.py). To be confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="0.34.0: StagedWriteTensor stages contents by reference and uploads them through a "
                    "round-robin UVA pool slot instead of async_tensor_h2d (0.33.0 -> 0.34.0)",
        invariants=(
            "strategies.buffer_utils.oracles:apply_write_writes_what_was_staged",
            "strategies.buffer_utils.oracles:apply_write_leaves_other_cells_alone",
            "strategies.buffer_utils.oracles:apply_write_clears_the_stage",
        ),
        # No consumer: the runner's kernels read .gpu on the device.
    ),
    Target(
        name="uva-buffer-pool-copy-to-uva",
        upstream=(
            f"{_B}::UvaBufferPool.copy_to_uva",
            f"{_B}::UvaBufferPool._next_buf",
            f"{_B}::NonUvaBuffer.uva",
        ),
        legacy="legacy.buffer_utils:UvaBufferPool.copy_to_uva",
        optimized="optimized.buffer_utils:UvaBufferPool.copy_to_uva",
        upstream_impl="vllm.v1.worker.gpu.buffer_utils:UvaBufferPool.copy_to_uva",
        inputs="strategies.buffer_utils.inputs:PoolInputs",
        comparison=Comparison(floats="exact"),
        # By design none: a host copy into a pinned slot and a UVA view (NonUvaBuffer: a non_blocking
        # copy from that slot, pinned in 0.34.0 where pinning exists, pageable before). To be
        # confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="0.34.0: UvaBufferPool's round robin split into _next_buf (shared with "
                    "copy_chunks_to_uva); NonUvaBuffer stages through pinned memory (0.33.0 -> 0.34.0)",
        invariants=(
            "strategies.buffer_utils.oracles:copy_to_uva_returns_the_data",
            "strategies.buffer_utils.oracles:views_survive_until_their_slot_returns",
        ),
    ),
    Target(
        name="fused-staged-writer-apply",
        upstream=(
            f"{_B}::FusedStagedWriter.apply",
            f"{_B}::UvaBufferPool.copy_chunks_to_uva",
        ),
        legacy="legacy.buffer_utils:FusedStagedWriter.apply",
        optimized="optimized.buffer_utils:FusedStagedWriter.apply",
        upstream_impl="vllm.v1.worker.gpu.buffer_utils:FusedStagedWriter.apply",
        inputs="strategies.buffer_utils.inputs:FusedInputs",
        comparison=Comparison(floats="exact"),
        # By design none: group ids, indices, starts, cu_lens and (0.34.0) the contents through UVA
        # pool slots, 0.33.0's contents through a pinned non_blocking copy; one kernel launch.
        # To be confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="0.34.0: FusedStagedWriter (multi-group block tables) concatenates the groups' staged "
                    "chunks into a round-robin UVA pool slot instead of async_tensor_h2d (0.33.0 -> 0.34.0)",
        invariants=(
            "strategies.buffer_utils.oracles:fused_apply_writes_what_was_staged",
            "strategies.buffer_utils.oracles:fused_apply_leaves_other_cells_alone",
            "strategies.buffer_utils.oracles:fused_apply_clears_the_stage",
        ),
    ),
]
