"""A planted edit of an optimized copy, as a target record."""

from __future__ import annotations

import dataclasses
import sys

from fuzz.mutate import mutant_module
from fuzz.targets import Target

PACKAGE = "tests.planted"


@dataclasses.dataclass(frozen=True)
class Plant:
    """``old`` -> ``new`` in ``module`` (an optimized copy), fuzzed as ``base_target``."""

    name: str
    base_target: str
    module: str
    old: str
    new: str
    why: str
    # Another input model for the mutant than the base target's ("module:Class"): for a target whose
    # real copies differ on part of its caller contract (a known finding), the plants are judged on
    # the rest, which that input model draws (tests/planted/idefics2_vision_model.py).
    inputs: str | None = None

    def target(self) -> Target:
        from fuzz.catalog import TARGETS

        base = {t.name: t for t in TARGETS}[self.base_target]
        if self.inputs:
            base = dataclasses.replace(base, inputs=self.inputs)
        attribute = "_" + self.name.replace("-", "_")
        mutant = mutant_module(self.module, f"{PACKAGE}.{attribute}", self.old, self.new)
        # Reachable as `tests.planted:<attribute>.<qualname>`, in this process
        # and in a replay child that imports tests.planted.
        setattr(sys.modules[PACKAGE], attribute, mutant)
        _, _, qualname = base.optimized.partition(":")
        return dataclasses.replace(base, name=self.name, optimized=f"{PACKAGE}:{attribute}.{qualname}")


@dataclasses.dataclass(frozen=True)
class SharedPlant:
    """The same bug in *both* copies: ``legacy`` and ``optimized`` are each
    ``(module, old, new)``, the one logical slip as each copy spells it. The
    differential check is blind to it by construction; a target's invariants
    or its reference (fuzz/oracles/) must report it."""

    name: str
    base_target: str
    legacy: tuple[str, str, str]
    optimized: tuple[str, str, str]
    why: str

    def target(self) -> Target:
        from fuzz.catalog import TARGETS

        base = {t.name: t for t in TARGETS}[self.base_target]
        paths = {}
        for side, (module, old, new) in (("legacy", self.legacy), ("optimized", self.optimized)):
            attribute = f"_{self.name.replace('-', '_')}_{side}"
            mutant = mutant_module(module, f"{PACKAGE}.{attribute}", old, new)
            setattr(sys.modules[PACKAGE], attribute, mutant)
            _, _, qualname = getattr(base, side).partition(":")
            paths[side] = f"{PACKAGE}:{attribute}.{qualname}"
        return dataclasses.replace(base, name=self.name, **paths)
