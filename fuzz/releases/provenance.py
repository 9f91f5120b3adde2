"""``python -m fuzz provenance``: prove the copies are upstream code, and spot upstream drift.

Verification: every line of every copy in ``legacy/`` and ``optimized/`` must
appear, in order and modulo whitespace, in the upstream definition of the same
qualname in the vllm release it was copied from -- unless it ends with
``# ADAPTED: <why>``. Each target names its (legacy, optimized) releases
(``Target.versions``, by default 0.27.1 / 0.28.0); a copy module is checked
against the release of the targets that use it. Upstream sources are read straight out of the vllm wheels
(``zipfile`` + ``ast``; vllm is never imported), downloaded once with pip into a
cache, or taken from a local wheel / source checkout / site-packages.

Drift (``--against vllm==X`` or a path): for every upstream function the targets
cover (and every helper the copies were verified against), compare the version
each side of its target was copied from with X and print unchanged / changed / missing with a
unified diff, so a maintainer knows which pairs to refresh.

Exit codes: 0 all verified (no drift), 1 mismatches (drift) found, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import (
    CACHE_ENV,
    EXIT_FAILURE,
    EXIT_OK,
    INSTALLED,
    PROJECT_ROOT,
    SIDE_VERSIONS,
    SIDES,
    default_cache,
    side_version,
    version_key,
)
from fuzz.releases.drift import drift_report, format_drift
from fuzz.releases.packs import default_source
from fuzz.releases.sources import Source, open_source, release_version
from fuzz.releases.verify import (
    check_side,
    copy_modules,
    format_verification,
    group_modules,
    module_of,
    target_rows,
    with_helper_modules,
)
from fuzz.versions import DEFAULT_PAIR

# --------------------------------------------------------------------------- CLI


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``provenance`` to the CLI's subcommands (plain argparse only)."""
    p = commands.add_parser(
        "provenance", help="check every copy line against the vllm releases it was copied from; --against: drift",
        description="Verify that every line of legacy/ and optimized/ appears in its upstream definition in the vllm "
                    "release its targets were copied from (Target.versions; by default "
                    f"{SIDE_VERSIONS['legacy']} / {SIDE_VERSIONS['optimized']}), in order, modulo whitespace, "
                    "unless marked `# ADAPTED: <why>`. With --against, report which upstream functions changed since "
                    "those versions instead.")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="only this target's copy modules (repeatable; default: every copy module)")
    for side in SIDES:
        env = f"SYNCFUZZ_{side.upper()}_SOURCE"
        p.add_argument(f"--{side}-source", metavar="PATH",
                       help=f"the {side} release: a .whl, a directory holding vllm/ (checkout, site-packages) or "
                            f"'installed'. It replaces vllm {SIDE_VERSIONS[side]} (the default pair's), or, when "
                            f"--target names targets of one other pair only, that pair's {side} release "
                            f"(default: ${env} for vllm {SIDE_VERSIONS[side]}, else the repo's source pack, else "
                            "pip download into the cache)")
    p.add_argument("--source", action="append", default=[], metavar="VERSION=PATH",
                   help="the source of vllm VERSION for whichever side and target was copied from it "
                        "(repeatable; PATH as for --legacy-source)")
    p.add_argument("--cache", metavar="DIR",
                   help=f"wheel cache (default ${CACHE_ENV}, else ~/.cache/syncfuzz/wheels)")
    p.add_argument("--against", metavar="vllm==X|PATH",
                   help="drift: compare the upstream functions with this version (vllm==X, a .whl, a directory or "
                        "'installed') instead of verifying the copies")
    p.add_argument("--sources", action="append", default=[], metavar="DIR",
                   help="source packs (python -m fuzz sources fetch) where vllm==X resolves, before "
                        "$SYNCFUZZ_SOURCES and the packs shipped in sources/ (repeatable); a release found in a "
                        "pack is never downloaded")
    p.add_argument("--legacy-diffs", action="store_true",
                   help="with --against: also print the legacy side's diffs (they mostly show the PR itself)")


def _given_sources(args: argparse.Namespace, pairs_in_play: Sequence[tuple[str, str]],
                   needed: Sequence[str]) -> dict[str, tuple[Source, str]]:
    """The sources named by flags and environment, by the vllm version they stand for.

    ``--legacy-source``/``--optimized-source`` stand for the default pair's releases, or for the
    one pair in play when that is another; ``$SYNCFUZZ_*_SOURCE`` for the default pair's only;
    ``--source VERSION=PATH`` for VERSION, which must be one of the ``needed`` releases (the copies
    checked were taken from them): another would be silently unused. Opened (and so checked) before
    any download.
    """
    flag_pair = DEFAULT_PAIR if DEFAULT_PAIR in pairs_in_play or len(pairs_in_play) != 1 else pairs_in_play[0]
    given: dict[str, tuple[Source, str]] = {}
    for side in SIDES:
        flag, env = f"--{side}-source", f"SYNCFUZZ_{side.upper()}_SOURCE"
        if getattr(args, f"{side}_source", None):
            given[side_version(flag_pair, side)] = open_source(getattr(args, f"{side}_source"), flag), flag
        elif os.environ.get(env) and DEFAULT_PAIR in pairs_in_play:  # CI or a checkout, without the flag
            given[side_version(DEFAULT_PAIR, side)] = open_source(os.environ[env], env), env
    for spec in getattr(args, "source", None) or []:
        version, sep, path = spec.partition("=")
        if not sep or not version.strip() or not path.strip():
            raise UsageError(f"--source {spec!r} must look like VERSION=PATH, e.g. --source 0.30.0=vllm-0.30.0.whl")
        if version.strip() not in needed:
            releases = ", ".join(sorted(needed, key=version_key))
            against = " (a source to drift against goes to --against PATH itself)" if getattr(args, "against", None) \
                else ""
            raise UsageError(f"--source {spec!r}: none of the copies checked was taken from vllm {version.strip()} "
                             f"(they come from {releases}); give one of those versions, or drop the flag{against}")
        given[version.strip()] = open_source(path.strip(), f"--source {version.strip()}"), "--source"
    return given


def _against_version(spec: str) -> str | None:
    """The X of ``--against vllm==X``; None for a path; a UsageError for anything else."""
    version = release_version(spec)
    if version:
        return version
    if spec == INSTALLED or Path(spec).expanduser().exists():
        return None
    raise UsageError(f"--against {spec!r} is neither vllm==VERSION nor an existing path; "
                     f"pass e.g. --against vllm==0.33.0, a .whl file or a directory holding vllm/")


def _pack_folders(folders: Sequence[str]) -> list[str]:
    """--sources folders, checked (one line and exit 2) before any download."""
    for folder in folders:
        if not folder.strip() or not Path(folder).expanduser().is_dir():  # "" would be the current folder
            raise UsageError(f"--sources {folder!r} is not a directory; pass the --into folder of "
                             "python -m fuzz sources fetch")
    return [str(Path(folder).expanduser().resolve()) for folder in folders]


def cmd_provenance(args: argparse.Namespace) -> int:
    from fuzz.reports.preflight import check_cache, refuse_empty
    from fuzz.targets import lookup

    refuse_empty({f"--{flag.replace('_', '-')}": getattr(args, flag, None)
                  for flag in ("legacy_source", "optimized_source", "against")})
    cache = check_cache(getattr(args, "cache", None), default_cache)
    against_spec = getattr(args, "against", None)
    if getattr(args, "legacy_diffs", False) and not against_spec:
        raise UsageError("--legacy-diffs only applies to drift; add --against vllm==VERSION (or a path)")
    chosen = lookup(getattr(args, "target", []) or [])
    # Every target record contributes upstream files, even under --target: a copy module is
    # shared by several targets (keye.py) and its helpers may come from any of their files.
    everyone = lookup([])
    modules = {side: copy_modules(PROJECT_ROOT, side) for side in SIDES}  # every copy module
    if getattr(args, "target", None):
        # The chosen targets' copy modules and the helper modules they import (fla_index -> fla_utils).
        modules = {side: with_helper_modules(side, sorted({module_of(getattr(t, side)) for t in chosen}))
                   for side in SIDES}
    groups = group_modules(everyone, modules)  # {(side, pair): modules}; a module in two pairs is an error
    pairs_in_play = list(dict.fromkeys(pair for _, pair in groups))
    # Every usage error is raised before the first (slow) download.
    needed = list(dict.fromkeys(side_version(pair, side) for side, pair in groups))
    given = _given_sources(args, pairs_in_play, needed)
    against_version = _against_version(against_spec) if against_spec else None
    against = open_source(against_spec, "--against") if against_spec and not against_version else None
    search = _pack_folders(getattr(args, "sources", None) or [])
    for version, (source, flag) in given.items():
        if source.version and source.version != version:
            print(f"[provenance] warning: {flag} is vllm {source.version}, but the copies it is checked against "
                  f"were taken from vllm {version}", file=sys.stderr)
    sources = {version: given[version][0] if version in given else default_source(version, cache, search=search)
               for version in needed}
    reports = [r for (side, pair), names in groups.items()
               for r in check_side(side, sources[side_version(pair, side)], everyone, names, pair=pair)]
    if against_spec:
        # A shipped or fetched pack first: the release's wheel is ~320 MB, its pack well under 1 MB.
        against = against or default_source(against_version, cache, search=search)
        drifts = drift_report(chosen, sources, against, reports)
        for line in format_drift(drifts, against, getattr(args, "legacy_diffs", False)):
            print(line)
        return EXIT_FAILURE if any(d.status in ("changed", "missing") for d in drifts) else EXIT_OK
    for line in format_verification(reports, target_rows(chosen, reports), sources):
        print(line)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILURE
