"""``python -m fuzz provenance``: prove the copies are upstream code, and spot upstream drift.

Verification: every line of every copy in ``legacy/`` (vllm 0.27.1) and
``optimized/`` (vllm 0.28.0) must appear, in order and modulo whitespace, in the
upstream definition of the same qualname -- unless it ends with
``# ADAPTED: <why>``. Upstream sources are read straight out of the vllm wheels
(``zipfile`` + ``ast``; vllm is never imported), downloaded once with pip into a
cache, or taken from a local wheel / source checkout / site-packages.

Drift (``--against vllm==X`` or a path): for every upstream function the targets
cover (and every helper the copies were verified against), compare the version
each side was copied from with X and print unchanged / changed / missing with a
unified diff, so a maintainer knows which pairs to refresh.

Exit codes: 0 all verified (no drift), 1 mismatches (drift) found, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fuzz.errors import UsageError
from fuzz.provenance._common import (  # noqa: F401
    ADAPTED_RE,
    CACHE_ENV,
    EXIT_FAILURE,
    EXIT_OK,
    INSTALLED,
    MAX_GAP_LINES,
    MAX_HUNKS,
    PROJECT_ROOT,
    SIDE_VERSIONS,
    SIDES,
    UPSTREAM_PATH_RE,
    default_cache,
)
from fuzz.provenance.drift import (  # noqa: F401
    Drift,
    _same,
    compare,
    definition_text,
    drift_report,
    extract,
    format_drift,
)
from fuzz.provenance.matching import (  # noqa: F401
    CopyLines,
    ModuleReport,
    Span,
    UnitReport,
    UpstreamFile,
    _Checker,
    _def_start,
    _is_def,
    _lcs,
    align,
    check_copy,
    is_subsequence,
    normalize,
    parse,
    referenced_paths,
    upstream_file,
    walk_spans,
)
from fuzz.provenance.sources import (  # noqa: F401
    Source,
    TextSource,
    TreeSource,
    WheelSource,
    _against_version,
    _installed_source,
    _last_error_line,
    _version_from_text,
    _version_from_wheel_name,
    cached_wheel,
    fetch_wheel,
    open_source,
)
from fuzz.provenance.verify import (  # noqa: F401
    TargetRow,
    _covering_unit,
    _describe,
    _module_of,
    check_side,
    copy_modules,
    format_verification,
    split_upstream,
    target_rows,
    upstream_files_by_module,
    with_helper_modules,
)

# --------------------------------------------------------------------------- CLI


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``provenance`` to the CLI's subcommands (plain argparse only)."""
    p = commands.add_parser(
        "provenance", help="check every copy line against the vllm wheels it was copied from; --against: drift",
        description="Verify that every line of legacy/ (vllm 0.27.1) and optimized/ (vllm 0.28.0) appears in its "
                    "upstream definition, in order, modulo whitespace, unless marked `# ADAPTED: <why>`. "
                    "With --against, report which upstream functions changed since those versions instead.")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="only this target's copy modules (repeatable; default: every copy module)")
    for side in SIDES:
        env = f"SYNCFUZZ_{side.upper()}_SOURCE"
        p.add_argument(f"--{side}-source", metavar="PATH",
                       help=f"vllm {SIDE_VERSIONS[side]}: a .whl, a directory holding vllm/ (checkout, site-packages) "
                            f"or 'installed' (default: ${env}, else pip download into the cache)")
    p.add_argument("--cache", metavar="DIR",
                   help=f"wheel cache (default ${CACHE_ENV}, else ~/.cache/syncfuzz/wheels)")
    p.add_argument("--against", metavar="vllm==X|PATH",
                   help="drift: compare the upstream functions with this version (vllm==X, a .whl, a directory or "
                        "'installed') instead of verifying the copies")
    p.add_argument("--legacy-diffs", action="store_true",
                   help="with --against: also print the legacy side's diffs (they mostly show the PR itself)")


def cmd_provenance(args: argparse.Namespace) -> int:
    from fuzz.targets import lookup

    cache = Path(args.cache).expanduser() if getattr(args, "cache", None) else default_cache()
    if cache.exists() and not cache.is_dir():
        raise UsageError(f"--cache {str(cache)!r} is a file; pass a directory (it is created if missing)")
    against_spec = getattr(args, "against", None)
    if getattr(args, "legacy_diffs", False) and not against_spec:
        raise UsageError("--legacy-diffs only applies to drift; add --against vllm==VERSION (or a path)")
    chosen = lookup(getattr(args, "target", []) or [])
    # Every usage error is raised before the first (slow) download.
    given: dict[str, tuple[Source, str]] = {}
    for side in SIDES:
        flag, env = f"--{side}-source", f"SYNCFUZZ_{side.upper()}_SOURCE"
        if getattr(args, f"{side}_source", None):
            given[side] = open_source(getattr(args, f"{side}_source"), flag), flag
        elif os.environ.get(env):  # CI or a maintainer's checkout, without repeating the flag
            given[side] = open_source(os.environ[env], env), env
    against_version = _against_version(against_spec) if against_spec else None
    against = open_source(against_spec, "--against") if against_spec and not against_version else None
    for side, (source, flag) in given.items():
        if source.version and source.version != SIDE_VERSIONS[side]:
            print(f"[provenance] warning: {flag} is vllm {source.version}, but the {side} copies were "
                  f"taken from vllm {SIDE_VERSIONS[side]}", file=sys.stderr)
    sources = {side: given[side][0] if side in given else WheelSource(fetch_wheel(SIDE_VERSIONS[side], cache))
               for side in SIDES}
    modules: dict[str, list[str] | None] = {side: None for side in SIDES}  # None: every copy module
    if getattr(args, "target", None):
        # The chosen targets' copy modules and the helper modules they import (fla_index -> fla_utils).
        modules = {side: with_helper_modules(side, sorted({_module_of(getattr(t, side)) for t in chosen}))
                   for side in SIDES}
    # Every target record contributes upstream files, even under --target: a copy module is
    # shared by several targets (keye.py) and its helpers may come from any of their files.
    reports = [r for side in SIDES for r in check_side(side, sources[side], lookup([]), modules[side])]
    if against_spec:
        against = against or WheelSource(fetch_wheel(against_version, cache))
        drifts = drift_report(chosen, sources, against, reports)
        for line in format_drift(drifts, against, getattr(args, "legacy_diffs", False)):
            print(line)
        return EXIT_FAILURE if any(d.status in ("changed", "missing") for d in drifts) else EXIT_OK
    for line in format_verification(reports, target_rows(chosen, reports), sources):
        print(line)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILURE
