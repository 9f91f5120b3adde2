"""Drift: which upstream functions changed since the version each side was copied from."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from fuzz.releases.common import SIDES, side_version
from fuzz.releases.matching import (
    ModuleReport,
    normalize,
    upstream_file,
)
from fuzz.releases.sources import (
    Source,
)
from fuzz.releases.verify import (
    split_upstream,
    target_pair,
)

# --------------------------------------------------------------------------- drift


@dataclass
class Drift:
    ref: str  # "vllm/...py::Qual"
    side: str
    base_version: str | None
    status: str  # "unchanged", "whitespace", "changed", "missing", "not in base"
    diff: list[str] = field(default_factory=list)
    same_as_optimized: bool = False  # legacy side: the function did not change 0.27.1 -> 0.28.0
    owners: list[str] = field(default_factory=list)  # targets naming it, or the copy modules holding it
    helper: bool = False  # not named by a target: a definition a copy holds verbatim


def definition_text(source: Source, ref: str) -> tuple[str, int] | None:
    """(text, first line) of a function; of a class, its own lines (methods are compared one by one)."""
    path, qualname = split_upstream(ref)
    parsed = upstream_file(source, path)
    if parsed is None or qualname not in parsed.spans:
        return None
    spans = parsed.spans[qualname]
    rows = [row for span in spans for row in span.own_rows()]
    return "\n".join(parsed.lines[row - 1] for row in rows) + "\n", spans[0].start


def extract(source: Source, ref: str) -> str | None:
    """The source text of ``path::qualname`` (decorators included; a class without its methods)."""
    found = definition_text(source, ref)
    return found[0] if found else None


def _same(a: str, b: str) -> bool:
    """Equal modulo whitespace (blank lines and indentation runs ignored)."""
    return [normalize(x) for x in a.splitlines() if x.strip()] == [normalize(x) for x in b.splitlines() if x.strip()]


def compare(ref: str, side: str, base: Source, new: Source) -> Drift:
    old, now = definition_text(base, ref), definition_text(new, ref)
    drift = Drift(ref, side, base.version, "unchanged")
    if old is None:
        drift.status = "not in base"
    elif now is None:
        drift.status = "missing"
    elif old[0] != now[0]:
        drift.status = "whitespace" if _same(old[0], now[0]) else "changed"
        path = split_upstream(ref)[0]
        drift.diff = list(difflib.unified_diff(
            old[0].splitlines(), now[0].splitlines(), f"vllm {base.version or base.label} {path}:{old[1]}",
            f"vllm {new.version or new.label} {path}:{now[1]}", lineterm="", n=2))
    return drift


def drift_report(targets: Sequence, sources: Mapping[str, Source], against: Source,
                 reports: Sequence[ModuleReport] = ()) -> list[Drift]:
    """Per side and version pair: the targets' qualnames, then the upstream definitions the copies
    of that pair hold verbatim, each measured from the version the side was copied from.

    ``sources``: by vllm version (each target's own pair, ``Target.versions``), or by side
    (``{"legacy": ..., "optimized": ...}``: every target measured from those two).
    Stand-ins (ADAPTED headers) are left out of the helpers: they follow
    upstream only as far as the copy needs, so upstream edits to them are noise.
    """
    by_side = set(sources) <= set(SIDES)

    def source(side: str, pair: tuple[str, str]) -> Source | None:
        return sources.get(side) if by_side else sources.get(side_version(pair, side))

    owners: dict[tuple[str, str], dict[str, list[str]]] = {}
    for t in targets:
        for ref in t.upstream:
            owners.setdefault(target_pair(t), {}).setdefault(ref, []).append(t.name)
    found = []
    for side in ("optimized", "legacy"):
        for pair, named in owners.items():
            base = source(side, pair)
            if base is None:
                continue
            helpers: dict[str, list[str]] = {}
            for r in (r for r in reports if r.side == side and (by_side or (r.pair or pair) == pair)):
                for u in r.definitions:
                    if u.upstream and not u.stand_in and u.verified and u.upstream not in named:
                        helpers.setdefault(u.upstream, []).append(r.copy)
            optimized = source("optimized", pair)
            for ref, who in [*named.items(), *helpers.items()]:
                drift = compare(ref, side, base, against)
                drift.owners, drift.helper = list(dict.fromkeys(who)), ref in helpers
                if drift.base_version is None:
                    drift.base_version = side_version(pair, side)  # a checkout without a recorded version
                if side == "legacy" and optimized is not None:
                    old, opt = definition_text(base, ref), definition_text(optimized, ref)
                    drift.same_as_optimized = bool(old and opt and old[0] == opt[0])
                found.append(drift)
    return found


def format_drift(drifts: Sequence[Drift], against: Source, legacy_diffs: bool = False) -> list[str]:
    """Statuses per side, then diffs: always for the optimized side, for the legacy side on request.

    The legacy copies are pre-PR code on purpose, so their drift mostly is the
    PR itself; a legacy function that 0.28.0 left alone drifts exactly like
    its optimized twin (marked ``= optimized``). Unchanged helpers are only counted.
    """
    version = against.version or against.label
    out = [f"drift: vllm {against.version or '?'} ({against.label}) against the versions the copies were taken from"]
    word = {"unchanged": "unchanged", "whitespace": "whitespace only", "changed": "CHANGED",
            "missing": f"MISSING in {version}", "not in base": "not in base version"}
    groups = [(side, base) for side in ("optimized", "legacy")
              for base in dict.fromkeys(d.base_version for d in drifts if d.side == side)]
    for side, base in groups:
        mine = [d for d in drifts if d.side == side and d.base_version == base]
        out.append(f"\n{side} side (copied from vllm {base}):")
        quiet = [d for d in mine if d.helper and d.status == "unchanged"]
        for d in mine:
            if d not in quiet:
                same = " (= optimized)" if d.same_as_optimized and d.status != "unchanged" else ""
                helper = "helper in " if d.helper else ""
                out.append(f"  {word[d.status]:24s} {d.ref}  [{helper}{', '.join(d.owners)}]{same}")
        if quiet:
            out.append(f"  unchanged                {len(quiet)} more definitions the {side} copies hold verbatim")
        for d in mine:
            if d.status != "changed" or (side == "legacy" and not legacy_diffs):
                continue
            out.append(f"\n  {side}: {d.ref} changed since vllm {d.base_version}")
            out.extend("    " + line for line in d.diff)
    changed = [d for d in drifts if d.status in ("changed", "missing")]
    refresh = sorted({name for d in changed if d.side == "optimized" for name in d.owners})
    out.append(f"\n{len(changed)} of {len(drifts)} definition/side pairs changed or missing in {version}"
               + (f"; optimized copies to refresh: {', '.join(refresh)}" if refresh else "")
               + ("" if legacy_diffs else "; legacy diffs: --legacy-diffs"))
    return out


