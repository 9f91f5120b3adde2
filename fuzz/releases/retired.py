"""Retired targets: a side whose release removed the upstream definitions a target is about.

vLLM removes models: ``keye.py`` is gone from 0.34.0, and 0.34.0's model registry lists
``KeyeForConditionalGeneration`` in ``_PREVIOUSLY_SUPPORTED_MODELS`` with "0.33.0", the last release
that had it. A target about such a model has nothing to compare against that side. It is not broken
(``cannot-build`` is for what the project could build and does not), and it is not "agree": it is
**retired**, a state of its own, counted apart in the ``result:`` line, and it does not by itself make
the run incomplete (docs/sides.md#retired-targets).

The rule: a target is retired on a side when **every** upstream file its claimed definitions
(``Target.upstream``) live in is absent from that side, and no other file the side holds defines more
than half of those definitions' top-level names (the class or function). A definition that moved or was
renamed is not retired: a moved module behind a compatibility shim is followed (docs/sides.md), and
anything else is ``cannot-build`` with its reason.

Where it is known from: the release that removed the file is the first source pack (in version order,
up to the side's own version) that records it as absent after the last one that holds it; the pack's
manifest says so (``absent``), and where the side carries vLLM's model registry
(``previously_supported_models`` in a pack's manifest, or ``registry.py`` in a tree or wheel), the
architectures it lists as previously supported whose classes were defined in the removed file are named.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.records.model import retired_label
from fuzz.releases.common import PROJECT_ROOT, version_key
from fuzz.releases.packs import (
    MANIFEST,
    REGISTRY,
    PackSource,
    catalog_paths,
    previously_supported_models,
    search_folders,
)
from fuzz.releases.sources import resolved

# A tree or a wheel may have moved a definition anywhere under vllm/: looked for in every file there
# (only on this path: a target whose files are all gone, so the cost is paid for retired targets alone).
_DEFINITION = "^(?:class|def|async def)\\s+{name}\\b"


@dataclass(frozen=True)
class Retirement:
    """Why a target has nothing to compare on one side: the files gone, the release that removed them,
    and the evidence."""

    side: str  # "optimized vllm==0.34.0"
    release: str | None  # the release that removed the files; None: only this checkout lacks them
    files: tuple[str, ...]
    known_from: str

    @property
    def label(self) -> str:
        """What the verdict column says: ``retired in 0.34.0`` (or ``retired in this checkout``)."""
        return retired_label(self.release)

    def to_json(self) -> dict[str, Any]:
        return {"side": self.side, "release": self.release, "files": list(self.files),
                "known_from": self.known_from}

    def __str__(self) -> str:
        return f"{self.side}: {self.label}: {', '.join(self.files)} absent; {self.known_from}"


def claimed_files(upstream: Iterable[str]) -> dict[str, list[str]]:
    """The upstream files of a target's claimed definitions, each with the top-level names defined there."""
    files: dict[str, list[str]] = {}
    for ref in upstream:
        path, _, qualname = ref.partition("::")
        names = files.setdefault(path, [])
        top = qualname.split(".")[0]
        if top and top not in names:
            names.append(top)
    return files


def retirement(upstream: Sequence[str], role: str, spec: str, source: Any, kind: str,
               search: Sequence[str] = (), base: Any = None) -> Retirement | None:
    """The retirement of a target claiming ``upstream`` on a side (``source``, read as ``spec``), or None.

    ``kind`` is the side's identity kind (``release`` or ``path``); ``base`` the source its copy was taken
    from (the removed file's classes are read there, to match the registry's names)."""
    files = claimed_files(upstream)
    # A file that is there is not retired, whatever it reads as: a shim whose module is missing is a broken
    # move (cannot-build, naming both paths), not a removal.
    if not files or any(resolved(source, path).raw is not None for path in files):
        return None
    names = [name for found in files.values() for name in found]
    if _defined_elsewhere(source, names, set(files)):
        return None
    version = getattr(source, "version", None)
    removed, last_with, pack = _removal(list(files), version, search)
    if removed is None and kind == "release":
        removed = version
    evidence = [_pack_evidence(list(files), removed, last_with, pack, version, spec)]
    registry = _registry_evidence(source, base, list(files))
    if registry:
        evidence.append(registry)
    return Retirement(f"{role} {spec}", removed, tuple(files), "; ".join(evidence))


def _defined_elsewhere(source: Any, names: Sequence[str], gone: set[str]) -> bool:
    """Whether the claimed definitions moved: one other file the side holds defines more than half of their
    top-level ``names``. A single shared name is no move: keye's ``Projector`` has a namesake in
    paddleocr_vl.py, and the rest of keye.py is gone."""
    patterns = [re.compile(_DEFINITION.format(name=re.escape(name)), re.MULTILINE) for name in names]
    for text in _texts(source, gone):
        if 2 * sum(1 for pattern in patterns if pattern.search(text)) > len(patterns):
            return True
    return False


def _texts(source: Any, gone: set[str]) -> Iterable[str]:
    """Every ``vllm/...py`` text the side can show: all of a tree's or a wheel's, a pack's catalog files."""
    root = getattr(source, "root", None)
    zipped = getattr(source, "_zip", None)
    if isinstance(source, PackSource) or (root is None and zipped is None):
        paths: Iterable[str] = catalog_paths()
    elif zipped is not None:
        paths = [n for n in zipped.namelist() if n.startswith("vllm/") and n.endswith(".py")]
    else:
        paths = [str(p.relative_to(root)) for p in (Path(root) / "vllm").rglob("*.py")]
    for path in paths:
        if path in gone:
            continue
        try:
            text = source.read(path)
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            yield text


def _packs(search: Sequence[str]) -> list[PackSource]:
    """Every source pack the run can see, one per version, in version order."""
    found: dict[str, PackSource] = {}
    for folder in search_folders(search):
        for pack in sorted(folder.glob("vllm-*")) if folder.is_dir() else []:
            if (pack / MANIFEST).is_file():
                source = PackSource(pack)
                found.setdefault(source.version, source)
    return [found[v] for v in sorted(found, key=version_key)]


def _removal(files: list[str], version: str | None,
             search: Sequence[str]) -> tuple[str | None, str | None, PackSource | None]:
    """(the release that removed ``files``, the last release holding them, the pack saying it was removed),
    from the packs up to ``version`` (every pack when the side has no version)."""
    packs = [p for p in _packs(search) if version is None or version_key(p.version) <= version_key(version)]
    held = [p for p in packs if any(path in p.hashes for path in files)]
    last_with = held[-1].version if held else None
    for pack in packs:
        after = last_with is None or version_key(pack.version) > version_key(last_with)
        if after and all(path in pack.manifest.get("absent", []) for path in files):
            return pack.version, last_with, pack
    return None, last_with, None


def _pack_evidence(files: list[str], removed: str | None, last_with: str | None, pack: PackSource | None,
                   version: str | None, spec: str) -> str:
    gone = ", ".join(files)
    had = f"; vllm {last_with} has {'them' if len(files) > 1 else 'it'}" if last_with else ""
    if pack is not None:
        manifest = _shown(pack.folder / MANIFEST)
        return f"known from the source pack of vllm {removed} ({manifest} lists {gone} as absent{had})"
    if removed is not None:
        return f"known from vllm {removed} itself ({gone} is not in it{had})"
    return f"known from {spec} ({gone} is not in it, and no release's pack records it as removed{had})"


def _registry_evidence(source: Any, base: Any, files: list[str]) -> str | None:
    """vLLM's own word: the registry's previously supported architectures whose classes the removed
    files defined (read from the base release, where they still are)."""
    listed = _previously_supported(source)
    if not listed or base is None:
        return None
    classes: list[str] = []
    for path in files:
        text = base.read(path)
        if text:
            tree = ast.parse(text)
            classes += [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    named = {name: listed[name] for name in classes if name in listed}
    if not named:
        return None
    by_release: dict[str, list[str]] = {}
    for name, last in named.items():
        by_release.setdefault(last, []).append(name)
    said = "; ".join(f"{', '.join(names)} as last supported in {last}" for last, names in sorted(by_release.items()))
    where = getattr(source, "version", None) or getattr(source, "label", "this side")
    return f"vLLM's model registry (_PREVIOUSLY_SUPPORTED_MODELS in {where}) lists {said}"


def _previously_supported(source: Any) -> Mapping[str, str]:
    if isinstance(source, PackSource):
        return source.manifest.get("previously_supported_models") or {}
    try:
        text = source.read(REGISTRY)
    except (OSError, UnicodeDecodeError):
        return {}
    return previously_supported_models(text) if text else {}


def _shown(path: Path) -> str:
    """A shipped pack's path as the checkout names it (``sources/vllm-0.34.0/...``); others as given."""
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)
