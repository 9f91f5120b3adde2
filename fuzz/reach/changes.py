"""The change's coverage: which definitions differ between the two sides, and which of them the run reached.

With a side from a source (``--legacy vllm==0.33.0 --optimized ~/src/vllm``), a pre-merge run is asked two
things: do the two sides compute the same, and did the fuzz run the code that changed? The second answer is
this: every definition that differs between the two sources in the files the catalog covers
(fuzz/code/codediff.py: comments, docstrings and layout aside), and for each the targets that executed it
(fuzz/reach/collect.py's ``executed``, on either side) and its lines reached. "not covered" = no target entered it.
``--require-changes-covered`` makes a changed definition no target reached exit 3 (``Report.exit_code``).

Each changed definition is also marked sync-relevant or not (fuzz/code/syncdiff.py: its diff touches transfer or
sync machinery), and for those that ran, the changed lines and changed branch arcs (arcs out of a changed
line) no example took are listed per side, in that side's source lines (old-side lines for legacy, new-side
for optimized): ``untaken``. ``--require-changes-covered=all`` and ``=sync`` count a definition with an
untaken changed branch as not covered; ``=sync`` looks at the sync-relevant definitions only.

A side that is the copy stands for the release the copy was taken from (its targets' version pair).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fuzz.code.codediff import changed_definitions, definitions
from fuzz.code.syncdiff import definition_diff
from fuzz.records.model import TargetEntry
from fuzz.records.reachdata import require_mode


def _source(spec: str, role: str, search: Iterable[str]) -> Any:
    from fuzz.releases import COPY, release_source, side_source
    from fuzz.versions import DEFAULT_PAIR

    if spec == COPY:
        return release_source(DEFAULT_PAIR[("legacy", "optimized").index(role)], list(search))
    return side_source(spec, list(search)).source


def _line_map(view: Any, qualname: str, text: str | None) -> dict[int, int]:
    """The measured file's lines of ``qualname`` -> the lines of that definition in the side's source (the
    two texts aligned modulo whitespace: a rebuilt side holds the source's text, a copy its own)."""
    from fuzz.releases import align, normalize

    if not text:
        return {}
    try:
        theirs = definitions(text).get(qualname)
    except SyntaxError:
        return {}
    mine = view.defs.get(qualname)
    if theirs is None or mine is None:
        return {}
    rows = text.splitlines()
    a = [normalize(r) for r in view.rows[mine.first_line - 1:mine.last_line]]
    b = [normalize(r) for r in rows[theirs.first_line - 1:theirs.last_line]]
    return {mine.first_line + i: theirs.first_line + j for i, j in align(a, b)}


class _Untaken:
    """One side's changed lines and branches of one definition, over every record that ran it, in the side's
    source lines."""

    def __init__(self) -> None:
        self.lines: set[int] = set()
        self.hit_lines: set[int] = set()
        self.arcs: set[tuple[int, int]] = set()
        self.hit_arcs: set[tuple[int, int]] = set()
        self.arcs_known = True
        self.seen = False

    def add(self, view: Any, unit: Mapping[str, Any], qualname: str, text: str | None, changed: set[int]) -> None:
        up = _line_map(view, qualname, text)
        body = view.bodies.get(qualname, set())
        if not up or not body:
            return
        self.seen = True
        mine = view.defs[qualname]
        candidates = {view.statement(line) for line in range(mine.first_line, mine.last_line + 1)
                      if up.get(line) in changed} & body

        def upstream(line: int) -> int | None:
            if line < 0:  # an arc out of the code object: coverage.py writes it as -(its first line)
                return -(up.get(mine.first_line) or 0)
            return up.get(line) or next((up[n] for n in range(line, mine.last_line + 1)
                                         if up.get(n) and view.statement(n) == line), None)

        reached = set(unit.get("reached", []))
        for line in candidates:
            where = upstream(line)
            if where is not None:
                self.lines.add(where)
                if line in reached:
                    self.hit_lines.add(where)
        if "reached_arcs" not in unit:
            self.arcs_known = False
        taken = {tuple(a) for a in unit.get("reached_arcs", [])}
        for arc in view.branch_arcs:
            if arc[0] in candidates:
                mapped = (upstream(arc[0]), upstream(arc[1]))
                if None not in mapped:
                    self.arcs.add(mapped)  # type: ignore[arg-type]
                    if arc in taken:
                        self.hit_arcs.add(mapped)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"statements": len(self.lines), "lines": sorted(self.lines - self.hit_lines)}
        if self.arcs_known:
            out.update(branches=len(self.arcs), arcs=[list(a) for a in sorted(self.arcs - self.hit_arcs)])
        return out


def open_side_source(spec: str, role: str, search: Iterable[str]) -> Any:
    """A side's source by its spec ("copy": the release the copy was taken from), to read its files."""
    return _source(spec, role, search)


def change_coverage(config: Any, entries: Iterable[TargetEntry], targets: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``run.changes`` record; None when both sides are the copies (nothing to compare)."""
    from fuzz.reach.collect import file_view
    from fuzz.releases import COPY, catalog_paths, upstream_files_by_module

    if config.legacy == COPY and config.optimized == COPY:
        return None
    old, new = _source(config.legacy, "legacy", config.sources), _source(config.optimized, "optimized", config.sources)
    changes = changed_definitions(old, new, catalog_paths())
    by_module = upstream_files_by_module(list(targets.values()))
    # Which upstream files each target's modules stand for: a qualname executed there is that file's.
    files_of: dict[str, set[str]] = {}
    for name, target in targets.items():
        files = {ref.partition("::")[0] for ref in target.upstream}
        for role in ("legacy", "optimized"):
            files.update(by_module.get(getattr(target, role).partition(":")[0].rpartition(".")[2], []))
        files_of[name] = files
    entries = list(entries)
    texts: dict[tuple[str, str], str | None] = {}

    def text_of(role: str, path: str) -> str | None:
        if (role, path) not in texts:
            texts[(role, path)] = (old if role == "legacy" else new).read(path)
        return texts[(role, path)]

    listed = []
    for change in changes:
        diff = definition_diff(text_of("legacy", change.path), text_of("optimized", change.path), change.qualname)
        changed_of = {"legacy": set(diff.removed), "optimized": set(diff.added)}
        reached: set[int] = set()
        total = 0
        fuzzed_by = []
        untaken = {side: _Untaken() for side in ("legacy", "optimized")}
        for entry in entries:
            if change.path not in files_of.get(entry.name, set()):
                continue
            hit = False
            for sides in entry.reach.values():
                for side, record in sides.items():
                    unit = record.get("executed", {}).get(change.qualname)
                    # A stand-in (its header ADAPTED: the copy's text kept in a rebuilt side) is the harness's
                    # code, not the release's: running it fuzzes nothing of the change.
                    if unit and not unit.get("stand_in"):
                        hit = True
                        total = max(total, int(unit.get("lines", 0)))
                        # Lines of one side's file; the two sides' line numbers differ, so the count is
                        # per side, and the best side's is kept.
                        reached = max(reached, set(unit.get("reached", [])), key=len)
                        if side in untaken and not changed_of[side]:  # nothing of this side changed
                            untaken[side].seen = True
                            untaken[side].arcs_known &= "reached_arcs" in unit
                            continue
                        view = file_view(str(record.get("path") or "")) if side in untaken else None
                        if view is not None:
                            untaken[side].add(view, unit, change.qualname, text_of(side, change.path),
                                              changed_of[side])
            if hit:
                fuzzed_by.append(entry.name)
        item = {**change.to_json(), "ref": change.ref, "targets": fuzzed_by, "lines": total,
                "reached": len(reached), "sync_relevant": diff.sync_relevant, "sync": list(diff.reasons),
                "changed_lines": {"legacy": len(diff.removed), "optimized": len(diff.added)}}
        if fuzzed_by:
            item["untaken"] = {side: found.to_json() for side, found in untaken.items() if found.seen}
        listed.append(item)
    fuzzed = [c for c in listed if c["targets"]]
    mode = require_mode(config.require_changes_covered)
    return {"legacy": config.legacy, "optimized": config.optimized, "required": mode is not None,
            "require": mode, "measured": bool(config.coverage), "changed": listed, "fuzzed": len(fuzzed),
            "sync_relevant": sum(c["sync_relevant"] for c in listed),
            "sync_fuzzed": sum(c["sync_relevant"] for c in fuzzed),
            "lines_reached": sum(c["reached"] for c in fuzzed), "lines": sum(c["lines"] for c in fuzzed),
            "not_covered": [c["ref"] for c in listed if not c["targets"]]}
