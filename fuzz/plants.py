"""Planted bugs and benign refactors: a one-edit mutant of a copy, fuzzed as a target.

A target lists its plants in ``strategies/<module>/planted.py`` (``Plant``, ``SharedPlant``, imported from
fuzz.api); ``tests.planted`` collects every target's and registers their mutants as its own attributes, so
that a record points at one with an ordinary dotted path (``tests.planted:_name.Qual.fn``) and a replay in a
fresh process rebuilds it the same way, by importing ``tests.planted`` (``SYNCFUZZ_TARGET_MODULES``). A
mutant is a real module, registered in ``sys.modules`` under its own name. The mutation self-test
(fuzz/run/selftest.py) builds its mutants itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import linecache
import sys
from types import ModuleType

from fuzz.errors import HarnessError
from fuzz.targets import Target, catalog_targets

PACKAGE = "tests.planted"
"""Where the mutants are registered, and the module that collects every target's plants."""


def mutant_module(base: str, name: str, old: str, new: str) -> ModuleType:
    """``base``'s source with the single occurrence of ``old`` replaced by ``new``."""
    if name in sys.modules:
        return sys.modules[name]
    source = inspect.getsource(importlib.import_module(base))
    count = source.count(old)
    if count != 1:
        raise HarnessError(f"mutant {name}: {old!r} occurs {count} times in {base}, expected exactly once")
    module = ModuleType(name)
    module.__file__ = f"<mutant of {base}: {old!r} -> {new!r}>"
    sys.modules[name] = module
    mutated = source.replace(old, new)
    # As fuzz/releases/sides.py does: tracebacks, and inspect.getsource (which @triton.jit needs).
    linecache.cache[module.__file__] = (len(mutated), None, mutated.splitlines(keepends=True), module.__file__)
    exec(compile(mutated, module.__file__, "exec"), module.__dict__)
    return module


def _base(name: str) -> Target:
    return {target.name: target for target in catalog_targets()}[name]


def _registered(attribute: str, module: str, old: str, new: str) -> str:
    """The mutant built and reachable as ``tests.planted:<attribute>``: in this process and in a replay
    child, which imports tests.planted and so builds it again."""
    mutant = mutant_module(module, f"{PACKAGE}.{attribute}", old, new)
    setattr(importlib.import_module(PACKAGE), attribute, mutant)
    return f"{PACKAGE}:{attribute}"


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
    # the rest, which that input model draws (strategies/idefics2_vision_model/planted.py).
    inputs: str | None = None
    # The devices whose examples can reach the edit: a bug on a path only host tensors take (a CPU fast path, an
    # early return for a tensor already on the host) shows on "cpu" only, and the CUDA power test leaves it out.
    shows_on: tuple[str, ...] = ("cpu", "cuda")

    def target(self) -> Target:
        base = _base(self.base_target)
        if self.inputs:
            base = dataclasses.replace(base, inputs=self.inputs)
        where = _registered("_" + self.name.replace("-", "_"), self.module, self.old, self.new)
        _, _, qualname = base.optimized.partition(":")
        return dataclasses.replace(base, name=self.name, optimized=f"{where}.{qualname}")


@dataclasses.dataclass(frozen=True)
class SharedPlant:
    """The same bug in *both* copies: ``legacy`` and ``optimized`` are each
    ``(module, old, new)``, the one logical slip as each copy spells it. The
    differential check is blind to it by construction; a target's invariants
    or its reference (``strategies/<module>/oracles.py``) must report it."""

    name: str
    base_target: str
    legacy: tuple[str, str, str]
    optimized: tuple[str, str, str]
    why: str

    def target(self) -> Target:
        base = _base(self.base_target)
        paths = {}
        for side, (module, old, new) in (("legacy", self.legacy), ("optimized", self.optimized)):
            where = _registered(f"_{self.name.replace('-', '_')}_{side}", module, old, new)
            _, _, qualname = getattr(base, side).partition(":")
            paths[side] = f"{where}.{qualname}"
        return dataclasses.replace(base, name=self.name, **paths)
