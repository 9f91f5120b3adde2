"""Every target's planted bugs and benign refactors, collected, and their mutants registered.

Each target lists its plants beside its other code, in ``strategies/<module>/planted.py``: ``BUGS``
(one-edit mutants the fuzzer must report), ``BENIGN`` (refactors it must pass), ``SYNC_BUGS`` (only the
CUDA sync oracle sees them), ``STRESS_BUGS`` (only ``--stress``), ``RACE_BUGS`` / ``RACE_BENIGN`` (races only
``--race`` sees on CUDA, and their safe twins), ``POLICY_BUGS`` (copies vLLM's CI copy check rejects: CUDA), ``SHARED_BUGS`` (one bug planted in both
copies at once, which only a target's invariants or reference can see) and ``WIDE_BUGS`` (only on inputs
the caller model never draws). The records are ``Plant`` / ``SharedPlant`` (fuzz/plants.py). Registered
for the CLI and for replay with ``SYNCFUZZ_TARGET_MODULES=tests.planted``: importing this package builds
every mutant as one of its attributes, so a replay child finds it by its dotted path.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

import strategies
from fuzz.api import Plant, SharedPlant

_FAMILIES = [
    importlib.import_module(f"strategies.{info.name}.planted")
    for info in pkgutil.iter_modules(strategies.__path__)
    if info.ispkg and importlib.util.find_spec(f"strategies.{info.name}.planted") is not None
]


def _all(kind: str) -> list:
    return [plant for family in _FAMILIES for plant in getattr(family, kind, [])]


BUGS: list[Plant] = _all("BUGS")
BENIGN: list[Plant] = _all("BENIGN")
SHARED_BUGS: list[SharedPlant] = _all("SHARED_BUGS")
SYNC_BUGS: list[Plant] = _all("SYNC_BUGS")
STRESS_BUGS: list[Plant] = _all("STRESS_BUGS")
RACE_BUGS: list[Plant] = _all("RACE_BUGS")
RACE_BENIGN: list[Plant] = _all("RACE_BENIGN")
POLICY_BUGS: list[Plant] = _all("POLICY_BUGS")
WIDE_BUGS: list[Plant] = _all("WIDE_BUGS")  # fuzzed under --contract wide by their own tests, not registered
TARGETS = [plant.target() for plant in [*BUGS, *BENIGN, *SYNC_BUGS, *STRESS_BUGS, *RACE_BUGS, *RACE_BENIGN,
                                        *POLICY_BUGS, *SHARED_BUGS]]
