"""The interface between the engine and a target's own code (``strategies/<module>/``), at the bottom.

What a target's code uses and the engine reads back: a side's ``Impl``, the ``InputModel`` protocol an
input model implements, the sides it materializes for, the release a rebuilt side's code is from, the
marker for a consumer's reads, and the oracle declarations (``Reference``, ``per_spec``). A leaf: it
imports nothing of the engine but its error types, so the engine's modules can import it from any layer.
Target code imports these names from ``fuzz.api``, the facade that adds the records (``Target``,
``Comparison``) and planted bugs (``Plant``); the import-linter contracts in pyproject.toml check both.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterator, Protocol, Sequence

from hypothesis.strategies import SearchStrategy

from fuzz.errors import HarnessError, UsageError

__all__ = ["FORM_ATTRIBUTE", "RELEASE_ATTRIBUTE", "SIDES", "Consumer", "HarnessError", "Impl", "InputModel",
           "Invariant", "Reference", "UsageError", "consumer_reads", "in_consumer_reads", "per_spec", "release_of"]

SIDES = ("legacy", "optimized", "upstream")
"""The sides an input model materializes for: the two copies and, under
``fuzz run --upstream``, the real vllm function."""
FORM_ATTRIBUTE = "SYNCFUZZ_FORM"
"""Set on a module rebuilt from an upstream source (fuzz/releases/sides.py): which copy,
legacy or optimized, it was rebuilt from, i.e. how its inputs are materialized."""
RELEASE_ATTRIBUTE = "SYNCFUZZ_RELEASE"
"""Set on a module rebuilt from an upstream source: the vllm version of that source (``"0.33.0"``), or
None for a checkout with no ``vllm/_version.py``. An input model whose target's call form changed in
some release reads it to hand that side its own release's form (``release_of``)."""


@dataclass(frozen=True)
class Impl:
    """A resolved side: the function to call, for a method its class, and the
    module that holds them (a copy, a planted or self-test mutant of one, or
    vllm's own module) -- where an input model finds the side's other classes."""

    path: str
    function: Callable[..., Any]
    owner: type | None
    module: ModuleType


class InputModel(Protocol):
    """Draws JSON-able input specs and turns one into a ready-to-run call.

    The engine runs each drawn spec on every device of the run, with ``"device"`` replaced: one Hypothesis
    draw serves them all. A model whose draws depend on the device (a form only CUDA has, an input kept off
    CUDA) also defines ``runs_on(spec, device) -> bool``, false where the spec must not run on ``device``;
    without it every spec runs on every device (fuzz.engine.devices.on_devices). A model whose draws depend on
    what the two sides' code supports (a side rebuilt from an older release lacks a fallback the other has)
    defines ``for_sides({"legacy": impl, "optimized": impl}) -> InputModel``: the engine draws from the model it
    returns (fuzz.engine.runner.model_for_sides); it must say in its docstring what it stops drawing."""

    def specs(self, devices: Sequence[str], contract: str) -> SearchStrategy[dict]:
        """Specs: plain JSON data including ``"device"``, one of ``devices``; never tensors."""

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        """Fresh inputs for one side (``side`` in ``SIDES``; ``impl.module``
        holds the side's classes); the thunk runs the upstream call only."""


def release_of(impl: Impl) -> str | None:
    """The vllm release a side's code is from, for an input model that must call it in that release's
    form: the source's version for a rebuilt side (None when unversioned); None for a copy, whose form
    the ``side`` argument of ``materialize`` already names."""
    return getattr(impl.module, RELEASE_ATTRIBUTE, None)


_in_consumer: ContextVar[bool] = ContextVar("syncfuzz_in_consumer", default=False)


@contextmanager
def consumer_reads() -> Iterator[None]:
    """Syncs made inside are the consumer's (fuzz.oracles.syncs ``SyncTally.consumer``), not the call's: an input
    model's stand-in for a caller wraps its reads of the output in this."""
    token = _in_consumer.set(True)
    try:
        yield
    finally:
        _in_consumer.reset(token)


def in_consumer_reads() -> bool:
    """Whether the current code runs inside ``consumer_reads()`` (fuzz.oracles.syncs counts by it)."""
    return _in_consumer.get()


_rehold: ContextVar[Callable[[], None] | None] = ContextVar("syncfuzz_rehold", default=None)


def engine_waited() -> None:
    """An input model that drives a sequence of calls calls this right after it made vLLM's engine wait between
    two steps (a stream or event synchronize): under the race oracle's held run (fuzz/oracles/races.py) the
    wait ran the held stream's sleep out, and this queues a new one, so the next step's copies and kernels are
    held too. Outside a held run it does nothing."""
    hold = _rehold.get()
    if hold is not None:
        hold()


@contextmanager
def holding_steps(rehold: Callable[[], None]) -> Iterator[None]:
    """While inside, ``engine_waited()`` calls ``rehold`` (the race oracle's held run installs it)."""
    token = _rehold.set(rehold)
    try:
        yield
    finally:
        _rehold.reset(token)


@dataclass(frozen=True)
class Reference:
    """An independent implementation of what a target's output means.

    ``expected(spec)``: the quantities the output must carry for this input,
    as plain Python values or CPU tensors; None where the documented meaning
    says nothing about the input (e.g. a wide-contract input no caller
    passes). ``observed(output)``: the same quantities read off one side's
    output, in the same structure. ``floats``: ``"exact"`` or ``"close"``
    (torch.testing.assert_close defaults), as in fuzz.targets.Comparison.
    """

    expected: Callable[[dict], Any]
    observed: Callable[[Any], Any]
    floats: str = "exact"

    def __post_init__(self) -> None:
        if self.floats not in ("close", "exact"):
            raise HarnessError(f"Reference.floats={self.floats!r} must be 'close' or 'exact'")


Invariant = Callable[[dict, Any], "str | None"]
Consumer = Callable[[dict, Any], None]


def per_spec(function: Callable[[dict], Any]) -> Callable[[dict], Any]:
    """``function(spec)`` computed once per example: an example's invariants, on
    both sides, and its reference often derive the same inputs from the spec
    (the coordinates the input model builds, a seeded table). The latest spec's
    value is kept, keyed by the spec's ``repr`` (specs are small JSON-like
    dicts); callers share it, so they must not modify it in place."""
    last: list[Any] = [None, None]

    @functools.wraps(function)
    def cached(spec: dict) -> Any:
        key = repr(spec)
        if last[0] != key:
            last[1] = function(spec)
            last[0] = key
        return last[1]

    return cached
