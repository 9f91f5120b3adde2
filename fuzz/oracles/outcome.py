"""What one side of an example produced: a value, or an exception.

Exceptions are outputs (Hypothesis ghostwriter's ``allow_same_errors``): the
exception type and message are captured so they can be compared and saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Raised:
    type_name: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> "Raised":
        kind = type(exc)
        qual = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        # Keep the first line: device-side messages can run for pages.
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return cls(type_name=qual, message=first_line[:500])


@dataclass
class SideResult:
    """One side's outcome plus the GPU<->CPU syncs its call made (CUDA only)."""

    value: Any = None
    raised: Raised | None = None
    syncs: int | None = None
    allowed_syncs: int | None = None
    hidden_syncs: int | None = None
    consumer_syncs: int | None = None  # the consumer stand-in's reads of the output (fuzz/oracles/)
    # The copies vLLM's CI copy check rejects, one line each with its site (CUDA only; fuzz/oracles/copypolicy.py).
    policy: list[str] | None = None

    @property
    def ok(self) -> bool:
        return self.raised is None
