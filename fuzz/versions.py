"""Versions recorded in reports and repro files."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

FUZZ_VERSION = "0.1.0"
LEGACY_UPSTREAM = "vllm 0.27.1"
OPTIMIZED_UPSTREAM = "vllm 0.28.0"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    import torch

    return {
        "syncfuzz": FUZZ_VERSION,
        "legacy": LEGACY_UPSTREAM,
        "optimized": OPTIMIZED_UPSTREAM,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "numpy": _version("numpy"),
        "hypothesis": _version("hypothesis"),
        "triton": _version("triton"),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
