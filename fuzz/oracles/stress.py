"""Async-hazard stress: make a late read of host memory visible.

An optimized side that stages host data with ``non_blocking=True`` is correct
only if nothing rewrites that host memory before the copy has run. Normally the
copy runs within microseconds, so a race hides. Under ``--stress`` the
optimized call runs on a non-default CUDA stream that is first made to *sleep*
(``torch.cuda._sleep``), so every copy it enqueues is still pending when the
call returns; right then, before any sync, the caller-owned host inputs are
overwritten with poison. A copy that reads them late, or an output that
aliases them, then differs from the legacy result.

Host inputs are found by walking the call's closure (what ``materialize``
built for the call): CPU tensors, numpy arrays and lists of numbers, nested in
lists, tuples and dicts. On CPU there are no asynchronous copies; poisoning
after return still catches outputs that alias a caller's buffer.

The premise is that the caller rewrites its inputs once the call returned. Where
the callers never do (the multimodal cache's items, which vLLM's zero-copy
``reduce_data`` outputs alias by design), the input model says so by setting
``caller_never_rewrites = True`` on the thunk, and nothing is poisoned: poisoning
memory no caller writes would report a race no caller can have.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import torch

from fuzz.oracles.hold import SLEEP_CYCLES, Hold

_INT_POISON = -7777
_MAX_DEPTH = 4


def _int_poison(lowest: int, highest: int) -> int:
    """-7777 where the dtype holds it, else its extreme value (int8: -128, uint8: 255):
    writing -7777 into int8/uint8 raised inside the poisoning, which read as "only optimized raised"."""
    if lowest <= _INT_POISON:
        return _INT_POISON
    return lowest if lowest < 0 else highest


def host_inputs(thunk: Callable[[], Any]) -> list[Any]:
    """Caller-owned host objects a thunk closes over (see module docstring); none where the input model
    declared that the callers never rewrite them (``caller_never_rewrites``)."""
    if getattr(thunk, "caller_never_rewrites", False):
        return []
    found: list[Any] = []
    seen: set[int] = set()
    for cell in getattr(thunk, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        found.extend(_walk(value, seen, 0))
    return found


def _walk(value: Any, seen: set[int], depth: int) -> Iterator[Any]:
    if id(value) in seen or depth > _MAX_DEPTH:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu" and value.numel():
            yield value
    elif isinstance(value, np.ndarray):
        if value.size and value.flags.writeable:
            yield value
    elif isinstance(value, list):
        if value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            yield value
        else:
            for item in value:
                yield from _walk(item, seen, depth + 1)
    elif isinstance(value, tuple):
        for item in value:
            yield from _walk(item, seen, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item, seen, depth + 1)


def poison(objects: list[Any]) -> None:
    """Overwrite every host object in place with values no real input has."""
    for obj in objects:
        if isinstance(obj, torch.Tensor):
            # inference_mode, not no_grad: it may write an input an input model made under inference_mode
            # (an inference tensor, which no_grad may not write) as well as an ordinary one.
            with torch.inference_mode():
                if obj.is_floating_point():
                    obj.fill_(float("nan"))
                elif obj.dtype == torch.bool:
                    obj.logical_not_()
                else:
                    obj.fill_(_int_poison(torch.iinfo(obj.dtype).min, torch.iinfo(obj.dtype).max))
        elif isinstance(obj, np.ndarray):
            if np.issubdtype(obj.dtype, np.floating):
                obj.fill(np.nan)
            elif obj.dtype == np.bool_:
                np.logical_not(obj, out=obj)
            elif np.issubdtype(obj.dtype, np.integer):
                obj.fill(_int_poison(int(np.iinfo(obj.dtype).min), int(np.iinfo(obj.dtype).max)))
        elif isinstance(obj, list):
            obj[:] = [_INT_POISON] * len(obj)


def call_under_stress(thunk: Callable[[], Any], on_cuda: bool) -> Any:
    """Run ``thunk`` so that late host reads show, then poison its host inputs."""
    targets = host_inputs(thunk)
    if not on_cuda:
        value = thunk()
        poison(targets)
        return value
    hold = Hold(SLEEP_CYCLES)
    with hold.entered():  # after what building the inputs queued on the current stream
        hold.sleep()
        value = thunk()
    poison(targets)  # the copies the call enqueued are still waiting behind the sleep
    hold.finish()
    return value
