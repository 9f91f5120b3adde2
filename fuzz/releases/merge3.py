"""A three-way line merge: carry a copy's adaptations onto a newer upstream text.

``base`` is the upstream definition the copy was taken from, ``ours`` the copy
(upstream plus its ``# ADAPTED:`` edits), ``theirs`` the same definition in
another release or checkout. Where only one of ``ours`` and ``theirs`` changed
a region of ``base``, that change is taken; where both changed it differently,
the merge stops with a conflict instead of guessing (diff3's rule), with one exception: where
``theirs`` only added lines before or after a region it left as ``base`` has it, and ``ours``
changed that region, the added lines go around ours' change (upstream put new statements next to a
line the copy adapts: 0.32.0's ``self.checkpoint_builder = ...`` right above the function-local
vllm import that optimized/gdn_attn.py comments out). Lines are
matched modulo inner whitespace, indentation kept (an ``if`` wrapped around a
block re-indents it); the output keeps each side's own text.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Sequence


def _key(line: str) -> str:
    """A line modulo inner and trailing whitespace; its indentation counts (it is Python's syntax)."""
    stripped = line.lstrip()
    return line[:len(line) - len(stripped)] + " ".join(stripped.split())


@dataclass(frozen=True)
class Conflict:
    """Both sides changed the same region of ``base``: where, in 0-based rows."""

    base_rows: tuple[int, int]
    ours_rows: tuple[int, int]
    theirs_rows: tuple[int, int]


def _matches(base: Sequence[str], other: Sequence[str]) -> dict[int, int]:
    """base row -> other row, for lines the two share (difflib's longest blocks)."""
    matcher = SequenceMatcher(None, [_key(x) for x in base], [_key(x) for x in other], autojunk=False)
    found: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            found[block.a + offset] = block.b + offset
    return found


def merge3(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> list[str] | Conflict:
    """The merged lines, or the first conflict."""
    to_ours, to_theirs = _matches(base, ours), _matches(base, theirs)
    # Sync points: base rows both sides kept, in increasing order on both sides.
    anchors: list[tuple[int, int, int]] = []
    for row in range(len(base)):
        if row in to_ours and row in to_theirs:
            o, t = to_ours[row], to_theirs[row]
            if not anchors or (o > anchors[-1][1] and t > anchors[-1][2]):
                anchors.append((row, o, t))
    anchors.append((len(base), len(ours), len(theirs)))
    merged: list[str] = []
    b0 = o0 = t0 = 0
    for b1, o1, t1 in anchors:
        chunk_base = [_key(x) for x in base[b0:b1]]
        chunk_ours, chunk_theirs = list(ours[o0:o1]), list(theirs[t0:t1])
        if [_key(x) for x in chunk_ours] == chunk_base:
            merged.extend(chunk_theirs)  # only theirs changed it (or nobody did)
        elif [_key(x) for x in chunk_theirs] == chunk_base:
            merged.extend(chunk_ours)  # only ours changed it: the adaptation stays
        elif [_key(x) for x in chunk_ours] == [_key(x) for x in chunk_theirs]:
            merged.extend(chunk_ours)
        elif (around := _added_around(chunk_base, chunk_theirs)) is not None:
            merged.extend([*around[0], *chunk_ours, *around[1]])
        else:
            return Conflict((b0, b1), (o0, o1), (t0, t1))
        if b1 < len(base):
            merged.append(ours[o1])  # the anchor line itself, as the copy writes it
        b0, o0, t0 = b1 + 1, o1 + 1, t1 + 1
    return merged


def _added_around(base: list[str], theirs: list[str]) -> tuple[list[str], list[str]] | None:
    """(lines before, lines after) when ``theirs`` is ``base`` (keys, non-empty) with lines only added
    before and/or after it; else None. The base lines themselves must be untouched and contiguous: an
    edit inside them, or lines added between them, is a change of the region (a conflict)."""
    if not base or len(theirs) <= len(base):
        return None
    keys = [_key(x) for x in theirs]
    for before in range(len(theirs) - len(base) + 1):
        if keys[before:before + len(base)] == base:
            return list(theirs[:before]), list(theirs[before + len(base):])
    return None
