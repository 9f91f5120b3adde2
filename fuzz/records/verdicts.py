"""The verdicts, and where they are decided (no torch): an example's and a target's, the
mismatches behind them, and the path of the leaf a failure names.

An *example* verdict is ``decide_example``'s, from what each oracle found (fuzz.oracles.compare's
differential, fuzz/oracles/syncrule.py's sync rule, fuzz/oracles/' invariants, reference and consumer), or
the isolation layer's for a dead worker (``crash``, ``hang``). A *target* verdict, per device
(``device_verdict``) and over its devices (``overall_verdict``), adds the states in which no example
verdict exists: the target was skipped (it does not run on the run's devices), the fuzzer broke, no
example ran at all, or the examples showed nothing. docs/verdicts.md defines each one; the severity
order (``SEVERITY``) and the precedence of one example's findings (``decide_example``) are written
here once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from enum import Enum


class _PlainValue(str, Enum):
    """A verdict that prints as its value: on 3.11 a ``(str, Enum)`` member formats as ``Verdict.AGREE`` in an
    f-string or ``str()``, which would leak into reports and messages; ``json`` already writes the value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Verdict(_PlainValue):
    """An example verdict: what one input did, with its severity (docs/verdicts.md's table shows the order):
    a target's verdict on a device is the most severe of its examples' (``worst``). Each is declared here
    once; ``TargetVerdict`` has every one of them and the target-only states."""

    AGREE = "agree", 0
    DIVERGENCE = "divergence", 3
    ERROR_MISMATCH = "error-mismatch", 2
    SYNC_REGRESSION = "sync-regression", 1
    CRASH = "crash", 4
    HANG = "hang", 4
    UPSTREAM_DIVERGENCE = "upstream-divergence", 2
    INVARIANT_VIOLATION = "invariant-violation", 3
    REFERENCE_DIVERGENCE = "reference-divergence", 3
    RACE = "race", 3  # a pending copy read or wrote host memory the host changed (fuzz/oracles/races.py)
    COPY_POLICY = "copy-policy", 1  # a non_blocking copy vLLM's CI copy check rejects (fuzz/oracles/copypolicy.py)

    severity: int

    def __new__(cls, value: str, severity: int) -> "Verdict":
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity = severity
        return member

    @property
    def failed(self) -> bool:
        return self is not Verdict.AGREE


SEVERITY = {verdict.value: verdict.severity for verdict in Verdict}
"""Example verdict -> its severity (read from the members)."""

_TARGET_ONLY = {
    "SKIPPED": "skipped",  # runs on none of this run's devices (said why)
    "FUZZER_ERROR": "fuzzer-error",  # the harness broke: a bug in the fuzzer
    "UNTESTED": "untested",  # no example ran (its budget share ran out first)
    "CANNOT_BUILD": "cannot-build",  # a side's source cannot be built into this target's code (said why)
    "RETIRED": "retired",  # a side's release removed the definitions the target is about (exit 0; said when)
    # Examples ran and agreed, but they are no evidence (docs/reach.md):
    "SAME_CODE": "same-code",  # both sides ran the same code: a function compared with itself (exit 0, not "agree")
    "UNREACHED": "unreached",  # a side never entered the definitions the target claims (exit 3, incomplete)
}

TargetVerdict = _PlainValue("TargetVerdict", {**{v.name: v.value for v in Verdict}, **_TARGET_ONLY},
                            module=__name__, qualname="TargetVerdict")
TargetVerdict.__doc__ = """A target's verdict on one device: an example verdict, or a state in which no example
verdict exists (``_TARGET_ONLY``). Its members equal their values as strings, so verdicts read back from a JSON
report compare either way."""


# A target's ``upstream_check`` when ``--upstream`` compared it with the real vllm (fuzz/engine/upstream.py);
# any other text says why it could not be.
UPSTREAM_COMPARED = "compared with the real vllm function"

EXAMPLE_VERDICTS = frozenset(SEVERITY)
TARGET_VERDICTS = frozenset(v.value for v in TargetVerdict)
CRASH_VERDICTS = frozenset({"crash", "hang"})  # decided by the isolation layer, inputs not shrunk


def worst(verdicts: object) -> str:
    """The most severe example verdict of ``verdicts`` ("agree" if none)."""
    return max(verdicts, key=lambda v: SEVERITY.get(v, 0), default="agree")  # type: ignore[arg-type]


# Where in an output tree two sides differ. ``fuzz.oracles.compare.compare_values`` keeps a leaf's path as a tuple of
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
    signature's reading of a path (fuzz.records.model.failure_signature)."""
    return _INDEX.sub("[]", path)


# --------------------------------------------------------------------------- what a failure names

@dataclass(frozen=True)
class Mismatch:
    """One thing an oracle found: where (a leaf of the outputs, or a name), what differs, in words."""

    path: str  # rendered: render_path(parts) for a leaf of the outputs, else a name ("invariant NAME", "consumer")
    what: str  # "type", "shape", "dtype", "device", "values", "layout", "length", "keys", "exception", "syncs"
    detail: str
    parts: tuple[PathPart, ...] = ()  # the leaf's path as compare_values walked it; () when not a leaf

    @classmethod
    def at(cls, parts: tuple[PathPart, ...], what: str, detail: str) -> Mismatch:
        """A mismatch at a leaf of the outputs, its path rendered once (``render_path``)."""
        return cls(render_path(parts), what, detail, parts)

    def as_json(self) -> dict[str, str]:
        return {"path": self.path or "<output>", "what": self.what, "detail": self.detail}


# --------------------------------------------------------------------------- deciding an example

Finding = Callable[[], list[Mismatch]]  # an oracle, asked only when its answer can matter; [] = nothing found


@dataclass(frozen=True)
class ExampleDecision:
    verdict: Verdict
    mismatches: list[Mismatch]
    oracles: tuple[str, ...]  # every oracle that flagged the example (docs/verdicts.md#oracles)


def _nothing() -> list[Mismatch]:
    return []


def decide_example(differential: tuple[Verdict, list[Mismatch]], both_returned: bool, *, sync: Finding,
                   invariants: Finding, reference: Finding, consumer: Finding,
                   upstream: Finding | None = None, race: Finding = _nothing,
                   policy: Finding = _nothing) -> ExampleDecision:
    """One example's verdict from what each oracle found: the one place the precedence is written.

    ``differential`` is the two sides compared (fuzz.oracles.compare.differential: agree, divergence or
    error-mismatch); ``both_returned``: neither side raised. The verdict is the first that applies:

    1. divergence / error-mismatch -- the sides differ, so what they share is moot;
    2. invariant-violation -- an invariant (fuzz/oracles/) fails on a side's output;
    3. reference-divergence -- the sides agree with each other, not with the reference;
    4. race -- under ``--race``, the optimized output changes when the host rewrites memory a pending
       copy still reads or writes, and legacy's does not (fuzz/oracles/races.py);
    5. sync-regression -- the function's syncs, by the target's sync rule (fuzz/oracles/syncrule.py);
    6. copy-policy -- copies vLLM's CI copy check rejects, by the same rule (fuzz/oracles/copypolicy.py);
    7. sync-regression -- the consumer's reads of the optimized output sync more than of legacy's;
    8. upstream-divergence -- under ``--upstream``, the optimized copy and the real vllm function differ;
    9. agree.

    Invariants are asked of every example (their names are listed even under a divergence); the sync
    rule, the copy policy, the race run, the reference and the consumer only where the sides agree and
    both returned; ``upstream`` only where nothing else failed. ``oracles`` names each that flagged the
    example, in that order of asking ("differential", "sync", "copy-policy", "invariant NAME", "reference",
    "race", "consumer-sync"; "upstream" alone).
    """
    verdict, mismatches = differential
    agreeing = not verdict.failed
    flagged: list[str] = ["differential"] if verdict.failed else []
    if agreeing and both_returned:
        syncs = sync()
        if syncs:
            verdict, mismatches = Verdict.SYNC_REGRESSION, syncs
            flagged.append("sync")
        rejected = policy()
        if rejected:
            flagged.append("copy-policy")
            if verdict is Verdict.AGREE:
                verdict, mismatches = Verdict.COPY_POLICY, rejected
    violated = invariants()
    flagged += [m.path for m in violated]
    if agreeing and violated:
        verdict, mismatches = Verdict.INVARIANT_VIOLATION, violated
    if agreeing and both_returned:
        differs = reference()
        if differs:
            flagged.append("reference")
            if verdict in (Verdict.AGREE, Verdict.SYNC_REGRESSION, Verdict.COPY_POLICY):
                verdict, mismatches = Verdict.REFERENCE_DIVERGENCE, differs
        raced = race()
        if raced:
            flagged.append("race")
            if verdict in (Verdict.AGREE, Verdict.SYNC_REGRESSION, Verdict.COPY_POLICY):
                verdict, mismatches = Verdict.RACE, raced
        reads = consumer()
        if reads:
            flagged.append("consumer-sync")
            if verdict is Verdict.AGREE:
                verdict, mismatches = Verdict.SYNC_REGRESSION, reads
    if upstream is not None and not verdict.failed:
        differences = upstream()
        if differences:
            return ExampleDecision(Verdict.UPSTREAM_DIVERGENCE, differences, ("upstream",))
    return ExampleDecision(verdict, mismatches, tuple(dict.fromkeys(flagged)))


# --------------------------------------------------------------------------- deciding a target

def target_state(skipped: bool, fuzzer_error: bool, cannot_build: bool, retired: bool = False) -> TargetVerdict | None:
    """The verdict that overrides every device's, or None: skipped (no device of the run), a fuzzer bug,
    a side whose release removed the target's definitions, or a side that cannot be built."""
    if skipped:
        return TargetVerdict.SKIPPED
    if fuzzer_error:
        return TargetVerdict.FUZZER_ERROR
    if retired:
        return TargetVerdict.RETIRED
    if cannot_build:
        return TargetVerdict.CANNOT_BUILD
    return None


def device_verdict(state: TargetVerdict | None, failures: Iterable[str], examples: int,
                   no_evidence: Callable[[], TargetVerdict | None]) -> TargetVerdict:
    """A target's verdict on one device: the overriding state; else the worst failure's; else untested
    (no example ran); else unreached / same-code (``no_evidence``, asked only here: whether the examples,
    which ran and agreed, showed nothing -- it reads the device's reach); else agree."""
    if state is not None:
        return state
    found = list(failures)
    if found:
        return TargetVerdict(worst(found))
    if examples == 0:
        return TargetVerdict.UNTESTED
    return no_evidence() or TargetVerdict.AGREE


def overall_verdict(state: TargetVerdict | None, failures: Iterable[str],
                    on_devices: Iterable[TargetVerdict]) -> TargetVerdict:
    """A target's verdict over its devices: the overriding state; else the worst failure's; else untested
    if a device (or every device: none ran) is; else unreached, then same-code, if a device is; else agree."""
    if state is not None:
        return state
    found = list(failures)
    if found:
        return TargetVerdict(worst(found))
    seen = set(on_devices)
    if not seen or TargetVerdict.UNTESTED in seen:
        return TargetVerdict.UNTESTED
    for no_evidence in (TargetVerdict.UNREACHED, TargetVerdict.SAME_CODE):
        if no_evidence in seen:
            return no_evidence
    return TargetVerdict.AGREE
