"""The verdicts, as plain data (no torch): an example's and a target's.

An *example* verdict is what ``fuzz.compare.judge`` (or the isolation layer,
for a dead worker) says of one input. A *target* verdict, per device, adds the
states in which no example verdict exists: the target was skipped (it does
not run on the run's devices), the fuzzer broke, or no example ran at all.
docs/verdicts.md defines each one.
"""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
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

# Target verdicts that are not example verdicts.
SKIPPED = "skipped"  # runs on none of this run's devices (said why)
FUZZER_ERROR = "fuzzer-error"  # the harness broke: a bug in the fuzzer
UNTESTED = "untested"  # no example ran (its budget share ran out first)
CANNOT_BUILD = "cannot-build"  # a side's source cannot be built into this target's code (said why)
# Examples ran and agreed, but they are no evidence (docs/reach.md):
SAME_CODE = "same-code"  # both sides ran the same code: a function compared with itself (exit 0, not "agree")
UNREACHED = "unreached"  # a side never entered the definitions the target claims (exit 3, incomplete)

# A target's ``upstream_check`` when ``--upstream`` compared it with the real vllm (fuzz/upstream.py);
# any other text says why it could not be.
UPSTREAM_COMPARED = "compared with the real vllm function"

EXAMPLE_VERDICTS = frozenset(SEVERITY)
TARGET_VERDICTS = EXAMPLE_VERDICTS | {SKIPPED, FUZZER_ERROR, UNTESTED, CANNOT_BUILD, SAME_CODE, UNREACHED}
CRASH_VERDICTS = frozenset({"crash", "hang"})  # decided by the isolation layer, inputs not shrunk


def worst(verdicts: object) -> str:
    """The most severe example verdict of ``verdicts`` ("agree" if none)."""
    return max(verdicts, key=lambda v: SEVERITY.get(v, 0), default="agree")  # type: ignore[arg-type]
