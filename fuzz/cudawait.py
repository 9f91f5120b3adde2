"""How a fuzz process' thread waits for the GPU: the primary CUDA context's scheduling flag.

CUDA's default (``CU_CTX_SCHED_AUTO``) spins a core while the thread waits for the GPU when the process
has fewer contexts than the machine has cores, which a fuzz process always has (one context). A spinning
wait holds its core; when the host's cores are all taken (N workers on N cores, plus their pytest-xdist
controllers and the MPS server) it takes them from the other workers' Hypothesis and Python work.
``SYNCFUZZ_CUDA_WAIT`` picks the flag for each fuzz process: ``auto`` (CUDA's default, nothing set),
``spin``, ``yield`` (spin, but give the core up to any other runnable thread) or ``blocking`` (sleep until
the GPU's interrupt). Set through the driver API with ctypes before torch makes the context (a leaf: no
torch import); a context already active keeps its flag, and the run goes on with it.
"""

from __future__ import annotations

import ctypes
import os

ENV = "SYNCFUZZ_CUDA_WAIT"
FLAGS = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}  # CU_CTX_SCHED_*


def wait_mode(environ: dict[str, str] | None = None) -> str:
    """The mode the environment asks for (``auto`` when unset); a ValueError names a wrong one."""
    mode = (os.environ if environ is None else environ).get(ENV, "auto") or "auto"
    if mode not in FLAGS:
        raise ValueError(f"{ENV}={mode!r}: expected one of {', '.join(FLAGS)}")
    return mode


def set_cuda_wait(mode: str) -> str | None:
    """Give every visible device's primary context the ``mode`` flag; None when done (or nothing to do),
    else why not, in one line (no driver, no device, a context already active)."""
    if mode == "auto":
        return None
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no CUDA driver ({exc})"
    if driver.cuInit(0) != 0:
        return "cuInit failed"
    count = ctypes.c_int(0)
    if driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "cuDeviceGetCount failed"
    set_flags = getattr(driver, "cuDevicePrimaryCtxSetFlags_v2", None) or driver.cuDevicePrimaryCtxSetFlags
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            return f"cuDeviceGet({ordinal}) failed"
        status = set_flags(device, ctypes.c_uint(FLAGS[mode]))
        if status != 0:
            return f"cuDevicePrimaryCtxSetFlags on device {ordinal} returned CUresult {status}"
    return None
