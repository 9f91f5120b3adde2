"""The report model: what a run found, as frozen data with one set of rules.

Every process boundary passes these records as JSON (an isolated worker's
result, an xdist item's, a shard's report read by ``merge-reports``), and
every output -- the summary table, the ``[fuzz]`` lines, Markdown, JUnit, the
exit code -- is rendered from them. So each rule lives here once:

* ``Failure.signature``: when two failures are the same bug;
* ``TargetEntry.verdict_on(device)`` / ``.verdict``: what a target × device
  showed, ``untested`` when no example ran (never "agree");
* ``a + b``: entries of one target from restarted workers, pieces, shards or
  hosts add up to what one run would have reported;
* ``Report.exit_code()``: 0 clean, 1 a failing verdict, 4 a fuzzer error,
  3 incomplete (some target × device ran no example, or a side could not be
  built for a target: ``cannot-build``).

No torch here: merging reports must not need a GPU stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fuzz.errors import UsageError
from fuzz.records.reachdata import add_reach, merged_changes, read_reach, uncovered, unreached_side
from fuzz.records.reachdata import same_code as reach_same_code
from fuzz.records.verdicts import (
    CRASH_VERDICTS,
    EXAMPLE_VERDICTS,
    UPSTREAM_COMPARED,
    TargetVerdict,
    Verdict,
    blank_indices,
    device_verdict,
    overall_verdict,
    target_state,
    worst,
)

REPORT_FORMAT = "syncfuzz-report/2"
# /1 said "agree" for a target that ran no example and had no exit code 3.
READABLE_FORMATS = (REPORT_FORMAT,)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
# A fuzzer bug (a strategy, oracle or the engine itself failed): never a usage error's 2, so CI and a
# Kubernetes failure policy can tell "fix your command" from "report this to syncfuzz".
EXIT_FUZZER_BUG = 4
SIDES = ("legacy", "optimized")


class Interrupted(Exception):
    """A run stopped by SIGINT/SIGTERM; carries the entries of the items that finished."""

    def __init__(self, entries: list[TargetEntry], signal_name: str = "SIGINT") -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.entries = entries
        self.signal_name = signal_name


class ReportError(UsageError):
    """A report file that cannot be read (wrong format, missing or mistyped field)."""


def _field(data: Any, key: str, kind: type | tuple[type, ...], where: str, optional: bool = False) -> Any:
    if not isinstance(data, Mapping):
        raise ReportError(f"{where} must be a JSON object, found {type(data).__name__}")
    if key not in data:
        if optional:
            return None
        raise ReportError(f"{where} has no {key!r} field")
    value = data[key]
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind)):
        names = "/".join(k.__name__ for k in _tuple(kind))
        raise ReportError(f"{where}: field {key!r} must be {names}, found {type(value).__name__}")
    return value


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def failure_signature(verdict: str, mismatches: Iterable[Mapping[str, str]],
                      exceptions: Mapping[str, str | None]) -> str:
    """What makes two failures the same bug: the verdict, the first leaf where
    the outputs differ and the exception types -- not the values or messages,
    nor every other leaf one root cause also changed. A dead worker has no
    leaf: its death ("killed by SIGABRT", "ran past the watchdog") stands in.
    Sequence indices are not part of the leaf (``[2]['cu_seqlens']`` is
    ``[]['cu_seqlens']``): the same slip seen at the third or the fifth element
    of a list is one bug, not two (F12 counted one as 18)."""
    mismatches = list(mismatches)
    if verdict in CRASH_VERDICTS:
        where = [[m["what"], m["detail"].split(";")[0]] for m in mismatches]
    else:
        where = [[blank_indices(m["path"]), m["what"]] for m in mismatches[:1]]
    return json.dumps([verdict, where, [exceptions.get("legacy"), exceptions.get("optimized")]])


@dataclass(frozen=True)
class Failure:
    """One distinct failure of a target: its minimal (or journaled) input."""

    device: str
    verdict: str
    input: Mapping[str, Any]
    mismatches: tuple[Mapping[str, str], ...] = ()
    exceptions: Mapping[str, str | None] = field(default_factory=lambda: {"legacy": None, "optimized": None})
    repro: str | None = None
    known: str | None = None  # the accepted reason (known-issues file), if any
    confirmed: str | None = None  # "k/n": reproduced k of n fresh replays
    flaky: bool = False  # did not reproduce every time
    oracles: tuple[str, ...] = ()  # every oracle that flagged the input, the verdict's first (fuzz/oracles/)
    # Why --confirm's replays did not run (the run was interrupted, the budget ran out); None when they
    # ran or were not asked for.
    unconfirmed: str | None = None

    @property
    def signature(self) -> str:
        return failure_signature(self.verdict, self.mismatches, self.exceptions)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "verdict": self.verdict, "input": dict(self.input),
                "mismatches": [dict(m) for m in self.mismatches], "exceptions": dict(self.exceptions),
                "repro": self.repro, "known": self.known, "confirmed": self.confirmed, "flaky": self.flaky,
                "oracles": list(self.oracles), "unconfirmed": self.unconfirmed}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Failure:
        verdict = _field(data, "verdict", str, where)
        if verdict not in EXAMPLE_VERDICTS:
            raise ReportError(f"{where}: verdict {verdict!r} is not one of {', '.join(sorted(EXAMPLE_VERDICTS))}")
        mismatches = _field(data, "mismatches", list, where)
        for index, mismatch in enumerate(mismatches):
            for key in ("path", "what", "detail"):
                _field(mismatch, key, str, f"{where} mismatch {index}")
        exceptions = _field(data, "exceptions", dict, where, optional=True) or {}
        return cls(device=_field(data, "device", str, where), verdict=verdict,
                   input=_field(data, "input", dict, where), mismatches=tuple(mismatches),
                   exceptions={side: exceptions.get(side) for side in SIDES},
                   repro=_field(data, "repro", str, where, optional=True),
                   known=_field(data, "known", str, where, optional=True),
                   confirmed=_field(data, "confirmed", str, where, optional=True),
                   flaky=bool(_field(data, "flaky", bool, where, optional=True)),
                   oracles=tuple(_field(data, "oracles", list, where, optional=True) or ()),
                   unconfirmed=_field(data, "unconfirmed", str, where, optional=True))


def _add_histograms(a: Mapping[str, Mapping[str, int]], b: Mapping[str, Mapping[str, int]]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for side in SIDES:
        merged = dict(a.get(side, {}))
        for count, n in b.get(side, {}).items():
            merged[count] = merged.get(count, 0) + n
        out[side] = dict(sorted(merged.items(), key=lambda kv: int(kv[0])))
    return out


def _histograms(data: Any, key: str, where: str) -> dict[str, dict[str, int]]:
    value = _field(data, key, dict, where, optional=True) or {}
    out = {}
    for side in SIDES:
        histogram = _field(value, side, dict, f"{where} {key}", optional=True) or {}
        for count, n in histogram.items():
            if not count.lstrip("-").isdigit() or not isinstance(n, int):
                raise ReportError(f"{where} {key} {side}: {count!r}: {n!r} is not a sync count and a number")
            if n < 0:
                raise ReportError(f"{where} {key} {side}: {n} calls with {count} syncs is negative; the report "
                                  "is damaged or edited: re-run that shard")
        out[side] = dict(histogram)
    return out


def _check_counts(examples: int, verdicts: Mapping[str, int], both_raised: int, where: str) -> None:
    """Counts no run can produce (a damaged or hand-edited report) would make a merge's totals lie."""
    fix = "the report is damaged or edited: re-run that shard"
    if examples < 0:
        raise ReportError(f"{where}: examples {examples} is negative; {fix}")
    negative = {v: n for v, n in verdicts.items() if n < 0}
    if negative:
        raise ReportError(f"{where}: verdict counts {negative} are negative; {fix}")
    if sum(verdicts.values()) > examples:
        raise ReportError(f"{where}: verdict counts add up to {sum(verdicts.values())}, more than its {examples} "
                          f"examples; {fix}")
    if not 0 <= both_raised <= examples:
        raise ReportError(f"{where}: both_raised {both_raised} is not between 0 and its {examples} examples; {fix}")


SYNC_PAIRS = ("fewer", "same", "more")  # DeviceTally.sync_pairs: optimized's syncs against legacy's


def _sync_pairs(data: Any, examples: int, where: str) -> dict[str, int]:
    """``sync_pairs`` of a tally as read: optional (a report from before it reads as {}), each of
    fewer / same / more a non-negative count, together no more than the examples."""
    value = _field(data, "sync_pairs", dict, where, optional=True) or {}
    fix = "the report is damaged or edited: re-run that shard"
    unknown = sorted(set(value) - set(SYNC_PAIRS))
    if unknown:
        raise ReportError(f"{where}: sync_pairs has {unknown}, not one of {', '.join(SYNC_PAIRS)}; {fix}")
    bad = {k: n for k, n in value.items() if not isinstance(n, int) or isinstance(n, bool) or n < 0}
    if bad:
        raise ReportError(f"{where}: sync_pairs {bad} must be non-negative counts; {fix}")
    if sum(value.values()) > examples:
        raise ReportError(f"{where}: sync_pairs add up to {sum(value.values())}, more than its {examples} "
                          f"examples; {fix}")
    return {k: value[k] for k in SYNC_PAIRS if k in value}


@dataclass(frozen=True)
class DeviceTally:
    """What ran on one device: examples, their verdicts, syncs per call."""

    examples: int = 0
    verdicts: Mapping[str, int] = field(default_factory=dict)
    both_raised: int = 0
    # side -> {syncs per call (as text, a JSON key): calls}
    syncs_per_call: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: {s: {} for s in SIDES})
    # The part of those syncs torch's detector cannot see (docs/verdicts.md#syncs).
    hidden_syncs_per_call: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: {s: {} for s in SIDES})
    # What the target's consumer stand-in's reads of each output cost (fuzz/oracles/); empty without one.
    consumer_syncs_per_call: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: {s: {} for s in SIDES})
    # CUDA, per example where both sides returned: did optimized make fewer, the same or more syncs than legacy
    # on that input ({"fewer": n, "same": n, "more": n}; {} where none was counted, or in a report from before).
    sync_pairs: Mapping[str, int] = field(default_factory=dict)
    # Runs Hypothesis made to shrink a failure (and its final replay of the smallest one): not examples, so
    # not in ``examples`` nor in any count above (0 in a report from before they were counted apart, whose
    # ``examples`` included them).
    shrink_steps: int = 0

    def __add__(self, other: DeviceTally) -> DeviceTally:
        verdicts = dict(self.verdicts)
        for verdict, count in other.verdicts.items():
            verdicts[verdict] = verdicts.get(verdict, 0) + count
        pairs = {k: self.sync_pairs.get(k, 0) + other.sync_pairs.get(k, 0) for k in SYNC_PAIRS
                 if k in self.sync_pairs or k in other.sync_pairs}
        return DeviceTally(self.examples + other.examples, verdicts, self.both_raised + other.both_raised,
                           _add_histograms(self.syncs_per_call, other.syncs_per_call),
                           _add_histograms(self.hidden_syncs_per_call, other.hidden_syncs_per_call),
                           _add_histograms(self.consumer_syncs_per_call, other.consumer_syncs_per_call), pairs,
                           self.shrink_steps + other.shrink_steps)

    def to_json(self) -> dict[str, Any]:
        return {"examples": self.examples, "verdicts": dict(self.verdicts), "both_raised": self.both_raised,
                "syncs_per_call": {s: dict(h) for s, h in self.syncs_per_call.items()},
                "hidden_syncs_per_call": {s: dict(h) for s, h in self.hidden_syncs_per_call.items()},
                "consumer_syncs_per_call": {s: dict(h) for s, h in self.consumer_syncs_per_call.items()},
                "sync_pairs": dict(self.sync_pairs), "shrink_steps": self.shrink_steps}

    @classmethod
    def from_json(cls, data: Any, where: str) -> DeviceTally:
        verdicts = _field(data, "verdicts", dict, where)
        if not all(isinstance(n, int) for n in verdicts.values()):
            raise ReportError(f"{where}: verdict counts must be numbers")
        examples, both_raised = _field(data, "examples", int, where), _field(data, "both_raised", int, where)
        _check_counts(examples, verdicts, both_raised, where)
        shrink_steps = _field(data, "shrink_steps", int, where, optional=True) or 0
        if shrink_steps < 0:
            raise ReportError(f"{where}: shrink_steps {shrink_steps} is negative; the report is damaged or edited: "
                              "re-run that shard")
        return cls(examples=examples, verdicts=dict(verdicts), both_raised=both_raised, shrink_steps=shrink_steps,
                   syncs_per_call=_histograms(data, "syncs_per_call", where),
                   hidden_syncs_per_call=_histograms(data, "hidden_syncs_per_call", where),
                   consumer_syncs_per_call=_histograms(data, "consumer_syncs_per_call", where),
                   sync_pairs=_sync_pairs(data, examples, where))


@dataclass(frozen=True)
class TargetEntry:
    """One target's run: the unit of every report, and of every merge."""

    name: str
    upstream: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    expected_optimized_syncs: int = 0
    by_device: Mapping[str, DeviceTally] = field(default_factory=dict)
    failures: tuple[Failure, ...] = ()
    first_failure_at: int | None = None  # examples run when the first failure was seen
    seconds: float = 0.0
    flaky: bool = False  # Hypothesis saw a failure not reproduce within the run
    skipped: str | None = None  # why the target runs on none of this run's devices
    fuzzer_error: str | None = None
    upstream_check: str | None = None  # under --upstream: compared, or why not
    placement: tuple[Mapping[str, Any], ...] = ()  # where each item ran (xdist)
    cannot_build: str | None = None  # why a side's source cannot be built into this target (fuzz/releases/sides.py)
    # Which rule judged the optimized side's syncs (docs/verdicts.md#which-sync-rule): "budget" (the copies),
    # "relative" (sides from sources), "relative+budget"; None where none applies (skipped, cannot-build).
    sync_rule: str | None = None
    # Under a rule for sides from sources, what decides the optimized side's syncs, part by part, and whether
    # each descends from the budget's release (fuzz.oracles.syncrule.descent_parts: "entry point", claimed definitions
    # an input model calls). {}: the copies, or not run.
    sync_descent: Mapping[str, bool] = field(default_factory=dict)
    # What each side ran, per device and side (fuzz/reach/collect.py, docs/reach.md): the lines and branches of the
    # definitions the target claims, reached or not, and every definition entered. Empty: not measured.
    reach: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Set when the two sides' code reachable from the entry point is the same text (fuzz/code/codediff.py): an
    # "agree" would compare a function with itself. Says which code, for the reader.
    same_code: str | None = None
    # Set when a side's release removed every file of the target's claimed definitions
    # (fuzz/releases/retired.py): side, release, files, known_from. Its own state, not cannot-build.
    retired: Mapping[str, Any] | None = None

    @property
    def examples(self) -> int:
        return sum(t.examples for t in self.by_device.values())

    @property
    def shrink_steps(self) -> int:
        """Hypothesis' runs to shrink the failures found, apart from the examples (DeviceTally.shrink_steps)."""
        return sum(t.shrink_steps for t in self.by_device.values())

    def _state(self) -> TargetVerdict | None:
        """The verdict that overrides every device's: skipped, a fuzzer bug, a retired target, or a side
        that cannot be built."""
        return target_state(bool(self.skipped and not self.by_device), bool(self.fuzzer_error),
                            bool(self.cannot_build), bool(self.retired))

    @property
    def retired_label(self) -> str | None:
        """``retired in 0.34.0`` (``retired in this checkout``), or None: the verdict as the table says it."""
        return retired_label(self.retired.get("release")) if self.retired else None

    def verdict_on(self, device: str) -> TargetVerdict:
        """agree, an example verdict, or a target-only one (fuzz.records.verdicts.device_verdict)."""
        tally = self.by_device.get(device)
        return device_verdict(self._state(), (f.verdict for f in self.failures if f.device == device),
                              tally.examples if tally is not None else 0, lambda: self.no_evidence_on(device))

    def no_evidence_on(self, device: str) -> TargetVerdict | None:
        """``unreached`` when a side never entered what the target claims, ``same-code`` when both sides ran
        the same code (docs/reach.md): examples ran and agreed, and showed nothing. None otherwise."""
        sides = self.reach.get(device) or {}
        if any(unreached_side(record) for record in sides.values()):
            return TargetVerdict.UNREACHED
        if self.same_code or reach_same_code(sides):
            return TargetVerdict.SAME_CODE
        return None

    def unreached_devices(self) -> list[str]:
        return [d for d in self.devices if self.verdict_on(d) == TargetVerdict.UNREACHED]

    @property
    def verdict(self) -> TargetVerdict:
        """The target's verdict over all its devices (fuzz.records.verdicts.overall_verdict)."""
        # Lazy: overall_verdict reads the devices' verdicts only when no state or failure decides it.
        return overall_verdict(self._state(), (f.verdict for f in self.failures),
                               (self.verdict_on(d) for d in self.devices))

    def untested_devices(self) -> list[str]:
        if self._state():
            return []
        return [d for d in self.devices if self.verdict_on(d) == TargetVerdict.UNTESTED]

    def is_flaky_on(self, device: str) -> bool:
        return any(f.flaky for f in self.failures if f.device == device) or (
            self.flaky and any(f.device == device for f in self.failures))

    def label_on(self, device: str) -> str:
        """The verdict as a person reads it: the worst *new* failure's, flaky ones
        saying so; where every failure is an accepted finding, "... (known)"."""
        verdict = self.verdict_on(device)
        if verdict == TargetVerdict.RETIRED:
            return self.retired_label or verdict
        if verdict not in EXAMPLE_VERDICTS or verdict == Verdict.AGREE.value:
            return verdict
        new = [f.verdict for f in self.failures if f.device == device and not f.known]
        label = worst(new) if new else verdict
        if self.is_flaky_on(device):
            label += " (flaky)"
        return label if new else f"{label} (known)"

    def with_failures(self, failures: Iterable[Failure]) -> TargetEntry:
        return replace(self, failures=tuple(failures))

    def __add__(self, other: TargetEntry) -> TargetEntry:
        """Two parts of one target's run (restarted workers, pieces, shards, hosts)."""
        if other.name != self.name:
            raise ValueError(f"cannot add entries of {self.name!r} and {other.name!r}")
        by_device = dict(self.by_device)
        for device, tally in other.by_device.items():
            by_device[device] = by_device[device] + tally if device in by_device else tally
        failures = list(self.failures)
        seen = {f.signature for f in failures}
        for failure in other.failures:
            if failure.signature not in seen:  # the same bug found twice is kept once (the first)
                seen.add(failure.signature)
                failures.append(failure)
        return TargetEntry(
            name=self.name, upstream=self.upstream or other.upstream,
            devices=tuple(sorted(set(self.devices) | set(other.devices))),
            expected_optimized_syncs=self.expected_optimized_syncs, by_device=by_device,
            failures=tuple(failures),
            first_failure_at=self.first_failure_at if self.first_failure_at is not None else other.first_failure_at,
            seconds=round(self.seconds + other.seconds, 3), flaky=self.flaky or other.flaky,
            skipped=(self.skipped or other.skipped) if not by_device else None,
            fuzzer_error=self.fuzzer_error or other.fuzzer_error,
            upstream_check=self.upstream_check or other.upstream_check,
            placement=self.placement + other.placement,
            cannot_build=self.cannot_build or other.cannot_build,
            sync_rule=self.sync_rule or other.sync_rule,
            sync_descent=self.sync_descent or other.sync_descent,
            reach=add_reach(self.reach, other.reach, self.name),
            same_code=self.same_code or other.same_code,
            retired=self.retired or other.retired)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "upstream": list(self.upstream), "devices": list(self.devices),
            "expected_optimized_syncs": self.expected_optimized_syncs, "examples": self.examples,
            "shrink_steps": self.shrink_steps,
            "first_failure_at": self.first_failure_at, "seconds": round(self.seconds, 3),
            "verdict": self.verdict,
            "verdict_by_device": {d: self.verdict_on(d) for d in self.devices},
            "flaky": self.flaky, "skipped": self.skipped, "fuzzer_error": self.fuzzer_error,
            "upstream_check": self.upstream_check,
            "by_device": {d: t.to_json() for d, t in self.by_device.items()},
            "failures": [f.to_json() for f in self.failures],
            "placement": [dict(p) for p in self.placement],
            "cannot_build": self.cannot_build,
            "sync_rule": self.sync_rule,
            "sync_descent": dict(self.sync_descent),
            "reach": {d: dict(sides) for d, sides in self.reach.items()},
            "same_code": self.same_code,
            "retired": dict(self.retired) if self.retired else None,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "target entry") -> TargetEntry:
        name = _field(data, "name", str, where)
        where = f"{where} {name!r}"
        by_device = _field(data, "by_device", dict, where)
        failures = _field(data, "failures", list, where)
        first = _field(data, "first_failure_at", int, where, optional=True)
        return cls(
            name=name, upstream=tuple(_field(data, "upstream", list, where)),
            devices=tuple(_field(data, "devices", list, where)),
            expected_optimized_syncs=_field(data, "expected_optimized_syncs", int, where),
            by_device={d: DeviceTally.from_json(t, f"{where} on {d}") for d, t in by_device.items()},
            failures=tuple(Failure.from_json(f, f"{where} failure {i}") for i, f in enumerate(failures)),
            first_failure_at=first, seconds=float(_field(data, "seconds", (int, float), where)),
            flaky=bool(_field(data, "flaky", bool, where)),
            skipped=_field(data, "skipped", str, where, optional=True),
            fuzzer_error=_field(data, "fuzzer_error", str, where, optional=True),
            upstream_check=_field(data, "upstream_check", str, where, optional=True),
            placement=tuple(_field(data, "placement", list, where, optional=True) or ()),
            cannot_build=_field(data, "cannot_build", str, where, optional=True),
            sync_rule=_field(data, "sync_rule", str, where, optional=True),
            sync_descent=_sync_descent(data, where),
            reach=read_reach(_field(data, "reach", dict, where, optional=True) or {}, where),
            same_code=_field(data, "same_code", str, where, optional=True),
            retired=_retired(data, where))


def retired_label(release: str | None) -> str:
    """What the verdict column says of a retired target: ``retired in 0.34.0``, or, where only a checkout
    lacks the code, ``retired in this checkout`` (fuzz/releases/retired.py)."""
    return f"retired in {release}" if release else "retired in this checkout"


def _sync_descent(data: Any, where: str) -> dict[str, bool]:
    """An entry's ``sync_descent`` (absent in reports from before it existed): part -> descends."""
    parts = _field(data, "sync_descent", dict, where, optional=True) or {}
    if not all(isinstance(k, str) and isinstance(v, bool) for k, v in parts.items()):
        raise ReportError(f"{where}: field 'sync_descent' must map each part's name to true or false")
    return dict(parts)


def _retired(data: Any, where: str) -> Mapping[str, Any] | None:
    """An entry's ``retired`` record (absent in reports from before it existed)."""
    record = _field(data, "retired", dict, where, optional=True)
    if record is None:
        return None
    if not isinstance(record.get("side"), str) or not isinstance(record.get("known_from"), str) \
            or not isinstance(record.get("release"), (str, type(None))) or not isinstance(record.get("files"), list):
        raise ReportError(f"{where}: its retired record needs side, release, files and known_from")
    return record


def _part_name(run: Mapping[str, Any]) -> str:
    """A merged part as a person names it: ``shard 2/3``, or ``a part`` where its scope does not say."""
    scope = run.get("scope") if isinstance(run.get("scope"), Mapping) else {}
    covers = scope.get("covers")
    shard = covers[0].get("shard") if isinstance(covers, list) and len(covers) == 1 \
        and isinstance(covers[0], Mapping) else scope.get("shard")
    if isinstance(shard, list) and len(shard) == 2:
        return "the whole run" if shard[1] == 1 else f"shard {shard[0]}/{shard[1]}"
    return "a part"


def add_entries(entries: Iterable[TargetEntry]) -> list[TargetEntry]:
    """Entries of the same target summed, in order of first appearance."""
    totals: dict[str, TargetEntry] = {}
    for entry in entries:
        totals[entry.name] = totals[entry.name] + entry if entry.name in totals else entry
    return list(totals.values())


@dataclass(frozen=True)
class Report:
    """A whole run (or several merged): its entries, settings and versions."""

    targets: tuple[TargetEntry, ...]
    run: Mapping[str, Any] = field(default_factory=dict)
    versions: Mapping[str, Any] = field(default_factory=dict)
    # "SIGTERM": a partial report of the items that finished; in a merge, the signal that stopped a part.
    interrupted: str | None = None

    def exit_code(self) -> int:
        """128 + signal if this run was interrupted, 4 a fuzzer error, 1 a failure not accepted as
        known, 3 incomplete (a merge holding an interrupted part or missing a shard is: the merge itself
        was not stopped, its content is partial), 0 clean."""
        if self.interrupted and not self.is_merge:
            return 128 + {"SIGINT": 2, "SIGTERM": 15}.get(self.interrupted, 2)
        if any(e.fuzzer_error for e in self.targets):
            return EXIT_FUZZER_BUG
        if self.new_failures():
            return EXIT_FAILURE
        if self.untested() or self.cannot_build() or self.upstream_not_compared() or self.unreached() \
                or self.changes_not_covered() or self.partial():
            return EXIT_INCOMPLETE
        return EXIT_OK

    @property
    def is_merge(self) -> bool:
        """Written by merge-reports: its run lists the runs it merges, or (one input) its scope the parts
        it covers."""
        scope = self.run.get("scope")
        return isinstance(self.run.get("merged_from"), list) or (isinstance(scope, Mapping) and "covers" in scope)

    def _parts(self) -> list[Mapping[str, Any]]:
        """The runs this report holds, each with its own ``interrupted`` signal where it had one: itself, or
        a merge's parts."""
        if isinstance(self.run.get("merged_from"), list):
            return [part for part in self.run["merged_from"] if isinstance(part, Mapping)]
        return [{**self.run, "interrupted": self.interrupted}]

    def partial(self) -> str | None:
        """Why this report holds less than its run planned, in words; None for a whole report. A run
        stopped by a signal; a merge with an interrupted part, or missing some of the run's shards."""
        if not self.is_merge:
            if not self.interrupted:
                return None
            phase = self.run.get("interrupted_in")
            return f"interrupted by {self.interrupted}" + (f" in {phase}" if phase else "")
        why = [f"{_part_name(part)} was interrupted by {part.get('interrupted') or self.interrupted}"
               + (f" in {part['interrupted_in']}" if isinstance(part.get("interrupted_in"), str) else "")
               for part in self._parts() if part.get("interrupted_in") or part.get("interrupted")]
        if self.interrupted and not why:  # no part's run says which one stopped
            why.append(f"a part was interrupted by {self.interrupted}")
        scope = self.run.get("scope")
        if isinstance(scope, Mapping) and scope.get("complete") is False:
            count, covered = scope.get("shard_count"), scope.get("covered") or []
            why.append(f"the merge covers {len(covered)} of the run's {count} shards (missing "
                       + ", ".join(f"{i}/{count}" for i in scope.get("missing") or []) + ")")
        return "; ".join(why) or None

    def planned(self) -> list[str] | None:
        """The targets this report was to hold (``run.planned``; a merge's parts' together, in order); None
        when a part does not record it (written before run.planned, or stopped before its targets were
        looked up)."""
        names: list[str] = []
        for part in self._parts():
            listed = part.get("planned")
            if not isinstance(listed, list):
                return None
            names += [name for name in listed if isinstance(name, str) and name not in names]
        return names

    def never_ran(self) -> list[str] | None:
        """The planned targets a partial report holds no entry of, in plan order ([] for a whole report);
        None where the plan is not recorded. A merge missing shards does not know those shards' targets:
        they are not named here (``partial()`` names the shards)."""
        if not self.interrupted:  # whole, or a merge lacking shards: every part it holds ran its plan
            return []
        planned = self.planned()
        if planned is None:
            return None
        present = {entry.name for entry in self.targets}
        return [name for name in planned if name not in present]

    def upstream_not_compared(self) -> bool:
        """``--upstream`` was asked for, yet no target could be compared with the
        real vllm (not installed, say): the check asked for did not run."""
        runs = self.run.get("merged_from") or [self.run]
        asked = any(isinstance(run, Mapping) and run.get("upstream") for run in runs)
        return asked and bool(self.targets) and not any(e.upstream_check == UPSTREAM_COMPARED for e in self.targets)

    def new_failures(self) -> list[tuple[TargetEntry, Failure]]:
        return [(e, f) for e in self.targets for f in e.failures if not f.known]

    def untested(self) -> list[tuple[str, str]]:
        """(target, device) pairs that ran no example."""
        out = [(e.name, d) for e in self.targets for d in e.untested_devices()]
        out += [(e.name, "-") for e in self.targets if not e.devices and e.verdict == TargetVerdict.UNTESTED]
        return out

    def unreached(self) -> list[tuple[str, str]]:
        """(target, device) pairs where a side never entered the definitions the target claims."""
        return [(e.name, d) for e in self.targets for d in e.unreached_devices()]

    def changes_not_covered(self) -> list[str]:
        """Under ``--require-changes-covered[=MODE]``: the changed definitions not covered (docs/reach.md): no
        target reached them; under ``all`` and ``sync`` also those that ran but left a changed branch untaken
        (``sync``: the sync-relevant ones only). Shards split the targets: what one shard reached or took is
        covered."""
        missing, branches = uncovered(merged_changes(self))
        return sorted(set(missing) | set(branches))

    def cannot_build(self) -> list[tuple[str, str]]:
        """(target, why) for targets a side's source could not be built into (retired ones are not)."""
        return [(e.name, e.cannot_build) for e in self.targets if e.cannot_build and not e.retired]

    def retired(self) -> list[TargetEntry]:
        """The targets a side's release removed: their own state, not incomplete (docs/sides.md)."""
        return [e for e in self.targets if e.retired]

    def failures_by_verdict(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for entry in self.targets:
            for failure in entry.failures:
                counts[failure.verdict] = counts.get(failure.verdict, 0) + 1
        return counts

    def __add__(self, other: Report) -> Report:
        # Each part keeps the signal that stopped it: the merge's own ``interrupted`` can name only one.
        runs = [*self._parts(), *other._parts()]
        runs = [{k: v for k, v in run.items() if k != "interrupted" or v} for run in runs]
        return Report(tuple(add_entries([*self.targets, *other.targets])), {"merged_from": runs},
                      self.versions or other.versions, self.interrupted or other.interrupted)

    def to_json(self) -> dict[str, Any]:
        return {"format": REPORT_FORMAT, "run": dict(self.run), "versions": dict(self.versions),
                "interrupted": self.interrupted, "partial": self.partial(), "never_ran": self.never_ran(),
                "exit_code": self.exit_code(),
                "failures_by_verdict": self.failures_by_verdict(), "targets": [e.to_json() for e in self.targets]}

    @classmethod
    def from_json(cls, data: Any, source: str) -> Report:
        if not isinstance(data, Mapping):
            raise ReportError(f"report {source!r} is not a syncfuzz report (a JSON object)")
        found = data.get("format")
        if found not in READABLE_FORMATS:
            if isinstance(found, str) and found.startswith("syncfuzz-report/"):
                raise ReportError(f"report {source!r} has format {found!r}, which this syncfuzz cannot read "
                                  f"(it reads {', '.join(READABLE_FORMATS)}); merge it with the syncfuzz that "
                                  "wrote it, or re-run that shard")
            raise ReportError(f"report {source!r} is not a syncfuzz report (format {found!r}, "
                              f"expected {REPORT_FORMAT!r})")
        where = f"report {source!r}"
        entries = _field(data, "targets", list, where)
        return cls(targets=tuple(TargetEntry.from_json(e, f"{where}: target {i}") for i, e in enumerate(entries)),
                   run=_field(data, "run", dict, where), versions=_field(data, "versions", dict, where),
                   interrupted=_field(data, "interrupted", str, where, optional=True))
