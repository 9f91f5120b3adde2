"""Local equivalents of the vllm helpers the copied functions call.

The copies in ``legacy/`` and ``optimized/`` must run without vllm installed, so
each vllm helper they use gets a small stand-in here with the *same semantics*
as the upstream one (vllm 0.28.0):

* ``async_tensor_h2d`` -- re-exported from ``optimized/torch_utils.py``, a
  verbatim copy of ``vllm/utils/torch_utils.py::async_tensor_h2d`` (identical
  in 0.27.1 and 0.28.0): pin the host data when pinned memory exists, then
  ``.to(device, dtype, non_blocking=True)``. vllm decides pinning once per
  process (``is_pin_memory_available()``, true on CUDA platforms); CPU-only
  torch raises on ``pin_memory()``, so the copy pins only when CUDA is
  available -- the same answer vllm's platform check gives.
* ``tensor_cache`` -- ``vllm/third_party/flash_linear_attention/ops/utils.py``:
  identity-keyed LRU of the last 8 calls.
* ``gpu_sync_allowed`` -- ``vllm/utils/gpu_sync_debug.py``: upstream it only
  exempts the block from vllm's own sync checker. Here it does the same for the
  fuzzer's sync counter (``fuzz.syncs``), which records syncs made inside such a
  block as *allowed* rather than as regressions.

Apache-2.0: the helper bodies are adapted from vLLM (Copyright contributors to
the vLLM project); ``tensor_cache`` originally from flash-linear-attention
(Songlin Yang, Yu Zhang, MIT).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

import torch

from optimized.torch_utils import PIN_MEMORY, async_tensor_h2d  # noqa: E402,F401 -- upstream's own body


def pin_memory_available() -> bool:
    """vllm's ``is_pin_memory_available()`` answer (true on CUDA platforms)."""
    return PIN_MEMORY


def tensor_cache(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Cache the most recent results of ``fn`` keyed by argument identity."""
    cache_entries: list[tuple[tuple, dict, Any]] = []
    cache_size = 8

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal cache_entries
        for i, entry in enumerate(cache_entries):
            last_args, last_kwargs, last_result = entry
            if (
                len(args) == len(last_args)
                and len(kwargs) == len(last_kwargs)
                and all(a is b for a, b in zip(args, last_args))
                and all(k in last_kwargs and v is last_kwargs[k] for k, v in kwargs.items())
            ):
                cache_entries = (
                    cache_entries[:i] + cache_entries[i + 1 :] + [(args, kwargs, last_result)]
                )
                return last_result
        result = fn(*args, **kwargs)
        if len(cache_entries) >= cache_size:
            cache_entries = cache_entries[1:]
        cache_entries.append((args, kwargs, result))
        return result

    return wrapper


# Depth of nested gpu_sync_allowed() blocks on this thread/task; fuzz.syncs
# reads it to classify each sync it sees.
sync_allowed_depth: ContextVar[int] = ContextVar("syncfuzz_sync_allowed_depth", default=0)


@contextmanager
def gpu_sync_allowed(first_only: bool = False) -> Iterator[None]:
    """Mark syncs in the block as deliberate (upstream keeps them on purpose).

    ``first_only`` is accepted for signature compatibility; upstream uses it to
    exempt only the first entry per call site, which matters for a long-lived
    server, not for one fuzz call.
    """
    token = sync_allowed_depth.set(sync_allowed_depth.get() + 1)
    try:
        yield
    finally:
        sync_allowed_depth.reset(token)
