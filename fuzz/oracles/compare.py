"""Compare two sides' outcomes: the differential oracle.

``differential`` says agree, divergence or error-mismatch of one example;
the example's verdict, weighed with the other oracles, is decided in
fuzz/records/verdicts.py (``decide_example``), with the severity order, and defined
in docs/verdicts.md. ``crash`` / ``hang`` are decided by the isolation layer
(fuzz/run/isolation.py); the same exception type on both sides agrees (the
messages may differ: they often embed addresses or sizes).

Messages name the two sides by ``labels`` (``("legacy", "optimized")`` unless
the caller passes others: the upstream check's ``("copy", "vllm")``, the
reference oracle's ``("reference", "copy")``), written once, never patched.

Values are walked like ``torch.testing``'s pair chain: sequences and mappings
recurse, growing a path (``[1]['cu_seqlens']``) so a report names the leaf.
Tensors must match in type, shape, dtype and device; integer/bool values must
be bitwise equal; floats use ``assert_close`` (or bitwise under ``exact``).
Where the target declares ``Comparison(layout=True)`` (its callers hand the
tensor to kernels or views), strides and contiguity must match too
(``layout_of``: strides of size-1 dimensions and of empty tensors are ignored).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch

from fuzz.oracles.outcome import SideResult
from fuzz.records.verdicts import Mismatch, PathPart, Verdict
from fuzz.targets import Comparison

SIDES = ("legacy", "optimized")


def compare_values(legacy: Any, optimized: Any, policy: Comparison, path: tuple[PathPart, ...] = (),
                   labels: tuple[str, str] = SIDES) -> Iterator[Mismatch]:
    """Yield every mismatch between two output trees, the sides named by ``labels``."""
    la, lb = labels
    if isinstance(legacy, np.ndarray):
        legacy = torch.from_numpy(legacy)
    if isinstance(optimized, np.ndarray):
        optimized = torch.from_numpy(optimized)
    if isinstance(legacy, torch.Tensor) or isinstance(optimized, torch.Tensor):
        yield from _compare_tensors(legacy, optimized, policy, path, labels)
    elif isinstance(legacy, (list, tuple)) and isinstance(optimized, (list, tuple)):
        if type(legacy) is not type(optimized):
            yield Mismatch.at(path, "type", f"{la} {type(legacy).__name__}, {lb} {type(optimized).__name__}")
        if len(legacy) != len(optimized):
            yield Mismatch.at(path, "length", f"{la} {len(legacy)}, {lb} {len(optimized)}")
            return
        for i, (a, b) in enumerate(zip(legacy, optimized)):
            yield from compare_values(a, b, policy, (*path, i), labels)
    elif isinstance(legacy, dict) and isinstance(optimized, dict):
        if set(legacy) != set(optimized):
            yield Mismatch.at(path, "keys", f"{la} {sorted(map(str, legacy))}, {lb} {sorted(map(str, optimized))}")
        for key in legacy.keys() & optimized.keys():
            yield from compare_values(legacy[key], optimized[key], policy, (*path, key), labels)
    elif type(legacy) is not type(optimized):
        yield Mismatch.at(path, "type", f"{la} {type(legacy).__name__}, {lb} {type(optimized).__name__}")
    elif legacy != optimized and not _both_nan(legacy, optimized):
        yield Mismatch.at(path, "values", f"{la} {legacy!r}, {lb} {optimized!r}")


def _both_nan(a: Any, b: Any) -> bool:
    return isinstance(a, float) and isinstance(b, float) and a != a and b != b


def _compare_tensors(legacy: Any, optimized: Any, policy: Comparison, path: tuple[PathPart, ...],
                     labels: tuple[str, str]) -> Iterator[Mismatch]:
    la, lb = labels
    if not (isinstance(legacy, torch.Tensor) and isinstance(optimized, torch.Tensor)):
        yield Mismatch.at(path, "type", f"{la} {type(legacy).__name__}, {lb} {type(optimized).__name__}")
        return
    for what, a, b in (
        ("shape", tuple(legacy.shape), tuple(optimized.shape)),
        ("dtype", legacy.dtype, optimized.dtype),
        ("device", legacy.device, optimized.device),
    ):
        if a != b:
            yield Mismatch.at(path, what, f"{la} {a}, {lb} {b}")
            return
    yield from _compare_tensor_values(legacy, optimized, policy, path, labels)
    if policy.layout:
        yield from _compare_layout(legacy, optimized, path, labels)


def _compare_tensor_values(legacy: torch.Tensor, optimized: torch.Tensor, policy: Comparison,
                           path: tuple[PathPart, ...], labels: tuple[str, str]) -> Iterator[Mismatch]:
    a, b = legacy.detach().cpu(), optimized.detach().cpu()
    exact = policy.floats == "exact" or not (a.is_floating_point() or a.is_complex())
    if exact:
        if not torch.equal(a, b) and not _equal_with_nans(a, b):
            yield Mismatch.at(path, "values", _describe_exact(a, b, labels))
        return
    declared = policy.tolerance(str(a.dtype).removeprefix("torch."))
    if _close_fast(a, b, declared):
        return
    try:
        rtol, atol = declared or (None, None)  # None, None: assert_close's default for the dtype
        torch.testing.assert_close(b, a, equal_nan=True, rtol=rtol, atol=atol)
    except AssertionError as exc:
        yield Mismatch.at(path, "values", " ".join(str(exc).split()))


# assert_close's default (rtol, atol) per dtype, read from the installed torch so the
# two can never disagree; empty (no fast path) if a torch release moves it.
_DEFAULT_TOLERANCES: dict = dict(getattr(getattr(torch.testing, "_comparison", None), "_DTYPE_PRECISIONS", {}))


def _close_fast(a: torch.Tensor, b: torch.Tensor, declared: tuple[float, float] | None = None) -> bool:
    """True where ``assert_close(b, a, equal_nan=True)`` passes, at a fraction of its
    cost (~35 us against ~150 us on a small tensor): bitwise equal, or -- for a plain
    float dtype -- the same ``isclose`` test assert_close makes with its default
    tolerances (``declared``: the target's own, Comparison.tolerances). False means
    "ask assert_close", which words the mismatch."""
    if not (a.layout == b.layout == torch.strided) or a.is_quantized:
        return False
    if torch.equal(a, b):
        return True
    tolerance = declared or _DEFAULT_TOLERANCES.get(a.dtype)
    return tolerance is not None and bool(torch.isclose(b, a, *tolerance, equal_nan=True).all())


def layout_of(tensor: torch.Tensor) -> tuple[tuple[int | None, ...], bool]:
    """What a kernel, a ``.view()`` or a Triton launch can see of a tensor's
    memory layout: its strides, ``None`` for a dimension of size 1 (never
    stepped over, so any stride is the same layout), and ``is_contiguous()``.
    An empty tensor has no layout: every stride is ``None``."""
    if tensor.layout != torch.strided:  # sparse and the like: no strides to compare, only the kind
        return (str(tensor.layout),), False
    sizes, strides = tuple(tensor.shape), tensor.stride()
    if tensor.numel() == 0:
        return (None,) * len(sizes), True
    return tuple(None if n == 1 else s for n, s in zip(sizes, strides)), tensor.is_contiguous()


def _compare_layout(legacy: torch.Tensor, optimized: torch.Tensor, path: tuple[PathPart, ...],
                    labels: tuple[str, str]) -> Iterator[Mismatch]:
    """Checked after the values: a leaf whose values differ too is reported
    (and de-duplicated, fuzz.records.model.failure_signature) as a value mismatch first."""
    if layout_of(legacy) != layout_of(optimized):
        yield Mismatch.at(path, "layout", (
            f"{labels[0]} strides {_strides(legacy)} (contiguous {legacy.is_contiguous()}), "
            f"{labels[1]} strides {_strides(optimized)} (contiguous {optimized.is_contiguous()}) "
            f"for shape {tuple(legacy.shape)}"))


def _strides(tensor: torch.Tensor) -> tuple[int, ...] | str:
    return tensor.stride() if tensor.layout == torch.strided else str(tensor.layout)


def _equal_with_nans(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.is_floating_point():
        return False
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _describe_exact(a: torch.Tensor, b: torch.Tensor, labels: tuple[str, str] = SIDES) -> str:
    """assert_close-style text for a bitwise mismatch."""
    differ = (a != b)
    if a.is_floating_point():
        differ &= ~(a.isnan() & b.isnan())
    count = int(differ.sum())
    first = tuple(int(i) for i in differ.nonzero()[0]) if count else ()
    at = f"at index {first}" if first else ""
    la = a[first].item() if first else a.item() if a.numel() == 1 else None
    lb = b[first].item() if first else b.item() if b.numel() == 1 else None
    return (
        f"Mismatched elements: {count} / {a.numel()}; first {at}: {labels[0]} {la!r}, {labels[1]} {lb!r} "
        f"(bitwise equality required)"
    )


EXACTLY = Comparison(floats="exact", layout=True)
"""The strictest comparison: bitwise values (NaN equal to NaN), and the same memory layout."""


def same_exactly(legacy: Any, optimized: Any) -> bool:
    """Two outputs no oracle can tell apart: equal under ``EXACTLY``, so every
    invariant and reference gives both the same answer (fuzz.engine.execute asks once)."""
    return next(compare_values(legacy, optimized, EXACTLY), None) is None


def differential(legacy: SideResult, optimized: SideResult, policy: Comparison, known_equal: bool = False,
                 labels: tuple[str, str] = SIDES) -> tuple[Verdict, list[Mismatch]]:
    """The differential oracle on one example: agree, divergence or error-mismatch, and the mismatches
    behind it (fuzz.records.verdicts.decide_example weighs it with the other oracles).

    ``known_equal``: the values were already found ``same_exactly``, which passes every policy, so they
    are not compared again. ``labels``: the sides' names in the mismatches' text.
    """
    if legacy.raised or optimized.raised:
        return _judge_exceptions(legacy, optimized, labels)
    mismatches = [] if known_equal else list(compare_values(legacy.value, optimized.value, policy, labels=labels))
    if mismatches:
        return Verdict.DIVERGENCE, mismatches
    return Verdict.AGREE, []


def _judge_exceptions(legacy: SideResult, optimized: SideResult,
                      labels: tuple[str, str] = SIDES) -> tuple[Verdict, list[Mismatch]]:
    if legacy.raised and optimized.raised:
        if legacy.raised.type_name == optimized.raised.type_name:
            return Verdict.AGREE, []
        detail = f"{labels[0]} raised {legacy.raised.type_name}, {labels[1]} raised {optimized.raised.type_name}"
        return Verdict.ERROR_MISMATCH, [Mismatch("", "exception", detail)]
    side, other = labels if legacy.raised else labels[::-1]
    raised = legacy.raised or optimized.raised
    assert raised is not None
    detail = f"only {side} raised {raised.type_name}: {raised.message}; {other} returned a value"
    return Verdict.DIVERGENCE, [Mismatch("", "exception", detail)]
