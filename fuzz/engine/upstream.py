"""``fuzz run --upstream``: the real vllm function as a third side.

With vllm installed (``pip install '.[upstream]'``), targets that record an
``upstream_impl`` also run the real function on every example and compare it
with our optimized copy; a difference is its own verdict,
``upstream-divergence``. Where the real function cannot be imported or called
on this host (vllm missing, a model module whose imports need CUDA-built
torchvision ops, a target whose harness stands in for layers the real class
would build) the run says why and fuzzes that target without the third side.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING

from fuzz.records.verdicts import UPSTREAM_COMPARED
from fuzz.targets import Target

if TYPE_CHECKING:
    from fuzz.config import RunConfig

COMPARED = UPSTREAM_COMPARED

NO_UPSTREAM = "no upstream callable recorded: the harness stands in for layers the real class would build"


def unavailable(target: Target) -> str | None:
    """Why the real function can't be a third side here (None: it can)."""
    if not target.upstream_impl:
        return NO_UPSTREAM
    module_name = target.upstream_impl.partition(":")[0]
    try:
        importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 -- any import failure is a reason to print
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"cannot import {module_name}: {type(exc).__name__}: {first[:200]}"
    try:
        target.impl("upstream")
    except Exception as exc:  # noqa: BLE001
        return f"cannot resolve {target.upstream_impl}: {exc}"
    return None


def with_upstream(target: Target, config: RunConfig) -> tuple[Target, str | None]:
    """The target as this run fuzzes it, and what ``--upstream`` did for it:
    without the flag no third side (None); with it, the real function where it
    can run here, else the target without it and the reason."""
    if not config.upstream:
        return dataclasses.replace(target, upstream_impl=None), None
    why_not = unavailable(target)
    if why_not:
        return dataclasses.replace(target, upstream_impl=None), why_not
    return target, COMPARED
