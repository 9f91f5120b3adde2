"""Where upstream text comes from: wheels (downloaded once into a cache), trees, installed vllm."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import (
    INSTALLED,
)
from fuzz.releases.shims import Resolved, resolve

# --------------------------------------------------------------------------- sources


class Source(Protocol):
    """A vllm source tree: a wheel, a checkout or site-packages."""

    label: str
    version: str | None

    def read(self, path: str) -> str | None:
        """The text of ``vllm/...py``, or None when the file is not there. A compatibility shim at
        ``path`` (fuzz/releases/shims.py) reads as the module it points to."""


class ShimReading:
    """What every source shares: ``read`` follows compatibility shims, ``read_raw`` does not.

    One place resolves them, so the side builder, the change list, provenance, reach, replay's
    file hashes and ``sources fetch`` all see the same text for a catalog path."""

    def read_raw(self, path: str) -> str | None:  # pragma: no cover -- every source defines it
        raise NotImplementedError

    def resolve(self, path: str) -> Resolved:
        """``path`` followed through shims: the text used, the file it came from, the shims passed."""
        return resolve(self.read_raw, path)

    def read(self, path: str) -> str | None:
        return self.resolve(path).text


def resolved(source: Source, path: str) -> Resolved:
    """``source.resolve(path)`` for any source; one without shim reading (a test's) is read as it is."""
    method = getattr(source, "resolve", None)
    if method is not None:
        return method(path)
    text = source.read(path)
    return Resolved(path, path, text, raw=text)


class WheelSource(ShimReading):
    """Files read straight out of a wheel: no unpacking, no import."""

    def __init__(self, wheel: Path) -> None:
        try:
            self._zip = zipfile.ZipFile(wheel)
        except (OSError, zipfile.BadZipFile) as exc:
            raise UsageError(f"{wheel} is not a readable wheel ({exc}); pass a vllm .whl file") from exc
        self.label = str(wheel)
        self._texts: dict[str, str | None] = {}
        self.version = _version_from_wheel_name(wheel.name) or _version_from_text(self.read_raw("vllm/_version.py"))

    def read_raw(self, path: str) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = self._zip.read(path).decode("utf-8")
            except KeyError:
                self._texts[path] = None
        return self._texts[path]


class TreeSource(ShimReading):
    """Files under a directory that holds the ``vllm/`` package."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.label = str(root)
        self.version = _version_from_text(self.read_raw("vllm/_version.py"))

    def read_raw(self, path: str) -> str | None:
        file = self.root / path
        return file.read_text(encoding="utf-8") if file.is_file() else None


class TextSource(ShimReading):
    """In-memory files (tests, planted edits)."""

    def __init__(self, files: Mapping[str, str], version: str | None = None, label: str = "<memory>") -> None:
        self.files = dict(files)
        self.version = version
        self.label = label

    def read_raw(self, path: str) -> str | None:
        return self.files.get(path)


def _version_from_wheel_name(name: str) -> str | None:
    match = re.match(r"vllm-([^-]+)-", name)
    return match.group(1) if match else None


def _version_from_text(text: str | None) -> str | None:
    match = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text or "")
    return match.group(1) if match else None


def open_source(spec: str, flag: str) -> Source:
    """A ``.whl``, a directory holding ``vllm/``, or ``installed`` (``flag`` names the option in errors)."""
    if spec == INSTALLED:
        return _installed_source(flag)
    path = Path(spec).expanduser()
    if not path.exists():
        raise UsageError(f"{flag} {spec!r} does not exist; pass a vllm .whl file or a directory holding vllm/")
    if path.is_file():
        if path.suffix != ".whl":
            raise UsageError(f"{flag} {spec!r} is not a .whl file; pass a vllm wheel or a directory holding vllm/")
        return WheelSource(path)
    if (path / "vllm").is_dir():
        return TreeSource(path)
    if path.name == "vllm" and (path / "__init__.py").is_file():
        return TreeSource(path.parent)  # the package itself was given: its parent holds vllm/
    raise UsageError(f"{flag} {spec!r} has no vllm/ package inside; pass a source checkout, site-packages or a .whl")


def _installed_source(flag: str) -> Source:
    """The vllm this interpreter would import, located without importing it."""
    import importlib.util

    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        raise UsageError(f"{flag} installed: no vllm package is installed for {sys.executable}; "
                         f"pass a .whl or a directory holding vllm/ instead")
    return TreeSource(Path(list(found.submodule_search_locations)[0]).parent)


def cached_wheel(version: str, cache: Path) -> Path | None:
    found = sorted(cache.glob(f"vllm-{version}-*.whl")) if cache.is_dir() else []
    return found[0] if found else None


# Each command that may download a wheel: how its user names a local source instead (the download's
# lines are labelled by the command, so a user of one is not told about another's flags).
LOCAL_INSTEAD = {"provenance": "--legacy-source/--optimized-source/--against PATH",
                 "new-target": "--legacy-source/--optimized-source PATH",
                 "sources": "sources fetch PATH, a .whl or a directory holding vllm/"}


def fetch_wheel(version: str, cache: Path, quiet: bool = False, pip_args: Sequence[str] = (),
                command: str = "provenance") -> Path:
    """The vllm ``version`` wheel from the cache, downloaded with pip if missing; ``command`` (a key of
    LOCAL_INSTEAD) is the one downloading, which labels its lines.

    pip writes into a private temporary folder first and the wheel is moved
    into the cache only when complete, so an interrupted download or a second
    process downloading at the same time never leaves a truncated wheel behind.
    """
    if cache.exists() and not cache.is_dir():
        raise UsageError(f"--cache {str(cache)!r} is a file; pass a directory (it is created if missing)")
    wheel = cached_wheel(version, cache)
    if wheel:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"[{command}] downloading vllm=={version} (~320 MB) into {cache}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--progress-bar", "off", *pip_args, f"vllm=={version}", "-d", tmp]
        done = subprocess.run(pip, capture_output=True, text=True)
        got = sorted(Path(tmp).glob("vllm-*.whl"))
        if done.returncode != 0 or not got:
            raise UsageError(f"could not download vllm=={version} with pip ({_last_error_line(done)}); "
                             f"check network access to the package registry, or pass a local wheel or checkout "
                             f"({LOCAL_INSTEAD[command]})")
        target = cache / got[0].name
        os.replace(got[0], target)
    return target


def _last_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [f"exit {done.returncode}"])[-1]


def release_version(spec: str) -> str | None:
    """The X of ``vllm==X`` (spaces allowed); None for anything else (a path)."""
    match = re.fullmatch(r"\s*vllm\s*==\s*([\w.+!-]+)\s*", spec)
    return match.group(1) if match else None
