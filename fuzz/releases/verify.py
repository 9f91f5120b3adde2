"""Which copy modules and upstream files each target involves, and the verification report."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import (
    PROJECT_ROOT,
    SIDE_VERSIONS,
    SIDES,
    version_key,
)
from fuzz.releases.matching import (
    ModuleReport,
    UnitReport,
    check_copy,
)
from fuzz.releases.sources import (
    Source,
)
from fuzz.versions import DEFAULT_PAIR

# --------------------------------------------------------------------------- targets and copy modules


def module_of(impl_path: str) -> str:
    """``"optimized.keye:Cls.fn"`` -> ``"keye"``."""
    return impl_path.partition(":")[0].split(".", 1)[1]


def split_upstream(ref: str) -> tuple[str, str]:
    path, _, qualname = ref.partition("::")
    return path, qualname


def upstream_files_by_module(targets: Sequence) -> dict[str, list[str]]:
    """Copy module name -> the upstream files its targets name, in catalog order."""
    files: dict[str, list[str]] = {}
    for target in targets:
        for impl in (target.legacy, target.optimized):
            known = files.setdefault(module_of(impl), [])
            for ref in target.upstream:
                path = split_upstream(ref)[0]
                if path not in known:
                    known.append(path)
    return files


def copy_modules(root: Path, side: str) -> list[str]:
    """Every copy module of a side: all ``.py`` files but ``__init__``."""
    return sorted(p.stem for p in (root / side).glob("*.py") if p.stem != "__init__")


def with_helper_modules(side: str, modules: Sequence[str], root: Path = PROJECT_ROOT) -> list[str]:
    """``modules`` and, transitively, the copy modules of ``side`` they import: the vllm helpers
    copied beside them (``torch_utils``, ``fla_utils``, ``gpu_sync_debug``), checked with them."""
    found: list[str] = []
    todo = list(modules)
    while todo:
        module = todo.pop(0)
        if module in found:
            continue
        found.append(module)
        path = root / side / f"{module}.py"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue  # a missing or broken copy is reported by the check itself
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == side:
                names = [f"{side}.{alias.name}" for alias in node.names]  # from optimized import torch_utils
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                package, _, rest = name.partition(".")
                if package == side and rest and "." not in rest and (root / side / f"{rest}.py").is_file():
                    todo.append(rest)
    return sorted(found)


def target_pair(target: object) -> tuple[str, str]:
    """A target's (legacy, optimized) versions; the default pair for a record without any."""
    return tuple(getattr(target, "versions", None) or DEFAULT_PAIR)  # type: ignore[return-value]


def module_pairs(targets: Sequence, side: str, root: Path = PROJECT_ROOT) -> dict[str, tuple[str, str]]:
    """Copy module of ``side`` -> the version pair of the targets that use it.

    A target uses the copy module its ``legacy``/``optimized`` path names and, transitively,
    the helper modules that copy imports (``with_helper_modules``). A copy is checked against
    one vllm version, so a module used by targets of two pairs is a usage error. Modules no
    target uses are not listed (they are checked against the default pair).
    """
    closure: dict[str, list[str]] = {}
    users: dict[str, dict[tuple[str, str], list[str]]] = {}
    for target in targets:
        path = getattr(target, side, None)
        if not path or not path.startswith(f"{side}."):
            continue  # a mutant built in memory (tests.planted) is no copy module
        module = module_of(path)
        if module not in closure:
            closure[module] = [m for m in with_helper_modules(side, [module], root)
                               if (root / side / f"{m}.py").is_file()]
        for used in closure[module]:
            users.setdefault(used, {}).setdefault(target_pair(target), []).append(target.name)
    shared = sorted(module for module, by_pair in users.items() if len(by_pair) > 1)
    if shared:
        uses = "; ".join(f"{'/'.join(pair)} by {_some(names)}" for pair, names in
                         sorted(users[shared[0]].items(), key=lambda item: [version_key(v) for v in item[0]]))
        raise UsageError(f"{', '.join(f'{side}/{m}.py' for m in shared)} {'is' if len(shared) == 1 else 'are'} "
                         f"used by targets of two version pairs ({uses}); a copy is checked against one vllm "
                         f"release: give the other pair's targets their own copy module (copy the helper from "
                         f"that release beside them)")
    return {module: next(iter(by_pair)) for module, by_pair in users.items()}


def _some(names: Sequence[str], shown: int = 3) -> str:
    names = list(dict.fromkeys(names))
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def group_modules(targets: Sequence, modules: Mapping[str, Sequence[str]],
                  root: Path = PROJECT_ROOT) -> dict[tuple[str, tuple[str, str]], list[str]]:
    """``{side: modules}`` -> ``{(side, pair): modules}``: each copy module under the version pair of
    the targets using it (the default pair when none does), sides in order, pairs by version."""
    groups: dict[tuple[str, tuple[str, str]], list[str]] = {}
    for side in SIDES:
        pairs = module_pairs(targets, side, root)
        for module in modules.get(side, []):
            groups.setdefault((side, pairs.get(module, DEFAULT_PAIR)), []).append(module)
    order = sorted(groups, key=lambda key: (SIDES.index(key[0]), [version_key(v) for v in key[1]]))
    return {key: groups[key] for key in order}


def check_side(side: str, source: Source, targets: Sequence, modules: Sequence[str] | None = None,
               root: Path = PROJECT_ROOT, pair: tuple[str, str] | None = None) -> list[ModuleReport]:
    """Check ``modules`` of ``side`` (all by default) against ``source``; ``pair``: the version pair
    they were copied for (recorded on each report, for drift and output)."""
    files = upstream_files_by_module(targets)
    reports = []
    for module in modules if modules is not None else copy_modules(root, side):
        copy_path = root / side / f"{module}.py"
        text = copy_path.read_text(encoding="utf-8")
        report = check_copy(f"{side}/{module}.py", text, source, files.get(module, []), side)
        report.pair = pair
        reports.append(report)
    return reports


@dataclass
class TargetRow:
    name: str
    side: str
    covered: list[tuple[str, UnitReport | None]]  # (upstream ref, the copy unit covering it)

    @property
    def units(self) -> list[UnitReport]:
        return list({id(u): u for _, u in self.covered if u}.values())


def target_rows(targets: Sequence, reports: Sequence[ModuleReport]) -> list[TargetRow]:
    """For each target and side: which copy definition covers each upstream qualname."""
    by_copy = {r.copy: r for r in reports}
    rows = []
    for target in targets:
        for side in SIDES:
            report = by_copy.get(f"{side}/{module_of(getattr(target, side))}.py")
            if report is None:
                continue
            covered = [(ref, _covering_unit(report, ref)) for ref in target.upstream]
            rows.append(TargetRow(target.name, side, covered))
    return rows


def _covering_unit(report: ModuleReport, ref: str) -> UnitReport | None:
    """The unit verified against ``ref``, else the copy definition of the same qualname."""
    qualname = split_upstream(ref)[1]
    for unit in report.definitions:
        if unit.upstream == ref:
            return unit
    for unit in report.definitions:
        if unit.qualname == qualname:
            return unit
    return None


# --------------------------------------------------------------------------- output


def _describe(source: Source, expected: str) -> str:
    """The source's path, and its version when that is not the expected one."""
    if source.version == expected:
        return source.label
    return f"{source.label}; {f'it is vllm {source.version}' if source.version else 'its version is not recorded'}"


def format_verification(reports: Sequence[ModuleReport], rows: Sequence[TargetRow],
                        sources: Mapping[str, Source]) -> list[str]:
    """The report; ``sources``: by side (every copy of a side against one version) or by version
    (each copy module against the version of its targets' pair, ``ModuleReport.pair``)."""
    out = []
    for side in SIDES:
        if side in sources:
            out.append(f"provenance: {side} copies vs vllm {SIDE_VERSIONS[side]} "
                       f"({_describe(sources[side], SIDE_VERSIONS[side])})")
            continue
        by_version: dict[str, list[str]] = {}
        for r in (r for r in reports if r.side == side and r.base in sources):
            by_version.setdefault(r.base, []).append(r.copy.split("/", 1)[1].removesuffix(".py"))
        for version, modules in by_version.items():
            mine = f": {', '.join(modules)}" if version != SIDE_VERSIONS[side] else ""
            out.append(f"provenance: {side} copies vs vllm {version} ({_describe(sources[version], version)}){mine}")
    out += ["", "every copy line must appear in its upstream definition, in order, modulo whitespace, unless "
                "marked ADAPTED;", "upstream code a verbatim definition leaves out needs an ADAPTED mark where it was.",
            "skipped (not compared): blank lines / comment lines outside definitions / the copy's own docstring", "",
            f"{'copy module':30s} {'definitions':>11s} {'adapted':>8s} {'skipped':>13s} {'mismatched':>10s} "
            f"{'dropped':>7s}"]
    for r in reports:
        defs = r.definitions
        skipped = f"{r.blank}/{r.module_comments}/{r.header_docstring}"
        out.append(f"{r.copy:30s} {f'{sum(u.ok for u in defs)}/{len(defs)} ok':>11s} {r.adapted:8d} {skipped:>13s} "
                   f"{r.mismatched:10d} {r.dropped:7d}  {'verified' if r.ok else 'FAIL'}")
    out += ["", f"{'target':33s} {'side':9s} {'qualnames ok/copied':>19s} {'adapted':>8s} {'mismatched':>10s} "
                f"{'dropped':>7s}"]
    for row in rows:
        units = row.units
        copied = sum(u is not None for _, u in row.covered)
        verified = sum(u is not None and u.ok for _, u in row.covered)
        out.append(f"{row.name:33s} {row.side:9s} {f'{verified}/{copied}':>19s} {sum(u.adapted for u in units):8d} "
                   f"{sum(len(u.mismatched) for u in units):10d} {sum(len(u.dropped) for u in units):7d}  "
                   f"{'verified' if verified == copied > 0 else 'FAIL'}")
        if not copied:
            out.append(f"    FAIL: the {row.side} copy holds none of this target's upstream qualnames")
        for ref, unit in row.covered:
            if unit is None:
                out.append(f"    not copied: {ref}")
            elif not unit.ok:
                out.append(f"    FAIL: {ref} (copy {unit.qualname})")
            elif unit.upstream != ref:
                out.append(f"    {ref}: verified as copy {unit.qualname} vs {unit.upstream}")
    for r in reports:
        for path in r.missing_files:
            out.append(f"\n{r.copy}: upstream file {path} is not in vllm {r.version}; fix the target record")
    failing = [(r, u) for r in reports for u in r.failed]
    if failing:
        out.append("\nmismatches: `+` copy lines not found upstream, `-` upstream lines (dropped ones need an "
                   "ADAPTED mark where they were). Fix the copy or mark the line `# ADAPTED: <why>`.")
    for r, u in failing:
        against = f" vs {u.upstream} (vllm {r.version})" if u.upstream else ""
        counts = [f"{len(u.mismatched)} line(s) not upstream"] if u.mismatched else []
        counts += [f"{len(u.dropped)} upstream line(s) dropped unmarked"] if u.dropped else []
        out.append(f"\n{r.copy}:{u.first_line} {u.qualname}{against}: {', '.join(counts) or 'not verified'}")
        if u.problem:
            out.append(f"  {u.problem}")
        out.extend(u.diff)
    n_defs = sum(len(r.definitions) for r in reports)
    ok_defs = sum(u.ok for r in reports for u in r.definitions)
    ok = all(r.ok for r in reports)
    out.append(f"\n{len(reports)} copy modules: {ok_defs}/{n_defs} definitions verified, "
               f"{sum(r.adapted for r in reports)} adapted lines, {sum(r.mismatched for r in reports)} mismatched "
               f"lines, {sum(r.dropped for r in reports)} unmarked dropped lines: " + ("OK" if ok else "FAIL"))
    return out


