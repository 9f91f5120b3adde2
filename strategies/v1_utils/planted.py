"""Planted bugs and benign refactors of the v1_utils targets, collected by tests/planted (fuzz/plants.py).

From shared_fla_glm4: Bugs planted in both copies at once: the FLA index helpers, glm4_1v, async_tensor_h2d
and CpuGpuBuffer.copy_to_gpu.

The differential check cannot see them (legacy and optimized share the slip);
the invariants and references of strategies/fla_index/oracles.py, glm4_1v.py,
torch_utils.py and v1_utils.py must.

From v1_utils: Planted bugs and benign refactors for the cpu-gpu-buffer-copy-to-gpu target (optimized/v1_utils.py).
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.v1_utils"


BUGS = [
    Plant("planted-copy-to-gpu-zero-is-all", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "if n is not None:", "if n:",
          "n=0 taken for 'no n': the whole buffer is copied and returned instead of no row"),
    Plant("planted-copy-to-gpu-gpu-unsliced", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "cpu, gpu = cpu[:n], gpu[:n]", "cpu = cpu[:n]",
          "only the host side sliced: n rows broadcast into the whole device buffer, or a shape error"),
    Plant("planted-copy-to-gpu-one-row-short", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "cpu, gpu = cpu[:n], gpu[:n]", "cpu, gpu = cpu[:n], gpu[: n - 1]",
          "off by one: the device slice is a row short of the host slice"),
]

BENIGN = [
    Plant("benign-copy-to-gpu-slice-none", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "        if n is not None:\n            cpu, gpu = cpu[:n], gpu[:n]\n",
          "        cpu, gpu = cpu[:n], gpu[:n]\n",
          "x[:None] is all of x: the None branch is not needed"),
    Plant("benign-copy-to-gpu-fresh-snapshot", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "cpu.pin_memory() if PIN_MEMORY else cpu", "(cpu.clone().pin_memory() if PIN_MEMORY else cpu)",
          "a fresh pinned snapshot even of a pinned buffer: the caller may rewrite its rows at once"),
]

# The 0.29.0 pageable copy was a benign refactor until the copy policy: values are the same, but vLLM's CI copy
# check (0.30.0+, fuzz/oracles/copypolicy.py) rejects a non_blocking copy from pageable memory.
POLICY_BUGS = [
    Plant("planted-policy-copy-to-gpu-unpinned", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "cpu.pin_memory() if PIN_MEMORY else cpu", "cpu",
          "the 0.29.0 pageable copy of a buffer built with pin_memory=False: rejected by vLLM's CI copy check"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-copy-to-gpu-whole-buffer",
        base_target="cpu-gpu-buffer-copy-to-gpu",
        legacy=("legacy.v1_utils", "return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)",
                "self.gpu.copy_(self.cpu, non_blocking=True)\n        return self.gpu[:n]"),
        optimized=("optimized.v1_utils",
                   "return gpu.copy_(cpu.pin_memory() if PIN_MEMORY else cpu, non_blocking=True)",
                   "self.gpu.copy_(self.cpu, non_blocking=True)\n        return gpu"),
        why="the whole host buffer copied whatever n says: device rows past n, the previous step's, "
        "are overwritten with stale host rows (same returned rows, so only the buffer shows it)",
    ),
]
