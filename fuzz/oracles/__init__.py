"""Oracles that see what a differential check cannot (docs/verdicts.md#oracles).

Legacy and optimized agreeing proves nothing about a bug they share. Three
kinds of oracle are declared per target, in its record (fuzz/targets.py),
and written in one module per family here, from the upstream semantics of
the result (its docstring, how callers use it) rather than from either copy:

* **invariants** -- ``def name(spec, output) -> str | None``: a property any
  correct implementation has (``cu_seqlens`` is a running sum from 0 to the
  total, split sizes add up, a rope table covers every position id). None
  when it holds or does not apply to this spec, else one line saying what
  is violated. Checked on every side that returned; a violation is the
  verdict ``invariant-violation``.
* a **reference** -- a :class:`Reference`: an independent implementation
  (plain Python loops where possible) of the quantities the output carries,
  compared with each side when the sides agree; a difference is
  ``reference-divergence``.
* a **consumer** -- ``def name(spec, output) -> None``: the host reads the
  real upstream consumer makes of the output (``max_seqlen.item()`` per
  attention call), run right after the call inside the sync counting and
  reported as *consumer syncs* (fuzz/oracles/syncs.py), so a device-resident output
  that costs its consumer a sync per use shows in the report.

The declarations a target writes (``Reference``, ``per_spec``) are in the ground (fuzz/interface.py,
imported by target code from fuzz.api). This module holds the engine side: resolving what a record
names, and judging an example's outputs with it (fuzz.engine.execute.run_example calls it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuzz.errors import HarnessError
from fuzz.interface import Consumer, Invariant, Reference, per_spec  # noqa: F401 -- declared in the ground
from fuzz.records.verdicts import Mismatch
from fuzz.targets import resolve_cached

if TYPE_CHECKING:
    from fuzz.oracles.outcome import SideResult
    from fuzz.targets import Target


def oracle_name(path: str) -> str:
    """An invariant's name as reports show it: its function name."""
    return path.rpartition(":")[2].rpartition(".")[2]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:500]


def check_invariants(target: Target, spec: dict, legacy: SideResult, optimized: SideResult,
                     identical: bool = False) -> list[Mismatch]:
    """One mismatch per violated invariant, naming the sides that violate it.

    ``identical``: the two outputs were found bitwise equal (fuzz.oracles.compare.same_exactly:
    equal under an exact comparison), so an invariant -- a function of the spec
    and the output -- is evaluated once, on the optimized output, for both.

    An invariant that raises on an output is reported as violated by it: a
    mutant's garbage output must not end the run, and the real copies' outputs
    are tested never to make one raise (tests/unit/test_oracles_*.py)."""
    found = []
    for path in target.invariants:
        check = resolve_cached(path)
        messages: dict[str, str] = {}
        for side, result in (("legacy", legacy), ("optimized", optimized)):
            if not result.ok or (identical and side == "legacy"):
                continue
            try:
                message = check(spec, result.value)
            except Exception as exc:  # noqa: BLE001 -- an output the invariant cannot read violates it
                message = f"could not be checked: {type(exc).__name__}: {exc}"
            if message:
                messages[side] = _one_line(message)
        if identical and "optimized" in messages:
            messages = {"legacy": messages["optimized"], "optimized": messages["optimized"]}
        if messages:
            if len(messages) == 2 and messages["legacy"] == messages["optimized"]:
                detail = f"legacy and optimized: {messages['legacy']}"
            else:
                detail = "; ".join(f"{side}: {text}" for side, text in messages.items())
            found.append(Mismatch(f"invariant {oracle_name(path)}", "invariant", detail))
    return found


def check_reference(target: Target, spec: dict, legacy: SideResult, optimized: SideResult,
                    identical: bool = False) -> list[Mismatch]:
    """Where each side that returned differs from the reference (called when
    the sides agree, so in practice both differ, or neither; ``identical``:
    bitwise equal outputs, compared once for both)."""
    from fuzz.oracles.compare import compare_values
    from fuzz.targets import Comparison

    if target.reference is None:
        return []
    reference: Reference = resolve_cached(target.reference)
    if not isinstance(reference, Reference):
        raise HarnessError(f"{target.name}: reference {target.reference!r} is a {type(reference).__name__}, "
                           "not a fuzz.oracles.Reference")
    try:
        expected = reference.expected(spec)
    except Exception as exc:  # the reference is ours: its failure is a fuzzer bug, not a verdict
        raise HarnessError(f"{target.name}: reference cannot compute {spec!r}: {exc!r}") from exc
    if expected is None:
        return []
    policy = Comparison(floats=reference.floats)
    by_side: dict[str, list[Mismatch]] = {}
    for side, result in (("legacy", legacy), ("optimized", optimized)):
        if not result.ok or (identical and side == "legacy"):
            continue
        try:
            observed = reference.observed(result.value)
        except Exception as exc:  # noqa: BLE001 -- an output the reference cannot read differs from it
            by_side[side] = [Mismatch("", "reference", f"output unreadable: {type(exc).__name__}: {exc}")]
            continue
        differences = list(compare_values(expected, observed, policy, labels=("reference", "copy")))
        if differences:
            by_side[side] = differences
    if not by_side:
        return []
    if identical:
        by_side = {"legacy": by_side["optimized"], "optimized": by_side["optimized"]}
    sides = " and ".join(by_side)
    first = next(iter(by_side.values()))
    return [Mismatch(f"reference{m.path}", "reference",
                     f"{sides} vs reference: " + _one_line(m.detail), m.parts) for m in first]


def consumer_of(target: Target) -> Consumer | None:
    return None if target.consumer is None else resolve_cached(target.consumer)
