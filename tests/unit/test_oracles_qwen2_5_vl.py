"""qwen25-vl-rope-by-thw oracles (strategies/qwen2_5_vl/oracles.py): each invariant holds on both real
copies' output and flags a hand-broken one; the reference matches the copies and flags a broken
output; the copies satisfy all of it over the target's own caller and wide specs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.engine.execute import run_side
from fuzz.targets import resolve_object
from strategies.qwen2_5_vl import oracles as Q25
from tests.unit.test_oracles_qwen2_vl import output, replaced, target

THW = "qwen25-vl-rope-by-thw"
SAMPLE = settings(max_examples=25, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def thw_spec(grid=([1, 4, 8], [2, 4, 4]), repeats=([0, 0], [1, 3]), **extra) -> dict:
    # window 1 merged token: every grid has several windows; repeats: an exact hit and a new t
    return {"device": "cpu", "merge": 2, "rotary_half": 2, "dtype": "float32", "seed": 7,
            "grid_thw": [list(g) for g in grid], "window": 1, "repeats": [list(r) for r in repeats],
            "scalar_form": "int", **extra}


def _thw_breaks(out):
    def edit(call: int, part: int, value):
        broken = [tuple(r) for r in out]
        result = list(broken[call])
        result[part] = value
        broken[call] = tuple(result)
        return broken

    cos, sin, index, cu_window, cu_full = out[0]
    # call 0 is [1, 4, 8]: 2 x 4 merged tokens, windows of 1 token (4 patches each)
    return [
        (Q25.rope_by_thw_parts_have_their_shapes, edit(0, 0, cos[:-1])),
        (Q25.rope_by_thw_parts_have_their_shapes, edit(0, 2, index.int())),
        (Q25.rope_by_thw_parts_have_their_shapes, edit(0, 4, cu_full.long())),
        (Q25.rope_by_thw_parts_have_their_shapes, edit(0, 4, cu_full + 1)),
        (Q25.rope_by_thw_parts_have_their_shapes, out[:-1]),
        (Q25.rope_by_thw_windows_partition_the_tokens, edit(0, 2, index.flip(0))),
        (Q25.rope_by_thw_windows_partition_the_tokens, edit(0, 2, replaced(index, 0, index[1]))),
        (Q25.rope_by_thw_windows_partition_the_tokens, edit(0, 3, replaced(cu_window, 0, cu_window[0] + 1))),
        (Q25.rope_by_thw_rows_follow_the_windows, edit(0, 1, replaced(sin, 0, sin[4]))),
        (Q25.rope_by_thw_rows_follow_the_windows, edit(0, 0, cos.flip(1))),
        # call 2 repeats call 0 exactly: hand it another item's window sums
        (Q25.rope_by_thw_repeats_agree, edit(2, 3, cu_window + 4)),
    ]


@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_rope_by_thw_invariants_hold_on_the_copies(side):
    spec = thw_spec()
    out = output(THW, spec, side)
    assert len(out) == 4  # two items, an exact repeat, a new t
    for path in target(THW).invariants:
        assert resolve_object(path)(spec, out) is None, path


def test_each_rope_by_thw_invariant_flags_a_broken_output():
    spec = thw_spec()
    out = output(THW, spec)
    breaks = _thw_breaks(out)
    assert {fn.__name__ for fn, _ in breaks} == {p.rpartition(":")[2] for p in target(THW).invariants}
    for invariant, broken in breaks:
        assert invariant(spec, broken), (invariant.__name__, "missed a broken output")


def test_rope_by_thw_reference_matches_and_flags():
    spec = thw_spec()
    out = output(THW, spec)
    ref = Q25.ROPE_BY_THW_REFERENCE
    want, got = ref.expected(spec), ref.observed(out)
    assert len(want) == len(got) == 4
    for expected, observed in zip(want, got):
        for a, b in zip(expected, observed):
            assert a.dtype == b.dtype and torch.equal(a, b)
    broken = ref.observed([(r[0], r[1], r[2].flip(0), r[3], r[4]) for r in out])
    assert not torch.equal(want[0][2], broken[0][2])


def test_rope_by_thw_window_order_by_hand():
    # a 2 x 3 merged grid in windows of 2: [0, 1, 3, 4] then the cut-off right column [2, 5]
    order, sizes = Q25.window_order(1, 4, 6, 2, 2)
    assert order == [0, 1, 3, 4, 2, 5] and sizes == [16, 8]
    # merge 1, window 4: one window holds the whole 3 x 3 grid
    assert Q25.window_order(2, 3, 3, 1, 4) == (list(range(18)), [9, 9])


def test_rope_by_thw_cache_hit_returns_the_cached_tensors():
    """An exact repeat returns the very tuple cached by the first call, on both sides: 0.30.0's
    per-tower LRUCache and 0.28.0's lru_cache on the method."""
    for side in ("legacy", "optimized"):
        out = output(THW, thw_spec(), side)
        assert out[2] is out[0]


@SAMPLE
@given(data=st.data())
def test_the_copies_satisfy_every_oracle_over_drawn_specs(data):
    record = target(THW)
    inputs = resolve_object(record.inputs)()
    for contract in ("caller", "wide"):
        spec = data.draw(inputs.specs(["cpu"], contract))
        result = run_side(record, "optimized", spec)
        assert result.ok, (spec, result.raised)  # every drawn grid is a valid call, numpy ints included
        for path in record.invariants:
            assert resolve_object(path)(spec, result.value) is None, (path, spec)


# --- qwen25-vl-encoder-metadata ---------------------------------------------------------------------------

META = "qwen25-vl-encoder-metadata"


def meta_spec(grid=([1, 4, 8], [2, 4, 4]), backend="FLASH_ATTN", kwargs=None, **extra) -> dict:
    # window 2 merged tokens: item 0 (2 x 4 tokens) has two windows, so the window order is no identity;
    # item 1 is a 2-frame video. Padded to 5 frames and 8 windows (a replay's budgets).
    kwargs = {"max_frames_per_batch": 5, "max_window_seqs_per_batch": 8} if kwargs is None else kwargs
    return {"device": "cpu", "merge": 2, "rotary_half": 2, "dtype": "float32", "seed": 7, "backend": backend,
            "path": "replay-video", "grid_thw": [list(g) for g in grid], "grid_form": "list", "kwargs": kwargs,
            "window": 2, "hidden_size": 16, "tp_size": 1, "fp8_padded_hidden_size": None, **extra}


def _meta_breaks(out):
    def put(**changes):
        return {**out, **changes}

    index, cu, cu_window = out["window_index"], out["cu_seqlens"], out["cu_window_seqlens"]
    return [
        (Q25.metadata_windows_are_a_permutation_and_its_inverse, put(window_index=index.int())),
        (Q25.metadata_windows_are_a_permutation_and_its_inverse,
         put(reverse_indices=torch.arange(index.numel()))),  # this window order is its own inverse: not the identity
        (Q25.metadata_windows_are_a_permutation_and_its_inverse, put(window_index=replaced(index, 8, 0))),
        (Q25.metadata_seqlens_follow_frames_and_windows, put(cu_seqlens=cu[:-1])),
        (Q25.metadata_seqlens_follow_frames_and_windows, put(cu_window_seqlens=replaced(cu_window, -1, 0))),
        (Q25.metadata_seqlens_follow_frames_and_windows, put(sequence_lengths_full=cu)),
        (Q25.metadata_max_seqlens_stay_on_the_host, put(max_seqlen_full=torch.tensor(32))),
        (Q25.metadata_max_seqlens_stay_on_the_host, put(max_seqlen_window=torch.tensor(0, dtype=torch.int32))),
        (Q25.metadata_rows_follow_the_windows,
         put(rotary_pos_emb_sin=replaced(out["rotary_pos_emb_sin"], 0, out["rotary_pos_emb_sin"][4]))),
        (Q25.metadata_rows_follow_the_windows, put(rotary_pos_emb_cos=out["rotary_pos_emb_cos"].double())),
    ]


@pytest.mark.parametrize("side", ["legacy", "optimized"])
@pytest.mark.parametrize("backend", ["FLASH_ATTN", "TORCH_SDPA", "FLASHINFER"])
def test_metadata_invariants_hold_on_the_copies(side, backend):
    spec = meta_spec(backend=backend)
    out = output(META, spec, side)
    for path in target(META).invariants:
        assert resolve_object(path)(spec, out) is None, path


def test_each_metadata_invariant_flags_a_broken_output():
    spec = meta_spec()
    out = output(META, spec)
    # item 0: windows [0, 1, 4, 5] and [2, 3, 6, 7]; item 1 (8 tokens from 8 on): one window per frame
    assert out["window_index"].tolist() == [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert out["cu_seqlens"].tolist() == [0, 32, 48, 64, 64, 64]
    assert out["cu_window_seqlens"].tolist() == [0, 16, 32, 48, 64, 64, 64, 64, 64]
    assert int(out["max_seqlen_full"]) == 32 and int(out["max_seqlen_window"]) == 16
    breaks = _meta_breaks(out)
    assert {fn.__name__ for fn, _ in breaks} == {p.rpartition(":")[2] for p in target(META).invariants}
    for invariant, broken in breaks:
        assert invariant(spec, broken), (invariant.__name__, "missed a broken output")


def test_metadata_flashinfer_layout_by_hand():
    spec = meta_spec(backend="FLASHINFER", kwargs={})
    out = output(META, spec)
    # 3 frames -> FlashInfer's batch bucket of 8; offsets scaled by hidden 16 (Q/K/O) and 48 (V)
    qko = [0, 512, 768, 1024] + [1024] * 5
    assert out["cu_seqlens"].tolist() == qko + [3 * b for b in qko]
    assert out["sequence_lengths_full"].tolist() == [32, 16, 16, 0, 0, 0, 0, 0]
    assert int(out["max_seqlen_full"]) == 1024  # the smallest FlashInfer bucket
    fp8 = output(META, meta_spec(backend="FLASHINFER", kwargs={}, fp8_padded_hidden_size=32))
    assert fp8["cu_seqlens"].tolist() == [0, 1024, 1536, 2048] + [2048] * 5 + [0, 1024, 1536, 2048] + [2048] * 5


def test_metadata_reference_matches_and_flags():
    for backend in ("FLASH_ATTN", "TORCH_SDPA", "FLASHINFER"):
        spec = meta_spec(backend=backend)
        out = output(META, spec)
        ref = Q25.METADATA_REFERENCE
        want, got = ref.expected(spec), ref.observed(out)
        for key in want:
            assert (want[key] is None and got[key] is None) or torch.equal(want[key], got[key]), (backend, key)
    assert Q25.METADATA_REFERENCE.expected(meta_spec(grid=())) is None


@SAMPLE
@given(data=st.data())
def test_the_copies_satisfy_every_metadata_oracle_over_drawn_specs(data):
    record = target(META)
    inputs = resolve_object(record.inputs)()
    for contract in ("caller", "wide"):
        spec = data.draw(inputs.specs(["cpu"], contract))
        result = run_side(record, "optimized", spec)
        if not result.ok:
            continue  # an input both sides refuse (wide: an empty grid list); agreement is fuzzed elsewhere
        for path in record.invariants:
            assert resolve_object(path)(spec, result.value) is None, (contract, path, spec)
