"""The oracles of the FLA index helpers, glm4_1v, async_tensor_h2d and copy_to_gpu
(strategies/fla_index/oracles.py, glm4_1v.py, torch_utils.py, v1_utils.py): each invariant
flags a hand-broken output and passes a right one, the references match the real
copies and flag a broken output, the real copies satisfy every oracle over their
own caller and wide specs, and the bugs planted in both copies span two targets (the fuzz that must
report each is tests/e2e/test_oracles.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

import strategies.fla_index.oracles as fla
import strategies.glm4_1v.oracles as glm
import strategies.torch_utils.oracles as h2d
import strategies.v1_utils.oracles as buf
from fuzz.engine.execute import run_side
from fuzz.oracles import Reference
from fuzz.oracles.compare import compare_values
from fuzz.targets import Comparison, Target, lookup, resolve_object
from strategies.fla_index.planted import SHARED_BUGS as FLA_SHARED
from strategies.glm4_1v.planted import SHARED_BUGS as GLM4_SHARED
from strategies.torch_utils.planted import SHARED_BUGS as H2D_SHARED
from strategies.v1_utils.planted import SHARED_BUGS as COPY_SHARED
from tests.conftest import requires_cuda

SHARED_BUGS = [*FLA_SHARED, *GLM4_SHARED, *H2D_SHARED, *COPY_SHARED]

INDICES, OFFSETS, EMBEDDINGS, POS_EMBEDS, H2D, COPY = lookup([
    "fla-chunk-indices", "fla-chunk-offsets", "glm4v-embeddings", "glm4v-pos-embeds", "async-tensor-h2d",
    "cpu-gpu-buffer-copy-to-gpu",
])
FAMILY = (INDICES, OFFSETS, EMBEDDINGS, POS_EMBEDS, H2D, COPY)
SIDES = ("legacy", "optimized")


def call(target: Target, spec: dict, side: str = "optimized") -> Any:
    return target.input_model().materialize(spec, target.impl(side), side)()


def differences(reference: Reference, spec: dict, output: Any) -> list:
    return list(compare_values(reference.expected(spec), reference.observed(output),
                               Comparison(floats=reference.floats)))


# -- fla-chunk-indices / fla-chunk-offsets ----------------------------------------------------------------------

def fla_spec(cu: list[int], chunk: int, dtype: str = "int32") -> dict:
    return {"device": "cpu", "cu_seqlens": cu, "dtype": dtype, "chunk_size": chunk}


# Lengths 5, 4, 1 with chunk 2: 3 + 2 + 1 chunks.
FLA = fla_spec([0, 5, 9, 10], 2)
ROWS = [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0]]


def table(rows: list, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype).reshape(-1, 2)


@pytest.mark.parametrize("side", SIDES)
def test_chunk_indices_of_the_copies_are_the_documented_table(side):
    output = call(INDICES, FLA, side)
    assert output.tolist() == ROWS
    for check in (fla.chunk_indices_cover_every_chunk, fla.chunk_indices_name_their_sequence,
                  fla.chunk_indices_follow_cu_seqlens):
        assert check(FLA, output) is None
    assert differences(fla.INDICES_REFERENCE, FLA, output) == []


@pytest.mark.parametrize(("broken", "words"), [
    (ROWS[:-1], "5 chunk rows"),                                   # a chunk dropped
    ([[0, 0], [0, 1], [0, 1], [1, 0], [1, 1], [2, 0]], "row 2 has chunk position 1"),
    ([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1]], "7 chunk rows"),
])
def test_chunk_indices_cover_every_chunk_flags_a_wrong_enumeration(broken, words):
    assert words in fla.chunk_indices_cover_every_chunk(FLA, table(broken))


def test_chunk_indices_cover_every_chunk_rejects_a_table_of_the_wrong_shape():
    assert "expected (num_chunks, 2)" in fla.chunk_indices_cover_every_chunk(FLA, torch.tensor(ROWS).flatten())
    assert "not a tensor" in fla.chunk_indices_cover_every_chunk(FLA, ROWS)


def test_chunk_indices_name_their_sequence_flags_ids_off_by_one():
    shifted = [[i + 1, j] for i, j in ROWS]
    message = fla.chunk_indices_name_their_sequence(FLA, table(shifted))
    assert "row 0 names sequence 1, but chunk 0 belongs to sequence 0" in message


def test_chunk_indices_follow_cu_seqlens_flags_dtype_and_device():
    assert "dtype torch.int64" in fla.chunk_indices_follow_cu_seqlens(FLA, table(ROWS, torch.int64))
    assert fla.chunk_indices_follow_cu_seqlens(fla_spec([0, 5, 9, 10], 2, "int64"), table(ROWS, torch.int64)) is None


def test_the_index_oracles_say_nothing_about_negative_lengths():
    wide = fla_spec([0, 5, 2, 7], 2)  # the wide contract's non-monotone cu_seqlens
    junk = table([[9, 9]])
    assert fla.chunk_indices_cover_every_chunk(wide, junk) is None
    assert fla.chunk_indices_name_their_sequence(wide, junk) is None
    assert fla.chunk_offsets_running_sum(wide, torch.tensor([7])) is None
    assert fla.INDICES_REFERENCE.expected(wide) is None and fla.OFFSETS_REFERENCE.expected(wide) is None


def test_the_indices_reference_flags_a_broken_table_and_skips_what_raises():
    assert differences(fla.INDICES_REFERENCE, FLA, table([[0, 0], *ROWS[1:-1], [1, 2]]))
    assert fla.INDICES_REFERENCE.expected(fla_spec([0], 4)) is None  # torch.cat of nothing raises upstream
    assert fla.INDICES_REFERENCE.expected(fla_spec([0, 0, 0], 4)).shape == (0, 2)  # sequences, none with a chunk


@pytest.mark.parametrize("cu", [[0, 0, 5], [0, 3, 3, 7], [0, 0, 1]])
@pytest.mark.parametrize("side", SIDES)
def test_finding_f16_an_empty_sequence_shifts_later_sequence_ids(cu, side):
    """Both releases number sequences by the chunks they see (``indices.eq(0).cumsum(0) - 1``):
    after an empty sequence every chunk names the sequence before its own, so the kernels read
    the wrong bounds from cu_seqlens (docs/findings F16). The invariant and the reference report
    it; known-issues.json accepts it (vLLM's callers append empty padding requests at the end)."""
    spec = fla_spec(cu, 4 if cu[-1] > 1 else 1)
    output = call(INDICES, spec, side)
    assert "belongs to sequence" in fla.chunk_indices_name_their_sequence(spec, output)
    assert fla.chunk_indices_cover_every_chunk(spec, output) is None  # the count and positions are right
    assert differences(fla.INDICES_REFERENCE, spec, output)


def test_trailing_empty_sequences_are_judged():
    spec = fla_spec([0, 5, 5, 5], 4)  # padding requests at the end own no chunk
    assert fla.INDICES_REFERENCE.expected(spec).tolist() == [[0, 0], [0, 1]]
    assert fla.chunk_indices_name_their_sequence(spec, table([[0, 0], [1, 1]])) is not None


@pytest.mark.parametrize("side", SIDES)
def test_chunk_offsets_of_the_copies_are_the_running_sum(side):
    output = call(OFFSETS, FLA, side)
    assert output.tolist() == [0, 3, 5, 6]
    assert fla.chunk_offsets_running_sum(FLA, output) is None
    assert fla.chunk_offsets_on_cu_seqlens_device(FLA, output) is None
    assert differences(fla.OFFSETS_REFERENCE, FLA, output) == []
    assert differences(fla.OFFSETS_REFERENCE, fla_spec([0], 4), call(OFFSETS, fla_spec([0], 4), side)) == []


@pytest.mark.parametrize(("broken", "words"), [
    ([1, 4, 6, 7], "start at 1"),
    ([0, 3, 5], "3 chunk offsets for 4"),
    ([0, 2, 4, 5], "step 2 at sequence 0, which has 3 chunks"),  # floor division
])
def test_chunk_offsets_running_sum_flags_a_wrong_sum(broken, words):
    assert words in fla.chunk_offsets_running_sum(FLA, torch.tensor(broken))
    assert differences(fla.OFFSETS_REFERENCE, FLA, torch.tensor(broken))


def test_chunk_offsets_must_be_a_1d_integer_table_on_the_device():
    assert "expected 1-D" in fla.chunk_offsets_running_sum(FLA, torch.tensor([[0, 3, 5, 6]]))
    assert "integer dtype" in fla.chunk_offsets_running_sum(FLA, torch.tensor([0.0, 3.0, 5.0, 6.0]))
    assert "cu_seqlens on cuda" in fla.chunk_offsets_on_cu_seqlens_device({**FLA, "device": "cuda"},
                                                                          torch.tensor([0, 3, 5, 6]))


# -- glm4v-embeddings ----------------------------------------------------------------------------------------------

def glm_spec(shapes: list, lengths: list, *, dtype: str = "float32", orig: int = 2, hidden: int = 3,
             seed: int = 5) -> dict:
    return {"device": "cpu", "hidden_size": hidden, "orig_size": orig, "weight_dtype": dtype, "seed": seed,
            "image_shapes": shapes, "lengths": lengths, "coords": "grid", "lengths_form": "list",
            "shapes_form": "list", "meta_dtype": "int64", "coords_on": "device", "coords_dtype": "int64"}


# A data-parallel rank holding 2 shapes for 3 frames: frame 2 cycles back to the 2x2 grid,
# the table's own size (orig 2), so tokens 0..3 and 12..15 share grid and patches.
DP = glm_spec([[1, 2, 2], [1, 2, 4]], [4, 8, 4])
GLM_CHECKS = (glm.embeddings_shape_follows_tokens, glm.embeddings_cycle_image_shapes,
              glm.embeddings_identity_grid_reads_the_table)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("side", SIDES)
def test_embeddings_of_the_copies_satisfy_the_invariants_and_the_reference(side, dtype):
    spec = {**DP, "weight_dtype": dtype}
    output = call(EMBEDDINGS, spec, side)
    for check in GLM_CHECKS:
        assert check(spec, output) is None, check.__name__
    assert differences(glm.EMBEDDINGS_REFERENCE, spec, output) == []


def test_the_embeddings_reference_compares_values_of_float32_tables_only():
    assert "values" in glm.EMBEDDINGS_REFERENCE.expected(DP)
    assert set(glm.EMBEDDINGS_REFERENCE.expected({**DP, "weight_dtype": "bfloat16"})) == {"shape", "dtype"}


def test_embeddings_shape_follows_tokens_flags_a_missing_row_and_a_wrong_dtype():
    output = call(EMBEDDINGS, DP)
    assert "expected (tokens, hidden) = (16, 3)" in glm.embeddings_shape_follows_tokens(DP, output[:-1])
    assert "dtype torch.float16" in glm.embeddings_shape_follows_tokens(DP, output.half())
    assert differences(glm.EMBEDDINGS_REFERENCE, DP, output[:-1])


def test_embeddings_cycle_image_shapes_flags_a_frame_resampled_to_the_wrong_grid():
    output = call(EMBEDDINGS, DP).clone()
    output[12:16] += 0.25  # frame 2 no longer matches frame 0's grid
    assert "tokens 0 and 12 share target grid (2, 2)" in glm.embeddings_cycle_image_shapes(DP, output)
    assert differences(glm.EMBEDDINGS_REFERENCE, DP, output)


def test_embeddings_identity_grid_reads_the_table_flags_a_shifted_sample():
    output = call(EMBEDDINGS, DP).clone()
    output[1] -= 0.1
    assert "token 1 on the table's own 2x2 grid" in glm.embeddings_identity_grid_reads_the_table(DP, output)


def test_the_embedding_oracles_skip_what_they_cannot_judge():
    empty = glm_spec([], [])
    output = call(EMBEDDINGS, empty)
    assert glm.embeddings_shape_follows_tokens(empty, output) is None
    assert glm.embeddings_cycle_image_shapes(empty, output) is None
    assert glm.EMBEDDINGS_REFERENCE.expected(empty) is None


def test_the_reference_resampling_is_grid_sample_at_pixel_centres():
    """F.interpolate(bicubic, align_corners=False) to (h, w) samples where upstream's grid_sample
    does: across table and target sizes the two agree to float32 noise."""
    generator = torch.Generator().manual_seed(3)
    for orig in (1, 2, 3, 5):
        table_2d = torch.randn(1, 2, orig, orig, generator=generator)
        for h, w in ((1, 1), (2, 4), (3, 7), (8, 6)):
            hc = torch.arange(h).repeat_interleave(w).float()
            wc = torch.arange(w).repeat(h).float()
            grid = torch.stack(((wc + 0.5) / w * 2 - 1, (hc + 0.5) / h * 2 - 1), -1)[None, :, None]
            sampled = torch.nn.functional.grid_sample(table_2d, grid, mode="bicubic", align_corners=False,
                                                      padding_mode="border")[0, :, :, 0]
            resized = torch.nn.functional.interpolate(table_2d.double(), size=(h, w), mode="bicubic",
                                                      align_corners=False)[0].reshape(2, h * w)
            torch.testing.assert_close(sampled.double(), resized, rtol=0, atol=2e-5)


# -- glm4v-pos-embeds ----------------------------------------------------------------------------------------------

def pos_spec(grid: list, *, merge: int = 2, dtype: str = "float32", orig: int = 2) -> dict:
    return {"device": "cpu", "hidden_size": 3, "orig_size": orig, "weight_dtype": dtype, "seed": 11,
            "merge": merge, "grid_thw": grid}


# Image 0: two frames of the table's own 2x2 grid; image 1: one 2x4 frame.
POS = pos_spec([[2, 2, 2], [1, 2, 4]])
POS_CHECKS = (glm.pos_embeds_shape_follows_grids, glm.pos_embeds_frames_repeat,
              glm.pos_embeds_identity_grid_reads_the_table)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("side", SIDES)
def test_pos_embeds_of_the_copies_satisfy_the_invariants_and_the_reference(side, dtype):
    spec = {**POS, "weight_dtype": dtype}
    output = call(POS_EMBEDS, spec, side)
    for check in POS_CHECKS:
        assert check(spec, output) is None, check.__name__
    assert differences(glm.POS_EMBEDS_REFERENCE, spec, output) == []


def test_pos_embeds_are_the_table_in_merge_order_on_its_own_grid():
    output = call(POS_EMBEDS, POS)
    table_rows = glm._weights(POS)
    torch.testing.assert_close(output[:4], table_rows)  # a 2x2 grid with merge 2: one window, row by row


def test_the_merge_order_walks_windows_then_patches():
    assert glm._merge_order(2, 4, 2) == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    assert glm._merge_order(2, 2, 1) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_pos_embeds_invariants_flag_broken_outputs():
    output = call(POS_EMBEDS, POS)
    assert "expected (tokens, hidden) = (16, 3)" in glm.pos_embeds_shape_follows_grids(POS, output[:12])
    frames = output.clone()
    frames[4:8] += 1.0
    assert "image 0 ([2, 2, 2]): frame 1 differs" in glm.pos_embeds_frames_repeat(POS, frames)
    shifted = output.clone()
    shifted[0:4] = shifted[[1, 0, 3, 2]]
    shifted[4:8] = shifted[0:4]
    assert "on the table's own grid" in glm.pos_embeds_identity_grid_reads_the_table(POS, shifted)
    assert differences(glm.POS_EMBEDS_REFERENCE, POS, shifted)


def test_the_pos_embeds_reference_skips_an_empty_grid():
    assert glm.POS_EMBEDS_REFERENCE.expected(pos_spec([])) is None


# -- async-tensor-h2d ----------------------------------------------------------------------------------------------

def h2d_spec(values: list, form: str = "list", dtype: str | None = None) -> dict:
    return {"device": "cpu", "values": values, "form": form, "dtype": dtype}


H2D_CHECKS = (h2d.h2d_lands_on_the_device, h2d.h2d_dtype_and_shape, h2d.h2d_keeps_the_values)


@pytest.mark.parametrize(("values", "form", "dtype"), [
    ([3, -1, 7], "list", None), ([3, -1, 7], "numpy", "int32"), ([3, -1, 7], "cpu_tensor", "float32"),
    ([300, -257], "list", "bfloat16"), ([], "list", None),
])
@pytest.mark.parametrize("side", SIDES)
def test_h2d_of_the_copies_satisfies_the_invariants(side, values, form, dtype):
    spec = h2d_spec(values, form, dtype)
    output = call(H2D, spec, side)
    for check in H2D_CHECKS:
        assert check(spec, output) is None, check.__name__


def test_h2d_invariants_flag_broken_outputs():
    spec = h2d_spec([3, -1, 7], "numpy", "int32")
    assert "asked for cuda" in h2d.h2d_lands_on_the_device({**spec, "device": "cuda"}, torch.tensor([3, -1, 7]))
    assert "dtype torch.int64, expected torch.int32" in h2d.h2d_dtype_and_shape(spec, torch.tensor([3, -1, 7]))
    assert "shape (2,), data (3,)" in h2d.h2d_dtype_and_shape(spec, torch.tensor([3, -1], dtype=torch.int32))
    message = h2d.h2d_keeps_the_values(spec, torch.tensor([3, 1, 7], dtype=torch.int32))
    assert "element 1: data -1 became 1" in message
    assert "not a tensor" in h2d.h2d_keeps_the_values(spec, np.array([3, -1, 7]))


def wide_h2d_spec(values: list, *, form: str = "list", src: str | None = None, dtype: str | None = None,
                  shape: list | None = None) -> dict:
    return {"device": "cpu", "form": form, "src_dtype": src, "shape": [len(values)] if shape is None else shape,
            "layout": "contiguous" if form != "list" else "nested", "values": values, "dtype": dtype,
            "call": "keywords"}


def test_h2d_values_judge_only_conversions_a_cast_defines():
    undefined = wide_h2d_spec([1.5, 3e9, "nan"], form="numpy", src="float64", dtype="int32")
    assert h2d.h2d_keeps_the_values(undefined, torch.tensor([7, 7, 7], dtype=torch.int32)) is None
    exact = wide_h2d_spec([2.0, -3.0, "inf"], form="numpy", src="float64", dtype="float16")
    assert h2d.h2d_keeps_the_values(exact, torch.tensor([2.0, -3.0, float("inf")], dtype=torch.float16)) is None
    assert "element 2" in h2d.h2d_keeps_the_values(exact, torch.tensor([2.0, -3.0, 0.0], dtype=torch.float16))
    into_bool = wide_h2d_spec([0, 5, "nan"], form="list", dtype="bool")
    assert h2d.h2d_keeps_the_values(into_bool, torch.tensor([False, True, True])) is None


def test_h2d_infers_a_list_s_dtype_as_torch_does():
    assert h2d._natural_dtype([[True, False]]) == torch.bool
    assert h2d._natural_dtype([True, 2]) == torch.int64
    assert h2d._natural_dtype([1, 2.5]) == torch.float32
    assert h2d._natural_dtype([]) == torch.float32
    assert h2d._shape_of([[1, 2], [3]]) is None and h2d._shape_of(4) == ()


# -- cpu-gpu-buffer-copy-to-gpu ------------------------------------------------------------------------------------

def buffer_spec(n: int | None, *, rows: int = 5, dtype: str = "int32") -> dict:
    return {"device": "cpu", "size": [rows, 2], "dtype": dtype, "pin_memory": "default", "with_numpy": True,
            "n": n, "seed": 3, "stale_seed": 4}


COPY_CHECKS = (buf.copy_to_gpu_copies_the_rows_in_use, buf.copy_to_gpu_returns_the_copied_rows,
               buf.copy_to_gpu_leaves_the_host_alone)


@pytest.mark.parametrize("n", [None, 0, 3, 5, 8, -2])
@pytest.mark.parametrize("side", SIDES)
def test_copy_to_gpu_of_the_copies_satisfies_the_invariants(side, n):
    spec = buffer_spec(n)
    output = call(COPY, spec, side)
    for check in COPY_CHECKS:
        assert check(spec, output) is None, check.__name__


def test_copy_to_gpu_invariants_flag_broken_outputs():
    spec = buffer_spec(3)
    output = call(COPY, spec)
    whole = {**output, "gpu": output["cpu"].clone()}  # every row copied: the stale rows overwritten
    assert "rows [3:] past the copy changed" in buf.copy_to_gpu_copies_the_rows_in_use(spec, whole)
    short = {**output, "gpu": output["gpu"].clone()}
    short["gpu"][2] += 1
    assert "rows [:3] differ from the host rows" in buf.copy_to_gpu_copies_the_rows_in_use(spec, short)
    assert "returned shape (5, 2), expected (3, 2)" in buf.copy_to_gpu_returns_the_copied_rows(
        spec, {**output, "returned": output["gpu"]})
    host = {**output, "cpu": output["cpu"] + 1}
    assert "changed the host buffer" in buf.copy_to_gpu_leaves_the_host_alone(spec, host)
    assert "without returned/gpu/cpu" in buf.copy_to_gpu_leaves_the_host_alone(spec, output["gpu"])


def test_copy_to_gpu_rows_say_nothing_about_a_negative_n():
    spec = buffer_spec(-2)
    output = call(COPY, spec)
    assert buf._rows(spec) is None and buf._rows(buffer_spec(9)) == 5
    assert buf.copy_to_gpu_copies_the_rows_in_use(spec, {**output, "gpu": output["cpu"]}) is None


# -- the real copies over their own specs ------------------------------------------------------------------------

def _f16(target: Target, spec: dict) -> bool:
    """An empty sequence before a non-empty one (wide only): F16, both releases' known shared bug."""
    if target.name != "fla-chunk-indices":
        return False
    cu = spec["cu_seqlens"]
    lengths = [b - a for a, b in zip(cu, cu[1:])]
    return 0 in lengths and any(lengths[lengths.index(0):])  # a non-empty sequence after the first empty one


def _oracles_hold(target: Target, spec: dict) -> None:
    if _f16(target, spec):
        return
    reference = resolve_object(target.reference) if target.reference else None
    for side in SIDES:
        result = run_side(target, side, spec)
        if not result.ok:
            continue
        for path in target.invariants:
            message = resolve_object(path)(spec, result.value)
            assert message is None, f"{side} {path}: {message} on {spec}"
        if reference is not None and reference.expected(spec) is not None:
            assert differences(reference, spec, result.value) == [], f"{side} vs reference on {spec}"


EXAMPLES = {"fla-chunk-indices": 60, "fla-chunk-offsets": 60, "glm4v-embeddings": 25, "glm4v-pos-embeds": 25,
            "async-tensor-h2d": 60, "cpu-gpu-buffer-copy-to-gpu": 60}


@pytest.mark.parametrize("contract", ["caller", "wide"])
@pytest.mark.parametrize("target", FAMILY, ids=lambda t: t.name)
def test_the_real_copies_satisfy_every_oracle(target, contract):
    @settings(max_examples=EXAMPLES[target.name], deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(target.input_model().specs(["cpu"], contract))
    def check(spec):
        _oracles_hold(target, spec)

    check()


@requires_cuda
@pytest.mark.parametrize("target", FAMILY, ids=lambda t: t.name)
def test_the_real_copies_satisfy_every_oracle_on_cuda(target):
    @settings(max_examples=20, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(target.input_model().specs(["cuda"], "caller"))
    def check(spec):
        _oracles_hold(target, spec)

    check()


def test_the_records_declare_the_oracles():
    for target in FAMILY:
        assert len(target.invariants) >= 2 and target.consumer is None, target.name
    assert {t.name for t in FAMILY if t.reference} == {"fla-chunk-indices", "fla-chunk-offsets",
                                                       "glm4v-embeddings", "glm4v-pos-embeds"}


# -- bugs in both copies -----------------------------------------------------------------------------------------

def test_the_shared_bugs_cover_two_targets_or_more():
    assert len({plant.base_target for plant in SHARED_BUGS}) >= 2
