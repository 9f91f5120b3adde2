"""The verdicts, as plain data (no torch): an example's and a target's, and
the path of the leaf a failure names.

An *example* verdict is what ``fuzz.compare.judge`` (or the isolation layer,
for a dead worker) says of one input. A *target* verdict, per device, adds the
states in which no example verdict exists: the target was skipped (it does
not run on the run's devices), the fuzzer broke, or no example ran at all.
docs/verdicts.md defines each one.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from enum import Enum


class _PlainValue(str, Enum):
    """A verdict that prints as its value: on 3.11 a ``(str, Enum)`` member formats as ``Verdict.AGREE`` in an
    f-string or ``str()``, which would leak into reports and messages; ``json`` already writes the value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Verdict(_PlainValue):
    """An example verdict: what one input did."""

    AGREE = "agree"
    DIVERGENCE = "divergence"
    ERROR_MISMATCH = "error-mismatch"
    SYNC_REGRESSION = "sync-regression"
    CRASH = "crash"
    HANG = "hang"
    UPSTREAM_DIVERGENCE = "upstream-divergence"
    INVARIANT_VIOLATION = "invariant-violation"
    REFERENCE_DIVERGENCE = "reference-divergence"

    @property
    def severity(self) -> int:
        return SEVERITY[self.value]

    @property
    def failed(self) -> bool:
        return self is not Verdict.AGREE


# The severity order, stated once (docs/verdicts.md's table shows it): a target's verdict on a device is the
# most severe of its examples' (``worst``).
SEVERITY = {
    "agree": 0,
    "sync-regression": 1,
    "upstream-divergence": 2,
    "error-mismatch": 2,
    "divergence": 3,
    "invariant-violation": 3,
    "reference-divergence": 3,
    "hang": 4,
    "crash": 4,
}


class TargetVerdict(_PlainValue):
    """A target's verdict on one device: an example verdict, or a state in which no example verdict exists.
    Its members equal their values as strings, so verdicts read back from a JSON report compare either way."""

    AGREE = "agree"
    DIVERGENCE = "divergence"
    ERROR_MISMATCH = "error-mismatch"
    SYNC_REGRESSION = "sync-regression"
    CRASH = "crash"
    HANG = "hang"
    UPSTREAM_DIVERGENCE = "upstream-divergence"
    INVARIANT_VIOLATION = "invariant-violation"
    REFERENCE_DIVERGENCE = "reference-divergence"
    SKIPPED = "skipped"  # runs on none of this run's devices (said why)
    FUZZER_ERROR = "fuzzer-error"  # the harness broke: a bug in the fuzzer
    UNTESTED = "untested"  # no example ran (its budget share ran out first)
    CANNOT_BUILD = "cannot-build"  # a side's source cannot be built into this target's code (said why)
    # Examples ran and agreed, but they are no evidence (docs/reach.md):
    SAME_CODE = "same-code"  # both sides ran the same code: a function compared with itself (exit 0, not "agree")
    UNREACHED = "unreached"  # a side never entered the definitions the target claims (exit 3, incomplete)


# The target-only verdicts under their old module-level names, for importers.
SKIPPED = TargetVerdict.SKIPPED
FUZZER_ERROR = TargetVerdict.FUZZER_ERROR
UNTESTED = TargetVerdict.UNTESTED
CANNOT_BUILD = TargetVerdict.CANNOT_BUILD
SAME_CODE = TargetVerdict.SAME_CODE
UNREACHED = TargetVerdict.UNREACHED

# A target's ``upstream_check`` when ``--upstream`` compared it with the real vllm (fuzz/upstream.py);
# any other text says why it could not be.
UPSTREAM_COMPARED = "compared with the real vllm function"

EXAMPLE_VERDICTS = frozenset(SEVERITY)
TARGET_VERDICTS = frozenset(v.value for v in TargetVerdict)
CRASH_VERDICTS = frozenset({"crash", "hang"})  # decided by the isolation layer, inputs not shrunk


def worst(verdicts: object) -> str:
    """The most severe example verdict of ``verdicts`` ("agree" if none)."""
    return max(verdicts, key=lambda v: SEVERITY.get(v, 0), default="agree")  # type: ignore[arg-type]


# Where in an output tree two sides differ. ``fuzz.compare.compare_values`` keeps a leaf's path as a tuple of
# parts (an int index into a list/tuple, or a dict key: any hashable) and renders it once, here, as the text a
# report, a repro file and the markdown show (``[1]['cu_seqlens']``). A report read back has only that text;
# ``blank_indices`` is the one reading of it.
PathPart = Hashable

# A sequence index in a rendered path. A dict's int key renders the same way and is blanked too: the failure
# signature has always read the text, not the tree.
_INDEX = re.compile(r"\[\d+\]")


def render_path(parts: Iterable[PathPart]) -> str:
    """The text of a path: each part in brackets, as its ``repr`` (``(0, 'key')`` -> ``[0]['key']``)."""
    return "".join(f"[{part!r}]" for part in parts)


def blank_indices(path: str) -> str:
    """``path`` with every sequence index left out (``[2]['cu_seqlens']`` -> ``[]['cu_seqlens']``): the failure
    signature's reading of a path (fuzz.model.failure_signature)."""
    return _INDEX.sub("[]", path)
