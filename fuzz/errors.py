"""The fuzzer's exceptions: one root, user mistakes apart from fuzzer bugs.

A ``UsageError`` is the user's to fix: the CLI prints its message as one line
and exits 2. A ``HarnessError`` means the fuzzer itself (a strategy, a target
record) is broken; it is never reported as a divergence.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class FuzzError(Exception):
    """Root of every error the fuzzer raises on purpose."""


class UsageError(FuzzError):
    """Bad input to a command: a flag, a target name, a repro file."""


class ReproFileError(UsageError):
    """A repro file that cannot be used (missing, not JSON, wrong fields)."""


class HarnessError(FuzzError):
    """The fuzzer could not build or run an example: a bug in the fuzzer."""


def unknown_name(kind: str, name: str, known: Iterable[str]) -> UsageError:
    """A UsageError for an unknown name, listing the closest known ones."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"closest matches: {', '.join(close)}" if close else f"known: {', '.join(known)}"
    return UsageError(f"unknown {kind} {name!r}; {hint} (see `python -m fuzz list`)")
