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
import math
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


def plan(targets: list[Target], *, seed: int, pieces: int, max_examples: int | None,
         shard: tuple[int, int] | None = None) -> list[Item]:
    if pieces < 1:
        raise UsageError(f"--pieces {pieces} must be at least 1")
    per_piece = None if max_examples is None else max(1, math.ceil(max_examples / pieces))
    items = [Item(t, p, pieces, piece_seed(seed, t, p), per_piece) for t in targets for p in range(pieces)]
    if shard is not None:
        index, count = shard
        items = items[index - 1::count]
    return items
