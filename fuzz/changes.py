"""The change's coverage: which definitions differ between the two sides, and which of them the run reached.

With a side from a source (``--legacy vllm==0.33.0 --optimized ~/src/vllm``), a pre-merge run is asked two
things: do the two sides compute the same, and did the fuzz run the code that changed? The second answer is
this: every definition that differs between the two sources in the files the catalog covers
(fuzz/codediff.py: comments, docstrings and layout aside), and for each the targets that executed it
(fuzz/reach.py's ``executed``, on either side) and its lines reached. "not covered" = no target entered it.
``--require-changes-covered`` makes a changed definition no target reached exit 3 (``Report.exit_code``).

A side that is the copy stands for the release the copy was taken from (its targets' version pair).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fuzz.codediff import changed_definitions
from fuzz.model import TargetEntry


def _source(spec: str, role: str, search: Iterable[str]) -> Any:
    from fuzz.releases import COPY, release_source, side_source
    from fuzz.versions import DEFAULT_PAIR

    if spec == COPY:
        return release_source(DEFAULT_PAIR[("legacy", "optimized").index(role)], list(search))
    return side_source(spec, list(search)).source


def change_coverage(config: Any, entries: Iterable[TargetEntry], targets: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``run.changes`` record; None when both sides are the copies (nothing to compare)."""
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
    listed = []
    for change in changes:
        reached: set[int] = set()
        total = 0
        fuzzed_by = []
        for entry in entries:
            if change.path not in files_of.get(entry.name, set()):
                continue
            hit = False
            for sides in entry.reach.values():
                for record in sides.values():
                    unit = record.get("executed", {}).get(change.qualname)
                    if unit:
                        hit = True
                        total = max(total, int(unit.get("lines", 0)))
                        # Lines of one side's file; the two sides' line numbers differ, so the count is
                        # per side, and the best side's is kept.
                        reached = max(reached, set(unit.get("reached", [])), key=len)
            if hit:
                fuzzed_by.append(entry.name)
        listed.append({**change.to_json(), "ref": change.ref, "targets": fuzzed_by,
                       "lines": total, "reached": len(reached)})
    fuzzed = [c for c in listed if c["targets"]]
    return {"legacy": config.legacy, "optimized": config.optimized, "required": bool(config.require_changes_covered),
            "measured": bool(config.coverage), "changed": listed, "fuzzed": len(fuzzed),
            "lines_reached": sum(c["reached"] for c in fuzzed), "lines": sum(c["lines"] for c in fuzzed),
            "not_covered": [c["ref"] for c in listed if not c["targets"]]}
