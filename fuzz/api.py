"""What a target's own code imports of the engine: everything it needs, and nothing else.

A target lives in one folder, ``strategies/<module>/`` (docs/adding-a-target.md): its input models
(``inputs.py``), its record (``record.py``), its oracles (``oracles.py``) and its planted bugs
(``planted.py``). They import the engine only through this module (lint-imports checks it), so the engine's
packages can change under them. Here: the record's types (``Target``, ``Comparison``), the input model's
interface (``Impl``, ``InputModel``, the sides, ``release_of``, ``consumer_reads``), the oracle
declarations (``Reference``, ``per_spec``), the planted bugs (``Plant``, ``SharedPlant``) and the errors an
input model raises. Part of the ground: it imports the ground's modules only.
"""

from __future__ import annotations

from fuzz.errors import HarnessError, UsageError
from fuzz.interface import (
    FORM_ATTRIBUTE,
    RELEASE_ATTRIBUTE,
    SIDES,
    Consumer,
    Impl,
    InputModel,
    Invariant,
    Reference,
    consumer_reads,
    engine_waited,
    in_consumer_reads,
    per_spec,
    release_of,
)
from fuzz.plants import Plant, SharedPlant
from fuzz.targets import Comparison, Target

__all__ = ["FORM_ATTRIBUTE", "RELEASE_ATTRIBUTE", "SIDES", "Comparison", "Consumer", "HarnessError", "Impl",
           "InputModel", "Invariant", "Plant", "Reference", "SharedPlant", "Target", "UsageError",
           "consumer_reads", "engine_waited", "in_consumer_reads", "per_spec", "release_of"]
