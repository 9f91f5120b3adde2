"""Target records and the registry that looks them up.

A target is one frozen, declarative record: which upstream functions it covers,
the dotted paths of its legacy and optimized callables, the input model that
draws and builds its inputs, how outputs are compared and how many GPU<->CPU
syncs the optimized side may make per call. A target's records live with the rest of its own code, in
``strategies/<module>/record.py`` (one folder per copy module: docs/adding-a-target.md); the registry
finds them by name, so no engine module imports target code. More can be added without touching the
engine by naming a module that defines ``TARGETS`` in ``SYNCFUZZ_TARGET_MODULES`` (comma separated).

``expected_optimized_syncs`` is the number of GPU<->CPU syncs the optimized side makes per call on CUDA
*by design* (upstream keeps some under ``gpu_sync_allowed``); more is a sync regression.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Sequence

from fuzz.errors import HarnessError, UsageError, unknown_name

# The interface to a target's own code (fuzz/interface.py, the leaf below the registry).
from fuzz.interface import FORM_ATTRIBUTE, RELEASE_ATTRIBUTE, SIDES, Impl, InputModel, release_of  # noqa: F401
from fuzz.versions import DEFAULT_PAIR, REPO_ROOT

CONTRACTS = ("caller", "wide")
"""Input contracts: ``caller`` draws inputs in the forms the callers of the
target's optimized release pass (docs/verdicts.md#contracts says which, per
target); ``wide`` draws every form the legacy function accepted."""

TARGET_MODULES_ENV = "SYNCFUZZ_TARGET_MODULES"
PROJECT_ROOT = REPO_ROOT  # the source tree (fuzz/run/child.py defines it once)


@dataclass(frozen=True)
class Comparison:
    """How outputs of the two sides are compared.

    ``floats``: ``"close"`` uses torch.testing.assert_close with its default
    per-dtype tolerances (docs/verdicts.md#values), ``"exact"`` demands bitwise
    equality. Integer and bool tensors are always compared bitwise.

    ``layout``: also compare every tensor leaf's strides and ``is_contiguous()``
    (``fuzz.oracles.compare.layout_of``; docs/verdicts.md#layout). Declared where the
    callers hand the output to a kernel, a ``.view()`` or a Triton launch, so
    a change of memory layout is something a caller can observe.
    """

    floats: str = "close"
    layout: bool = False
    # ``"close"`` only: ``(("float32", rtol, atol), ...)`` in place of assert_close's default for those
    # dtypes. For a target whose two sides do the same math in another order or blocking (a batch in one
    # call against one call per item) where a step amplifies one rounding past the defaults; the record
    # says which step and by how much (docs/verdicts.md#values).
    tolerances: tuple[tuple[str, float, float], ...] = ()

    def __post_init__(self) -> None:
        if self.floats not in ("close", "exact"):
            raise HarnessError(f"Comparison.floats={self.floats!r} must be 'close' or 'exact'")
        if not isinstance(self.layout, bool):
            raise HarnessError(f"Comparison.layout={self.layout!r} must be True or False")
        for entry in self.tolerances:
            dtype, rtol, atol = entry if isinstance(entry, tuple) and len(entry) == 3 else (None, -1, -1)
            if self.floats != "close" or dtype not in _TOLERANCE_DTYPES or not (
                    isinstance(rtol, float) and isinstance(atol, float) and rtol >= 0 and atol >= 0):
                raise HarnessError(f"Comparison.tolerances entry {entry!r}: give (dtype, rtol, atol) with dtype "
                                   f"one of {', '.join(_TOLERANCE_DTYPES)}, rtol and atol floats >= 0, and "
                                   "floats='close'")

    def tolerance(self, dtype_name: str) -> tuple[float, float] | None:
        """``(rtol, atol)`` declared for ``dtype_name`` (``"float32"``), or None: assert_close's default."""
        return next(((rtol, atol) for name, rtol, atol in self.tolerances if name == dtype_name), None)

    def as_json(self) -> dict[str, object]:
        """The policy as the `list --json` interface shows it."""
        shown: dict[str, object] = {"floats": self.floats, "integers": "exact", "layout": self.layout}
        if self.tolerances:
            shown["tolerances"] = {name: {"rtol": rtol, "atol": atol} for name, rtol, atol in self.tolerances}
        return shown


_TOLERANCE_DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Target:
    name: str
    upstream: tuple[str, ...]
    legacy: str
    optimized: str
    inputs: str
    comparison: Comparison = field(default_factory=Comparison)
    devices: tuple[str, ...] = ("cpu", "cuda")
    expected_optimized_syncs: int = 0
    description: str = ""
    # Where the designed number of syncs depends on the input (a sync per
    # grid row the PR left alone, a grid kept on the device by one caller and
    # on the host by another): "module:function" taking the spec and returning
    # that example's allowance. expected_optimized_syncs stays the upper bound.
    sync_budget: str | None = None
    # The real vllm callable (vllm installed: `pip install '.[upstream]'`),
    # run as a third side under `fuzz run --upstream`.
    upstream_impl: str | None = None
    # The vllm releases the copies were taken from, (legacy, optimized): what provenance checks
    # them against, drift measures from, and reports and repro files label the target with.
    versions: tuple[str, str] = DEFAULT_PAIR
    # Oracles beyond the differential check (fuzz/oracles/, docs/verdicts.md#oracles):
    # "module:function" invariants (spec, output) -> None | what is violated; or, when
    # none applies, why not.
    invariants: tuple[str, ...] = ()
    no_invariants: str | None = None
    # "module:NAME" of a fuzz.oracles.Reference: an independent implementation of the meaning.
    reference: str | None = None
    # "module:function" (spec, output) -> None: the host reads the real consumer of the
    # output makes, counted as consumer syncs.
    consumer: str | None = None
    # "module:NAME" of the ContextVar[int] holding the depth of the optimized copies' gpu_sync_allowed()
    # regions (optimized/gpu_sync_debug.py): syncs made inside one are counted as allowed, deliberate
    # upstream syncs (docs/verdicts.md#syncs). None where the target's copies open no such region.
    sync_allow_region: str | None = None
    # How many copies per call vLLM's CI copy check may reject on the optimized copy (docs/verdicts.md#copy-policy):
    # None = 0 where the optimized copy's release already enforced the check (0.30.0 and later), else not judged
    # by a budget, only relative to legacy (code written before the check existed).
    copy_policy_budget: int | None = None

    def __post_init__(self) -> None:
        pair = tuple(self.versions)
        if len(pair) != 2 or not all(isinstance(v, str) and v for v in pair):
            raise HarnessError(f"target {self.name}: versions={self.versions!r} must be (legacy, optimized) "
                               f"vllm versions, e.g. ('0.29.0', '0.30.0')")
        object.__setattr__(self, "versions", pair)
        object.__setattr__(self, "invariants", tuple(self.invariants))
        if self.invariants and self.no_invariants:
            raise HarnessError(f"target {self.name}: declares invariants and says why none applies "
                               "(no_invariants); keep one")

    def syncs_allowed(self, spec: dict) -> int:
        if self.sync_budget is None:
            return self.expected_optimized_syncs
        return int(resolve_object(self.sync_budget)(spec))

    def allow_region(self) -> Any:
        """The ContextVar ``sync_allow_region`` names, resolved once per process; None when unnamed."""
        return None if self.sync_allow_region is None else resolve_cached(self.sync_allow_region)

    def input_model(self) -> InputModel:
        model = resolve_object(self.inputs)
        return model() if isinstance(model, type) else model

    def impl(self, side: str) -> Impl:
        path = {"legacy": self.legacy, "optimized": self.optimized, "upstream": self.upstream_impl}[side]
        if path is None:
            raise HarnessError(f"{self.name} has no {side} implementation")
        return resolve_impl(path)

    def files(self) -> dict[str, str | None]:
        """The files of the legacy copy, the optimized copy and the input model,
        repo-relative (``legacy/glm4_1v.py``); found without importing them
        (None where a path names no file, e.g. a mutant built in memory)."""
        return {"legacy": module_file(self.legacy), "optimized": module_file(self.optimized),
                "inputs": module_file(self.inputs)}

    def as_json(self) -> dict[str, Any]:
        """The record in the `list --json` interface (docs/design.md)."""
        return {
            "name": self.name,
            "upstream": list(self.upstream),
            "legacy": self.legacy,
            "optimized": self.optimized,
            "devices": list(self.devices),
            "expected_optimized_syncs": self.expected_optimized_syncs,
            "inputs": self.inputs,
            "comparison": self.comparison.as_json(),
            "description": self.description,
            "sync_budget": self.sync_budget,
            "upstream_impl": self.upstream_impl,
            "versions": {"legacy": self.versions[0], "optimized": self.versions[1]},
            "invariants": list(self.invariants),
            "no_invariants": self.no_invariants,
            "reference": self.reference,
            "consumer": self.consumer,
            "sync_allow_region": self.sync_allow_region,
            "copy_policy_budget": self.copy_policy_budget,
            "files": self.files(),
        }


def resolve_object(path: str) -> Any:
    """Import ``"package.module:Qual.name"`` and return the object."""
    module_name, _, qualname = path.partition(":")
    if not qualname:
        raise HarnessError(f"dotted path {path!r} must look like 'module:qualname'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise HarnessError(f"cannot resolve {path!r}: {exc}") from exc
    return obj


@functools.lru_cache(maxsize=None)
def resolve_cached(path: str) -> Any:
    """``resolve_object`` once per path and process: the oracles and allow regions a record names are
    resolved for every example."""
    return resolve_object(path)


def resolve_impl(path: str) -> Impl:
    """The callable ``path`` names, its class (for a method) and its module.

    The module is the last module on the path: ``tests.planted:_mutant.Cls.fn``
    (a mutant module reached as an attribute) resolves to ``_mutant``.
    """
    module_name, _, qualname = path.partition(":")
    if not qualname:
        raise HarnessError(f"dotted path {path!r} must look like 'module:qualname'")
    try:
        module = importlib.import_module(module_name)
        chain: list[Any] = [module]
        for part in qualname.split("."):
            chain.append(getattr(chain[-1], part))
            if isinstance(chain[-1], ModuleType):
                module, chain = chain[-1], [chain[-1]]
    except (ImportError, AttributeError) as exc:
        raise HarnessError(f"cannot resolve {path!r}: {exc}") from exc
    if len(chain) < 2:
        raise HarnessError(f"cannot resolve {path!r}: it names a module, not a callable")
    owner = chain[-2] if isinstance(chain[-2], type) else None
    return Impl(path=path, function=chain[-1], owner=owner, module=module)


def module_file(path: str) -> str | None:
    """The source file of the module a ``"module:qualname"`` path names, repo-relative
    when inside this checkout; found with ``importlib`` finders, without importing
    the module or its packages (their ``__init__`` may import torch)."""
    parts = path.partition(":")[0].split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for part in parts[1:]:
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    file = Path(spec.origin).resolve()
    return file.relative_to(PROJECT_ROOT).as_posix() if file.is_relative_to(PROJECT_ROOT) else str(file)


def plugin_modules() -> list[str]:
    """The plug-in target modules this environment trusts: ``SYNCFUZZ_TARGET_MODULES``, comma-separated."""
    raw = os.environ.get(TARGET_MODULES_ENV, "")
    return [m.strip() for m in raw.split(",") if m.strip()]


CATALOG_PACKAGE = "strategies"
"""Where the catalog lives: a folder per copy module, its records in ``record.py`` (``TARGETS``, and
``DESIGN_ROWS``, the rows of docs/design.md's table it covers, by which the records are ordered)."""


@functools.lru_cache(maxsize=1)
def catalog_targets() -> tuple[Target, ...]:
    """The catalog's targets, in design-row order: every ``strategies/<module>/record.py``, found by name.

    Once per process. Found with importlib, never imported statically: the engine depends on no target's
    code (lint-imports checks it), and a record imports only fuzz.api, so listing the catalog imports no
    torch."""
    package = importlib.import_module(CATALOG_PACKAGE)
    modules = [importlib.import_module(f"{CATALOG_PACKAGE}.{info.name}.record")
               for info in pkgutil.iter_modules(package.__path__)
               if info.ispkg and importlib.util.find_spec(f"{CATALOG_PACKAGE}.{info.name}.record") is not None]
    modules.sort(key=lambda m: (min(getattr(m, "DESIGN_ROWS", (99,))), m.__name__))
    return tuple(target for module in modules for target in module.TARGETS)


_REGISTRIES: dict[tuple[str, ...], dict[str, Target]] = {}


def all_targets(extra_modules: Iterable[str] = ()) -> dict[str, Target]:
    """Every registered target by name: the catalog plus plug-in modules.

    Looked up once per process for each set of modules (the session, a worker's jobs, a folder of repro
    files all ask again); a registry that is refused is not kept. A name registered by two sources is an
    error naming both: a plug-in must never shadow a catalog target (or another plug-in's) without anyone
    being told -- its runs would report the real target's name."""
    modules = tuple(dict.fromkeys([*plugin_modules(), *extra_modules]))  # a module named twice registers once
    if modules not in _REGISTRIES:
        _REGISTRIES[modules] = _registry(modules)
    return dict(_REGISTRIES[modules])


def _registry(modules: tuple[str, ...]) -> dict[str, Target]:
    found: dict[str, Target] = {}
    origin: dict[str, str] = {}
    sources: list[tuple[str, Iterable[Target]]] = [(f"the catalog ({CATALOG_PACKAGE}/*/record.py)", catalog_targets())]
    for module_name in modules:
        try:
            sources.append((f"module {module_name!r}", importlib.import_module(module_name).TARGETS))
        except (ImportError, AttributeError) as exc:
            raise UsageError(
                f"target module {module_name!r} has no TARGETS list ({exc}); "
                f"fix {TARGET_MODULES_ENV} or the repro file's target_module"
            ) from exc
    for where, source in sources:
        for target in source:
            if target.name in origin:
                raise UsageError(f"target {target.name!r} is registered twice, by {origin[target.name]} and by "
                                 f"{where}; rename one of them (a plug-in may not shadow another target)")
            found[target.name] = target
            origin[target.name] = where
    return found


def lookup(names: Sequence[str], extra_modules: Iterable[str] = ()) -> list[Target]:
    """The named targets (all when ``names`` is empty), in catalog order."""
    return select(all_targets(extra_modules), names)


def select(registry: dict[str, Target], names: Sequence[str]) -> list[Target]:
    """The named targets of ``registry`` (all when ``names`` is empty), in the order named; an unknown name
    is a UsageError naming the closest ones."""
    if not names:
        return list(registry.values())
    chosen = []
    for name in names:
        if name not in registry:
            raise unknown_name("target", name, registry)
        if registry[name] not in chosen:
            chosen.append(registry[name])
    return chosen
