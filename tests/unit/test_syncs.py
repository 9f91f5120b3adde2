"""The hidden-sync detector's rule, checked without a GPU (tests/gpu/test_gpu.py runs it on CUDA)."""

from __future__ import annotations

import torch

from fuzz.oracles.syncs import PAGEABLE_STAGED_BYTES, _pageable_host


def test_only_a_pageable_copy_larger_than_the_driver_stages_counts():
    big = torch.empty(PAGEABLE_STAGED_BYTES + 1, dtype=torch.uint8)
    assert _pageable_host(big)
    assert not _pageable_host(torch.empty(PAGEABLE_STAGED_BYTES, dtype=torch.uint8))  # staged: returns at once
    assert not _pageable_host(torch.arange(3))
    assert not _pageable_host(big.to("meta"))
    assert not _pageable_host([1, 2, 3])


def test_an_empty_host_tensor_stages_nothing_so_it_is_never_a_hidden_sync():
    # torch.tensor([], pin_memory=True) has no storage pointer and reports
    # is_pinned() == False; a zero-byte copy cannot stage or wait.
    assert not _pageable_host(torch.empty(0))
    assert not _pageable_host(torch.empty(0, 4))


def test_non_blocking_flag_is_read_from_keywords_and_positions():
    from fuzz.oracles.copywatch import non_blocking_flag as _non_blocking

    t = torch.arange(3)
    assert _non_blocking((t, "cuda"), {"non_blocking": True})
    assert _non_blocking((t, "cuda", torch.int32, True), {})  # to(device, dtype, non_blocking)
    assert _non_blocking((t, torch.int32, True, False), {})  # to(dtype, non_blocking, copy)
    assert not _non_blocking((t, "cuda"), {})
    assert not _non_blocking((t, "cuda"), {"non_blocking": False, "copy": True})


def test_host_to_host_copies_are_not_counted_and_results_are_untouched():
    from fuzz.oracles.syncs import SyncTally, copy_watch

    tally = SyncTally()
    with copy_watch(tally, lambda: False):
        out = torch.arange(3).to(torch.float32, non_blocking=True)  # host to host: no sync
        torch.empty(3).copy_(torch.ones(3), non_blocking=True)
    assert out.tolist() == [0.0, 1.0, 2.0]
    assert (tally.total, tally.hidden) == (0, 0)


def test_the_copy_methods_are_restored_on_exit_even_when_the_call_raises():
    from fuzz.oracles.syncs import SyncTally, copy_watch

    before = {name: torch.Tensor.__dict__.get(name) for name in ("to", "cuda", "copy_")}
    try:
        with copy_watch(SyncTally(), lambda: False):
            assert torch.Tensor.to is not before["to"]  # armed: wrapped
            torch.arange(3).to(torch.float32, non_blocking=True)
            raise RuntimeError("the call under test failed")
    except RuntimeError:
        pass
    assert {name: torch.Tensor.__dict__.get(name) for name in ("to", "cuda", "copy_")} == before
    assert torch.arange(2).to(torch.float64).dtype == torch.float64
