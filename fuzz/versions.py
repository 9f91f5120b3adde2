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


@functools.lru_cache(maxsize=1)
def _torch_build() -> tuple[str | None, str | None]:
    """``(torch.__version__, torch.version.cuda)`` as the installed torch's ``torch/version.py`` records
    them, read without importing torch: a run's parent process otherwise imports it only for these two
    strings, 2 s of CPU in every run (its workers import torch anyway)."""
    import ast
    from importlib.util import find_spec

    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    found: dict[str, str | None] = {}
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for name in targets:
            if isinstance(name, ast.Name) and isinstance(value, ast.Constant):
                found[name.id] = value.value
    if "__version__" not in found:
        raise ValueError(f"{path} names no __version__")
    return found["__version__"], found.get("cuda")


def _gpu() -> str | None:
    """The GPU's name where this process has already imported torch (any run that may use CUDA has: it
    asked ``torch.cuda.is_available()`` to choose its devices); None in a ``--device cpu`` run's parent."""
    torch = sys.modules.get("torch")
    return torch.cuda.get_device_name(0) if torch is not None and torch.cuda.is_available() else None


def versions() -> dict[str, str | None]:
    try:
        torch_version, torch_cuda = _torch_build()
    except (OSError, SyntaxError, ValueError):  # an unusual install: ask torch itself
        import torch

        torch_version, torch_cuda = torch.__version__, torch.version.cuda
    return {
        "syncfuzz": FUZZ_VERSION,
        **code_tree(),
        "legacy": LEGACY_UPSTREAM,
        "optimized": OPTIMIZED_UPSTREAM,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch_version,
        "torch_cuda": torch_cuda,
        "numpy": _version("numpy"),
        "hypothesis": _version("hypothesis"),
        "triton": _version("triton"),
        "gpu": _gpu(),
    }
