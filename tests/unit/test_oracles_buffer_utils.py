"""The staging-buffer oracles (strategies/buffer_utils/oracles.py): each invariant holds on both real copies for a
hand-made spec and flags a hand-broken output; the input model's caller forms build on both sides."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings

import legacy.buffer_utils as legacy_buffer_utils
import optimized.buffer_utils as optimized_buffer_utils
import strategies.buffer_utils.inputs as inputs
import strategies.buffer_utils.oracles as oracles
from fuzz.engine.execute import run_side
from fuzz.errors import HarnessError
from fuzz.releases.sides import bind
from fuzz.targets import lookup

STAGED, POOL, FUSED = lookup(["staged-write-tensor-apply-write", "uva-buffer-pool-copy-to-uva",
                              "fused-staged-writer-apply"])
SIDES = ("legacy", "optimized")

STAGED_INVARIANTS = (oracles.apply_write_writes_what_was_staged, oracles.apply_write_leaves_other_cells_alone,
                     oracles.apply_write_clears_the_stage)
FUSED_INVARIANTS = (oracles.fused_apply_writes_what_was_staged, oracles.fused_apply_leaves_other_cells_alone,
                    oracles.fused_apply_clears_the_stage)
POOL_INVARIANTS = (oracles.copy_to_uva_returns_the_data, oracles.views_survive_until_their_slot_returns)


def staged_spec(*, dtype: str = "int32", uva: bool = True, uva_instead_of_gpu: bool = False) -> dict:
    """Three steps on a 4 x 6 table: a list and an ndarray (rope.py) in one step, an empty step, then a
    dict's keys and an empty list (append_block_ids with no new block)."""
    forms = ("list", "ndarray", "dict_keys") if dtype != "float32" else ("list", "list", "dict_values")
    return {
        "device": "cpu", "dtype": dtype, "rows": 4, "cols": 6, "uva": uva,
        "uva_instead_of_gpu": uva_instead_of_gpu, "max_concurrency": None,
        "steps": [
            [{"op": "write", "index": 1, "start": 2, "form": forms[0], "len": 3, "seed": 1},
             {"op": "write", "index": 3, "start": 0, "form": forms[1], "len": 6, "seed": 2}],
            [],
            [{"op": "write", "index": 1, "start": 0, "form": forms[2], "len": 2, "seed": 3},
             {"op": "write", "index": 0, "start": 4, "form": "list", "len": 0, "seed": 4}],
        ],
    }


def long_row_spec() -> dict:
    """A 1-D tensor's stage_write_elem (states.py) is covered by 1-D specs; this one a write past
    _WRITE_BLOCK_SIZE (two kernel programs on its row)."""
    return {"device": "cpu", "dtype": "int32", "rows": 2, "cols": 1100, "uva": True, "uva_instead_of_gpu": False,
            "max_concurrency": None,
            "steps": [[{"op": "write", "index": 0, "start": 10, "form": "ndarray", "len": 1090, "seed": 5}]]}


def elem_spec() -> dict:
    return {"device": "cpu", "dtype": "int32", "rows": 3, "cols": None, "uva": False, "uva_instead_of_gpu": True,
            "max_concurrency": None,
            "steps": [[{"op": "elem", "index": 2, "seed": 6}, {"op": "elem", "index": 0, "seed": 7}],
                      [{"op": "elem", "index": 2, "seed": 8}]]}


def pool_spec(*, uva: bool = True) -> dict:
    calls = [{"form": "list", "n": n, "seed": 10 + i} for i, n in enumerate((3, 1, 5, 0, 2))]
    return {"device": "cpu", "dtype": "int32", "size": 2, "uva": uva, "max_concurrency": None, "calls": calls}


def output(target, spec: dict, side: str = "optimized"):
    result = run_side(target, side, spec)
    assert result.ok, result.raised
    return result.value


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("spec", [staged_spec(), staged_spec(dtype="float32", uva=False),
                                  staged_spec(uva_instead_of_gpu=True), long_row_spec(), elem_spec()],
                         ids=["int32", "float32-non-uva", "uva-table", "long-row", "elem"])
def test_staged_invariants_hold_on_both_copies(side, spec):
    out = output(STAGED, spec, side)
    for invariant in STAGED_INVARIANTS:
        assert invariant(spec, out) is None, invariant.__name__


def test_a_staged_cell_not_written_is_flagged():
    spec = staged_spec()
    out = output(STAGED, spec)
    out["steps"][0][1, 3] += 1  # a staged cell of step 0
    assert "step 0: a staged cell" in oracles.apply_write_writes_what_was_staged(spec, out)
    assert oracles.apply_write_leaves_other_cells_alone(spec, out) is None


def test_a_stray_write_is_flagged():
    spec = staged_spec()
    out = output(STAGED, spec)
    out["steps"][1][2, 0] = 99  # row 2 is never written; step 1 writes nothing
    assert "step 1: a cell no write named changed" in oracles.apply_write_leaves_other_cells_alone(spec, out)
    assert oracles.apply_write_writes_what_was_staged(spec, out) is None


def test_writes_left_staged_are_flagged():
    spec = staged_spec()
    out = output(STAGED, spec)
    assert "2 writes still staged" in oracles.apply_write_clears_the_stage(spec, {**out, "pending": 2})
    stale = {**out, "gpu": out["steps"][0]}
    assert "differs from the tensor after the last" in oracles.apply_write_clears_the_stage(spec, stale)


def test_a_missing_or_misshapen_snapshot_is_flagged():
    spec = staged_spec()
    out = output(STAGED, spec)
    short = {**out, "steps": out["steps"][:2]}
    assert "2 step snapshots for 3 steps" in oracles.apply_write_writes_what_was_staged(spec, short)
    wrong = {**out, "steps": [s.to(torch.int64) for s in out["steps"]]}
    assert "allocated" in oracles.apply_write_leaves_other_cells_alone(spec, wrong)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("uva", [True, False])
def test_pool_invariants_hold_on_both_copies(side, uva):
    spec = pool_spec(uva=uva)
    out = output(POOL, spec, side)
    for invariant in POOL_INVARIANTS:
        assert invariant(spec, out) is None, invariant.__name__


def test_a_view_not_holding_its_data_is_flagged():
    spec = pool_spec()
    out = output(POOL, spec)
    out["returned"][2][4] += 1
    assert "call 2: the view does not hold x" in oracles.copy_to_uva_returns_the_data(spec, out)
    out["returned"][1] = out["returned"][1][:0]
    assert "call 1: view is (0,)" in oracles.copy_to_uva_returns_the_data(spec, out)


def test_a_view_overwritten_before_its_slot_returns_is_flagged():
    spec = pool_spec()
    out = output(POOL, spec)
    # The slot of the call before the last rewritten by the last call: what a stuck round robin does.
    live = [out["live"][1].clone(), out["live"][1]]
    assert "the view returned 1 call(s) before the last was overwritten" in \
        oracles.views_survive_until_their_slot_returns(spec, {**out, "live": live})
    assert "1 live views for the last 2 calls" in \
        oracles.views_survive_until_their_slot_returns(spec, {**out, "live": out["live"][:1]})


def fused_spec() -> dict:
    """Two KV cache groups of 3 requests (block_table.py), two steps: appends at a row's end and an overwrite."""
    return {"device": "cpu", "rows": 3, "cols": [5, 8], "uva": False, "steps": [
        [{"group": 0, "index": 2, "start": 0, "form": "list", "len": 3, "seed": 1},
         {"group": 1, "index": 2, "start": 0, "form": "list", "len": 6, "seed": 2},
         {"group": 1, "index": 0, "start": 1, "form": "list", "len": 2, "seed": 3}],
        [{"group": 0, "index": 2, "start": 3, "form": "list", "len": 2, "seed": 4},
         {"group": 1, "index": 1, "start": 0, "form": "list", "len": 0, "seed": 5}],
    ]}


@pytest.mark.parametrize("side", SIDES)
def test_fused_invariants_hold_on_both_copies(side):
    spec = fused_spec()
    out = output(FUSED, spec, side)
    for invariant in FUSED_INVARIANTS:
        assert invariant(spec, out) is None, invariant.__name__


def test_fused_breaks_are_flagged_per_group():
    spec = fused_spec()
    out = output(FUSED, spec)
    out["steps"][0][1][0, 2] += 1  # group 1, row 0, a staged cell of step 0
    assert "group 1: step 0: a staged cell" in oracles.fused_apply_writes_what_was_staged(spec, out)
    out = output(FUSED, spec)
    out["steps"][1][0][0, 0] = 7  # group 0, row 0: no write of step 1 names it
    assert "group 0: step 1: a cell no write named changed" in oracles.fused_apply_leaves_other_cells_alone(spec, out)
    assert "1 writes still staged" in oracles.fused_apply_clears_the_stage(spec, {**out, "pending": 1})
    assert "2 group tables" in oracles.fused_apply_clears_the_stage(spec, {**out, "gpu": out["gpu"][:1]})


# ---- a side rebuilt from 0.28.0: no NonUvaBuffer, no slot growth, one kernel program per write -----------

OLD = "vllm==0.28.0"


def on_0_28_0(target):
    return bind(target, legacy=OLD)


# On a CUDA host the 0.28.0 kernel runs as such; on a host spec the copy's _Launcher interprets it, on every host.
# Triton 3.6's interpreter took 0.28.0's `range(0, content_len, BLOCK_SIZE)` bound with int() of a 1-element array,
# which numpy 2.4+ refuses ("only 0-dimensional arrays can be converted to Python scalars", the GPU host's triton 3.6.0,
# lab/gpu-runs/2026-12-06f-h100.md; here too with triton 3.6.0 beside numpy 2.4.6): the launcher's _squeezed_index.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", [staged_spec(), staged_spec(uva_instead_of_gpu=True), long_row_spec()],
                         ids=["int32", "uva-table", "long-row"])
def test_staged_invariants_hold_on_0_28_0(spec, device):
    # 0.28.0's _apply_write_kernel loops over a write's blocks in one program (grid (n,)): the copy's _Launcher
    # and _check_writes (ADAPTED, kept by the merge) run it the same way.
    spec = {**spec, "device": device}
    out = output(on_0_28_0(STAGED), spec, "legacy")
    for invariant in STAGED_INVARIANTS:
        assert invariant(spec, out) is None, invariant.__name__


@pytest.mark.parametrize("copy", [legacy_buffer_utils, optimized_buffer_utils], ids=["legacy", "optimized"])
def test_the_launcher_reads_a_loaded_scalar_as_an_index_on_any_triton(copy):
    # Triton 3.6's own patch, as it reads an index: int() of the loaded value's 1-element array.
    def triton_3_6(tensor, scope):
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    class Loaded:
        handle = SimpleNamespace(data=np.array([5], dtype=np.int32))

    copy._squeezed_index(triton_3_6)(Loaded, Scope())
    assert range(0, Loaded(), 2) == range(0, 5, 2)


def test_a_stray_write_is_still_refused_on_0_28_0():
    module = on_0_28_0(STAGED).impl("legacy").module
    grid, out = (1,), torch.zeros(2, 4, dtype=torch.int32)
    ints = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    with pytest.raises(IndexError, match="outside the buffers"):
        module._check_writes(grid, out, 4, ints(1), ints(2), ints(1, 2, 3), ints(3), None)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_invariants_hold_on_0_28_0(device):
    spec = {**fused_spec(), "uva": True, "device": device}
    out = output(on_0_28_0(FUSED), spec, "legacy")
    for invariant in FUSED_INVARIANTS:
        assert invariant(spec, out) is None, invariant.__name__


def test_with_a_0_28_0_side_the_fallback_and_growth_are_not_drawn():
    assert inputs.side_support({s: POOL.impl(s) for s in SIDES}) == inputs.SideSupport(True, True)  # the copies
    old = on_0_28_0(POOL)
    support = inputs.side_support({s: old.impl(s) for s in SIDES})
    assert support == inputs.SideSupport(fallback=False, grows=False)
    model = old.input_model().for_sides({s: old.impl(s) for s in SIDES})

    @given(model.specs(["cpu"], "wide"))
    @settings(max_examples=30, database=None)
    def drawn(spec):
        sizes = spec["size"] if isinstance(spec["size"], int) else spec["size"][0]
        assert spec["uva"] and all(c["n"] <= sizes for c in spec["calls"])

    drawn()


def test_a_saved_fallback_spec_is_refused_on_0_28_0_as_an_input_it_cannot_take():
    with pytest.raises(HarnessError, match="no NonUvaBuffer"):
        on_0_28_0(POOL).input_model().materialize(pool_spec(uva=False), on_0_28_0(POOL).impl("legacy"), "legacy")
