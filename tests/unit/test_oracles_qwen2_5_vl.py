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
