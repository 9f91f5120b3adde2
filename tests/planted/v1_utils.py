"""Planted bugs and benign refactors for the cpu-gpu-buffer-copy-to-gpu target (optimized/v1_utils.py)."""

from tests.planted.plant import Plant

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
    Plant("benign-copy-to-gpu-unpinned", "cpu-gpu-buffer-copy-to-gpu", _OPT,
          "cpu.pin_memory() if PIN_MEMORY else cpu", "cpu",
          "the 0.29.0 pageable copy: values are the same, only the copy's asynchrony differs"),
]
