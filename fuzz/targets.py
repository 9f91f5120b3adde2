"""Target records and the registry that looks them up.

A target is one frozen, declarative record: which upstream functions it covers,
the dotted paths of its legacy and optimized callables, the input model that
draws and builds its inputs, how outputs are compared and how many GPU<->CPU
syncs the optimized side may make per call. Records live in
``fuzz/catalog.py``; more can be added without touching the engine by naming a
module that defines ``TARGETS`` in ``SYNCFUZZ_TARGET_MODULES`` (comma separated).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from hypothesis.strategies import SearchStrategy

from fuzz.errors import HarnessError, UsageError, unknown_name

CONTRACTS = ("caller", "wide")
"""Input contracts: ``caller`` draws inputs in the forms today's (0.28.0)
callers pass; ``wide`` draws every form the legacy function accepted."""

TARGET_MODULES_ENV = "SYNCFUZZ_TARGET_MODULES"


@dataclass(frozen=True)
class Impl:
    """A resolved side: the function to call and, for a method, its class."""

    path: str
    function: Callable[..., Any]
    owner: type | None


class InputModel(Protocol):
    """Draws JSON-able input specs and turns one into a ready-to-run call."""

    def specs(self, devices: Sequence[str], contract: str) -> SearchStrategy[dict]:
        """Specs: plain JSON data including ``"device"``; never tensors."""

    def materialize(self, spec: dict, impl: Impl) -> Callable[[], Any]:
        """Fresh inputs for one side; the thunk runs the upstream call only."""


@dataclass(frozen=True)
class Comparison:
    """How outputs of the two sides are compared.

    ``floats``: ``"close"`` uses torch.testing.assert_close with its default
    per-dtype tolerances (docs/comparison.md), ``"exact"`` demands bitwise
    equality. Integer and bool tensors are always compared bitwise.
    """

    floats: str = "close"

    def __post_init__(self) -> None:
        if self.floats not in ("close", "exact"):
            raise HarnessError(f"Comparison.floats={self.floats!r} must be 'close' or 'exact'")


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

    def syncs_allowed(self, spec: dict) -> int:
        if self.sync_budget is None:
            return self.expected_optimized_syncs
        return int(resolve_object(self.sync_budget)(spec))

    def input_model(self) -> InputModel:
        model = resolve_object(self.inputs)
        return model() if isinstance(model, type) else model

    def impl(self, side: str) -> Impl:
        path = {"legacy": self.legacy, "optimized": self.optimized, "upstream": self.upstream_impl}[side]
        if path is None:
            raise HarnessError(f"{self.name} has no {side} implementation")
        return resolve_impl(path)

    def as_json(self) -> dict[str, Any]:
        """The record in the `list --json` interface (DESIGN.md)."""
        return {
            "name": self.name,
            "upstream": list(self.upstream),
            "legacy": self.legacy,
            "optimized": self.optimized,
            "devices": list(self.devices),
            "expected_optimized_syncs": self.expected_optimized_syncs,
            "inputs": self.inputs,
            "comparison": {"floats": self.comparison.floats, "integers": "exact"},
            "description": self.description,
            "sync_budget": self.sync_budget,
            "upstream_impl": self.upstream_impl,
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


def resolve_impl(path: str) -> Impl:
    function = resolve_object(path)
    module_name, _, qualname = path.partition(":")
    owner = None
    if "." in qualname:
        owner = resolve_object(f"{module_name}:{qualname.rsplit('.', 1)[0]}")
    return Impl(path=path, function=function, owner=owner)


def _extra_modules() -> list[str]:
    raw = os.environ.get(TARGET_MODULES_ENV, "")
    return [m.strip() for m in raw.split(",") if m.strip()]


def all_targets(extra_modules: Iterable[str] = ()) -> dict[str, Target]:
    """Every registered target by name: the catalog plus plug-in modules."""
    from fuzz.catalog import TARGETS

    found: dict[str, Target] = {}
    modules = [*_extra_modules(), *extra_modules]
    sources: list[Iterable[Target]] = [TARGETS]
    for module_name in modules:
        try:
            sources.append(importlib.import_module(module_name).TARGETS)
        except (ImportError, AttributeError) as exc:
            raise UsageError(
                f"target module {module_name!r} has no TARGETS list ({exc}); "
                f"fix {TARGET_MODULES_ENV} or the repro file's target_module"
            ) from exc
    for source in sources:
        for target in source:
            found[target.name] = target
    return found


def lookup(names: Sequence[str], extra_modules: Iterable[str] = ()) -> list[Target]:
    """The named targets (all when ``names`` is empty), in catalog order."""
    registry = all_targets(extra_modules)
    if not names:
        return list(registry.values())
    chosen = []
    for name in names:
        if name not in registry:
            raise unknown_name("target", name, registry)
        if registry[name] not in chosen:
            chosen.append(registry[name])
    return chosen
