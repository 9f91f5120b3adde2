"""qwen2-vl-encoder-metadata oracles (strategies/qwen2_vl_meta/oracles.py): each invariant holds on both copies'
output and flags a hand-broken one; the reference matches the copies; the consumer makes the blocks' reads;
the copies satisfy every oracle over the target's own caller and wide specs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fuzz.engine.execute import run_side
from fuzz.targets import resolve_object
from strategies.qwen2_vl_meta import oracles as M
from strategies.qwen2_vl_meta.inputs import capture_grid
from tests.unit.test_oracles_qwen2_vl import SAMPLE, output, replaced, target

META = "qwen2-vl-encoder-metadata"


def meta_spec(grid=([1, 2, 4], [2, 4, 4]), backend="FLASH_ATTN", path="replay-video", kwargs=None, **extra) -> dict:
    # two images, one a 2-frame video: 3 frames, padded to 5 sequences
    kwargs = {"max_frames_per_batch": 5} if kwargs is None else kwargs
    return {"device": "cpu", "merge": 2, "rotary_half": 2, "dtype": "float32", "seed": 7, "backend": backend,
            "path": path, "grid_thw": [list(g) for g in grid], "grid_form": "list", "kwargs": kwargs, **extra}


def _with(out: dict, **changes) -> dict:
    return {**out, **changes}


def _breaks(out):
    cu, cos = out["cu_seqlens"], out["rotary_pos_emb_cos"]
    return [
        (M.metadata_cu_seqlens_are_frame_boundaries, _with(out, cu_seqlens=cu[:-1])),
        (M.metadata_cu_seqlens_are_frame_boundaries, _with(out, cu_seqlens=cu.long())),
        (M.metadata_cu_seqlens_are_frame_boundaries, _with(out, cu_seqlens=replaced(cu, 4, 0))),
        (M.metadata_cu_seqlens_are_frame_boundaries, {k: v for k, v in out.items() if k != "cu_seqlens"}),
        (M.metadata_max_seqlen_follows_backend, _with(out, max_seqlen=None)),
        (M.metadata_max_seqlen_follows_backend, _with(out, max_seqlen=torch.tensor(15, dtype=torch.int32))),
        (M.metadata_max_seqlen_follows_backend, _with(out, max_seqlen=torch.tensor(16))),
        (M.metadata_rotary_rows_follow_the_patches, _with(out, rotary_pos_emb_cos=replaced(cos, 0, cos[1]))),
    ]


@pytest.mark.parametrize("side", ["legacy", "optimized"])
@pytest.mark.parametrize("backend", ["FLASH_ATTN", "TORCH_SDPA"])
def test_invariants_hold_on_the_copies(side, backend):
    spec = meta_spec(backend=backend)
    out = output(META, spec, side)
    for path in target(META).invariants:
        assert resolve_object(path)(spec, out) is None, path


def test_each_invariant_flags_a_broken_output():
    spec = meta_spec()
    out = output(META, spec)
    assert out["cu_seqlens"].tolist() == [0, 8, 24, 40, 40, 40] and int(out["max_seqlen"]) == 16
    breaks = _breaks(out)
    assert {fn.__name__ for fn, _ in breaks} == {p.rpartition(":")[2] for p in target(META).invariants}
    for invariant, broken in breaks:
        assert invariant(spec, broken), (invariant.__name__, "missed a broken output")
    sdpa = meta_spec(backend="TORCH_SDPA")
    assert M.metadata_max_seqlen_follows_backend(sdpa, _with(out, max_seqlen=out["max_seqlen"]))


def test_capture_override_and_grid():
    grid = capture_grid(token_budget=5, max_batch_size=2, max_frames_per_batch=5, merge=2)
    assert grid == [[2, 2, 4], [2, 2, 4]]  # per item ceil(5/2)=3 tokens, 2 frames of ceil(3/2)=2 tokens
    kwargs = {"max_batch_size": 2, "max_frames_per_batch": 5, "max_seqlen_override": 20, "device": "spec"}
    spec = meta_spec(grid=grid, path="capture", kwargs=kwargs)
    out = output(META, spec)
    assert int(out["max_seqlen"]) == 20 and out["cu_seqlens"].tolist() == [0, 8, 16, 24, 32, 32]
    for path in target(META).invariants:
        assert resolve_object(path)(spec, out) is None, path


def test_reference_matches_and_flags():
    spec = meta_spec()
    out = output(META, spec)
    ref = M.METADATA_REFERENCE
    want, got = ref.expected(spec), ref.observed(out)
    assert set(want) == set(got) and all(torch.equal(want[k], got[k]) for k in want)
    assert ref.expected(meta_spec(grid=())) is None


def test_consumer_reads_on_the_host():
    spec = meta_spec(backend="TORCH_SDPA")
    M.encoder_blocks_read_metadata(spec, output(META, spec))  # cpu: the SDPA read, no error


@SAMPLE
@given(data=st.data())
def test_the_copies_satisfy_every_oracle_over_drawn_specs(data):
    record = target(META)
    inputs = resolve_object(record.inputs)()
    for contract in ("caller", "wide"):
        spec = data.draw(inputs.specs(["cpu"], contract))
        result = run_side(record, "optimized", spec)
        if not result.ok:
            continue  # an input both sides refuse (wide: an empty grid list); agreement is fuzzed elsewhere
        for path in record.invariants:
            assert resolve_object(path)(spec, result.value) is None, (contract, path, spec)
