"""One watch over torch's three Python copy methods, feeding the oracles that judge copies.

``Tensor.to``, ``Tensor.cuda`` and ``Tensor.copy_`` are where every ``non_blocking`` copy in the
copied vLLM code is issued (vLLM's own CI check wraps the same three: fuzz/oracles/copypolicy.py).
While a :class:`CopyWatch` is armed they are wrapped once, and each call is shown to every
observer as a :class:`CopyCall`: the hidden-sync counter and the copy policy (fuzz/oracles/syncs.py)
and the race recorder (fuzz/oracles/races.py). One wrapper, not one per oracle: stacking wrappers
cost a Python frame per oracle per copy, and each would have had to agree with the others on how
the arguments are read.

An observer may be asked *before* the copy is issued (``before``: the race recorder holds the copy
engine back there) and is always told after it returned (``copied``); a copy that raised is not
shown. Copies the observers make themselves are not shown (a re-entrancy guard), and exit leaves
``torch.Tensor`` exactly as it was, whatever the call under watch raised.
"""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch

COPY_METHODS = ("to", "cuda", "copy_")


def non_blocking_flag(args: tuple, kwargs: dict) -> bool:
    """The ``non_blocking`` flag of a to/cuda/copy_ call: a keyword, or the
    first bool after ``self`` (every overload puts it before ``copy``)."""
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    return next((a for a in args[1:] if isinstance(a, bool)), False)


@dataclass(frozen=True)
class CopyCall:
    """One call of a copy method: its raw arguments (``args[0]`` is ``self``) and, once it returned, its result."""

    method: str  # "to", "cuda" or "copy_"
    args: tuple
    kwargs: dict
    result: Any = None

    @property
    def non_blocking(self) -> bool:
        return non_blocking_flag(self.args, self.kwargs)

    @property
    def source(self) -> Any:
        if self.method == "copy_":
            return self.args[1] if len(self.args) > 1 else self.kwargs.get("src")
        return self.args[0] if self.args else None

    @property
    def destination(self) -> Any:
        """The tensor written: ``self`` of ``copy_``, the result of ``to``/``cuda`` (known after the call)."""
        return self.args[0] if self.method == "copy_" else self.result

    def direction(self, gpu: str = "cuda") -> str | None:
        """"H2D", "D2H" or None (host to host, device to device, not tensors, or a ``to`` that copied nothing).
        ``gpu``: the device type that counts as the GPU (tests without one use "meta")."""
        source, destination = self.source, self.destination
        if not isinstance(source, torch.Tensor) or not isinstance(destination, torch.Tensor):
            return None
        if source is destination:  # .to() of what is already there returns self: no copy
            return None
        kinds = (source.device.type, destination.device.type)
        return {("cpu", gpu): "H2D", (gpu, "cpu"): "D2H"}.get(kinds)


class CopyObserver(Protocol):
    def copied(self, call: CopyCall) -> None:
        """Told after each copy call under watch returned (``call.result`` set)."""


_busy = threading.local()  # set while an observer runs: its own copies are not watched


class CopyWatch:
    """Arms the observers over ``torch.Tensor.to/.cuda/.copy_`` for the duration of a ``with`` block."""

    def __init__(self, observers: Sequence[CopyObserver]) -> None:
        self.observers = list(observers)
        self._before = [o for o in self.observers if hasattr(o, "before")]
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> CopyWatch:
        # What torch.Tensor itself defines (None: inherited from TensorBase), so exit leaves the class
        # exactly as it was -- also when watches nest (each restores what it found).
        self._saved = {name: torch.Tensor.__dict__.get(name) for name in COPY_METHODS}
        for name in COPY_METHODS:
            setattr(torch.Tensor, name, self._watched(name, getattr(torch.Tensor, name)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for name, saved in self._saved.items():
            if saved is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, saved)

    def _watched(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def watched(*args: Any, **kwargs: Any) -> Any:
            if getattr(_busy, "on", False):
                return method(*args, **kwargs)
            if self._before:
                self._tell("before", CopyCall(name, args, kwargs), self._before)
            result = method(*args, **kwargs)
            self._tell("copied", CopyCall(name, args, kwargs, result), self.observers)
            return result

        return watched

    @staticmethod
    def _tell(hook: str, call: CopyCall, observers: Sequence[CopyObserver]) -> None:
        _busy.on = True
        try:
            for observer in observers:
                getattr(observer, hook)(call)
        finally:
            _busy.on = False


def caller_site(skip: int = 2) -> str:
    """The first frame outside torch and the fuzzer's oracles: the line that copied ("dir/file.py:LINE")."""
    frame = sys._getframe(skip)
    while frame is not None and ("/torch/" in frame.f_code.co_filename
                                 or "/fuzz/oracles/" in frame.f_code.co_filename):
        frame = frame.f_back
    return "?" if frame is None else "/".join(frame.f_code.co_filename.rsplit("/", 2)[-2:]) + f":{frame.f_lineno}"
