"""Inputs for ernie45_vl's vision tower metadata and resampler (docs/design.md rows 6-8).

How 0.28.0's callers build them (vllm/model_executor/models/ernie45_vl.py):

* ``Ernie4_5_VisionTransformer.rot_pos_emb`` has one caller,
  ``prepare_encoder_metadata``, which hands on either the eager path's
  ``grid_thw`` -- ``image_grid_thw``/``video_grid_thw`` on the device, already
  expanded by ``_vision_forward`` to one ``[1, h, w]`` row per frame -- or, on
  the CUDA-graph capture/replay paths, a host list it turns into a CPU int32
  tensor.
* ``prepare_encoder_metadata`` is called by the eager ``forward`` with that
  device tensor, ``num_pad=0`` and ``device=hidden_states.device``. The graph
  paths pass lists plus ``max_batch_size``/``max_seqlen_override``, which the
  0.27.1 inline block never saw (tests/unit/test_ernie45_vl.py covers them).
* The graph paths (``ernie-encoder-metadata-graph``): capture passes
  ``[[1, m, ceil(budget / B) * m]] * B`` with ``max_batch_size=B``,
  ``max_seqlen_override=budget * m**2`` and ``device``; replay passes the
  images' ``image_grid_thw.tolist()`` (``t == 1``, at most ``B`` rows) with
  ``max_batch_size=B`` and no device (the tower's own). 0.27.1 had no such
  parameters: its side gets the same grid as the CPU int32 tensor 0.28.0
  builds from the list, and ``graph_buffers_reference`` applies what the
  parameters mean (strategies/ernie45_vl/record.py). Both calls come from the
  model's hooks, ``prepare_encoder_cudagraph_capture_inputs`` and
  ``prepare_encoder_cudagraph_replay_buffers``, which the optimized side runs
  as the encoder CUDA-graph manager does (``ErnieGraphMetadataInputs``).
* ``VariableResolutionResamplerModel.forward`` gets the vision features and
  the *unexpanded* grid on the device: images have ``t == 1``, videos an even
  ``t`` (the processor pads frames to ``temporal_conv_size == 2``).

The wide contract adds what the 0.27.1 functions accepted: numpy and CPU
tensors (``rot_pos_emb``), CPU tensors (the metadata block, the resampler),
unexpanded grids with ``t > 1`` including odd ``t``, ``num_pad > 0``, empty
batches, a rotary table built on the CPU, and ``use_temporal_conv=False``.
"""

from __future__ import annotations

import functools
import inspect
import re
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl, release_of
from strategies.common import FLOAT_DTYPES, INT_DTYPES, choice_of, devices, float_dtypes, int_dtypes, seeded_floats
from strategies.grids import grid_thws

# Grid forms today's callers hand to rot_pos_emb: the eager path's device
# tensor (the processor's int64, int32 also seen) or the graph paths' host
# list, which prepare_encoder_metadata turns into a CPU int32 tensor.
CALLER_ROT_FORMS = (("device_tensor", "int64"), ("device_tensor", "int32"), ("cpu_tensor", "int32"))
CALLER_METADATA_FORMS = (("device_tensor", "int64"), ("device_tensor", "int32"))
# The eager caller's grid: at most this many [t, h, w] items of up to this
# many frames each, so at most CALLER_MAX_ROWS rows after the per-frame
# expansion (the bound behind the catalog's expected sync counts).
CALLER_MAX_ITEMS, CALLER_MAX_FRAMES = 3, 2
CALLER_MAX_ROWS = CALLER_MAX_ITEMS * CALLER_MAX_FRAMES
BACKENDS = ("FLASH_ATTN", "TRITON_ATTN", "ROCM_AITER_FA", "TORCH_SDPA")
TEMPORAL_CONV_SIZE = 2  # Ernie 4.5 VL's config; fwd_placeholder pairs frames, so nothing else fits

# Strategies with fixed arguments, built once (strategies/common.py says why).
MERGES = st.sampled_from([1, 2])
HEAD_DIMS = st.sampled_from([4, 8, 16])
BACKEND_CHOICES = st.sampled_from(BACKENDS)
ROTARY_PLACES = st.sampled_from(["device", "cpu"])
TOWER_NUM_PADS = st.sampled_from([0, 0, 1, 3, 7])
GRAPH_PATHS = st.sampled_from(["capture", "replay"])
GRAPH_BATCH_SIZES = st.one_of(st.none(), st.integers(0, 6))
GRAPH_SEQLEN_OVERRIDES = st.one_of(st.none(), st.integers(0, 10_000))
GRAPH_GRID_FORMS = st.sampled_from(["list", "cpu_tensor"])
GRAPH_NUM_PADS = st.sampled_from([0, 1, 3])
GRAPH_BUDGET_SLACK = st.integers(0, 6)
GRAPH_MM_GRID_FORMS = st.sampled_from(["device_tensor", "cpu_tensor"])
GRAPH_PIXEL_DTYPES = st.sampled_from(["float32", "bfloat16"])
SPATIAL_CONV_SIZES = st.sampled_from([1, 2])
RESAMPLER_GRID_FORMS = st.sampled_from(["cpu_tensor", "device_tensor"])
MODALITIES = st.sampled_from(["image", "video"])


def expand_frames(grid: list[list[int]]) -> list[list[int]]:
    """``_vision_forward``'s expansion: ``[[2, h, w]] -> [[1, h, w], [1, h, w]]``."""
    return [[1, h, w] for t, h, w in grid for _ in range(t)]


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def frame_grid_thws(*, merge: int, min_size: int = 1) -> st.SearchStrategy[list[list[int]]]:
    """Grids as the vision tower receives them on the eager path: one row per frame."""
    if min_size < 0 or min_size > CALLER_MAX_ITEMS:
        raise HarnessError(f"frame_grid_thws: need 0 <= min_size <= {CALLER_MAX_ITEMS}")
    items = grid_thws(min_size=min_size, max_size=CALLER_MAX_ITEMS, max_t=CALLER_MAX_FRAMES, merge=merge)
    return items.map(expand_frames)


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def resampler_grid_thws(*, merge: int, modality: str) -> st.SearchStrategy[list[list[int]]]:
    """Caller grids for the resampler: images ``t == 1``, videos an even ``t``."""
    if modality not in ("image", "video"):
        raise HarnessError(f"resampler_grid_thws: modality={modality!r} must be 'image' or 'video'")
    grids = grid_thws(min_size=1, max_size=3, max_t=2, merge=merge)
    if modality == "image":
        return grids.map(lambda g: [[1, h, w] for _, h, w in g])
    return grids.map(lambda g: [[2 * t, h, w] for t, h, w in g])


def grid_in_form(grid: list[list[int]], form: str, dtype: str, device: str) -> Any:
    """``grid`` as an ``[n, 3]`` array/tensor (also when empty) in ``form``."""
    array = np.asarray(grid, dtype=dtype).reshape(-1, 3)
    if form == "numpy":
        return array
    if form == "list":
        return [list(row) for row in grid]
    tensor = torch.from_numpy(array).to(INT_DTYPES[dtype])
    if form == "cpu_tensor":
        return tensor
    if form == "device_tensor":
        return tensor.to(device)
    raise HarnessError(f"unknown grid form {form!r}")


def _copy_module(impl: Impl, expected: str) -> ModuleType:
    if impl.owner is None:
        raise HarnessError(f"{impl.path} must be {expected}")
    return impl.module


def _tower(module: ModuleType, spec: dict) -> torch.nn.Module:
    """The side's stand-in vision tower, built the way vllm builds models:
    under the target device, which is where the rotary table's ``inv_freq``
    (a plain attribute that ``.to()`` would not move) ends up."""
    where = spec["device"] if spec["rotary_on"] == "device" else "cpu"
    backend = module.AttentionBackendEnum[spec["backend"]]
    with torch.device(where):
        return module.Ernie4_5_VisionTransformer(spec["merge"], spec["head_dim"], backend)


@st.composite
def _tower_specs(draw: st.DrawFn, available: Sequence[str], contract: str, caller_forms: tuple,
                 wide_forms: tuple[str, ...]) -> dict:
    wide = contract == "wide"
    merge = draw(MERGES)
    if wide:
        grid = draw(grid_thws(min_size=0, max_size=3, max_t=3, merge=merge))
        form, dtype = draw(choice_of(wide_forms)), draw(int_dtypes())
    else:
        grid = draw(frame_grid_thws(merge=merge))
        form, dtype = draw(choice_of(caller_forms))
    return {
        "device": draw(devices(available)),
        "merge": merge,
        "head_dim": draw(HEAD_DIMS),
        "backend": draw(BACKEND_CHOICES),
        "grid_thw": grid,
        "grid_form": form,
        "grid_dtype": dtype,
        "rotary_on": draw(ROTARY_PLACES) if wide else "device",
        "num_pad": draw(TOWER_NUM_PADS) if wide else 0,
    }


class ErnieRotPosEmbInputs:
    """``Ernie4_5_VisionTransformer.rot_pos_emb(grid_thw)``: host-built ``pos_ids``
    gathered from a rotary table on the device."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _tower_specs(available, contract, CALLER_ROT_FORMS, ("numpy", "cpu_tensor", "device_tensor"))

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        tower = _tower(_copy_module(impl, "Ernie4_5_VisionTransformer.rot_pos_emb"), spec)
        grid = grid_in_form(spec["grid_thw"], spec["grid_form"], spec["grid_dtype"], spec["device"])

        def call() -> torch.Tensor:
            with torch.inference_mode():
                return impl.function(tower, grid)

        return call


class ErnieEncoderMetadataInputs:
    """``prepare_encoder_metadata(grid_thw, num_pad=, device=)`` as the eager
    ``forward`` calls it: 0.28.0's method against 0.27.1's inline block."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _tower_specs(available, contract, CALLER_METADATA_FORMS, ("cpu_tensor", "device_tensor"))

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        tower = _tower(_copy_module(impl, "Ernie4_5_VisionTransformer.prepare_encoder_metadata"), spec)
        grid = grid_in_form(spec["grid_thw"], spec["grid_form"], spec["grid_dtype"], spec["device"])
        device = torch.device(spec["device"])  # forward passes hidden_states.device
        num_pad = spec["num_pad"]  # the thunk closes over no spec lists: --stress poisons host lists it finds

        def call() -> dict[str, Any]:
            with torch.inference_mode():
                return impl.function(tower, grid, num_pad=num_pad, device=device)

        return call


@st.composite
def _graph_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    merge = draw(MERGES)
    batch = draw(st.integers(1, 4))
    path = draw(GRAPH_PATHS)
    override = None
    if path == "capture":
        budget = draw(st.integers(1, 16))
        grid = [[1, merge, -(-budget // batch) * merge] for _ in range(batch)]
        override = budget * merge**2
    else:
        grid = draw(grid_thws(min_size=1, max_size=batch, max_t=1, merge=merge))
        # The manager replays the smallest captured budget the batch's output tokens fit.
        budget = sum(h * w for _, h, w in grid) // merge**2 + draw(GRAPH_BUDGET_SLACK)
    via, form = "model", "device_tensor" if path == "replay" else "list"
    num_pad = 0
    if wide and draw(st.booleans()):
        # prepare_encoder_metadata called directly with anything its parameters
        # accept: more rows than the batch (no padding), an empty batch, any
        # override, num_pad, a tensor grid.
        via = "direct"
        grid = draw(st.one_of(st.just(grid), grid_thws(min_size=0, max_size=5, max_t=2, merge=merge)))
        batch = draw(GRAPH_BATCH_SIZES)
        override = draw(GRAPH_SEQLEN_OVERRIDES)
        form, num_pad = draw(GRAPH_GRID_FORMS), draw(GRAPH_NUM_PADS)
    elif wide and path == "replay":
        form = draw(GRAPH_MM_GRID_FORMS)  # a host image_grid_thw in mm_kwargs
    return {
        "device": draw(devices(available)),
        "merge": merge,
        "head_dim": draw(HEAD_DIMS),
        "backend": draw(BACKEND_CHOICES),
        "rotary_on": "device",
        "grid_thw": grid,
        "grid_form": form,
        "grid_dtype": "int64" if via == "model" else "int32",
        "path": path,
        "via": via,
        "token_budget": budget,
        "pixel_dtype": draw(GRAPH_PIXEL_DTYPES),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "max_batch_size": batch,
        "max_seqlen_override": override,
        "pass_device": path == "capture",
        "num_pad": num_pad,
    }


def graph_buffers_reference(metadata: dict[str, Any], *, max_batch_size: int | None,
                            max_seqlen_override: int | None, device: torch.device) -> dict[str, Any]:
    """0.27.1's metadata turned into what the 0.28.0 graph parameters promise
    (their docstring): ``cu_seqlens`` padded to ``max_batch_size + 1`` entries
    by appending empty sequences (the last offset repeated), so attention and
    ``max_seqlen`` are unchanged; ``max_seqlen`` replaced by the override as a
    host int32 scalar; every buffer on the graph's device. Harness code, not an
    upstream copy: it states the contract, the optimized side must meet it."""
    cu_seqlens = metadata["cu_seqlens"]
    missing = 0 if max_batch_size is None else max_batch_size - (cu_seqlens.numel() - 1)
    if missing > 0:
        cu_seqlens = torch.cat([cu_seqlens, cu_seqlens[-1:].expand(missing)])
    max_seqlen = metadata["max_seqlen"]
    if max_seqlen_override is not None:
        max_seqlen = torch.tensor(max_seqlen_override, dtype=torch.int32)
    # non_blocking: this small copy is harness work and must not add a sync to
    # the legacy side's count (from pageable memory it stages without waiting).
    return {"rotary_pos_emb": metadata["rotary_pos_emb"], "cu_seqlens": cu_seqlens.to(device, non_blocking=True),
            "max_seqlen": max_seqlen}


def fill_graph_buffers(capture: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any]:
    """What the captured encoder graph reads at replay: the encoder CUDA-graph
    manager (vllm/v1/worker/encoder_cudagraph.py, EncoderCudaGraphManager
    ._run_budget_graph) keeps capture's values as the graph's input buffers and,
    before each ``graph.replay()``, copies the batch's replay values into them:
    ``src = replay.values.get(key)``; None is skipped, a 0-d ``src`` is
    ``buf.copy_(src)``, any other goes through ``_copy_padded_buffer``
    (``dst.zero_(); dst[: src.shape[0]].copy_(src)``; Ernie's
    ``get_encoder_cudagraph_config`` names no other padding logic). Harness
    code, the same on both sides: it turns the two calls into the encoder's view."""
    buffers = {key: buffer.clone() for key, buffer in capture.items()}
    for key, buffer in buffers.items():
        src = replay.get(key)
        if src is None:
            continue
        if src.ndim == 0:
            buffer.copy_(src)
        else:
            buffer.zero_()
            buffer[: src.shape[0]].copy_(src)
    return buffers


def _graph_model(module: ModuleType) -> type | None:
    """The side's stand-in for the model class holding the graph hooks: 0.28.0 and
    later copies have it, 0.27.1 (no encoder CUDA graphs) does not."""
    model = getattr(module, "Ernie4_5_VLMoeForConditionalGeneration", None)
    if model is None or not hasattr(model, "prepare_encoder_cudagraph_capture_inputs"):
        return None
    return model


class ErnieGraphMetadataInputs:
    """The encoder CUDA-graph paths (0.28.0 only), as EncoderCudaGraphManager
    calls the model (vllm/v1/worker/encoder_cudagraph.py): at capture
    ``prepare_encoder_cudagraph_capture_inputs(token_budget, max_batch_size,
    max_frames_per_batch, device, dtype)`` once per budget, and before each
    replay ``prepare_encoder_cudagraph_replay_buffers(mm_kwargs, max_batch_size,
    max_frames_per_batch)`` for the batch (``mm_kwargs`` on the device, as the
    runner batches them), whose values it copies into capture's buffers
    (``fill_graph_buffers``). Both hooks call ``prepare_encoder_metadata`` with a
    host list and the graph parameters. The thunk returns that metadata and the
    ``pixel_values`` the hook made -- at capture random dummies, so only their
    shape, dtype and device (``zeros_like``) -- and, at replay, the filled
    buffers the graph reads (``graph_buffers``).

    The legacy side computes 0.27.1's metadata for the same grid (the CPU int32
    tensor 0.28.0 makes of the list) and ``graph_buffers_reference`` applies the
    parameters; the harness builds the buffers the hooks promise from it.
    Under ``wide``, ``via == "direct"`` calls ``prepare_encoder_metadata`` itself
    with anything its parameters accept."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _graph_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _copy_module(impl, "Ernie4_5_VisionTransformer.prepare_encoder_metadata")
        tower = _tower(module, spec)
        if spec.get("via", "direct") == "direct":
            return self._direct(spec, impl, tower)
        device = torch.device(spec["device"])
        batch, budget = spec["max_batch_size"], spec["token_budget"]
        dtype = FLOAT_DTYPES[spec["pixel_dtype"]]
        frames = batch  # max_frames_per_batch: images only (t == 1), which Ernie's hooks do not read
        model = _graph_model(module)
        if model is None:
            return self._legacy_graph(spec, impl, tower)
        graph = model(tower)
        if spec["path"] == "capture":

            def capture() -> dict[str, Any]:
                with torch.inference_mode():
                    values = dict(graph.prepare_encoder_cudagraph_capture_inputs(
                        budget, batch, frames, device, dtype).values)
                values["pixel_values"] = torch.zeros_like(values["pixel_values"])  # random dummies
                return values

            return capture
        with torch.inference_mode():  # once per budget, before any replay
            captured = dict(graph.prepare_encoder_cudagraph_capture_inputs(budget, batch, frames, device,
                                                                           dtype).values)
        mm_kwargs = _graph_mm_kwargs(spec, tower)

        def replay() -> dict[str, Any]:
            with torch.inference_mode():
                values = dict(graph.prepare_encoder_cudagraph_replay_buffers(mm_kwargs, batch, frames).values)
                return values | {"graph_buffers": fill_graph_buffers(captured, values)}

        return replay

    @staticmethod
    def _legacy_graph(spec: dict, impl: Impl, tower: torch.nn.Module) -> Callable[[], Any]:
        """0.27.1: its metadata for the grid each hook hands prepare_encoder_metadata, made into
        what the hooks' values promise (graph_buffers_reference; the dummy pixel buffer's shape is
        the capture grid's patches by in_channels * patch_size**2 columns)."""
        device = torch.device(spec["device"])
        batch, budget, merge = spec["max_batch_size"], spec["token_budget"], spec["merge"]
        dtype = FLOAT_DTYPES[spec["pixel_dtype"]]
        capture_grid = [[1, merge, -(-budget // batch) * merge]] * batch
        embed = tower.patch_embed
        columns = embed.in_channels * embed.patch_size**2

        def buffers(grid: list[list[int]], override: int | None, where: torch.device) -> dict[str, Any]:
            metadata = impl.function(tower, grid_in_form(grid, "cpu_tensor", "int32", spec["device"]),
                                     num_pad=0, device=where)
            return graph_buffers_reference(metadata, max_batch_size=batch, max_seqlen_override=override,
                                           device=where)

        def capture_values() -> dict[str, Any]:
            patches = sum(t * h * w for t, h, w in capture_grid)
            return buffers(capture_grid, budget * merge**2, device) | {
                "pixel_values": torch.zeros(patches, columns, device=device, dtype=dtype)}

        if spec["path"] == "capture":

            def legacy_capture() -> dict[str, Any]:
                with torch.inference_mode():
                    return capture_values()

            return legacy_capture
        with torch.inference_mode():
            captured = capture_values()
        mm_kwargs = _graph_mm_kwargs(spec, tower)

        def legacy_replay() -> dict[str, Any]:
            with torch.inference_mode():
                grid = mm_kwargs["image_grid_thw"].tolist()
                values = buffers(grid, None, tower.device) | {"pixel_values": mm_kwargs["pixel_values"]}
                return values | {"graph_buffers": fill_graph_buffers(captured, values)}

        return legacy_replay

    @staticmethod
    def _direct(spec: dict, impl: Impl, tower: torch.nn.Module) -> Callable[[], Any]:
        device = torch.device(spec["device"])
        batch, override, num_pad = spec["max_batch_size"], spec["max_seqlen_override"], spec["num_pad"]
        takes_graph_parameters = "max_batch_size" in inspect.signature(impl.function).parameters
        if takes_graph_parameters:
            grid = grid_in_form(spec["grid_thw"], spec["grid_form"], spec["grid_dtype"], spec["device"])
            # As the graph paths call it: no num_pad (its default counts), a
            # device only at capture.
            extra = {"device": device} if spec["pass_device"] else {}
            if num_pad:
                extra["num_pad"] = num_pad

            def call() -> dict[str, Any]:
                with torch.inference_mode():
                    return impl.function(tower, grid, max_batch_size=batch, max_seqlen_override=override, **extra)

            return call
        # 0.27.1: the CPU int32 tensor 0.28.0 makes of the list, then the contract.
        grid = grid_in_form(spec["grid_thw"], "cpu_tensor", "int32", spec["device"])

        def legacy_call() -> dict[str, Any]:
            with torch.inference_mode():
                metadata = impl.function(tower, grid, num_pad=num_pad, device=device)
                return graph_buffers_reference(metadata, max_batch_size=batch, max_seqlen_override=override,
                                               device=device)

        return legacy_call


def _graph_mm_kwargs(spec: dict, tower: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The replayed batch's ``mm_kwargs``: the processor's int64 ``image_grid_thw`` and the
    flattened patches (``in_channels * patch_size**2`` columns), on the device as the runner
    batches them (a host grid under ``wide``)."""
    embed = tower.patch_embed
    patches = sum(t * h * w for t, h, w in spec["grid_thw"])
    pixels = seeded_floats((patches, embed.in_channels * embed.patch_size**2), spec["pixel_dtype"], spec["seed"],
                           spec["device"])
    grid = grid_in_form(spec["grid_thw"], spec["grid_form"], spec["grid_dtype"], spec["device"])
    return {"pixel_values": pixels, "image_grid_thw": grid}


@st.composite
def _resampler_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    conv = draw(SPATIAL_CONV_SIZES)
    if wide:
        grid = draw(grid_thws(min_size=0, max_size=3, max_t=4, merge=conv))
        form, dtype = draw(RESAMPLER_GRID_FORMS), draw(int_dtypes())
    else:
        grid = draw(resampler_grid_thws(merge=conv, modality=draw(MODALITIES)))
        form, dtype = "device_tensor", draw(int_dtypes())
    return {
        "device": draw(devices(available)),
        "spatial_conv_size": conv,
        "in_dim": draw(st.integers(1, 4)),
        "out_dim": draw(st.integers(1, 6)),
        "float_dtype": draw(float_dtypes(("float32", "bfloat16"))),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "grid_thw": grid,
        "grid_form": form,
        "grid_dtype": dtype,
        "use_temporal_conv": draw(st.booleans()) if wide else True,
    }


def _resampler(module: ModuleType, spec: dict) -> torch.nn.Module:
    """The side's resampler with every weight drawn from the spec's seed."""
    config = SimpleNamespace(use_temporal_conv=spec["use_temporal_conv"], rms_norm_eps=1e-6)
    model = module.VariableResolutionResamplerModel(
        spec["in_dim"], spec["out_dim"], spec["spatial_conv_size"], TEMPORAL_CONV_SIZE, config
    )
    for i, (_, param) in enumerate(sorted(model.named_parameters())):
        param.data = seeded_floats(tuple(param.shape), spec["float_dtype"], spec["seed"] + 1 + i, "cpu")
    return model.to(spec["device"])


class ErnieResamplerInputs:
    """``VariableResolutionResamplerModel.forward(x, grid_thw)``; the thunk also
    returns what ``fwd_placeholder`` gathered (the temporal layer's input)."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _resampler_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        model = _resampler(_copy_module(impl, "VariableResolutionResamplerModel.forward"), spec)
        rows = sum(t * h * w for t, h, w in spec["grid_thw"])
        x = seeded_floats((rows, spec["in_dim"]), spec["float_dtype"], spec["seed"], spec["device"])
        grid = grid_in_form(spec["grid_thw"], spec["grid_form"], spec["grid_dtype"], spec["device"])
        temporal = spec["use_temporal_conv"]

        def call() -> dict[str, Any]:
            with torch.inference_mode():
                output = impl.function(model, x, grid)
            gathered = model.temporal_linear1.received if temporal else None
            return {"output": output, "placeholder": gathered}

        return call


# --- ernie-encoder-output: the embeddings EncoderCudaGraphManager hands back --------------------------

OUTPUT_PATHS = st.sampled_from(["graph", "eager"])
OUTPUT_ORDERS = st.sampled_from(["ascending", "descending"])
# "runner": where the side's own model runner puts image_grid_thw -- on the device up to 0.28.0, on the host
# from 0.29.0 (MultiModalFieldConfig.batched("image", keep_on_cpu=True)), which 0.30.0's async_tensor_h2d
# of it relies on (a device tensor fails its ``assert t.is_cpu``). The wide contract adds a host grid for
# every side (0.28.0's ``.to(device)`` takes one).
OUTPUT_GRID_FORMS = st.sampled_from(["runner", "cpu_tensor"])
KEEP_ON_CPU_SINCE = (0, 29)
OUTPUT_SLACK = st.integers(0, 2)
OUTPUT_BUDGET_SLACK = st.integers(0, 6)
OUTPUT_PATCH_SIZES = st.sampled_from([1, 2])
OUTPUT_CHANNELS = st.integers(1, 2)
OUTPUT_EMBED_DIMS = st.integers(1, 4)
OUTPUT_WIDENINGS = st.integers(1, 3)
GRAPH_GRID_DTYPES = st.sampled_from(["int64", "int32"])


@st.composite
def _output_specs(draw: st.DrawFn, available: Sequence[str], contract: str, paths: st.SearchStrategy[str]) -> dict:
    merge = draw(MERGES)
    grid = draw(grid_thws(min_size=1, max_size=4, max_t=1, merge=merge))
    tokens = sum(h * w for _, h, w in grid) // merge**2
    embed_dim = draw(OUTPUT_EMBED_DIMS)
    wide = contract == "wide"
    return {
        "device": draw(devices(available)),
        "merge": merge,
        "head_dim": draw(HEAD_DIMS),
        "backend": draw(BACKEND_CHOICES),
        "rotary_on": "device",
        "patch_size": draw(OUTPUT_PATCH_SIZES),
        "in_channels": draw(OUTPUT_CHANNELS),
        "embed_dim": embed_dim,
        # The LM's hidden size is wider than the ViT's (1280 -> 2560 in ERNIE-4.5-VL-28B-A3B). Equal
        # widths (no shipped config) only turn the 0.28.0 eager finding from a shape error into an
        # IndexError or wrong values (known-issues.json), so neither contract draws them.
        "out_dim": embed_dim + draw(OUTPUT_WIDENINGS),
        "grid_thw": grid,
        "grid_form": draw(OUTPUT_GRID_FORMS) if wide else "runner",
        # The processor's int64; 0.27.1 had none of these methods, so the wide contract only adds an
        # int32 grid (what prepare_encoder_metadata makes of a host list).
        "grid_dtype": draw(GRAPH_GRID_DTYPES) if wide else "int64",
        "pixel_dtype": draw(GRAPH_PIXEL_DTYPES),
        "path": draw(paths),
        "order": draw(OUTPUT_ORDERS),
        "max_batch_size": len(grid) + draw(OUTPUT_SLACK),
        "token_budget": tokens + draw(OUTPUT_BUDGET_SLACK),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def _segment_means(hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Each row's sequence mean, the sequences cut by ``cu_seqlens`` (rows past its last offset, the
    graph's padding, form one more sequence): the only way a token sees another, as in varlen attention.
    Device ops only, no host read. Summed in float64, as the other stand-in towers do, so that the order of
    index_add_'s atomics on CUDA (another each run) cannot reach the outputs: with float32 sums the
    outputs came 5.4e-4 apart under --stress on an H200 (lab/gpu-runs/2026-12-06g-h200.md)."""
    bounds = cu_seqlens[1:].to(torch.int64)
    positions = torch.arange(hidden.shape[0], device=hidden.device)
    segment = torch.searchsorted(bounds, positions, right=True)
    wide = hidden.double()
    sums = wide.new_zeros(bounds.numel() + 1, hidden.shape[1]).index_add_(0, segment, wide)
    counts = wide.new_zeros(bounds.numel() + 1).index_add_(0, segment, torch.ones_like(wide[:, 0]))
    return (sums / counts.clamp(min=1).unsqueeze(1))[segment].to(hidden.dtype)


@functools.lru_cache(maxsize=None)
def _tiny_vit_class(tower_class: type) -> type:
    """The side's ``Ernie4_5_VisionTransformer`` stand-in given a tiny deterministic ``forward`` with
    upstream's signature and control flow (vllm/model_executor/models/ernie45_vl.py 0.28.0
    ``Ernie4_5_VisionTransformer.forward``): patch embedding, the metadata computed inline when the
    caller hands none (eager) or the graph buffers used as they are (``encoder_metadata=``), then one
    stand-in block that reads the rotary rows and ``cu_seqlens``. Harness code, the same on both sides:
    the ViT's kernels and weights are out of reach, its host-side metadata is not."""

    class TinyVit(tower_class):  # type: ignore[misc, valid-type]
        def forward(self, hidden_states: torch.Tensor, grid_thw: Any = None, num_pad: int = 0, *,
                    encoder_metadata: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
            hidden_states = self.patch_embed(hidden_states)
            if encoder_metadata is None:
                encoder_metadata = self.prepare_encoder_metadata(grid_thw, num_pad=num_pad,
                                                                 device=hidden_states.device)
            rotary = encoder_metadata["rotary_pos_emb"].to(hidden_states.dtype)
            hidden_states = hidden_states + rotary @ self.rotary_mix
            return hidden_states + _segment_means(hidden_states, encoder_metadata["cu_seqlens"])

    return TinyVit


def _tiny_vit(module: ModuleType, spec: dict) -> torch.nn.Module:
    """The side's tower with a seeded patch embedding (``in_channels * patch_size**2 -> embed_dim``)
    and rotary mixing, on the spec's device."""
    backend = module.AttentionBackendEnum[spec["backend"]]
    with torch.device(spec["device"]):
        tower = _tiny_vit_class(module.Ernie4_5_VisionTransformer)(spec["merge"], spec["head_dim"], backend)
    embed = module.Ernie4_5_VisionPatchEmbed(patch_size=spec["patch_size"], in_channels=spec["in_channels"],
                                             embed_dim=spec["embed_dim"])
    columns = spec["in_channels"] * spec["patch_size"] ** 2
    embed.proj.weight.data = seeded_floats((spec["embed_dim"], columns), "float32", spec["seed"] + 101, "cpu")
    tower.patch_embed = embed.to(spec["device"])
    tower.rotary_mix = seeded_floats((spec["head_dim"] // 2, spec["embed_dim"]), "float32", spec["seed"] + 102,
                                     spec["device"])
    return tower


def _output_resampler(module: ModuleType, spec: dict) -> torch.nn.Module:
    """Ernie's resampler as the model builds it: ``in_dim`` the ViT's width, ``out_dim`` the LM's,
    ``spatial_conv_size`` the merge size, temporal conv on (Ernie 4.5 VL's config); seeded weights."""
    return _resampler(module, {"in_dim": spec["embed_dim"], "out_dim": spec["out_dim"],
                               "spatial_conv_size": spec["merge"], "use_temporal_conv": True,
                               "float_dtype": "float32", "seed": spec["seed"] + 200, "device": spec["device"]})


def output_batch(spec: dict) -> tuple[list[int], list[int]]:
    """The manager's batch order and per-item output tokens (vllm/v1/worker/encoder_cudagraph.py
    ``_execute_local``): ``per_item_out_tokens`` from ``get_encoder_cudagraph_item_specs``
    (``t * h * w // m // m``, in the items' own order); 0.28.0 .. 0.33.0 pack items sorted by tokens
    ascending, 0.34.0 takes the whole batch largest first (a stable sort either way)."""
    merge = spec["merge"]
    tokens = [t * h * w // merge // merge for t, h, w in spec["grid_thw"]]
    order = sorted(range(len(tokens)), key=lambda i: tokens[i], reverse=spec["order"] == "descending")
    return order, tokens


def grid_on_host(spec: dict, impl: Impl) -> bool:
    """Whether the batch's ``image_grid_thw`` is a host tensor for ``impl``'s side: ``"runner"`` follows the
    side's release (``KEEP_ON_CPU_SINCE``; the copies, 0.27.1 and 0.28.0, keep it on the device)."""
    if spec["grid_form"] == "cpu_tensor":
        return True
    found = re.match(r"(\d+)\.(\d+)", release_of(impl) or "")
    return bool(found) and (int(found[1]), int(found[2])) >= KEEP_ON_CPU_SINCE


def _output_mm_kwargs(spec: dict, batch_indices: list[int], on_host: bool) -> dict[str, torch.Tensor]:
    """``mm_kwargs`` for the batch as ``select_encoder_cudagraph_items`` hands them on: the batch's
    patches concatenated in batch order and ``image_grid_thw[indices]`` (the processor's int64; on the
    device in 0.28.0, kept on the host from 0.29.0, ``keep_on_cpu=True``: ``grid_on_host``)."""
    grid = spec["grid_thw"]
    columns = spec["in_channels"] * spec["patch_size"] ** 2
    patches = [t * h * w for t, h, w in grid]
    pixels = seeded_floats((sum(patches), columns), spec["pixel_dtype"], spec["seed"], spec["device"])
    starts = [sum(patches[:i]) for i in range(len(patches))]
    selected = torch.cat([pixels[starts[i]: starts[i] + patches[i]] for i in batch_indices])
    batch_grid = grid_in_form([grid[i] for i in batch_indices], "cpu_tensor" if on_host else "device_tensor",
                              spec["grid_dtype"], spec["device"])
    return {"pixel_values": selected, "image_grid_thw": batch_grid}


class ErnieEncoderOutputInputs:
    """The image embeddings EncoderCudaGraphManager._execute_local (vllm/v1/worker/encoder_cudagraph.py,
    0.28.0 .. 0.34.0) gets from Ernie4_5_VLMoeForConditionalGeneration for one batch, by either path:

    * ``graph``: ``prepare_encoder_cudagraph_capture_inputs(token_budget, max_batch_size,
      max_frames_per_batch, device, dtype)`` once per budget (here at materialize, outside the count),
      then per batch ``prepare_encoder_cudagraph_replay_buffers(batch_mm_kwargs, max_batch_size,
      max_frames_per_batch)``, its values copied into capture's buffers (``_run_budget_graph``,
      ``fill_graph_buffers``), the captured ``encoder_cudagraph_forward(values)`` run on them (eagerly
      here: same math, no capture) and ``postprocess_encoder_output({"default": output}, indices,
      per_item_out_tokens, dest, clone=True, batch_mm_kwargs=batch_mm_kwargs)``;
    * ``eager`` (no captured budget fits): ``encoder_eager_forward(batch_mm_kwargs, path="default")``,
      then the same ``postprocess_encoder_output`` call: every manager from 0.28.0 to 0.34.0 makes it
      after either path.

    The thunk returns ``dest`` as the manager reads it, one tensor per item in the items' own order.
    The vision tower and the resampler weights are tiny seeded stand-ins, the same on both sides
    (``_tiny_vit``, ``_output_resampler``); what is fuzzed is the host-side logic around them.

    The legacy side (0.27.1) has no encoder CUDA graphs: it gets the batch's embeddings the way its
    ``_process_image_input`` makes them -- the tower on the grid, the resampler, ``split`` by
    ``t * h * w // m // m`` -- scattered to the same indices.
    """

    paths: st.SearchStrategy[str] = OUTPUT_PATHS

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _output_specs(available, contract, self.paths)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _copy_module(impl, "a method of the ernie45_vl copy")
        tower, resampler = _tiny_vit(module, spec), _output_resampler(module, spec)
        batch_indices, out_tokens = output_batch(spec)
        mm_kwargs = _output_mm_kwargs(spec, batch_indices, grid_on_host(spec, impl))
        model_class = _graph_model(module)
        if model_class is None:
            return _legacy_output(module.Ernie4_5_VLMoeForConditionalGeneration(tower, resampler), mm_kwargs,
                                  batch_indices, out_tokens)
        model = model_class(tower, resampler)
        budget, batch = spec["token_budget"], spec["max_batch_size"]
        device = torch.device(spec["device"])
        if spec["path"] == "graph":
            with torch.inference_mode():  # once per budget, before any replay
                captured = dict(model.prepare_encoder_cudagraph_capture_inputs(
                    budget, batch, batch, device, tower.dtype).values)

        def run() -> list[torch.Tensor]:
            with torch.inference_mode():
                if spec["path"] == "graph":
                    replay = model.prepare_encoder_cudagraph_replay_buffers(mm_kwargs, batch, batch)
                    output = model.encoder_cudagraph_forward(fill_graph_buffers(captured, dict(replay.values)))
                else:
                    output = model.encoder_eager_forward(mm_kwargs, path="default")
                dest: dict[int, torch.Tensor] = {}
                if spec["path"] == "eager-direct":  # 0.28.0's promise, not its manager (class docstring)
                    module.scatter_output_slices(output, batch_indices, out_tokens, dest, True)
                else:
                    model.postprocess_encoder_output({"default": output}, batch_indices, out_tokens, dest,
                                                     clone=True, batch_mm_kwargs=mm_kwargs)
            return [dest[i] for i in range(len(out_tokens))]

        return run


def _legacy_output(model: torch.nn.Module, mm_kwargs: dict, batch_indices: list[int],
                   out_tokens: list[int]) -> Callable[[], Any]:
    """0.27.1 on the batch: its ``_process_image_input`` (legacy/ernie45_vl.py holds it as
    ``encoder_eager_forward``) -- ``_vision_forward``'s frame expansion, the tower, the resampler,
    ``split`` by ``grid_thw.prod(-1) // m // m`` -- each piece to its item, copied as the manager's
    ``clone=True`` asks."""

    def legacy_run() -> list[torch.Tensor]:
        with torch.inference_mode():
            pieces = model.encoder_eager_forward(mm_kwargs)
        by_item = dict(zip(batch_indices, pieces))
        return [by_item[i].clone() for i in range(len(out_tokens))]

    return legacy_run


class ErnieEncoderGraphOutputInputs(ErnieEncoderOutputInputs):
    """``ErnieEncoderOutputInputs`` beside the 0.28.0 eager finding (known-issues.json,
    ernie-encoder-output), for the plants and the self-test: the graph path as the manager runs it,
    and ``eager-direct``, 0.28.0's ``encoder_eager_forward`` taken at its word ("The result is
    scattered directly, so it must be the post-merge embeddings"): its output scattered with
    ``scatter_output_slices(output, indices, per_item_out_tokens, dest, clone=True)``, no
    ``postprocess_encoder_output``. Only the 0.27.1/0.28.0 copies mean the same by it: from 0.34.0
    ``encoder_eager_forward`` returns the ViT's features."""

    paths = st.sampled_from(["graph", "eager-direct"])
