"""Either side of a run from any upstream source: ``--legacy SIDE --optimized SIDE``.

SIDE is ``copy`` (the frozen copy under ``legacy/`` or ``optimized/``),
``vllm==X.Y.Z`` (a release, from a source pack or the wheel cache:
fuzz/releases/packs.py) or a PATH (a vllm checkout, an unpacked wheel, a ``.whl``).
A side from a source is the copy package nearest to that source's version
(the *template*: ``optimized/`` for 0.28.0 and later or an unversioned
checkout, ``legacy/`` before), rebuilt module by module from the source
(fuzz/releases/sidebuild.py) and imported under its own package name, so both roles
can come from sources at once. A target whose code cannot be rebuilt from
that source is ``cannot-build`` for the run, with the reason.

Every process of a run (the isolated worker, each xdist worker, confirm
replays, ``replay``) rebuilds the same sides from the ``RunConfig``; the
side's identity (release version or checkout path, git commit and the hash
of the files read) goes into reports and repro files; ``replay`` names a
source that has changed since (``replay --strict`` refuses it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.abc
import importlib.machinery
import inspect
import json
import linecache
import os
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from fuzz.config import COPY
from fuzz.errors import UsageError
from fuzz.releases.common import side_version, version_key
from fuzz.releases.packs import SHIPPED_PACKS, catalog_paths, release_source
from fuzz.releases.retired import Retirement, retirement
from fuzz.releases.sidebuild import ModuleBuild, build_module, reach
from fuzz.releases.sources import Source, open_source, release_version, resolved
from fuzz.releases.verify import upstream_files_by_module
from fuzz.targets import FORM_ATTRIBUTE, RELEASE_ATTRIBUTE, Target
from fuzz.versions import DEFAULT_PAIR

ROLES = ("legacy", "optimized")
PACKAGE = "syncfuzz_sides"


class CannotBuild(Exception):
    """A target whose code cannot be rebuilt from a side's source (the reason is the message)."""


class Retired(CannotBuild):
    """A side's release removed the upstream definitions the target is about (fuzz/releases/retired.py):
    nothing to build, and nothing broken. A CannotBuild, so whatever only needs "no callable" (replay) says
    why; the run records it as its own state."""

    def __init__(self, found: Retirement) -> None:
        super().__init__(str(found))
        self.retirement = found


def check_side(spec: str, flag: str, search: Sequence[str] = ()) -> str:
    """``spec`` as a RunConfig keeps it (a path made absolute), or a UsageError
    naming the problem and the fix -- before any work is done."""
    if spec == COPY:
        return spec
    if not spec.strip():  # Path("") is the current folder
        raise UsageError(f"{flag} is empty; pass copy, vllm==X.Y.Z or a path (a vllm checkout or a .whl)")
    version = release_version(spec)
    if version is not None:
        side_source(f"vllm=={version}", search, flag)
        return f"vllm=={version}"
    path = Path(spec).expanduser()
    if not path.exists():
        raise UsageError(f"{flag} {spec!r} is not copy, vllm==X.Y.Z or an existing path; pass one of those "
                         "(a path is a vllm checkout, an unpacked wheel or a .whl)")
    open_source(str(path), flag)  # the same checks as provenance: a wheel, or a folder holding vllm/
    return str(path.resolve())


@dataclass(frozen=True)
class SideSource:
    """A resolved side: where its upstream text comes from, and who it is."""

    spec: str
    source: Source
    identity: dict[str, Any]

    @property
    def version(self) -> str | None:
        return self.source.version


_SOURCES: dict[tuple[str, tuple[str, ...]], SideSource] = {}


def side_source(spec: str, search: Sequence[str] = (), flag: str = "side") -> SideSource:
    """The source a side spec names, opened once per process (``flag`` names it in errors)."""
    key = (spec, tuple(search))
    if key not in _SOURCES:
        version = release_version(spec)
        source = release_source(version, search) if version else open_source(spec, flag)
        if source is None:
            shipped = ", ".join(p.name for p in sorted(SHIPPED_PACKS.glob("vllm-*"))) or "none"
            raise UsageError(
                f"{flag} vllm=={version}: no source pack or cached wheel for that release; fetch one (network "
                f"needed once): python -m fuzz sources fetch vllm=={version} --into DIR, then pass --sources DIR "
                f"(packs shipped here: {shipped})")
        _SOURCES[key] = SideSource(spec, source, _identity(spec, source))
    return _SOURCES[key]


def _identity(spec: str, source: Source) -> dict[str, Any]:
    """The side's name, version, where it was read and a sha256 per catalog file
    (``None``: absent), so replay can name the file that changed.

    A catalog path that is a compatibility shim (fuzz/releases/shims.py) is hashed by the text of the
    module it resolves to, so a change there is seen; ``shims`` names both paths (catalog path -> the
    file read), and ``shim_problems`` why one could not be followed (then the shim's own text is hashed)."""
    files: dict[str, str | None] = {}
    shims: dict[str, str] = {}
    problems: dict[str, str] = {}
    for path in catalog_paths():
        found = resolved(source, path)
        text = found.text if found.text is not None else found.raw
        files[path] = hashlib.sha256(text.encode()).hexdigest()[:16] if text is not None else None
        if found.is_shim:
            shims[path] = found.path
        if found.problem:
            problems[path] = found.problem
    hashed: dict[str, Any] = dict(files)
    if shims:  # only then: the digest of a tree without shims is what it always was
        hashed["<shims>"] = shims
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:16]
    identity: dict[str, Any] = {"side": spec, "kind": "release" if release_version(spec) else "path",
                                "version": source.version, "from": source.label,
                                "files_sha256": digest, "files": files}
    if shims:
        identity["shims"] = shims
    if problems:
        identity["shim_problems"] = problems
    if identity["kind"] == "path":
        identity["git_commit"] = _git_commit(Path(spec))
    return identity


def _git_commit(path: Path) -> str | None:
    folder = path if path.is_dir() else path.parent
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def identity(spec: str, search: Sequence[str] = ()) -> dict[str, Any]:
    """What a side is, for reports and repro files."""
    if spec == COPY:
        from fuzz.versions import code_tree

        return {"side": COPY, "kind": "copy", "code_sha256": code_tree()["code_sha256"]}
    return dict(side_source(spec, search).identity)


def template_for(version: str | None, target: Target) -> str:
    """The copy a source's side is rebuilt from: the nearest by version."""
    optimized = side_version(target.versions, "optimized")
    return "legacy" if version and version_key(version) < version_key(optimized) else "optimized"


# --------------------------------------------------------------------------- built packages


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the rebuilt modules of every built package from memory."""

    def __init__(self) -> None:
        self.packages: dict[str, _Package] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == PACKAGE or fullname in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        parent, _, _ = fullname.rpartition(".")
        if parent in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, origin=self.packages[parent].filename(fullname))
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        if name == PACKAGE or name in self.packages:
            module.__path__ = []  # type: ignore[attr-defined]
            return
        package = self.packages[name.rpartition(".")[0]]
        build = package.module(name.rpartition(".")[2])
        if build.error:
            raise ImportError(build.error)
        filename = written_text(package.name, name, build.text)
        lines = build.text.splitlines(keepends=True)
        linecache.cache[filename] = (len(build.text), None, lines, filename)  # tracebacks, inspect.getsource
        module.__file__ = filename
        setattr(module, FORM_ATTRIBUTE, package.template)
        setattr(module, RELEASE_ATTRIBUTE, package.side.version)
        exec(compile(build.text, filename, "exec"), module.__dict__)  # noqa: S102 -- the rebuilt copy


_FINDER = _Finder()
SIDE_FILES_ENV = "SYNCFUZZ_SIDE_FILES"


def side_files_folder() -> Path:
    """Where rebuilt modules are written: ``$SYNCFUZZ_SIDE_FILES``, else ``syncfuzz-sides`` in the temp folder."""
    return Path(os.environ.get(SIDE_FILES_ENV) or Path(tempfile.gettempdir()) / "syncfuzz-sides")


def written_text(package: str, name: str, text: str) -> str:
    """The rebuilt module's text as a real file, named by its content, so that coverage.py (which skips
    ``<...>`` names), debuggers and ``fuzz coverage`` can read what ran (docs/reach.md). Every process of
    a run writes the same bytes to the same name; the rename makes it whole for a reader at any moment."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    file = side_files_folder() / package.rpartition(".")[2] / f"{name.rpartition('.')[2]}-{digest}.py"
    if not file.is_file():
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_name(f".{file.name}.{os.getpid()}")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, file)
    return str(file)


class _Package:
    """One template copy package rebuilt from one source."""

    def __init__(self, side: SideSource, template: str, search: Sequence[str]) -> None:
        self.side = side
        self.template = template
        self.search = tuple(search)
        key = hashlib.sha256(f"{side.identity['files_sha256']}|{side.spec}|{template}".encode()).hexdigest()[:12]
        self.name = f"{PACKAGE}.{template}_{key}"
        self.builds: dict[str, ModuleBuild] = {}

    def filename(self, fullname: str) -> str:
        return f"<{self.template}/{fullname.rpartition('.')[2]}.py from {self.side.spec}>"

    def module(self, name: str) -> ModuleBuild:
        if name not in self.builds:
            self.builds[name] = self._build(name)
        return self.builds[name]

    def _build(self, name: str) -> ModuleBuild:
        from fuzz.targets import all_targets

        targets = list(all_targets().values())
        users = [t for t in targets if getattr(t, self.template).partition(":")[0] == f"{self.template}.{name}"]
        base_version = side_version(users[0].versions if users else DEFAULT_PAIR, self.template)
        base = base_source(base_version, self.search)
        if base is None:
            return ModuleBuild(name, error=f"no source for vllm=={base_version}, which {self.template}/{name}.py "
                                           "was copied from (the base of the merge); fetch its pack")
        named = upstream_files_by_module(targets).get(name, [])
        # A file the targets name must be in the base: without it nothing of the copy maps
        # to upstream, and the copy's text would run unnoticed as if it were the source's.
        lacking = [path for path in named if base.read(path) is None]
        if lacking:
            return ModuleBuild(name, error=f"the vllm {base_version} source (the base of the merge) has no "
                                           f"{lacking[0]}; fetch its pack again: python -m fuzz sources fetch "
                                           f"vllm=={base_version} --into DIR")
        paths = list(dict.fromkeys([*named, *catalog_paths()]))
        try:
            return build_module(name, self.template, base, self.side.source, paths, self.name)
        except (SyntaxError, ValueError, UsageError) as exc:
            return ModuleBuild(name, error=f"{self.template}/{name}.py cannot be rebuilt from "
                                           f"{self.side.spec}: {exc}")


_BASES: dict[tuple[str, tuple[str, ...]], Source | None] = {}


def base_source(version: str, search: Sequence[str]) -> Source | None:
    """The release a copy was taken from, opened once per process (its parsed files are cached on it)."""
    key = (version, tuple(search))
    if key not in _BASES:
        _BASES[key] = release_source(version, search)
    return _BASES[key]


_PACKAGES: dict[tuple[str, str, tuple[str, ...]], _Package] = {}


def _package(side: SideSource, template: str, search: Sequence[str]) -> _Package:
    key = (side.spec, template, tuple(search))
    if key not in _PACKAGES:
        package = _Package(side, template, search)
        _PACKAGES[key] = package
        _FINDER.packages[package.name] = package
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    return _PACKAGES[key]


# --------------------------------------------------------------------------- binding targets to sides


def bind_sides(target: Target, config: Any) -> Target:
    """``bind`` with the sides a RunConfig names (every process of a run calls this)."""
    return bind(target, config.legacy, config.optimized, config.sources)


def side_labels(config: Any) -> dict[str, str]:
    """``versions()``'s legacy/optimized labels for the roles that run a source, not a copy."""
    return {role: getattr(config, role) for role in ROLES if getattr(config, role) != COPY}


def side_identities(config: Any) -> dict[str, dict[str, Any]]:
    """Each role's identity, for reports and repro files."""
    return {role: identity(getattr(config, role), config.sources) for role in ROLES}


@dataclass(frozen=True)
class SideChange:
    """A side whose catalog files are not what a repro file recorded: ``files`` holds (path, sha256 then,
    sha256 now) for each file that differs (``None``: absent)."""

    role: str
    spec: str
    files: tuple[tuple[str, str | None, str | None], ...]
    commit_then: str | None = None

    def refusal(self, where: str) -> str:
        """``replay --strict``'s one line: the first changed file, and how to replay it."""
        commit = f" (saved at git commit {self.commit_then})" if self.commit_then else ""
        more = f" and {len(self.files) - 1} more" if len(self.files) > 1 else ""
        return (f"{where}: its {self.role} side {self.spec} has changed since the failure was saved{commit}: "
                f"{self.files[0][0]}{more}; restore that source to replay it as saved, or drop --strict to replay "
                "it on the source as it is now")

    def hashes(self, shown: int = 3) -> str:
        """The files that changed with their short hashes, then and now: ``a.py 1a2b3c4d -> 5e6f7a8b``."""
        def short(digest: str | None) -> str:
            return digest[:8] if digest else "absent"

        listed = [f"{path} {short(then)} -> {short(now)}" for path, then, now in self.files[:shown]]
        more = f" and {len(self.files) - shown} more file(s)" if len(self.files) > shown else ""
        return ", ".join(listed) + more


def side_changes(payload: dict, config: Any, where: str) -> list[SideChange]:
    """Each side the repro names that is no longer the code it was when the failure was saved (its files
    hash differently). A side that cannot be found here is a UsageError: there is nothing to replay on."""
    recorded = payload.get("sides") or {}
    changes = []
    for role in ROLES:
        spec = getattr(config, role)
        if spec == COPY:
            continue
        then = recorded.get(role) or {}
        try:
            now = identity(spec, config.sources)
        except UsageError as exc:
            raise UsageError(f"{where}: its {role} side {spec} cannot be found here ({exc}); replay it where "
                             "that source is, or fetch its pack and pass the folder in $SYNCFUZZ_SOURCES") from exc
        before, after = then.get("files") or {}, now["files"]
        changed = sorted(path for path in set(before) & set(after) if before[path] != after[path])
        if changed:
            changes.append(SideChange(role, spec, tuple((path, before[path], after[path]) for path in changed),
                                      then.get("git_commit")))
    return changes


def bind(target: Target, legacy: str = COPY, optimized: str = COPY, search: Sequence[str] = ()) -> Target:
    """``target`` with each role's callable taken from its side; CannotBuild with the reason."""
    for role, spec in zip(ROLES, (legacy, optimized)):
        if spec != COPY:
            gone = _retirement(target, role, spec, search)
            if gone is not None:
                raise Retired(gone)
    paths = {}
    for role, spec in zip(ROLES, (legacy, optimized)):
        if spec != COPY:
            paths[role] = _built_path(target, role, spec, search)
    return dataclasses.replace(target, **paths) if paths else target


_RETIRED: dict[tuple[tuple[str, ...], str, str, tuple[str, ...]], Retirement | None] = {}


def _retirement(target: Target, role: str, spec: str, search: Sequence[str]) -> Retirement | None:
    """Whether ``spec``'s source removed every file of the target's claimed definitions (once per process)."""
    key = (tuple(target.upstream), role, spec, tuple(search))
    if key not in _RETIRED:
        side = side_source(spec, search)
        base = base_source(side_version(target.versions, template_for(side.version, target)), search)
        _RETIRED[key] = retirement(target.upstream, role, spec, side.source, side.identity["kind"], search, base)
    return _RETIRED[key]


def _built_path(target: Target, role: str, spec: str, search: Sequence[str]) -> str:
    side = side_source(spec, search)
    template = template_for(side.version, target)
    copy_path = getattr(target, template)
    module_name, _, qualname = copy_path.partition(":")
    if module_name.split(".")[0] != template:
        raise CannotBuild(f"{role} {spec}: {copy_path} is not a module of {template}/ (a mutant or plug-in "
                          "copy); only the copies under legacy/ and optimized/ can be rebuilt")
    short = module_name.split(".", 1)[1]
    package = _package(side, template, search)
    build = package.module(short)
    where = f"{role} {spec} ({template}/{short}.py rebuilt)"
    if build.error:
        raise CannotBuild(f"{where}: {build.error}")
    problem = unbuilt(build, qualname, [ref.partition("::")[2] for ref in target.upstream])
    if problem:
        raise CannotBuild(f"{where}: {problem}")
    path = f"{package.name}.{short}:{qualname}"
    try:
        built = dataclasses.replace(target, **{role: path}).impl(role).function
    except Exception as exc:  # noqa: BLE001 -- the rebuilt module failed to import: that is the reason
        raise CannotBuild(f"{where}: importing it fails: {type(exc).__name__}: {exc}") from exc
    # An input model may say a rebuilt side takes a form it cannot hand it: an optional
    # ``fits(impl) -> None | reason`` (strategies/paddleocr_vl/inputs.py's encode_image grids). One that calls
    # each release its own way (strategies/diffusion_gemma/inputs.py's sampler: 0.34.0 renamed ``logits`` to
    # ``hidden_states``) sets ``fits_checks_signature = True``: its fits() then judges the signature too.
    model = target.input_model()
    if not getattr(model, "fits_checks_signature", False):
        _check_signature(target, template, built, where)
    fits = getattr(model, "fits", None)
    problem = fits(dataclasses.replace(target, **{role: path}).impl(role)) if fits else None
    if problem:
        raise CannotBuild(f"{where}: the input model does not fit {side.version or spec}: {problem}")
    return path


def unbuilt(build: ModuleBuild, entry: str, claimed: Sequence[str] = ()) -> str | None:
    """Why a call of ``entry`` cannot run on the rebuilt module (one line), or None: the entry point is a
    definition the release does not have, or what a call of it may run -- and of every definition the
    target claims: an input model may call a claimed hook directly (ernie's CUDA-graph capture and replay
    methods) -- failed to rebuild. A definition the release lacks is not in the module (``build.removed``):
    only what still needs it fails (fuzz/releases/sidebuild.py ``_still_needed``), never its absence."""
    if entry in build.removed:
        return build.removed[entry]
    needed = reach(build.text, entry)
    for name in claimed:
        needed |= reach(build.text, name)
    failed = [reason for name, reason in build.failed.items() if name in needed]
    if not failed:
        return None
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{failed[0]}{more}"


def _check_signature(target: Target, template: str, built: Any, where: str) -> None:
    """The harness calls the function as the copy is called: a new required
    parameter or a removed one means the target's input model no longer fits."""
    copy = target.impl(template).function
    try:
        old, new = inspect.signature(copy), inspect.signature(built)
    except (TypeError, ValueError):
        return
    old_names = [p.name for p in old.parameters.values()]
    new_required = [p.name for p in new.parameters.values()
                    if p.default is inspect.Parameter.empty and p.name not in old_names
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    gone = [name for name in old_names if name not in new.parameters]
    if new_required or gone:
        raise CannotBuild(f"{where}: the signature changed from {old} to {new}; the input model passes the "
                          "copy's parameters (update the copy and its input model)")

