"""The targets: one declarative record per changed function (docs/design.md table).

Data only: each module here holds the ``TARGETS`` of one upstream file (or
family) and the ``DESIGN_ROWS`` it covers; they are collected in row order.
Adding a target means adding a record (or a module), never touching the engine.

``expected_optimized_syncs`` is the number of GPU<->CPU syncs the optimized
side makes per call on CUDA *by design* (upstream keeps some under
``gpu_sync_allowed``); more is a sync regression. The values were measured on
an H200 (lab/gpu-runs/).
"""

from __future__ import annotations

import importlib
import pkgutil

from fuzz.targets import Target


def _collect() -> list[Target]:
    modules = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    modules.sort(key=lambda m: (min(getattr(m, "DESIGN_ROWS", (99,))), m.__name__))
    return [target for module in modules for target in module.TARGETS]


TARGETS: list[Target] = _collect()
