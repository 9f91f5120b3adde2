"""Planted bugs and benign refactors of the optimized copies.

Each module here lists ``BUGS`` (one-edit mutants the fuzzer must report) and
``BENIGN`` (refactors it must pass) for one family of targets, as ``Plant``
records (tests/planted/plant.py); the ``shared_*`` modules list
``SHARED_BUGS``, one bug planted in both copies at once (``SharedPlant``),
which only a target's invariants or reference can see. Registered for the CLI and for replay with
``SYNCFUZZ_TARGET_MODULES=tests.planted``.
"""

from __future__ import annotations

import importlib
import pkgutil

from tests.planted.plant import Plant, SharedPlant

_FAMILIES = [
    importlib.import_module(f"{__name__}.{info.name}")
    for info in pkgutil.iter_modules(__path__)
    if info.name != "plant"
]
BUGS: list[Plant] = [plant for family in _FAMILIES for plant in getattr(family, "BUGS", [])]
BENIGN: list[Plant] = [plant for family in _FAMILIES for plant in getattr(family, "BENIGN", [])]
SHARED_BUGS: list[SharedPlant] = [plant for family in _FAMILIES for plant in getattr(family, "SHARED_BUGS", [])]
SYNC_BUGS: list[Plant] = [plant for family in _FAMILIES for plant in getattr(family, "SYNC_BUGS", [])]
STRESS_BUGS: list[Plant] = [plant for family in _FAMILIES for plant in getattr(family, "STRESS_BUGS", [])]
TARGETS = [plant.target() for plant in [*BUGS, *BENIGN, *SYNC_BUGS, *STRESS_BUGS, *SHARED_BUGS]]
