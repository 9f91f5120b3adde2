"""ernie45_vl targets: the copies agree, the input models draw what callers pass,
and 0.28.0's graph-only metadata fields behave as its docstring says."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import legacy.ernie45_vl as legacy
import optimized.ernie45_vl as optimized
import tests.planted as planted
from fuzz.targets import CONTRACTS, lookup
from strategies.ernie45_vl.inputs import (
    CALLER_MAX_ROWS,
    expand_frames,
    frame_grid_thws,
    grid_in_form,
    resampler_grid_thws,
)
from tests.conftest import requires_cuda
from tests.support import fuzz

ERNIE_TARGETS = ("ernie-rot-pos-emb", "ernie-encoder-metadata", "ernie-resampler-placeholder")


def tower(module, merge: int = 2, head_dim: int = 8, backend: str = "FLASH_ATTN"):
    return module.Ernie4_5_VisionTransformer(merge, head_dim, module.AttentionBackendEnum[backend])


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("name", ERNIE_TARGETS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_specs_are_json(name, contract, data):
    (target,) = lookup([name])
    spec = data.draw(target.input_model().specs(("cpu", "cuda"), contract))
    assert json.loads(json.dumps(spec)) == spec


@settings(max_examples=50, deadline=None)
@given(grid=frame_grid_thws(merge=2))
def test_caller_tower_grids_are_one_row_per_frame(grid):
    assert 1 <= len(grid) <= CALLER_MAX_ROWS
    assert all(t == 1 and h % 2 == 0 and w % 2 == 0 for t, h, w in grid)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), modality=st.sampled_from(["image", "video"]))
def test_caller_resampler_grids_pair_frames(data, modality):
    grid = data.draw(resampler_grid_thws(merge=1, modality=modality))
    assert all((t == 1) if modality == "image" else (t % 2 == 0) for t, _, _ in grid)


def test_declared_sync_bounds_follow_the_row_bound():
    """9 syncs per device grid row and 1 for the table size; the metadata adds
    repeat_interleave's and the max_seqlen read (strategies/ernie45_vl/record.py)."""
    rot, metadata, resampler = lookup(list(ERNIE_TARGETS))
    assert rot.expected_optimized_syncs == 9 * CALLER_MAX_ROWS + 1
    assert metadata.expected_optimized_syncs == rot.expected_optimized_syncs + 2
    assert resampler.expected_optimized_syncs == 1


def test_expand_frames_matches_vision_forward():
    # _vision_forward: [[1,64,64],[2,80,80]] -> [[1,64,64],[1,80,80],[1,80,80]]
    assert expand_frames([[1, 64, 64], [2, 80, 80]]) == [[1, 64, 64], [1, 80, 80], [1, 80, 80]]


def test_placeholder_pairs_even_and_odd_frames():
    """The observable is the gather itself: frame 2k next to frame 2k+1, images paired with themselves."""
    from types import SimpleNamespace

    config = SimpleNamespace(use_temporal_conv=True, rms_norm_eps=1e-6)
    model = optimized.VariableResolutionResamplerModel(2, 3, 1, 2, config)
    x = torch.randn(1 * 2 * 2 + 2 * 1 * 3, 2)
    with torch.inference_mode():
        model(x, torch.tensor([[1, 2, 2], [2, 1, 3]]))
        features, _ = model.spatial_linear1(x)
        features, _ = model.spatial_linear2(model.spatial_gelu(features))
        features = model.spatial_norm(features)
    image, frame0, frame1 = features[0:4], features[4:7], features[7:10]
    expected = torch.cat([torch.cat([image, frame0]), torch.cat([image, frame1])], dim=-1)
    torch.testing.assert_close(model.temporal_linear1.received, expected, rtol=0, atol=0)


# -- 0.28.0's prepare_encoder_metadata beyond the eager path ------------------


@settings(max_examples=40, deadline=None)
@given(grid=frame_grid_thws(merge=2))
def test_graph_list_path_matches_legacy_eager_block(grid):
    """The CUDA-graph paths pass a host list; 0.27.1 had no such path, its
    eager block needs a tensor. Same grid, same metadata."""
    new = optimized.Ernie4_5_VisionTransformer.prepare_encoder_metadata(tower(optimized), grid)
    old = legacy.Ernie4_5_VisionTransformer.prepare_encoder_metadata(
        tower(legacy), torch.tensor(grid), device=torch.device("cpu")
    )
    torch.testing.assert_close(new["rotary_pos_emb"], old["rotary_pos_emb"], rtol=0, atol=0)
    assert torch.equal(new["cu_seqlens"], old["cu_seqlens"])
    assert new["max_seqlen"].dtype == torch.int32 and int(new["max_seqlen"]) == int(old["max_seqlen"])


def test_legacy_block_rejects_host_lists():
    with pytest.raises(TypeError):
        legacy.Ernie4_5_VisionTransformer.prepare_encoder_metadata(
            tower(legacy), [[1, 2, 2]], device=torch.device("cpu")
        )


@pytest.mark.parametrize("max_batch_size", [1, 3, 5])
def test_max_batch_size_pads_with_the_last_offset(max_batch_size):
    grid = [[1, 2, 4], [1, 2, 2], [1, 4, 4]]
    plain = optimized.Ernie4_5_VisionTransformer.prepare_encoder_metadata(tower(optimized), grid)
    padded = optimized.Ernie4_5_VisionTransformer.prepare_encoder_metadata(
        tower(optimized), grid, max_batch_size=max_batch_size
    )
    cu = plain["cu_seqlens"]
    expected = torch.cat([cu, cu[-1:].expand(max(0, max_batch_size - len(grid)))])
    assert torch.equal(padded["cu_seqlens"], expected)
    # Padding adds empty sequences: the longest one is unchanged.
    assert int(padded["max_seqlen"]) == int(plain["max_seqlen"])


def test_max_seqlen_override_is_a_host_int32_scalar():
    metadata = optimized.Ernie4_5_VisionTransformer.prepare_encoder_metadata(
        tower(optimized), [[1, 2, 2]], max_seqlen_override=64
    )
    max_seqlen = metadata["max_seqlen"]
    assert max_seqlen.device.type == "cpu" and max_seqlen.dtype == torch.int32 and int(max_seqlen) == 64


def test_non_flash_backends_get_no_max_seqlen():
    for module in (legacy, optimized):
        metadata = module.Ernie4_5_VisionTransformer.prepare_encoder_metadata(
            tower(module, backend="TORCH_SDPA"), torch.tensor([[1, 2, 2]]), device=torch.device("cpu")
        )
        assert metadata["max_seqlen"] is None


@pytest.mark.parametrize("form", ["numpy", "cpu_tensor", "device_tensor", "list"])
def test_grid_in_form_keeps_empty_grids_two_dimensional(form):
    grid = grid_in_form([], form, "int32", "cpu")
    assert grid == [] if form == "list" else tuple(grid.shape) == (0, 3)
    if form == "numpy":
        assert isinstance(grid, np.ndarray) and grid.dtype == np.int32


def test_shrunk_h_squared_has_h_different_from_w():
    plant = next(p for p in planted.BUGS if p.name == "planted-ernie-metadata-h-squared")
    failure = fuzz(plant.target()).failures[0]
    assert any(h != w for _, h, w in failure.spec["grid_thw"])


@requires_cuda
def test_cpu_grid_cu_seqlens_now_land_on_the_device():
    """The wide contract's one known divergence: 0.27.1's block left
    cu_seqlens wherever grid_thw was; 0.28.0 moves them to ``device``. No
    0.27.1 caller passed a CPU grid (mm kwargs arrive on the device)."""
    grid, cuda = torch.tensor([[1, 2, 4]]), torch.device("cuda")
    with torch.device("cuda"):
        old_tower, new_tower = tower(legacy), tower(optimized)
    old = legacy.Ernie4_5_VisionTransformer.prepare_encoder_metadata(old_tower, grid, device=cuda)
    new = optimized.Ernie4_5_VisionTransformer.prepare_encoder_metadata(new_tower, grid, device=cuda)
    assert old["cu_seqlens"].device.type == "cpu" and new["cu_seqlens"].device.type == "cuda"
    assert torch.equal(old["cu_seqlens"], new["cu_seqlens"].cpu())


# -- the encoder CUDA-graph hooks (ernie-encoder-metadata-graph) ----------------

GRAPH_HOOKS = ("prepare_encoder_cudagraph_capture_inputs", "prepare_encoder_cudagraph_replay_buffers")


def test_caller_metadata_forms_are_split_between_the_two_targets():
    """0.28.0's prepare_encoder_metadata parameters under caller: the eager forward
    passes a device grid, num_pad=0 (no 0.28.0 or 0.27.1 caller passes another) and
    a device; the graph hooks pass host lists, max_batch_size (padding when the
    replayed batch has fewer images), capture's max_seqlen_override, replay no device."""
    (eager,) = lookup(["ernie-encoder-metadata"])
    (graph,) = lookup(["ernie-encoder-metadata-graph"])
    seen = set()

    @settings(max_examples=80, database=None, deadline=None)
    @given(eager.input_model().specs(["cpu"], "caller"), graph.input_model().specs(["cpu"], "caller"))
    def check(tower_spec, graph_spec):
        assert tower_spec["num_pad"] == 0 and tower_spec["grid_form"] == "device_tensor"
        assert graph_spec["num_pad"] == 0 and graph_spec["via"] == "model"
        padded = len(graph_spec["grid_thw"]) < graph_spec["max_batch_size"]
        seen.add((graph_spec["path"], padded, graph_spec["max_seqlen_override"] is not None,
                  graph_spec["pass_device"]))

    check()
    assert {("capture", False, True, True), ("replay", True, False, False)} <= seen


@pytest.mark.parametrize("contract", CONTRACTS)
def test_graph_target_runs_both_model_hooks(monkeypatch, contract):
    """Every upstream definition the record lists is entered by its runs: the
    two hooks, on the optimized copy's stand-in model class."""
    (target,) = lookup(["ernie-encoder-metadata-graph"])
    listed = {entry.rpartition("::")[2] for entry in target.upstream}
    assert {f"Ernie4_5_VLMoeForConditionalGeneration.{hook}" for hook in GRAPH_HOOKS} <= listed
    calls = dict.fromkeys(GRAPH_HOOKS, 0)
    model = optimized.Ernie4_5_VLMoeForConditionalGeneration
    for hook in GRAPH_HOOKS:
        original = getattr(model, hook)

        def counted(self, *args, _hook=hook, _original=original, **kwargs):
            calls[_hook] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(model, hook, counted)
    outcome = fuzz(target, max_examples=60, contract=contract)
    assert not outcome.failures, [(f.spec, f.mismatches) for f in outcome.failures]
    assert all(calls.values()), calls


def test_replay_buffers_fill_the_capture_buffers():
    """As the manager replays: the batch's values copied into capture's buffers
    leave the real tokens first and zeros (cu_seqlens: the padded offsets) after."""
    from strategies.ernie45_vl.inputs import fill_graph_buffers

    graph = optimized.Ernie4_5_VLMoeForConditionalGeneration(tower(optimized))
    captured = graph.prepare_encoder_cudagraph_capture_inputs(8, 2, 2, torch.device("cpu"), torch.float32).values
    assert tuple(captured["pixel_values"].shape) == (2 * 2 * 8, 1)  # 2 items of [1, m, ceil(8 / 2) * m]
    assert int(captured["max_seqlen"]) == 8 * 4
    mm_kwargs = {"image_grid_thw": torch.tensor([[1, 2, 4]]), "pixel_values": torch.arange(8.0).reshape(8, 1)}
    replay = graph.prepare_encoder_cudagraph_replay_buffers(mm_kwargs, 2, 2).values
    assert replay["cu_seqlens"].tolist() == [0, 8, 8]
    buffers = fill_graph_buffers(dict(captured), replay)
    assert buffers["pixel_values"][:8].flatten().tolist() == list(range(8))
    assert not buffers["pixel_values"][8:].any()
    assert int(buffers["max_seqlen"]) == 8


@pytest.mark.slow  # fuzzes a planted capture-hook slip (~3 s): CI's slow step runs it
def test_a_slip_in_the_capture_hook_is_reported():
    """Flooring the per-item budget makes the capture buffers too small for a
    full batch: the legacy side's buffers (the hook's documented shape) differ."""
    from fuzz.api import Plant

    plant = Plant(
        "ernie-graph-capture-floor", "ernie-encoder-metadata-graph", "optimized.ernie45_vl",
        "per_mm_item_output = (token_budget + max_batch_size - 1) // max_batch_size",
        "per_mm_item_output = token_budget // max_batch_size", "the ceil dropped",
    )
    assert fuzz(plant.target(), max_examples=100).failures
