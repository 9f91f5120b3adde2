"""vLLM PR #56888 (0.29.0 -> 0.30.0): ``CpuGpuBuffer.copy_to_gpu`` in vllm/v1/utils.py.

0.29.0 copied ``self.cpu[:n]`` into ``self.gpu[:n]`` with ``non_blocking=True``;
0.30.0 slices both first and copies from ``cpu.pin_memory()`` when pinned memory
exists, so a buffer allocated with ``pin_memory=False`` is staged through pinned
memory (a truly asynchronous copy) instead of a pageable one. The first target of a
second version pair: its copies are checked against 0.29.0 / 0.30.0 (``VERSIONS``).
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="cpu-gpu-buffer-copy-to-gpu",
        upstream=(
            "vllm/v1/utils.py::CpuGpuBuffer.copy_to_gpu",
        ),
        legacy="legacy.v1_utils:CpuGpuBuffer.copy_to_gpu",
        optimized="optimized.v1_utils:CpuGpuBuffer.copy_to_gpu",
        upstream_impl="vllm.v1.utils:CpuGpuBuffer.copy_to_gpu",
        inputs="strategies.v1_utils.inputs:CopyToGpuInputs",
        comparison=Comparison(floats="exact"),
        # By design none: a non_blocking H2D copy (pinning a pageable slice first is a host copy).
        # To be confirmed on CUDA (lab/gpu-runs/).
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="PR #56888: copy_to_gpu stages the host slice through pinned memory (0.29.0 -> 0.30.0)",
        invariants=(
            "strategies.v1_utils.oracles:copy_to_gpu_copies_the_rows_in_use",
            "strategies.v1_utils.oracles:copy_to_gpu_returns_the_copied_rows",
            "strategies.v1_utils.oracles:copy_to_gpu_leaves_the_host_alone",
        ),
        # No consumer: the v1 model runner hands the device rows (input ids, positions, slot
        # mappings) to the model's kernels; nothing reads them back on the host.
    ),
]
