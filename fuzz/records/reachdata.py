"""Reach as data (docs/reach.md): the JSON model of what each side ran, and of the change's coverage.

The report model (fuzz/records/model.py), ``merge-reports`` and every renderer read reach through this module, so it
imports nothing of the engine but its errors (no torch, no coverage.py, no side builds): a report is read
and added up anywhere. fuzz/reach/collect.py measures it, fuzz/reach/changes.py computes the change's coverage.

Per target entry, ``reach[device][side]`` is ``{"file", "path", "definitions", "executed"}``:

* ``definitions``: the claimed definitions (qualname in the side's file -> its ``upstream`` ref, ``kind``,
  ``first_line``, ``digest``, ``lines`` (upstream code), ``adapted`` (ADAPTED lines), ``reached``, ``arcs``
  and ``reached_arcs`` (branches), ``upstream_lines`` / ``upstream_first_line`` (the line map); a class has
  ``entered`` instead of lines; ``stand_in`` marks a definition kept from the copy in a rebuilt side);
* ``executed``: every function of the file that ran a line: ``{"digest", "lines", "reached", "reached_arcs"}``
  (``reached_arcs``, its branches taken, since the change's changed branches; older reports lack it);
* ``calls`` and ``measured``: the side's calls on that device, and how many of them were traced
  (fuzz/reach/collect.py ``Measure.wants``: the first 32 per process, then one in 8).

Parts of one target's run add up (``add_reach``): reached lines and arcs are united, and a definition must
be the same code (digest) in every part.
"""


from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzz.errors import UsageError

SIDES = ("legacy", "optimized")


class ReachError(UsageError):
    """Reach data that cannot be read or added up (damaged, or from parts that ran different code)."""


# --------------------------------------------------------------------------- the JSON model

def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ReachError(f"{where} must be a list of line numbers")
    return value


def _arcs(value: Any, where: str) -> list[list[int]]:
    if not isinstance(value, list) or not all(
            isinstance(a, list) and len(a) == 2 and all(isinstance(v, int) for v in a) for a in value):
        raise ReachError(f"{where} must be a list of [from, to] line pairs")
    return value


def read_reach(data: Mapping[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """The ``reach`` field of a target entry, checked (a damaged report is refused, not half-read)."""
    out: dict[str, dict[str, Any]] = {}
    for device, sides in data.items():
        if not isinstance(sides, Mapping):
            raise ReachError(f"{where} reach on {device} must be an object of sides")
        out[device] = {}
        for side, record in sides.items():
            at = f"{where} reach on {device} {side}"
            if not isinstance(record, Mapping) or not isinstance(record.get("definitions"), Mapping):
                raise ReachError(f"{at} has no definitions object; the report is damaged: re-run that shard")
            for qualname, unit in record["definitions"].items():
                if not isinstance(unit, Mapping):
                    raise ReachError(f"{at} {qualname} must be an object (lines, reached, ...), found "
                                     f"{type(unit).__name__}; the report is damaged: re-run that shard")
                for key in ("lines", "adapted", "reached"):
                    _ints(unit.get(key, []), f"{at} {qualname} {key}")
                for key in ("arcs", "reached_arcs"):
                    _arcs(unit.get(key, []), f"{at} {qualname} {key}")
                if set(unit.get("reached", [])) - set(unit.get("lines", [])) - set(unit.get("adapted", [])):
                    raise ReachError(f"{at} {qualname}: reached lines that are not its lines; the report is "
                                     "damaged or edited: re-run that shard")
            executed = record.get("executed", {})
            if not isinstance(executed, Mapping) or not all(
                    isinstance(u, Mapping) and isinstance(u.get("digest"), str) for u in executed.values()):
                raise ReachError(f"{at} executed must be an object of qualname -> {{digest, lines, reached}}")
            out[device][side] = dict(record)
    return out


def _add_unit(a: Mapping[str, Any], b: Mapping[str, Any], where: str) -> dict[str, Any]:
    if a.get("digest") != b.get("digest"):
        raise ReachError(f"{where}: the parts ran different code (digest {a.get('digest')} vs {b.get('digest')}); "
                         "only parts of one run add up")
    unit = dict(a)
    if "entered" in a or "entered" in b:  # a class: entered in either part is entered
        unit["entered"] = bool(a.get("entered")) or bool(b.get("entered"))
    unit["reached"] = sorted(set(a.get("reached", [])) | set(b.get("reached", [])))
    unit["reached_arcs"] = sorted({tuple(x) for x in [*a.get("reached_arcs", []), *b.get("reached_arcs", [])]})
    unit["reached_arcs"] = [list(x) for x in unit["reached_arcs"]]
    return unit


def _add_side(a: Mapping[str, Any], b: Mapping[str, Any], where: str) -> dict[str, Any]:
    definitions = dict(a.get("definitions", {}))
    for qualname, unit in b.get("definitions", {}).items():
        definitions[qualname] = _add_unit(definitions[qualname], unit, f"{where} {qualname}") \
            if qualname in definitions else dict(unit)
    executed = dict(a.get("executed", {}))
    for qualname, unit in b.get("executed", {}).items():
        mine = executed.setdefault(qualname, unit)
        if mine.get("digest") != unit.get("digest"):
            raise ReachError(f"{where} {qualname}: the parts ran different code; only parts of one run add up")
        executed[qualname] = {**mine, "reached": sorted(set(mine.get("reached", [])) | set(unit.get("reached", [])))}
        if "reached_arcs" in mine or "reached_arcs" in unit:  # reports before the change's branches lack them
            arcs = {tuple(a) for a in [*mine.get("reached_arcs", []), *unit.get("reached_arcs", [])]}
            executed[qualname]["reached_arcs"] = [list(a) for a in sorted(arcs)]
    record = {**a, **{k: v for k, v in b.items() if k not in a}}
    record.update(definitions=definitions, executed=dict(sorted(executed.items())))
    for count in ("calls", "measured"):  # calls seen and traced, per part: they add up
        record[count] = int(a.get(count, 0)) + int(b.get(count, 0))
    return record


def add_reach(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]],
              target: str = "target") -> dict[str, dict[str, Any]]:
    """Two parts of one target's reach, added up (workers, pieces, shards)."""
    out = {device: dict(sides) for device, sides in a.items()}
    for device, sides in b.items():
        mine = out.setdefault(device, {})
        for side, record in sides.items():
            mine[side] = _add_side(mine[side], record, f"{target} on {device} {side}") if side in mine \
                else dict(record)
    return out


# --------------------------------------------------------------------------- reading it

def line_counts(record: Mapping[str, Any]) -> tuple[int, int]:
    """(reached, total) upstream lines (ADAPTED ones left out) of a side's claimed definitions."""
    reached = total = 0
    for unit in record.get("definitions", {}).values():
        lines = set(unit.get("lines", []))
        total += len(lines)
        reached += len(lines & set(unit.get("reached", [])))
    return reached, total


def arc_counts(record: Mapping[str, Any]) -> tuple[int, int]:
    reached = total = 0
    for unit in record.get("definitions", {}).values():
        arcs = {tuple(a) for a in unit.get("arcs", [])}
        total += len(arcs)
        reached += len(arcs & {tuple(a) for a in unit.get("reached_arcs", [])})
    return reached, total


def entered(unit: Mapping[str, Any]) -> bool:
    """A definition ran: one of its lines was reached (a class: one of its methods, recorded as ``entered``)."""
    return bool(unit.get("reached")) or bool(unit.get("entered"))


def unreached(record: Mapping[str, Any]) -> list[str]:
    """The claimed definitions of a side that never ran."""
    return [q for q, unit in record.get("definitions", {}).items() if not entered(unit)]


def unreached_side(record: Mapping[str, Any]) -> bool:
    """A side that never entered any claimed definition of its own code (a stand-in kept from the copy in a
    side rebuilt from a source is the harness' text, not the source's: it does not count)."""
    units = record.get("definitions", {})
    return not any(entered(unit) for unit in units.values() if not unit.get("stand_in"))


def percent(reached: int, total: int) -> str:
    return f"{100 * reached // total}%" if total else "-"


def same_code(sides: Mapping[str, Mapping[str, Any]]) -> bool:
    """Both sides executed the same definitions, each the same code (digest): a comparison of a
    function with itself. False when a side is missing or ran nothing."""
    if not all(side in sides for side in SIDES):
        return False
    executed = [{q: u.get("digest") for q, u in sides[side].get("executed", {}).items()} for side in SIDES]
    return bool(executed[0]) and executed[0] == executed[1]




# --------------------------------------------------------------------------- the change's coverage

SHOWN = 3  # not-covered definitions named in the table footer; the JSON and Markdown list all

# --require-changes-covered[=MODE] (docs/reach.md): "reached" (the flag alone, as before): every changed
# definition reached by some target; "all": that, and no changed branch of a definition that ran left untaken;
# "sync": the same for the sync-relevant definitions only (fuzz/code/syncdiff.py).
REQUIRE_MODES = ("reached", "all", "sync")


def require_mode(value: Any) -> str | None:
    """RunConfig.require_changes_covered as a mode: False -> None, True (the flag alone) -> "reached"."""
    if value is None or value is False or value == "":
        return None
    if value is True:
        return "reached"
    if value not in REQUIRE_MODES:
        raise UsageError(f"--require-changes-covered={value!r} is not one of {', '.join(REQUIRE_MODES)}")
    return str(value)


def untaken_counts(change: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """side -> (changed lines, changed branch arcs) no example took, for a changed definition that ran."""
    return {side: (len(found.get("lines", [])), len(found.get("arcs", [])))
            for side, found in (change.get("untaken") or {}).items() if isinstance(found, Mapping)}


def _arc_text(arc: Any) -> str:
    a, b = arc
    return f"{a}->{'exit' if b < 0 else b}"


def untaken_text(change: Mapping[str, Any], limit: int | None = None) -> str:
    """A changed definition's changed lines and branches no example took, per side, in that side's source
    lines: "optimized lines 797, 812, branches 809->812"; ``limit`` items a side, then "+N more"; "" when
    none (or when it did not run)."""
    parts = []
    for side, found in (change.get("untaken") or {}).items():
        if not isinstance(found, Mapping):
            continue
        items = [str(n) for n in found.get("lines", [])]
        arcs = [_arc_text(a) for a in found.get("arcs", [])]
        if not items and not arcs:
            continue
        text = []
        if items:
            text.append("lines " + ", ".join(items))
        if arcs:
            text.append("branches " + ", ".join(arcs))
        words = f"{side} " + ", ".join(text)
        if limit is not None and len(items) + len(arcs) > limit:
            shown = (["lines " + ", ".join(items[:limit])] if items[:limit] else []) + (
                ["branches " + ", ".join(arcs[:max(0, limit - len(items))])] if limit > len(items) else [])
            words = f"{side} " + ", ".join(shown) + f" +{len(items) + len(arcs) - limit} more"
        parts.append(words)
    return "; ".join(parts)


def has_untaken_branch(change: Mapping[str, Any]) -> bool:
    return any(arcs for _, arcs in untaken_counts(change).values())


def uncovered(changes: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """Under the record's ``require`` mode: (changed definitions no target reached, definitions that ran but
    left a changed branch untaken); both empty when the flag was not given."""
    if not changes or not changes.get("required"):
        return [], []
    mode = changes.get("require") or "reached"
    listed = [c for c in changes.get("changed", []) if mode != "sync" or c.get("sync_relevant")]
    missing = [c["ref"] for c in listed if not c.get("targets")]
    branches = [c["ref"] for c in listed if c.get("targets") and has_untaken_branch(c)] if mode != "reached" else []
    return missing, branches


def _first(refs: list[str], shown: int = SHOWN) -> str:
    return ", ".join(refs[:shown]) + (f" and {len(refs) - shown} more" if len(refs) > shown else "")


def change_line(changes: Mapping[str, Any] | None) -> str | None:
    """The table footer's one line: "changed: 7 definitions ...; sync-relevant 3 (fuzzed 2); other 4 (fuzzed
    3); lines reached 93%; not covered 2 (sync-relevant 1): ..."; a report from before the sync-relevant
    mark keeps the old line."""
    if not changes:
        return None
    listed = changes.get("changed", [])
    head = f"changed: {len(listed)} definitions between {changes['legacy']} and {changes['optimized']}"
    marked = "sync_relevant" in changes
    if marked:
        sync = [c for c in listed if c.get("sync_relevant")]
        other = [c for c in listed if not c.get("sync_relevant")]
        head += (f"; sync-relevant {len(sync)} (fuzzed {sum(bool(c.get('targets')) for c in sync)}); "
                 f"other {len(other)} (fuzzed {sum(bool(c.get('targets')) for c in other)})")
    if not changes.get("measured"):
        return head + "; which of them ran is not known (run with --coverage)"
    lines, reached = changes.get("lines", 0), changes.get("lines_reached", 0)
    share = f"{100 * reached // lines}%" if lines else "-"
    missing = changes.get("not_covered", [])
    if not marked:
        text = f"{head}; fuzzed {changes.get('fuzzed', 0)} (lines reached {share}); not covered {len(missing)}"
        if missing:
            text += ": " + _first(missing) + (" (JSON: run.changes)" if len(missing) > SHOWN else "")
        return text
    sync_missing = [c["ref"] for c in listed if c.get("sync_relevant") and not c.get("targets")]
    # The sync-relevant ones first: they are the ones a gap matters for.
    ordered = sync_missing + [ref for ref in missing if ref not in set(sync_missing)]
    text = f"{head}; lines reached {share}; not covered {len(missing)} (sync-relevant {len(sync_missing)})"
    if ordered:
        text += ": " + _first(ordered) + (" (JSON: run.changes)" if len(ordered) > SHOWN else "")
    gaps = [c for c in listed if c.get("targets") and any(sum(n) for n in untaken_counts(c).values())]
    if gaps:
        sync_gaps = [c["ref"] for c in gaps if c.get("sync_relevant")]
        totals = {side: [0, 0] for side in SIDES}
        for change in gaps:
            for side, (n_lines, n_arcs) in untaken_counts(change).items():
                totals[side][0] += n_lines
                totals[side][1] += n_arcs
        text += (f"; changed code no example took in {len(gaps)} fuzzed (sync-relevant {len(sync_gaps)}"
                 + (": " + _first(sync_gaps) if sync_gaps else "") + "): "
                 + ", ".join(f"{side} {n} lines and {a} branches" for side, (n, a) in totals.items())
                 + " (python -m fuzz coverage REPORT --changes lists them)")
    return text


def _merge_untaken(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any]:
    """Two shards' untaken changed code of one definition: a line or branch one shard took is taken."""
    out = {side: dict(found) for side, found in (a or {}).items()}
    for side, found in (b or {}).items():
        mine = out.get(side)
        if mine is None:
            out[side] = dict(found)
            continue
        mine["statements"] = max(mine.get("statements", 0), found.get("statements", 0))
        mine["lines"] = sorted(set(mine.get("lines", [])) & set(found.get("lines", [])))
        if "arcs" in mine and "arcs" in found:
            mine["branches"] = max(mine.get("branches", 0), found.get("branches", 0))
            arcs = {tuple(x) for x in mine["arcs"]} & {tuple(x) for x in found["arcs"]}
            mine["arcs"] = [list(x) for x in sorted(arcs)]
        else:
            mine.pop("arcs", None)
            mine.pop("branches", None)
    return out


def merged_changes(report: Any) -> dict[str, Any] | None:
    """The change's coverage of a report, shards added up: a definition any shard's targets reached is
    fuzzed (each shard lists every changed definition, and reached what its own targets ran); a changed
    line or branch any shard took is taken."""
    runs = [run for run in (report.run.get("merged_from") or [report.run]) if isinstance(run, Mapping)]
    records = [run["changes"] for run in runs if isinstance(run.get("changes"), Mapping)]
    if not records:
        return None
    if len(records) == 1:
        return dict(records[0])
    by_ref: dict[str, dict[str, Any]] = {}
    for record in records:
        for change in record.get("changed", []):
            mine = by_ref.get(change["ref"])
            if mine is None:
                by_ref[change["ref"]] = {**change, "targets": list(change.get("targets", []))}
                continue
            mine["targets"] = sorted(set(mine["targets"]) | set(change.get("targets", [])))
            mine["reached"] = max(mine.get("reached", 0), change.get("reached", 0))
            mine["lines"] = max(mine.get("lines", 0), change.get("lines", 0))
            if "untaken" in mine or "untaken" in change:
                mine["untaken"] = _merge_untaken(mine.get("untaken"), change.get("untaken"))
    listed = list(by_ref.values())
    fuzzed = [c for c in listed if c["targets"]]
    first = records[0]
    modes = [r.get("require") or ("reached" if r.get("required") else None) for r in records]
    merged = {"legacy": first.get("legacy"), "optimized": first.get("optimized"),
              "required": any(r.get("required") for r in records),
              "require": next((m for m in modes if m), None),
              "measured": all(r.get("measured") for r in records),
              "changed": listed, "fuzzed": len(fuzzed), "lines_reached": sum(c["reached"] for c in fuzzed),
              "lines": sum(c["lines"] for c in fuzzed), "not_covered": [c["ref"] for c in listed if not c["targets"]]}
    if all("sync_relevant" in r for r in records):  # reports from before the mark have none
        merged["sync_relevant"] = sum(bool(c.get("sync_relevant")) for c in listed)
        merged["sync_fuzzed"] = sum(bool(c.get("sync_relevant")) for c in fuzzed)
    return merged
