"""Targets whose oracles the engine tests plant (SYNCFUZZ_TARGET_MODULES=tests.oracle_demo).

The copies are the real ones, so legacy and optimized always agree: whatever
is reported comes from the oracle alone. Each oracle is deliberately *wrong*
on part of the input space (a stricter claim than the meaning of the result),
which gives the engine a failure to find, shrink, save, replay and accept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fuzz.oracles import Reference
from fuzz.targets import catalog_targets

CATALOG = catalog_targets()

_OFFSETS = {t.name: t for t in CATALOG}["fla-chunk-offsets"]


def offsets_stay_below_four(spec: dict, output: Any) -> str | None:
    """Not a real invariant: the last chunk offset stays below 4 (false for 4+ chunks)."""
    last = output.tolist()[-1]
    return f"last offset {last} >= 4" if last >= 4 else None


def offsets_never_read(spec: dict, output: Any) -> str | None:
    """Raises on every output: an invariant that cannot read the output reports it."""
    raise KeyError("no such field")


def _expected_offsets_ignoring_chunk_size(spec: dict) -> list[int] | None:
    """Wrong on purpose: one chunk per token (right only for chunk_size 1)."""
    out = [0]
    for start, end in zip(spec["cu_seqlens"], spec["cu_seqlens"][1:]):
        out.append(out[-1] + (end - start))
    return out


WRONG_REFERENCE = Reference(expected=_expected_offsets_ignoring_chunk_size, observed=lambda output: output.tolist())

TARGETS = [
    dataclasses.replace(_OFFSETS, name="demo-invariant", invariants=("tests.oracle_demo:offsets_stay_below_four",)),
    dataclasses.replace(_OFFSETS, name="demo-unreadable", invariants=("tests.oracle_demo:offsets_never_read",)),
    dataclasses.replace(_OFFSETS, name="demo-reference", invariants=(),
                        reference="tests.oracle_demo:WRONG_REFERENCE"),
]
