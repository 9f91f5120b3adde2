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

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import (
    EXIT_FAILURE,
    EXIT_OK,
    INSTALLED,
    PROJECT_ROOT,
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

# --------------------------------------------------------------------------- the command


def _given_sources(pairs_in_play: Sequence[tuple[str, str]], needed: Sequence[str], *,
                   side_sources: Mapping[str, str | None], version_sources: Sequence[str],
                   against: str | None = None) -> dict[str, tuple[Source, str]]:
    """The sources named by flags and environment, by the vllm version they stand for.

    ``side_sources`` (``--legacy-source``/``--optimized-source``, by side) stand for the default pair's releases,
    or for the one pair in play when that is another; ``$SYNCFUZZ_*_SOURCE`` for the default pair's only;
    ``version_sources`` (``--source VERSION=PATH``) for VERSION, which must be one of the ``needed`` releases
    (the copies checked were taken from them): another would be silently unused. Opened (and so checked)
    before any download.
    """
    flag_pair = DEFAULT_PAIR if DEFAULT_PAIR in pairs_in_play or len(pairs_in_play) != 1 else pairs_in_play[0]
    given: dict[str, tuple[Source, str]] = {}
    for side in SIDES:
        flag, env = f"--{side}-source", f"SYNCFUZZ_{side.upper()}_SOURCE"
        if side_sources.get(side):
            given[side_version(flag_pair, side)] = open_source(side_sources[side], flag), flag
        elif os.environ.get(env) and DEFAULT_PAIR in pairs_in_play:  # CI or a checkout, without the flag
            given[side_version(DEFAULT_PAIR, side)] = open_source(os.environ[env], env), env
    for spec in version_sources:
        version, sep, path = spec.partition("=")
        if not sep or not version.strip() or not path.strip():
            raise UsageError(f"--source {spec!r} must look like VERSION=PATH, e.g. --source 0.30.0=vllm-0.30.0.whl")
        if version.strip() not in needed:
            releases = ", ".join(sorted(needed, key=version_key))
            hint = " (a source to drift against goes to --against PATH itself)" if against else ""
            raise UsageError(f"--source {spec!r}: none of the copies checked was taken from vllm {version.strip()} "
                             f"(they come from {releases}); give one of those versions, or drop the flag{hint}")
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


def provenance_command(*, targets: Sequence[str] = (), legacy_source: str | None = None,
                       optimized_source: str | None = None, version_sources: Sequence[str] = (),
                       cache: str | None = None, against: str | None = None, sources: Sequence[str] = (),
                       legacy_diffs: bool = False) -> int:
    """``provenance``: verify the copies (or, with ``against``, report drift), print it; the exit code.

    The values are the flags' (``python -m fuzz provenance --help``): ``version_sources`` holds
    ``VERSION=PATH`` specs (``--source``), ``sources`` source-pack folders (``--sources``)."""
    from fuzz.reports.preflight import check_cache, refuse_empty
    from fuzz.targets import lookup

    refuse_empty({"--legacy-source": legacy_source, "--optimized-source": optimized_source, "--against": against})
    cache_dir = check_cache(cache, default_cache)
    if legacy_diffs and not against:
        raise UsageError("--legacy-diffs only applies to drift; add --against vllm==VERSION (or a path)")
    chosen = lookup(list(targets))
    # Every target record contributes upstream files, even under --target: a copy module is
    # shared by several targets (keye.py) and its helpers may come from any of their files.
    everyone = lookup([])
    modules = {side: copy_modules(PROJECT_ROOT, side) for side in SIDES}  # every copy module
    if targets:
        # The chosen targets' copy modules and the helper modules they import (fla_index -> fla_utils).
        modules = {side: with_helper_modules(side, sorted({module_of(getattr(t, side)) for t in chosen}))
                   for side in SIDES}
    groups = group_modules(everyone, modules)  # {(side, pair): modules}; a module in two pairs is an error
    pairs_in_play = list(dict.fromkeys(pair for _, pair in groups))
    # Every usage error is raised before the first (slow) download.
    needed = list(dict.fromkeys(side_version(pair, side) for side, pair in groups))
    given = _given_sources(pairs_in_play, needed, side_sources={"legacy": legacy_source, "optimized": optimized_source},
                           version_sources=version_sources, against=against)
    against_version = _against_version(against) if against else None
    against_source = open_source(against, "--against") if against and not against_version else None
    search = _pack_folders(sources)
    for version, (source, flag) in given.items():
        if source.version and source.version != version:
            print(f"[provenance] warning: {flag} is vllm {source.version}, but the copies it is checked against "
                  f"were taken from vllm {version}", file=sys.stderr)
    releases = {version: given[version][0] if version in given else default_source(version, cache_dir, search=search)
                for version in needed}
    reports = [r for (side, pair), names in groups.items()
               for r in check_side(side, releases[side_version(pair, side)], everyone, names, pair=pair)]
    if against:
        # A shipped or fetched pack first: the release's wheel is ~320 MB, its pack well under 1 MB.
        against_source = against_source or default_source(against_version, cache_dir, search=search)
        drifts = drift_report(chosen, releases, against_source, reports)
        for line in format_drift(drifts, against_source, legacy_diffs):
            print(line)
        return EXIT_FAILURE if any(d.status in ("changed", "missing") for d in drifts) else EXIT_OK
    for line in format_verification(reports, target_rows(chosen, reports), releases):
        print(line)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILURE
