"""Every path a command will write, checked before the first example.

A run that finds a divergence after an hour and then cannot write its report
has wasted the hour: so the corpus and every output file are tried for
writing up front (a real file created and removed in the target folder: a
read-only mount, a folder under a regular file, ``/proc`` all fail here), and
each problem is one ``UsageError`` line naming the path and the fix. If
writing still fails at the end (the disk filled up meanwhile), ``write_or_fall
back`` saves the output elsewhere and says where, so no result is lost.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from fuzz.errors import UsageError


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


def _probe(folder: Path) -> None:
    """Create and remove a file in ``folder``; OSError if that cannot be done."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".syncfuzz-probe-")
    os.close(fd)
    os.unlink(name)


def _blocked_by_file(path: Path) -> Path | None:
    """The regular file standing where a folder of ``path`` must be, if any."""
    for parent in [path, *path.parents]:
        if parent.exists():
            return parent if not parent.is_dir() else None
    return None


def check_output(flag: str, value: str) -> Path:
    """``--report`` / ``--markdown`` / ``--junit`` / ``--json``: a file we can write."""
    if not value.strip():
        raise UsageError(f"{flag} is empty; give a file path, or drop the flag")
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value!r} is a directory; pass a file path")
    blocker = _blocked_by_file(path.parent)
    if blocker is not None:
        raise UsageError(f"{flag} {value!r}: {str(blocker)!r} is a file, not a folder; choose another path")
    if not path.parent.exists():
        raise UsageError(f"{flag} {value!r}: folder {str(path.parent)!r} does not exist; create it first")
    try:
        _probe(path.parent)
        if path.exists() and not os.access(path, os.W_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise UsageError(f"{flag} {value!r} cannot be written ({_reason(exc)}); choose a writable path") from None
    return path


def check_corpus(value: str) -> Path:
    """``--corpus``: a folder we can create and write (created now if missing)."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--corpus {value!r} is a file; pass a directory (it is created if missing)")
    blocker = _blocked_by_file(path)
    if blocker is not None:
        raise UsageError(f"--corpus {value!r}: {str(blocker)!r} is a file, not a folder; choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        _probe(path)
    except OSError as exc:
        raise UsageError(f"--corpus {value!r} cannot be written ({_reason(exc)}); choose a writable folder") from None
    return path


def check_outputs(flags: Mapping[str, str | None]) -> dict[str, Path]:
    """The output flags that were given, each checked: {"report": path, ...}."""
    return {name: check_output(f"--{name}", value) for name, value in flags.items() if value is not None}


def write_or_fall_back(path: Path, write: Callable[[Path], None], fallback_folder: Path | None) -> Path:
    """Write with ``write(path)``; if that fails, write to a file named like it
    in ``fallback_folder`` (or the temporary folder) and return where it went."""
    try:
        write(path)
        return path
    except OSError:
        pass
    for folder in filter(None, [fallback_folder, Path(tempfile.gettempdir())]):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=folder, prefix=f"{path.stem}-", suffix=path.suffix)
            os.close(fd)
            write(Path(name))
            return Path(name)
        except OSError:
            continue
    raise UsageError(f"cannot write {str(path)!r} nor any fallback copy; the results are in the lines above")
