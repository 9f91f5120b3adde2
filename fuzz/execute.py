"""Run one example: both sides on fresh inputs, then judge.

Each side gets its own freshly materialized inputs (a side that mutates its
arguments cannot leak into the other) and its own sync tally. Materializing is
outside the tally: only the upstream call is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fuzz.compare import Mismatch, Verdict, judge
from fuzz.errors import HarnessError
from fuzz.outcome import Raised, SideResult
from fuzz.syncs import counting_syncs
from fuzz.targets import Target


@dataclass
class ExampleResult:
    spec: dict
    verdict: Verdict
    mismatches: list[Mismatch]
    legacy: SideResult
    optimized: SideResult
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return self.spec["device"]

    @property
    def signature(self) -> tuple:
        """What makes two failures the same bug: verdict, where the outputs
        differ and the exception types -- not the values or messages."""
        return (
            self.verdict.value,
            tuple((m.path, m.what) for m in self.mismatches),
            self.legacy.raised.type_name if self.legacy.raised else None,
            self.optimized.raised.type_name if self.optimized.raised else None,
        )


def run_side(target: Target, side: str, spec: dict) -> SideResult:
    impl = target.impl(side)
    try:
        thunk = target.input_model().materialize(spec, impl)
    except Exception as exc:  # a strategy bug, not a verdict
        raise HarnessError(f"{target.name}: cannot build inputs for {side} from {spec!r}: {exc!r}") from exc
    on_cuda = spec["device"].startswith("cuda")
    if on_cuda:
        # Start from an idle device so the tally only sees this call's syncs.
        torch.cuda.synchronize()
    result = SideResult()
    with counting_syncs(on_cuda) as tally:
        try:
            result.value = thunk()
        except Exception as exc:
            result.raised = Raised.of(exc)
    if tally is not None:
        result.syncs, result.allowed_syncs = tally.total, tally.allowed
    return result


def run_example(target: Target, spec: dict) -> ExampleResult:
    legacy = run_side(target, "legacy", spec)
    optimized = run_side(target, "optimized", spec)
    expected = target.expected_optimized_syncs if spec["device"].startswith("cuda") else None
    verdict, mismatches = judge(legacy, optimized, target.comparison, expected)
    return ExampleResult(spec, verdict, mismatches, legacy, optimized)
