"""vllm releases and checkouts as sources: where each copy came from, sides built from any release.

The upstream-source tooling, one package; the rest of the engine imports only the names below
(lint-imports checks it). Its modules, lowest first (no module imports one above it):

* ``common``: constants and small helpers every module shares (the sides, the wheel cache);
* ``shims``: compatibility shims (a module that only re-exports another) followed to their target;
* ``sources``: a vllm release read as files -- a wheel, a tree, a local install (never imported);
* ``matching``: a copy's lines found in order in their upstream definitions;
* ``verify`` and ``drift``: every copy module checked against its release; what changed since;
* ``packs``: source packs, the few vllm files the catalog needs, kept offline in ``sources/``,
  and where a release is read from when no flag names it (pack, else wheel cache, else pip);
* ``retired``: a side whose release removed every file of a target's claimed definitions;
* ``merge3`` and ``sidebuild``: a copy rebuilt on another release's text by a three-way merge;
* ``sides``: ``--legacy``/``--optimized`` bound to a target (the copy, ``vllm==X`` or a PATH);
* ``provenance``, ``scaffold``: the ``provenance`` and ``new-target`` commands (``sources``: packs).
"""

from __future__ import annotations

from fuzz.releases.common import CACHE_ENV, SIDE_VERSIONS, SIDES, version_key
from fuzz.releases.matching import HEADER_RE, CopyLines, align, check_copy, normalize, upstream_file
from fuzz.releases.packs import SOURCES_ENV, catalog_paths, fetch_packs, list_packs, release_source
from fuzz.releases.provenance import provenance_command
from fuzz.releases.scaffold import new_target_command
from fuzz.releases.sidebuild import claimed_digests, entry_digests
from fuzz.releases.sides import (
    COPY,
    PACKAGE,
    CannotBuild,
    Retired,
    SideChange,
    base_source,
    bind_sides,
    check_side,
    identity,
    side_changes,
    side_identities,
    side_labels,
    side_source,
)
from fuzz.releases.sources import release_version
from fuzz.releases.verify import upstream_files_by_module

__all__ = [
    # the commands (fuzz.commands calls them; fuzz/cli.py parses their flags, and its help names these values):
    # provenance, sources fetch|list (packs), new-target
    "provenance_command", "fetch_packs", "list_packs", "new_target_command",
    "SIDES", "SIDE_VERSIONS", "CACHE_ENV", "SOURCES_ENV",
    # sides: a run's --legacy/--optimized bound to its targets, and what each side is
    "COPY", "PACKAGE", "CannotBuild", "Retired", "bind_sides", "check_side", "identity",
    "SideChange", "side_changes", "side_identities", "side_labels", "side_source", "base_source", "release_version",
    "version_key",
    # what the reach report and the sync rule read: the upstream files, copies matched to them, digests
    "HEADER_RE", "CopyLines", "align", "check_copy", "normalize", "upstream_file", "catalog_paths",
    "release_source", "upstream_files_by_module", "entry_digests", "claimed_digests",
]
