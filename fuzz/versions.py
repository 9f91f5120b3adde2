"""Versions recorded in reports and repro files."""

from __future__ import annotations

import functools
import hashlib
import platform
import sys
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # the source tree: fuzz/, legacy/, optimized/, strategies/
ROOT = REPO_ROOT

# What decides what an example computes: the copies and the input models.
CODE_FOLDERS = ("legacy", "optimized", "strategies")

FUZZ_VERSION = "0.1.0"
LEGACY_UPSTREAM = "vllm 0.27.1"
OPTIMIZED_UPSTREAM = "vllm 0.28.0"
# The (legacy, optimized) vllm versions of a target that names none (Target.versions):
# the pair of the first PR's targets. Each catalog module may give its targets another.
DEFAULT_PAIR: tuple[str, str] = (LEGACY_UPSTREAM.split()[-1], OPTIMIZED_UPSTREAM.split()[-1])


def pair_labels(pair: tuple[str, str]) -> dict[str, str]:
    """``("0.29.0", "0.30.0")`` -> ``{"legacy": "vllm 0.29.0", "optimized": "vllm 0.30.0"}``: what
    ``versions()`` records for the default pair, for one target's own pair."""
    return {"legacy": f"vllm {pair[0]}", "optimized": f"vllm {pair[1]}"}


def target_versions(target: object) -> dict[str, str]:
    """The ``legacy``/``optimized`` labels of one target (its ``versions`` pair; the default pair
    for a record without one): what a report entry or repro file of that target should print."""
    return pair_labels(tuple(getattr(target, "versions", DEFAULT_PAIR)))


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def code_tree() -> dict[str, str]:
    """Which source tree runs: its folder and a hash of the copies and input models."""
    digest = hashlib.sha256()
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {"root": str(ROOT), "code_sha256": digest.hexdigest()[:16]}


def versions() -> dict[str, str | None]:
    import torch

    return {
        "syncfuzz": FUZZ_VERSION,
        **code_tree(),
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
