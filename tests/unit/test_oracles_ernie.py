"""ernie45_vl's oracles (strategies/ernie45_vl/oracles.py): each invariant holds on
the real copies and flags a hand-broken output, the references match both
copies and flag a broken one, the consumers make upstream's reads and no
other, and the bugs planted in both copies span two targets (the fuzz that must report each is
tests/e2e/test_oracles.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies.ernie45_vl.oracles as oracles
from fuzz.engine.execute import run_example
from fuzz.oracles.compare import compare_values
from fuzz.records.verdicts import Verdict
from fuzz.targets import CONTRACTS, Comparison, Target, lookup
from tests import planted
from tests.conftest import requires_cuda

ROT, METADATA, GRAPH, RESAMPLER = lookup(
    ["ernie-rot-pos-emb", "ernie-encoder-metadata", "ernie-encoder-metadata-graph", "ernie-resampler-placeholder"]
)
SIDES = ("legacy", "optimized")


def tower_spec(grid: list[list[int]], *, merge: int = 2, head_dim: int = 8, backend: str = "FLASH_ATTN",
               num_pad: int = 0, device: str = "cpu", grid_form: str = "device_tensor") -> dict:
    return {"device": device, "merge": merge, "head_dim": head_dim, "backend": backend, "grid_thw": grid,
            "grid_form": grid_form, "grid_dtype": "int64", "rotary_on": "device", "num_pad": num_pad}


def graph_spec(grid: list[list[int]], *, path: str, batch: int | None, override: int | None,
               merge: int = 2, backend: str = "FLASH_ATTN", device: str = "cpu") -> dict:
    spec = tower_spec(grid, merge=merge, backend=backend, device=device, grid_form="list")
    spec.update(grid_dtype="int32", path=path, max_batch_size=batch, max_seqlen_override=override,
                pass_device=path == "capture")
    return spec


def resampler_spec(grid: list[list[int]], *, conv: int = 2, temporal: bool = True) -> dict:
    return {"device": "cpu", "spatial_conv_size": conv, "in_dim": 2, "out_dim": 3, "float_dtype": "float32",
            "seed": 7, "grid_thw": grid, "grid_form": "device_tensor", "grid_dtype": "int64",
            "use_temporal_conv": temporal}


def call(target: Target, spec: dict, side: str = "optimized") -> Any:
    return target.input_model().materialize(spec, target.impl(side), side)()


def replaced(value: dict, **fields: Any) -> dict:
    return {**value, **fields}


# A frame with h != w and several merge windows, a second item, and a video item of 2 frames.
GRID = [[1, 2, 4], [1, 4, 2], [2, 2, 2]]


# -- rot_pos_emb ------------------------------------------------------------------------

def test_rot_invariants_hold_on_both_copies():
    spec = tower_spec(GRID, grid_form="cpu_tensor")
    for side in SIDES:
        output = call(ROT, spec, side)
        for path in ROT.invariants:
            check = getattr(oracles, path.rpartition(":")[2])
            assert check(spec, output) is None, (side, path)


def test_rot_shape_flags_a_dropped_row_and_wrong_width():
    spec = tower_spec(GRID)
    output = call(ROT, spec)
    assert "want (24, 4)" in oracles.rot_pos_emb_shape(spec, output[:-1])
    assert "want (24, 4)" in oracles.rot_pos_emb_shape(spec, output[:, :2])


def test_rows_are_table_rows_flags_a_row_off_the_table():
    spec = tower_spec(GRID)
    output = call(ROT, spec).clone()
    output[5, 1] += 0.25  # the h half's second frequency no longer matches its position
    assert "row 5 column 1" in oracles.rot_pos_emb_rows_are_table_rows(spec, output)
    output = call(ROT, spec).clone()
    output[3, 0] = 0.5  # not a position id
    assert "not non-negative integers" in oracles.rot_pos_emb_rows_are_table_rows(spec, output)


def test_covers_every_frame_flags_swapped_halves_and_a_doubled_token():
    spec = tower_spec([[1, 2, 4]], merge=1)
    output = call(ROT, spec)
    swapped = torch.cat([output[:, 2:], output[:, :2]], dim=1)  # w positions in the h half
    assert "outside its grid" in oracles.rot_pos_emb_covers_every_frame(spec, swapped)
    doubled = output.clone()
    doubled[1] = doubled[0]
    assert "cover 7 distinct cells" in oracles.rot_pos_emb_covers_every_frame(spec, doubled)
    assert oracles.rot_pos_emb_covers_every_frame(spec, output) is None


def test_follows_merge_windows_flags_row_major_order():
    spec = tower_spec([[1, 2, 4]], merge=2)
    output = call(ROT, spec)
    # Row-major over the whole frame covers it too, but a window is then (0,0),(0,1),(0,2),(0,3).
    order = [r * 4 + c for r in range(2) for c in range(4)]
    by_position = {tuple(int(v) for v in output[i, [0, 2]].tolist()): i for i in range(8)}
    row_major = output[[by_position[divmod(k, 4)] for k in order]]
    assert oracles.rot_pos_emb_covers_every_frame(spec, row_major) is None
    assert "not the 2x2 window (0, 0)" in oracles.rot_pos_emb_follows_merge_windows(spec, row_major)
    assert oracles.rot_pos_emb_follows_merge_windows(spec, output) is None


def test_rot_invariants_skip_grids_without_a_merge_order():
    spec = tower_spec([[1, 3, 4]], merge=2)  # h not a multiple of the merge size: no window order
    for path in ROT.invariants:
        assert getattr(oracles, path.rpartition(":")[2])(spec, torch.zeros(12, 4)) is None


# -- prepare_encoder_metadata (eager) --------------------------------------------------------

def test_metadata_invariants_hold_on_both_copies_with_and_without_padding():
    for spec in (tower_spec(GRID), tower_spec(GRID, num_pad=3, backend="TRITON_ATTN"),
                 tower_spec(GRID, backend="TORCH_SDPA", grid_form="cpu_tensor")):
        for side in SIDES:
            output = call(METADATA, spec, side)
            for path in METADATA.invariants:
                assert getattr(oracles, path.rpartition(":")[2])(spec, output) is None, (side, path, spec)


def test_running_sum_flags_each_way_to_be_wrong():
    spec = tower_spec(GRID, num_pad=3)
    output = call(METADATA, spec)
    assert output["cu_seqlens"].tolist() == [0, 8, 16, 20, 24, 27]
    check = oracles.metadata_cu_seqlens_running_sum
    assert check(spec, output) is None
    cases = {
        "does not start at 0": [1, 8, 16, 20, 24, 27],
        "decreases at index 2": [0, 8, 7, 20, 24, 27],
        "has 5 entries, want 6": [0, 8, 16, 20, 24],
        "not at the token total 27": [0, 8, 16, 20, 24, 26],
        "first at index 1": [0, 9, 16, 20, 24, 27],
    }
    for message, offsets in cases.items():
        broken = replaced(output, cu_seqlens=torch.tensor(offsets, dtype=torch.int32))
        assert message in check(spec, broken), message


def test_max_seqlen_flags_the_packed_total_and_a_value_for_sdpa():
    spec = tower_spec(GRID)
    output = call(METADATA, spec)
    check = oracles.metadata_max_seqlen_is_longest
    assert check(spec, output) is None and int(output["max_seqlen"]) == 8
    assert "longest sequence" in check(spec, replaced(output, max_seqlen=torch.tensor(24)))
    assert "not a 0-d tensor" in check(spec, replaced(output, max_seqlen=8))
    sdpa = tower_spec(GRID, backend="TORCH_SDPA")
    assert call(METADATA, sdpa)["max_seqlen"] is None and check(sdpa, call(METADATA, sdpa)) is None
    assert "which gets None" in check(sdpa, output)


def test_on_attention_device_flags_dtype_and_device():
    spec = tower_spec(GRID)
    output = call(METADATA, spec)
    check = oracles.metadata_on_attention_device
    assert check(spec, output) is None
    assert "not torch.int32" in check(spec, replaced(output, cu_seqlens=output["cu_seqlens"].long()))
    on_cuda = tower_spec(GRID, device="cuda")  # a CPU output checked against a CUDA example
    assert "rotary_pos_emb is on cpu, not on cuda" in check(on_cuda, output)
    on_cuda_cpu_grid = tower_spec(GRID, device="cuda", grid_form="cpu_tensor")
    moved = replaced(output, rotary_pos_emb=output["rotary_pos_emb"].to("meta"))
    assert "rotary_pos_emb is on meta" in check(on_cuda_cpu_grid, moved)


def test_encoder_rotary_follows_grid_flags_a_missing_token():
    spec = tower_spec(GRID, num_pad=3)
    output = call(METADATA, spec)
    assert oracles.encoder_rotary_follows_grid(spec, output) is None
    short = replaced(output, rotary_pos_emb=output["rotary_pos_emb"][:-1])
    assert "want (24, 4)" in oracles.encoder_rotary_follows_grid(spec, short)


def test_an_output_of_the_wrong_structure_raises_for_the_engine_to_report():
    with pytest.raises(KeyError):
        oracles.metadata_cu_seqlens_running_sum(tower_spec(GRID), torch.zeros(3))


# -- prepare_encoder_metadata (CUDA-graph paths) ----------------------------------------------

CAPTURE = graph_spec([[1, 2, 6]] * 3, path="capture", batch=3, override=20)
REPLAY = graph_spec([[1, 2, 4], [1, 4, 4]], path="replay", batch=4, override=None)


def test_graph_invariants_hold_on_both_sides():
    for spec in (CAPTURE, REPLAY, graph_spec([[1, 2, 2]], path="replay", batch=None, override=None,
                                             backend="TORCH_SDPA")):
        for side in SIDES:
            output = call(GRAPH, spec, side)
            for path in GRAPH.invariants:
                assert getattr(oracles, path.rpartition(":")[2])(spec, output) is None, (side, path, spec)


def test_graph_padding_repeats_the_last_offset():
    output = call(GRAPH, REPLAY)
    assert output["cu_seqlens"].tolist() == [0, 8, 24, 24, 24]
    check = oracles.graph_cu_seqlens_padded
    zero_padded = replaced(output, cu_seqlens=torch.tensor([0, 8, 24, 0, 0], dtype=torch.int32))
    assert "decreases at index 3" in check(REPLAY, zero_padded)
    unpadded = replaced(output, cu_seqlens=torch.tensor([0, 8, 24], dtype=torch.int32))
    assert "has 3 entries, want 5" in check(REPLAY, unpadded)


def test_graph_max_seqlen_is_the_override_on_the_host():
    output = call(GRAPH, CAPTURE)
    check = oracles.graph_max_seqlen_on_host
    assert check(CAPTURE, output) is None and int(output["max_seqlen"]) == 20
    derived = replaced(output, max_seqlen=torch.tensor(12, dtype=torch.int32))
    assert "not the override 20" in check(CAPTURE, derived)
    assert "as int32" in check(CAPTURE, replaced(output, max_seqlen=torch.tensor(20)))
    on_device = replaced(output, max_seqlen=torch.tensor(20, dtype=torch.int32, device="meta"))
    assert "inside the graph" in check(CAPTURE, on_device)
    replay = call(GRAPH, REPLAY)
    assert check(REPLAY, replay) is None and int(replay["max_seqlen"]) == 16
    assert "longest sequence" in check(REPLAY, replaced(replay, max_seqlen=torch.tensor(24)))


def test_graph_buffers_on_device_flags_a_host_buffer():
    output = call(GRAPH, REPLAY)
    check = oracles.graph_buffers_on_device
    assert check(REPLAY, output) is None
    on_cuda = graph_spec([[1, 2, 4], [1, 4, 4]], path="replay", batch=4, override=None, device="cuda")
    assert "cu_seqlens is on cpu, not on cuda" in check(on_cuda, output)
    assert "not torch.int32" in check(REPLAY, replaced(output, cu_seqlens=output["cu_seqlens"].long()))


# -- references ------------------------------------------------------------------------------

def differences(reference, spec: dict, output: Any) -> list:
    return list(compare_values(reference.expected(spec), reference.observed(output),
                               Comparison(floats=reference.floats)))


@pytest.mark.parametrize("spec", [tower_spec(GRID), tower_spec(GRID, merge=1, head_dim=16, num_pad=1),
                                  tower_spec([[2, 4, 2]], backend="TORCH_SDPA")], ids=["m2", "m1-pad", "sdpa-t2"])
def test_references_match_both_copies(spec):
    for side in SIDES:
        assert differences(oracles.ROT_POS_EMB_REFERENCE, spec, call(ROT, spec, side)) == []
        assert differences(oracles.METADATA_REFERENCE, spec, call(METADATA, spec, side)) == []


def test_reference_spells_out_the_merge_order():
    spec = tower_spec([[1, 2, 4]], merge=2, head_dim=4)  # one frequency: columns are the positions
    expected = oracles.ROT_POS_EMB_REFERENCE.expected(spec)
    assert expected.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]


def test_graph_reference_matches_both_sides():
    for spec in (CAPTURE, REPLAY):
        for side in SIDES:
            assert differences(oracles.GRAPH_METADATA_REFERENCE, spec, call(GRAPH, spec, side)) == []


def test_references_flag_broken_outputs():
    spec = tower_spec(GRID)
    rot = call(ROT, spec)
    transposed_windows = rot.clone()
    transposed_windows[[1, 2]] = rot[[2, 1]]  # within a window, (0, 1) and (1, 0) swapped: invariants hold
    assert all(getattr(oracles, p.rpartition(":")[2])(spec, transposed_windows) is None for p in ROT.invariants)
    assert differences(oracles.ROT_POS_EMB_REFERENCE, spec, transposed_windows)
    output = call(METADATA, spec)
    broken = replaced(output, max_seqlen=torch.tensor(24))
    assert [d.path for d in differences(oracles.METADATA_REFERENCE, spec, broken)] == ["['max_seqlen']"]
    replay = call(GRAPH, REPLAY)
    unpadded = replaced(replay, cu_seqlens=replay["cu_seqlens"][:3])
    assert differences(oracles.GRAPH_METADATA_REFERENCE, REPLAY, unpadded)


def test_references_say_nothing_where_the_meaning_does_not_apply():
    assert oracles.METADATA_REFERENCE.expected(tower_spec([])) is None
    assert oracles.ROT_POS_EMB_REFERENCE.expected(tower_spec([[1, 3, 2]])) is None


# -- resampler -------------------------------------------------------------------------------

def test_resampler_invariants_hold_on_both_copies():
    for spec in (resampler_spec([[1, 2, 4], [1, 4, 2]]), resampler_spec([[2, 2, 2], [4, 2, 4]]),
                 resampler_spec([[1, 2, 2]], conv=1, temporal=False)):
        for side in SIDES:
            output = call(RESAMPLER, spec, side)
            for path in RESAMPLER.invariants:
                assert getattr(oracles, path.rpartition(":")[2])(spec, output) is None, (side, path, spec)


def test_resampler_output_rows_follow_the_split_sizes():
    spec = resampler_spec([[1, 2, 4], [4, 2, 4]])  # image: 2 tokens; video of 4 frames: 2 pairs x 2
    output = call(RESAMPLER, spec)
    check = oracles.resampler_output_follows_grid
    assert tuple(output["output"].shape) == (6, 3) and check(spec, output) is None
    assert "want (6, 3)" in check(spec, replaced(output, output=output["output"][:-2]))
    assert "not float32" in check(spec, replaced(output, output=output["output"].double()))


def test_resampler_pairs_an_image_with_itself():
    spec = resampler_spec([[2, 2, 2], [1, 2, 4]])
    output = call(RESAMPLER, spec)
    check = oracles.resampler_pairs_frames
    assert check(spec, output) is None
    gathered = output["placeholder"].clone()
    gathered[1:, 8:] = gathered[0, 8:]  # the image's second half taken from the video's frame 1
    assert "image 1 (rows 1..2) is not paired with itself" in check(spec, replaced(output, placeholder=gathered))
    assert "want (3, 16)" in check(spec, replaced(output, placeholder=gathered[:, :8]))


def test_resampler_invariants_skip_odd_frame_counts():
    spec = resampler_spec([[3, 2, 2]])
    assert oracles.resampler_output_follows_grid(spec, {}) is None
    assert oracles.resampler_pairs_frames(spec, {}) is None


# -- consumers -------------------------------------------------------------------------------

@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every .item() / .tolist() made while the consumer runs."""
    seen: list[str] = []
    for name in ("item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            seen.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return seen


@pytest.mark.parametrize("backend, device, want", [
    ("FLASH_ATTN", "cuda", ["item"]), ("ROCM_AITER_FA", "cuda", ["item"]), ("TRITON_ATTN", "cuda", ["item"]),
    ("TORCH_SDPA", "cuda", ["tolist"]), ("FLASH_ATTN", "cpu", ["tolist"]),
])
def test_eager_consumer_makes_one_block_s_reads(backend, device, want, reads):
    output = call(METADATA, tower_spec(GRID, backend=backend))  # built on the CPU, read as a `device` example
    before = copy.deepcopy(output)
    reads.clear()
    oracles.encoder_blocks_read_metadata(tower_spec(GRID, backend=backend, device=device), output)
    assert reads == want
    assert not list(compare_values(before, output, Comparison(floats="exact")))  # left unchanged


def test_graph_consumer_reads_twice_at_capture_and_only_copies_at_replay(reads):
    capture = call(GRAPH, CAPTURE)
    reads.clear()
    oracles.graph_forward_reads_metadata({**CAPTURE, "device": "cuda"}, capture)
    assert reads == ["item", "item"]
    replay = call(GRAPH, REPLAY)
    before = copy.deepcopy(replay)
    reads.clear()
    oracles.graph_forward_reads_metadata(REPLAY, replay)
    assert reads == []
    assert not list(compare_values(before, replay, Comparison(floats="exact")))


@requires_cuda
def test_on_cuda_the_eager_max_seqlen_costs_a_sync_per_block_and_the_graph_s_none():
    """The question the consumer answers: 0.28.0's eager metadata (device grid) keeps max_seqlen on
    the device as 0.27.1 did, so each block's .item() syncs on both sides; the graph paths' host
    list keeps it on the CPU, so theirs cost nothing."""
    eager = run_example(METADATA, tower_spec(GRID, device="cuda"))
    assert eager.legacy.consumer_syncs == eager.optimized.consumer_syncs == 1
    graph = run_example(GRAPH, {**CAPTURE, "device": "cuda"})
    assert graph.legacy.consumer_syncs == graph.optimized.consumer_syncs == 0


# -- the real copies over the targets' own specs ---------------------------------------------

@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("target", [ROT, METADATA, GRAPH, RESAMPLER], ids=lambda t: t.name)
@settings(max_examples=30, derandomize=True)
@given(data=st.data())
def test_real_copies_satisfy_every_oracle(target, contract, data):
    spec = data.draw(target.input_model().specs(("cpu",), contract))
    result = run_example(target, spec)
    assert result.verdict is Verdict.AGREE, (spec, result.mismatches)
    assert not result.oracles, (spec, result.oracles)


# -- bugs planted in both copies -------------------------------------------------------------

ERNIE_SHARED = [p for p in planted.SHARED_BUGS if p.base_target.startswith("ernie-")]


def test_shared_plants_cover_two_targets():
    assert len({p.base_target for p in ERNIE_SHARED}) >= 2




# -- ernie-encoder-output ----------------------------------------------------------------------

(OUTPUT,) = lookup(["ernie-encoder-output"])


def output_spec(grid: list[list[int]], *, path: str = "graph", order: str = "descending", merge: int = 2,
                embed_dim: int = 3, out_dim: int = 5, grid_form: str = "runner") -> dict:
    tokens = sum(h * w for _, h, w in grid) // merge**2
    return {"device": "cpu", "merge": merge, "head_dim": 8, "backend": "FLASH_ATTN", "rotary_on": "device",
            "patch_size": 2, "in_channels": 1, "embed_dim": embed_dim, "out_dim": out_dim, "grid_thw": grid,
            "grid_form": grid_form, "grid_dtype": "int64", "pixel_dtype": "float32", "path": path,
            "order": order, "max_batch_size": len(grid) + 1, "token_budget": tokens + 3, "seed": 7}


OUTPUT_GRID = [[1, 2, 4], [1, 4, 4], [1, 2, 2]]  # three sizes: the manager's batch order is not the items'


def test_output_invariants_hold_on_both_copies_and_the_graph_path_agrees():
    spec = output_spec(OUTPUT_GRID)
    outputs = {side: call(OUTPUT, spec, side) for side in SIDES}
    for side in SIDES:
        assert oracles.output_one_piece_per_item(spec, outputs[side]) is None
        assert oracles.output_pieces_are_own_copies(spec, outputs[side]) is None
    for legacy, optimized in zip(outputs["legacy"], outputs["optimized"]):
        torch.testing.assert_close(optimized, legacy)


def test_output_order_follows_the_items_not_the_batch():
    ascending = call(OUTPUT, output_spec(OUTPUT_GRID, order="ascending"))
    descending = call(OUTPUT, output_spec(OUTPUT_GRID, order="descending"))
    for first, second in zip(ascending, descending):
        torch.testing.assert_close(first, second)


def test_one_piece_per_item_flags_a_missing_item_and_wrong_shapes():
    spec = output_spec(OUTPUT_GRID)
    output = call(OUTPUT, spec)
    assert "one embedding per item" in oracles.output_one_piece_per_item(spec, output[:-1])
    assert "item 1: shape" in oracles.output_one_piece_per_item(spec, [output[0], output[1][:-1], output[2]])
    assert "item 0: shape" in oracles.output_one_piece_per_item(spec, [output[0][:, :-1]] + output[1:])
    swapped = [output[1], output[0], output[2]]  # items 0 and 1 differ in size
    assert oracles.output_one_piece_per_item(spec, swapped) is not None


def test_own_copies_flags_views_of_one_buffer():
    spec = output_spec(OUTPUT_GRID)
    output = call(OUTPUT, spec)
    assert "share one storage" in oracles.output_pieces_are_own_copies(spec, [output[0], output[1], output[0]])
    views = list(torch.cat(output).split([2, 4, 1]))  # what scatter_output_slices gives without clone=True
    assert "view into a larger buffer" in oracles.output_pieces_are_own_copies(spec, views)


def test_finding_0_28_0_eager_fallback_runs_the_resampler_twice():
    """0.28.0's encoder_eager_forward returns merged embeddings (LM width) and the manager's
    postprocess_encoder_output resamples them again: a shape error where the LM is wider than the ViT.
    0.27.1's path (legacy) gives the embeddings; known-issues.json accepts it (0.34.0 fixed it)."""
    spec = output_spec(OUTPUT_GRID, path="eager")
    assert oracles.output_one_piece_per_item(spec, call(OUTPUT, spec, "legacy")) is None
    with pytest.raises(RuntimeError):
        call(OUTPUT, spec, "optimized")


@pytest.mark.parametrize("contract", CONTRACTS)
@settings(max_examples=30, derandomize=True)
@given(data=st.data())
def test_output_graph_path_satisfies_every_oracle(contract, data):
    from strategies.ernie45_vl.inputs import ErnieEncoderGraphOutputInputs

    spec = data.draw(ErnieEncoderGraphOutputInputs().specs(("cpu",), contract))
    result = run_example(OUTPUT, spec)
    assert result.verdict is Verdict.AGREE, (spec, result.mismatches)
    assert not result.oracles, (spec, result.oracles)
