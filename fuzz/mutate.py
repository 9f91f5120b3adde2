"""Build a mutant of a copied module: the same source with one edit.

Used by the planted-bug tests (tests/planted/plant.py; the mutation self-test, fuzz/selftest.py,
builds its mutants itself): a mutant is a real module, registered in ``sys.modules`` under its own name, so target
records can point at it with an ordinary dotted path and a replay in a fresh
process rebuilds it the same way by importing the module that defines it.
"""

from __future__ import annotations

import importlib
import inspect
import linecache
import sys
from types import ModuleType

from fuzz.errors import HarnessError


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
