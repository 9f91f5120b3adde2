"""vLLM's copy policy: which ``non_blocking`` CPU<->CUDA copies its CI sync check rejects.

Since 0.30.0, ``vllm/utils/gpu_sync_debug.py`` (``_install_copy_checkers``, armed by
``VLLM_GPU_SYNC_CHECK=warn|error`` once ``GPUWorker.compile_or_warm_up_model`` calls
``enable_gpu_sync_check()``; reports only inside ``@with_gpu_sync_check`` ``execute_model`` /
``sample_tokens`` and outside ``gpu_sync_allowed()``) wraps ``Tensor.to``, ``Tensor.cuda`` and
``Tensor.copy_`` and flags a ``non_blocking`` copy between a CPU and a CUDA tensor whose CPU side
is *not densely laid out* or *not pinned*, whatever its size (0.30.0-0.34.0 identical, lines
250-346; 0.27.1-0.29.0 have no copy checker, only torch's ``set_sync_debug_mode``). Its rule:

* ``_cpu_copy_stall_reason(cpu_tensor, device)``: nothing unless ``device`` is CUDA and the
  CPU side is on the CPU; nothing for an empty CPU side; else "not densely laid out" (checked
  first), else "not pinned".
* ``_is_dense``: contiguous, or its strides, sorted, are a permutation of a contiguous layout
  (size-1 dimensions ignored): a transposed matrix is dense, a step slice or an expanded
  (stride-0) dimension is not.
* ``Tensor.to``: H2D only -- ``self`` is the CPU side, the device is what torch's own
  ``torch._C._nn._parse_to`` returns (so ``.to(other_tensor)`` takes that tensor's device);
  a D2H ``.to`` is never flagged ("D2H `to` allocates a pinned destination").
* ``Tensor.cuda(device=None, non_blocking=False)``: H2D, the device defaulting to ``cuda``.
* ``Tensor.copy_(src, non_blocking)``: a CUDA ``self`` is H2D (``src`` judged), any other
  ``self`` is D2H (``self`` judged against ``src``'s device). Read positionally as vLLM
  does: ``src`` must be the first positional argument.

Here the rule is a pure function of facts about the two sides (:class:`CopySide`), so it can be
checked without a GPU (tests/unit/test_copypolicy.py builds the sides by hand) and applied in
production to the arguments the sync oracle's wrappers already see (:func:`judge_call`). Where it
differs from vLLM's, and why:

* no scoping: vLLM reports only on a checked thread outside ``gpu_sync_allowed()``; which copies
  count as allowed is the caller's business here (fuzz/oracles/syncs.py's allow region), as for
  syncs. Nor is ``torch.compiler.is_compiling()`` consulted (vLLM skips traced copies).
* the reason is a line naming the method, direction and fault ("Tensor.copy_: non_blocking D2H
  copy into pageable host memory") rather than vLLM's exception text.
* vLLM's blind spots are kept, so that a copy its CI accepts is accepted here: ``copy_`` with
  ``src=`` as a keyword, a D2H ``.to``, copies issued from C++ (compiled graphs), and any other
  entry point (``torch.tensor(..., device=)``, ``Tensor.pin_memory``). Keeping them is a choice
  for parity; the race oracle (lab/design/2026-12-06-race-oracle.md) is what sees the races.
* no size threshold: the measured 2 MiB above which a pageable H2D copy makes the host wait
  (syncs.PAGEABLE_STAGED_BYTES) is a hidden sync's *cost* and stays in syncs.py; this is policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

# torch's parser of Tensor.to's overloads, (device, dtype, non_blocking, memory_format): the one vLLM uses.
_parse_to = getattr(torch._C._nn, "_parse_to", None)

COPY_METHODS = ("to", "cuda", "copy_")


def dense_layout(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """vLLM's ``_is_dense`` on a layout: the elements fill a contiguous storage range, possibly
    permuted (pitched cudaMemcpy2D/3DAsync copies it straight from or to pinned memory); a gapped
    or overlapping layout stages through a pageable temporary."""
    expected_stride = 1
    for stride, size in sorted(zip(strides, shape)):
        if size <= 1:
            continue
        if stride != expected_stride:
            return False
        expected_stride *= size
    return True


@dataclass(frozen=True)
class CopySide:
    """What the policy needs to know of one tensor of a copy: built from a tensor in production
    (:meth:`of`), by hand in tests (a CPU-only torch can neither pin nor hold a CUDA tensor)."""

    device_type: str  # "cpu", "cuda", "meta", ...
    pinned: bool = False  # page-locked host memory (meaningful for a CPU side)
    dense: bool = True  # dense_layout(shape, strides)
    numel: int = 1

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "CopySide":
        on_cpu = tensor.device.type == "cpu"
        dense = tensor.is_contiguous() or dense_layout(tensor.shape, tensor.stride())
        return cls(tensor.device.type, pinned=on_cpu and tensor.is_pinned(), dense=dense, numel=tensor.numel())


def stall_reason(cpu_side: CopySide, other_device_type: str | None) -> str | None:
    """vLLM's ``_cpu_copy_stall_reason``: why a ``non_blocking`` copy between ``cpu_side`` and a
    tensor on ``other_device_type`` would silently block the host, or None."""
    if other_device_type != "cuda" or cpu_side.device_type != "cpu":
        return None
    if cpu_side.numel == 0:
        return None  # nothing to copy; torch issues no CUDA call at all
    if not cpu_side.dense:
        return "not densely laid out"
    if not cpu_side.pinned:
        return "pageable"
    return None


def _line(method: str, direction: str, fault: str) -> str:
    where = "from" if direction == "H2D" else "into"
    memory = "pageable host memory" if fault == "pageable" else "host memory not densely laid out"
    return f"Tensor.{method}: non_blocking {direction} copy {where} {memory}"


def _device_type(device: torch.device | str | int | None, default: str | None) -> str | None:
    if device is None:
        return default
    if isinstance(device, int):
        return "cuda"  # .cuda(0): an index on the CUDA device
    return torch.device(device).type


def violation(method: str, self_side: CopySide, *, non_blocking: bool, src: CopySide | None = None,
              device: torch.device | str | int | None = None) -> str | None:
    """The policy's verdict on one copy call: None, or one line saying why vLLM's check rejects it.

    ``method``: "to" (``device``: the target device as ``_parse_to`` gives it; None when the call
    only changes dtype), "cuda" (``device``: its argument, None meaning the current CUDA device) or
    "copy_" (``self_side`` the destination, ``src`` the source). A blocking copy is never flagged.
    """
    if not non_blocking:
        return None
    if method == "to":
        fault = stall_reason(self_side, _device_type(device, None))
        return _line(method, "H2D", fault) if fault else None
    if method == "cuda":
        fault = stall_reason(self_side, _device_type(device, "cuda"))
        return _line(method, "H2D", fault) if fault else None
    if method == "copy_":
        if src is None:
            return None
        if self_side.device_type == "cuda":
            fault, direction = stall_reason(src, "cuda"), "H2D"
        else:
            fault, direction = stall_reason(self_side, src.device_type), "D2H"
        return _line(method, direction, fault) if fault else None
    raise ValueError(f"not a copy method vLLM's check wraps: {method!r}")


def judge_call(method: str, args: tuple, kwargs: dict) -> str | None:
    """:func:`violation` for the raw arguments of ``torch.Tensor.<method>(*args, **kwargs)``
    (``args[0]`` is ``self``, as a wrapper installed on ``torch.Tensor`` receives them), read the
    way vLLM's ``_checked_to`` / ``_checked_cuda`` / ``_checked_copy_`` read them. Arguments the
    method would reject are not judged (the call itself raises)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    this, rest = args[0], args[1:]
    if method == "to":
        if _parse_to is None:
            return None
        try:
            device, _, non_blocking, _ = _parse_to(*rest, **kwargs)
        except Exception:  # noqa: BLE001 -- invalid arguments: the original call raises
            return None
        return violation("to", CopySide.of(this), non_blocking=bool(non_blocking), device=device)
    if method == "cuda":
        device = rest[0] if rest else kwargs.get("device")
        non_blocking = rest[1] if len(rest) > 1 else kwargs.get("non_blocking", False)
        if not non_blocking:
            return None
        try:
            return violation("cuda", CopySide.of(this), non_blocking=True, device=device)
        except (RuntimeError, TypeError):  # a device string torch rejects: the original call raises
            return None
    if method == "copy_":
        if not rest or not isinstance(rest[0], torch.Tensor):
            return None  # vLLM judges copy_ only with src as the first positional argument
        non_blocking = rest[1] if len(rest) > 1 else kwargs.get("non_blocking", False)
        if not non_blocking:
            return None
        return violation("copy_", CopySide.of(this), non_blocking=True, src=CopySide.of(rest[0]))
    return None

