"""The work of a run as a deterministic list of items: (target, piece).

A target's examples can be split into ``pieces``, each with its own seed
(piece 0 keeps the run seed, so a one-piece run is the plain run). The item
list depends only on the targets, pieces and seed, so every host computes the
same list and ``--shard i/n`` takes items i-1, i-1+n, ... -- shards never
overlap and together cover the run. pytest-xdist schedules the items of one
host across its workers.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from fuzz.errors import UsageError
from fuzz.targets import Target


@dataclass(frozen=True)
class Item:
    target: Target
    piece: int
    pieces: int
    seed: int
    max_examples: int | None

    @property
    def key(self) -> str:
        return f"{self.target.name}[{self.piece + 1}/{self.pieces}]"


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"--shard {text!r} must look like i/n with 1 <= i <= n, e.g. 1/4")
    return int(match[1]), int(match[2])


def piece_seed(seed: int, target: Target, piece: int) -> int:
    if piece == 0:
        return seed
    digest = hashlib.sha256(f"piece:{seed}:{target.name}:{piece}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def split_examples(max_examples: int | None, pieces: int) -> list[int | None]:
    """Each piece's examples, adding up to exactly ``max_examples`` (a piece
    that would get none is not planned); under a budget (None) every piece."""
    if max_examples is None:
        return [None] * pieces
    base, extra = divmod(max_examples, pieces)
    return [base + (p < extra) for p in range(pieces) if base + (p < extra)]


def plan(targets: list[Target], *, seed: int, pieces: int, max_examples: int | None,
         shard: tuple[int, int] | None = None) -> list[Item]:
    if pieces < 1:
        raise UsageError(f"--pieces {pieces} must be at least 1")
    items = [Item(t, p, pieces, piece_seed(seed, t, p), share)
             for t in targets for p, share in enumerate(split_examples(max_examples, pieces))]
    if shard is not None:
        index, count = shard
        items = items[index - 1::count]
    return items
