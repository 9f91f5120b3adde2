"""Constants shared by the provenance modules."""

from __future__ import annotations

import os
import re
from pathlib import Path

from fuzz.versions import DEFAULT_PAIR

EXIT_OK, EXIT_FAILURE = 0, 1
SIDES = ("legacy", "optimized")
# The version each side of the default pair was copied from (a target's own pair: Target.versions).
SIDE_VERSIONS = dict(zip(SIDES, DEFAULT_PAIR))
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CACHE_ENV = "SYNCFUZZ_WHEEL_CACHE"
INSTALLED = "installed"  # a --*-source value: the vllm this Python has installed

ADAPTED_RE = re.compile(r"#\s*ADAPTED\b")
# Paths a copy names in its docstring or ADAPTED comments: where its helpers came from.
UPSTREAM_PATH_RE = re.compile(r"\bvllm/[\w/]+\.py\b")
MAX_HUNKS = 3  # per definition: the first mismatches are what a reader needs
MAX_GAP_LINES = 6  # upstream lines shown between two anchors of a hunk


def default_cache() -> Path:
    """``$SYNCFUZZ_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/syncfuzz/wheels`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "syncfuzz" / "wheels"


def side_version(pair: tuple[str, str], side: str) -> str:
    """The version ``side`` of a (legacy, optimized) pair was copied from."""
    return pair[SIDES.index(side)]


def version_key(version: str) -> tuple:
    """Sorts "0.9.1" before "0.27.1": numeric parts as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"[.+-]", version))
