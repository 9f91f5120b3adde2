"""Writing output files atomically: an interrupted run never leaves half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text(path: Path, text: str) -> None:
    """Atomic write of a text output (Markdown, JUnit XML, a report)."""
    write_bytes(path, text.encode())


def write_bytes(path: Path, data: bytes) -> None:
    """Atomic write: a temporary file in the same folder, then a rename; a reader sees the whole file or
    none, and an interrupted write leaves nothing behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        # mkstemp makes 0600 files; an output is the user's, made as open() would.
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: Path, payload: Any) -> None:
    """Atomic write of a JSON output."""
    write_text(path, json.dumps(payload, indent=2) + "\n")
