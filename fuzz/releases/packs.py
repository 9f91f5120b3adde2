"""Source packs: the few vllm files the catalog needs, kept offline with their hashes.

A side built from a release (``fuzz run --optimized vllm==0.33.0``) needs only
the ~20 upstream files that the targets and their copies name, about 0.6 MB,
not the 320 MB wheel. ``python -m fuzz sources fetch vllm==X --into DIR``
writes them as ``DIR/vllm-X/vllm/...py`` beside a ``MANIFEST.json`` holding
each file's sha256 and the wheel they came from; a GPU host with no network
then resolves ``vllm==X`` from ``--sources DIR`` (or ``$SYNCFUZZ_SOURCES``).
The packs of the versions the copies come from live in the repository
(``sources/``, Apache-2.0, vLLM's LICENSE beside them), so provenance and the
side builder work offline.

A pack is data: its files are read and hashed, never imported.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import PROJECT_ROOT, default_cache
from fuzz.releases.matching import referenced_paths
from fuzz.releases.sources import (
    Source,
    TreeSource,
    WheelSource,
    cached_wheel,
    fetch_wheel,
    open_source,
    release_version,
    resolved,
)

PACK_FORMAT = "syncfuzz-source-pack/1"
MANIFEST = "MANIFEST.json"
SOURCES_ENV = "SYNCFUZZ_SOURCES"
SHIPPED_PACKS = PROJECT_ROOT / "sources"
COPY_FOLDERS = ("legacy", "optimized")
# vLLM's model registry: its ``_PREVIOUSLY_SUPPORTED_MODELS`` (architecture -> the last release that had it) is
# kept in each pack's manifest, so a retired target can cite vLLM's own word offline (fuzz/releases/retired.py).
REGISTRY = "vllm/model_executor/models/registry.py"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def catalog_paths(targets: Iterable[Any] | None = None, root: Path = PROJECT_ROOT) -> list[str]:
    """Every ``vllm/...py`` file a side build or provenance may read: the files the
    target records name and the ones the copies name in docstrings and ADAPTED marks."""
    if targets is None:
        from fuzz.targets import all_targets

        targets = all_targets().values()
    paths = {ref.partition("::")[0] for target in targets for ref in target.upstream}
    for folder in COPY_FOLDERS:
        for copy in (root / folder).glob("*.py"):
            paths.update(referenced_paths(copy.read_text(encoding="utf-8")))
    return sorted(paths)


class PackSource(TreeSource):
    """A source pack: a tree whose files are checked against its manifest when read."""

    def __init__(self, folder: Path) -> None:
        manifest = read_manifest(folder)
        self.folder = folder
        self.manifest = manifest
        self.hashes: dict[str, str] = manifest["files"]
        super().__init__(folder)
        self.version = manifest["version"]
        self.label = f"source pack {folder}"

    def read_raw(self, path: str) -> str | None:
        if path not in self.hashes:
            return None
        file = self.folder / path
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise UsageError(f"source pack {self.folder} lacks {path} ({exc.strerror}), which its manifest lists; "
                             f"fetch it again: python -m fuzz sources fetch vllm=={self.version} "
                             f"--into {self.folder.parent}") from exc
        if sha256(data) != self.hashes[path]:
            raise UsageError(f"source pack {self.folder}: {path} does not match its manifest's sha256 (edited "
                             f"after it was fetched); fetch it again: python -m fuzz sources fetch "
                             f"vllm=={self.version} --into {self.folder.parent}")
        return data.decode("utf-8")


def read_manifest(folder: Path) -> dict[str, Any]:
    file = folder / MANIFEST
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{folder} is not a source pack: {MANIFEST} cannot be read ({exc.strerror}); "
                         "make one with: python -m fuzz sources fetch vllm==X --into DIR") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file} is not JSON ({exc.msg}, line {exc.lineno}); fetch the pack again") from exc
    files = data.get("files") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("format") != PACK_FORMAT or not isinstance(data.get("version"), str)
            or not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values())):
        raise UsageError(f"{file} is not a {PACK_FORMAT} manifest (format, version and files are required); "
                         "fetch the pack again with python -m fuzz sources fetch")
    return data


def search_folders(search: Sequence[str] = ()) -> list[Path]:
    """Where packs are looked for: ``--sources`` folders, ``$SYNCFUZZ_SOURCES``
    (``os.pathsep``-separated), then the packs shipped in the repository."""
    env = [p for p in os.environ.get(SOURCES_ENV, "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in [*search, *env]] + [SHIPPED_PACKS]


def find_pack(version: str, search: Sequence[str] = ()) -> PackSource | None:
    for folder in search_folders(search):
        candidate = folder / f"vllm-{version}"
        if (candidate / MANIFEST).is_file():
            return PackSource(candidate)
    return None


def release_source(version: str, search: Sequence[str] = (), cache: Path | None = None) -> Source | None:
    """vllm ``version`` from a source pack, else from the wheel cache; None when neither has it."""
    pack = find_pack(version, search)
    if pack is not None:
        return pack
    wheel = cached_wheel(version, cache or default_cache())
    return WheelSource(wheel) if wheel else None


def default_source(version: str, cache: Path, quiet: bool = False, pip_args: Sequence[str] = (),
                   search: Sequence[str] = (), command: str = "provenance") -> Source:
    """Where vllm ``version`` is read from when no flag names a source: its source pack (``search``,
    ``$SYNCFUZZ_SOURCES``, the repo's), else its wheel from the cache, downloaded with pip if missing.

    Packs hold only the vllm files the catalog needs, so provenance and scaffolding run offline from
    the checkout, as ``run --legacy vllm==X`` resolves a release. ``command``: the one asking (it labels a
    download's lines, fuzz.releases.sources.fetch_wheel)."""
    return (release_source(version, search, cache=cache)
            or WheelSource(fetch_wheel(version, cache, quiet=quiet, pip_args=pip_args, command=command)))


def write_pack(source: Source, into: Path, paths: Sequence[str], origin: dict[str, Any]) -> Path:
    """``into/vllm-VERSION/``: ``paths`` read from ``source``, a manifest, vLLM's LICENSE.

    Written beside the target and renamed into place, so an interrupted fetch
    never leaves half a pack, and an existing pack is replaced only whole.
    """
    if not source.version:
        raise UsageError(f"{source.label} records no vllm version (no vllm/_version.py); "
                         "a pack is named by its version: pass a wheel or an installed vllm")
    into.mkdir(parents=True, exist_ok=True)
    final = into / f"vllm-{source.version}"
    files: dict[str, str] = {}
    absent: list[str] = []
    shims: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=into, prefix=".pack-") as tmp:
        staging = Path(tmp) / final.name
        for path in paths:
            found = resolved(source, path)
            if found.raw is None:
                absent.append(path)  # a file a later release moved: the side build says so per target
                continue
            # A compatibility shim is kept as it is, with every module it leads to (fuzz/releases/shims.py),
            # so the pack reads as the tree did: offline, a pack made from vllm main resolves the same.
            chain = [*found.via, found.path] if found.is_shim else [path]
            for hop in chain:
                text = source.read_raw(hop) if hasattr(source, "read_raw") else source.read(hop)
                if text is None or hop in files:
                    continue
                data = text.encode("utf-8")
                (staging / hop).parent.mkdir(parents=True, exist_ok=True)
                (staging / hop).write_bytes(data)
                files[hop] = sha256(data)
            if found.is_shim:
                shims[path] = found.path
        license_text = _license(source)
        if license_text:
            (staging / "LICENSE").write_text(license_text, encoding="utf-8")
        manifest = {"format": PACK_FORMAT, "version": source.version, **origin,
                    "license": "Apache-2.0 (vLLM project; LICENSE beside this file)" if license_text else None,
                    "files": files, "absent": absent, **({"shims": shims} if shims else {})}
        registry = source.read(REGISTRY)
        if registry:
            manifest["previously_supported_models"] = previously_supported_models(registry)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        if final.exists():
            old = Path(tmp) / "old"
            os.replace(final, old)
        os.replace(staging, final)
    return final


def previously_supported_models(text: str) -> dict[str, str]:
    """The registry's ``_PREVIOUSLY_SUPPORTED_MODELS`` literal (architecture -> last release); {} if absent."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "_PREVIOUSLY_SUPPORTED_MODELS" for t in targets) \
                and isinstance(node.value, ast.Dict):
            return {k.value: v.value for k, v in zip(node.value.keys, node.value.values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
                    and isinstance(k.value, str) and isinstance(v.value, str)}
    return {}


def _license(source: Source) -> str | None:
    zipped = getattr(source, "_zip", None)
    if zipped is not None:
        for name in zipped.namelist():
            if name.endswith(".dist-info/licenses/LICENSE") or name.endswith(".dist-info/LICENSE"):
                return zipped.read(name).decode("utf-8")
    root = getattr(source, "root", None)
    if root is not None and (Path(root) / "LICENSE").is_file():
        return (Path(root) / "LICENSE").read_text(encoding="utf-8")
    return None


def wheel_origin(wheel: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with wheel.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"from": wheel.name, "from_sha256": digest.hexdigest()}


# --------------------------------------------------------------------------- the command


def fetch_packs(specs: Sequence[str], *, into: str, cache: str | None = None) -> int:
    """``sources fetch``: a pack of each release (``vllm==X``, a .whl or a vllm tree) written under ``into``
    (``into/vllm-X/``), one line each; the exit code. A ``vllm==X`` missing from the wheel ``cache``
    (default $SYNCFUZZ_WHEEL_CACHE, else ~/.cache/syncfuzz/wheels) is downloaded."""
    from fuzz.reports.preflight import check_cache, check_folder

    # Checked before the first (slow) download: an --into that cannot be written fails only at the end.
    folder_into = check_folder("--into", into)
    cache_dir = check_cache(cache, default_cache)
    # Every spec is checked before the first (slow) download.
    wanted = [(spec, release_version(spec)) for spec in specs]
    for spec, version in wanted:
        if version is None:
            open_source(spec, "sources fetch")
    paths = catalog_paths()
    for spec, version in wanted:
        if version is not None:
            wheel = fetch_wheel(version, cache_dir, command="sources")
            source, origin = WheelSource(wheel), wheel_origin(wheel)
        else:
            source = open_source(spec, "sources fetch")
            origin = wheel_origin(Path(spec)) if spec.endswith(".whl") else {"from": str(Path(spec).resolve())}
        folder = write_pack(source, folder_into, paths, origin)
        manifest = read_manifest(folder)
        size = sum((folder / path).stat().st_size for path in manifest["files"])
        absent = f", {len(manifest['absent'])} absent in this release" if manifest["absent"] else ""
        shims = manifest.get("shims") or {}
        shimmed = f", {len(shims)} compatibility shims with the modules they point to" if shims else ""
        print(f"[sources] {folder}: {len(manifest['files'])} files, {size / 1e6:.2f} MB{absent}{shimmed}")
    return 0


def list_packs(search: Sequence[str] = (), *, newest: bool = False) -> int:
    """``sources list``: the packs found (in ``search``, $SYNCFUZZ_SOURCES and sources/) and whether their
    files match their manifests; with ``newest``, only ``vllm==X`` of the newest. The exit code."""
    return _newest(search) if newest else _list(search)


def _check_search(search: Sequence[str]) -> None:
    for folder in search:  # a misspelt folder would list only the other packs, silently
        if not folder.strip() or not Path(folder).expanduser().is_dir():
            raise UsageError(f"--sources {folder!r} is not a directory; pass the --into folder of "
                             "python -m fuzz sources fetch")


def _newest(search: Sequence[str]) -> int:
    """``vllm==X`` of the newest pack found (versions compared as numbers), on a line of its own."""
    from fuzz.releases.common import version_key

    _check_search(search)
    versions = [read_manifest(pack)["version"] for folder in search_folders(search) if folder.is_dir()
                for pack in folder.glob("vllm-*") if (pack / MANIFEST).is_file()]
    if not versions:
        raise UsageError("no source packs found; make one with: python -m fuzz sources fetch vllm==X --into DIR")
    print(f"vllm=={max(versions, key=version_key)}")
    return 0


def _list(search: Sequence[str]) -> int:
    _check_search(search)
    found = 0
    for folder in search_folders(search):
        for pack in sorted(folder.glob("vllm-*")) if folder.is_dir() else []:
            if not (pack / MANIFEST).is_file():
                continue
            found += 1
            source = PackSource(pack)
            bad = []
            for path in source.hashes:
                try:
                    source.read(path)
                except UsageError:
                    bad.append(path)
            state = f"{len(bad)} files changed or missing" if bad else "files match the manifest"
            print(f"vllm {source.version}  {pack}  {len(source.hashes)} files, {state}")
    if not found:
        print("no source packs found; make one with: python -m fuzz sources fetch vllm==X --into DIR")
    return 0

