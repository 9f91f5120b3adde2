# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0: vllm/utils/gpu_sync_debug.py :: _allow_syncs (verbatim),
gpu_sync_allowed (the allow region only).

Upstream, ``gpu_sync_allowed()`` exempts the block from vllm's own sync checker
(armed by ``VLLM_GPU_SYNC_CHECK``; a no-op otherwise): it opens an allow
region, ``_allow_syncs()``, which raises the ``_allow_depth`` ContextVar for the
block. Here it always opens that region, and the fuzzer's sync counter
(``fuzz.oracles.syncs``, pointed here by the records' ``sync_allow_region``) reads the same ContextVar to record
syncs made inside such a block as *allowed* rather than as regressions.
``first_only`` is accepted for signature compatibility; upstream uses it to
exempt only the first entry per call site, which matters for a long-lived
server, not for one fuzz call.

Only the optimized copies call it (the legacy functions, vllm 0.27.1, have no
``gpu_sync_allowed`` block), so there is one ContextVar, and it lives here.
"""
from contextlib import contextmanager  # ADAPTED: upstream also imports nullcontext, for the disabled check
from contextvars import ContextVar

# Depth of nested `gpu_sync_allowed()` regions on this thread.
_allow_depth: ContextVar[int] = ContextVar("vllm_gpu_sync_allow_depth", default=0)
sync_allowed_depth = _allow_depth  # ADAPTED: the name the records give the sync oracle (Target.sync_allow_region)


@contextmanager
def _allow_syncs():
    token = _allow_depth.set(_allow_depth.get() + 1)
    try:
        yield
    finally:
        _allow_depth.reset(token)


def gpu_sync_allowed(first_only: bool = False):
    """Allow GPU<->CPU syncs inside the `with` block, on this thread only.

    With `first_only`, only the first entry from a given call site
    (filename, lineno) is allowed, so later syncs there are still reported.
    """
    # ADAPTED: no VLLM_GPU_SYNC_CHECK mode and no first_only bookkeeping: always the allow region
    return _allow_syncs()
