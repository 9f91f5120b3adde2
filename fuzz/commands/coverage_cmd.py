"""``python -m fuzz coverage REPORT``: the lines and branches of the claimed definitions no example ran.

Reads a JSON report of a run with ``--coverage`` (or a merged one) and prints, per target × device × side,
each claimed definition's share of lines and branches reached, then every line no example ran, with its
source text and the upstream line it came from (docs/reach.md says how to read it). The source is read from
the file the run measured (a copy, or a rebuilt side's file) when that definition is still the same code
there; otherwise the line numbers alone are printed, and a note says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from fuzz.errors import UsageError

EXIT_OK = 0


def _source_rows(record: Mapping[str, Any], qualname: str, digest: str | None) -> tuple[list[str] | None, str]:
    """The measured file's lines, if the definition there is still the code that ran; else why not."""
    from fuzz.code.codediff import definitions

    path = Path(record.get("path") or "")
    if not path.is_file():
        return None, f"source not here ({record.get('path')}); line numbers only"
    text = path.read_text(encoding="utf-8")
    try:
        now = definitions(text).get(qualname)
    except SyntaxError:
        now = None
    if now is None or now.digest != digest:
        return None, f"{record.get('file')} changed since the run; line numbers only"
    return text.splitlines(), ""


def _arc(arc: list[int]) -> str:
    a, b = arc
    return f"{a}->{'exit' if b < 0 else b}"


def coverage_lines(report: Any, targets: list[str], device: str | None, side: str | None,
                   show_all: bool = False) -> list[str]:
    from fuzz.records.reachdata import arc_counts, percent

    names = {e.name for e in report.targets}
    unknown = [t for t in targets if t not in names]
    if unknown:
        raise UsageError(f"target {unknown[0]!r} is not in the report (it has: {', '.join(sorted(names))}); pass one "
                         "of those to --target")
    out: list[str] = []
    measured = False
    for entry in report.targets:
        if targets and entry.name not in targets:
            continue
        for dev, sides in entry.reach.items():
            if device and dev != device:
                continue
            for role, record in sides.items():
                if side and role != side:
                    continue
                measured = True
                if record.get("calls") and record.get("measured", 0) < record["calls"]:
                    out.append(f"{entry.name} on {dev}, {role}: traced {record['measured']} of its {record['calls']} "
                               "calls (the first ones, then one in eight: docs/reach.md)")
                units = record.get("definitions", {})
                if not units:
                    out.append(f"{entry.name} on {dev}, {role} ({record.get('file')}): claims no definition of "
                               "this file (docs/reach.md: a claim the copy lacks)")
                for qualname, unit in units.items():
                    lines = unit.get("lines", [])
                    reached = set(unit.get("reached", []))
                    missing = [line for line in lines if line not in reached]
                    arcs_reached, arcs_total = arc_counts({"definitions": {qualname: unit}})
                    if not missing and arcs_reached == arcs_total and not show_all and (
                            reached or unit.get("entered")):
                        continue
                    head = f"{entry.name} on {dev}, {role} ({record.get('file')}:{unit.get('first_line')}): {qualname}"
                    if unit.get("upstream"):
                        head += f"  <- {unit['upstream']}"
                        if unit.get("upstream_first_line"):
                            head += f" line {unit['upstream_first_line']}"
                    out.append(head)
                    if unit.get("kind") == "class":
                        out.append("  a class: " + ("entered (a method ran)" if unit.get("entered")
                                                    else "NEVER ENTERED: no method of it ran"))
                        continue
                    adapted = unit.get("adapted", [])
                    out.append(f"  lines {percent(len(reached & set(lines)), len(lines))} "
                               f"({len(reached & set(lines))}/{len(lines)}), branches {arcs_reached}/{arcs_total}"
                               + (f"; {len(adapted)} ADAPTED lines apart (harness), "
                                  f"{len(reached & set(adapted))} ran" if adapted else "")
                               + ("; a stand-in kept from the copy (not the source's code)"
                                  if unit.get("stand_in") else ""))
                    if not reached:
                        out.append("  NEVER ENTERED: no example ran this definition")
                    rows, why = _source_rows(record, qualname, unit.get("digest"))
                    upstream_of = dict(zip(lines, unit.get("upstream_lines", [None] * len(lines))))
                    if missing:
                        out.append("  not run:" + (f" ({why})" if why else ""))
                    for line in missing:
                        up = upstream_of.get(line)
                        where = f"{line}" + (f" (upstream {up})" if up else "")
                        text = rows[line - 1].strip() if rows and line <= len(rows) else ""
                        out.append(f"    {where:<18} {text}")
                    taken = {tuple(a) for a in unit.get("reached_arcs", [])}
                    untaken = [a for a in unit.get("arcs", []) if tuple(a) not in taken]
                    if untaken:
                        out.append("  branches not taken: " + ", ".join(_arc(a) for a in untaken))
    if not measured:
        raise UsageError("the report holds no coverage (the run had no --coverage, or it ran no example); run "
                         "again with --coverage (on by default for --profile premerge and nightly)")
    return out


def change_lines(report: Any, side: str | None, show_all: bool = False,
                 open_source: Callable[[str, str, list[str]], Any] | None = None) -> list[str]:
    """``--changes``: the change's coverage in full (docs/reach.md, "The change's coverage"). ``open_source``
    (spec, role, source folders) opens a side's source to print each line's text (the CLI passes
    fuzz.reach.changes' opener: this layer does not import the release tooling); without it, or where it fails,
    line numbers only."""
    from fuzz.records.reachdata import change_line, merged_changes, untaken_text

    changes = merged_changes(report)
    if not changes:
        raise UsageError("the report has no change's coverage: it comes from a run whose sides were both the "
                         "copies; run with --legacy/--optimized a release or a path")
    out = [change_line(changes) or ""]
    sources: dict[str, Any] = {}
    for change in sorted(changes.get("changed", []), key=lambda c: not c.get("sync_relevant")):
        gap = untaken_text(change)
        if not show_all and not gap and not (change.get("sync_relevant") and not change.get("targets")):
            continue
        sync = f"; sync-relevant: {', '.join(change.get('sync', []))}" if change.get("sync_relevant") else ""
        ran = ", ".join(change.get("targets", [])) or "NOT COVERED: no target ran it"
        out.append(f"{change['ref']} ({change['change']}{sync}): {ran}")
        for role, found in (change.get("untaken") or {}).items():
            if side and role != side:
                continue
            spec = str(changes.get(role))
            arcs = f", branches {len(found.get('arcs', []))}/{found['branches']} not taken" if "arcs" in found else ""
            out.append(f"  {role} ({spec}): changed lines {len(found.get('lines', []))}/{found.get('statements', 0)} "
                       f"not run{arcs}")
            if found.get("lines"):
                if role not in sources:
                    try:
                        sources[role] = open_source(spec, role, list(report.run.get("sources") or [])) \
                            if open_source else None
                    except Exception:  # noqa: BLE001 -- line numbers alone then
                        sources[role] = None
                try:
                    text = sources[role].read(change["path"]) if sources[role] is not None else None
                except Exception:  # noqa: BLE001
                    text = None
                rows = text.splitlines() if text else []
                for line in found["lines"]:
                    out.append(f"    {line:<6} {rows[line - 1].strip() if line <= len(rows) else ''}")
            if found.get("arcs"):
                out.append("    branches not taken: " + ", ".join(_arc(a) for a in found["arcs"]))
    return out


def coverage(report_path: str, *, targets: Sequence[str] = (), device: str | None = None, side: str | None = None,
             show_all: bool = False, changes: bool = False,
             open_source: Callable[[str, str, list[str]], Any] | None = None) -> int:
    """``coverage REPORT``: the lines of the claimed definitions no example ran; with ``changes``, the change's
    coverage (every changed definition, sync-relevant first, and the changed code no example took), each
    untaken line's text read with ``open_source`` where given."""
    from fuzz.reports.merge import read_report

    report = read_report(report_path)
    if changes:
        for line in change_lines(report, side, show_all, open_source):
            print(line)
        return EXIT_OK
    lines = coverage_lines(report, list(targets), device, side, show_all)
    for line in lines or ["every line and branch of every claimed definition ran"]:
        print(line)
    return EXIT_OK
