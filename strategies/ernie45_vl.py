"""Inputs for ernie45_vl's vision tower metadata and resampler (DESIGN.md rows 6-8).

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
  0.27.1 inline block never saw (tests/test_ernie45_vl.py covers them).
* ``VariableResolutionResamplerModel.forward`` gets the vision features and
  the *unexpanded* grid on the device: images have ``t == 1``, videos an even
  ``t`` (the processor pads frames to ``temporal_conv_size == 2``).

The wide contract adds what the 0.27.1 functions accepted: numpy and CPU
tensors (``rot_pos_emb``), CPU tensors (the metadata block, the resampler),
unexpanded grids with ``t > 1`` including odd ``t``, ``num_pad > 0``, empty
batches, a rotary table built on the CPU, and ``use_temporal_conv=False``.
"""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.errors import HarnessError
from fuzz.targets import Impl
from strategies.common import INT_DTYPES, devices, float_dtypes, int_dtypes, seeded_floats
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


def expand_frames(grid: list[list[int]]) -> list[list[int]]:
    """``_vision_forward``'s expansion: ``[[2, h, w]] -> [[1, h, w], [1, h, w]]``."""
    return [[1, h, w] for t, h, w in grid for _ in range(t)]


def frame_grid_thws(*, merge: int, min_size: int = 1) -> st.SearchStrategy[list[list[int]]]:
    """Grids as the vision tower receives them on the eager path: one row per frame."""
    if min_size < 0 or min_size > CALLER_MAX_ITEMS:
        raise HarnessError(f"frame_grid_thws: need 0 <= min_size <= {CALLER_MAX_ITEMS}")
    items = grid_thws(min_size=min_size, max_size=CALLER_MAX_ITEMS, max_t=CALLER_MAX_FRAMES, merge=merge)
    return items.map(expand_frames)


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
    return sys.modules[impl.owner.__module__]


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
    merge = draw(st.sampled_from([1, 2]))
    if wide:
        grid = draw(grid_thws(min_size=0, max_size=3, max_t=3, merge=merge))
        form, dtype = draw(st.sampled_from(wide_forms)), draw(int_dtypes())
    else:
        grid = draw(frame_grid_thws(merge=merge))
        form, dtype = draw(st.sampled_from(caller_forms))
    return {
        "device": draw(devices(available)),
        "merge": merge,
        "head_dim": draw(st.sampled_from([4, 8, 16])),
        "backend": draw(st.sampled_from(BACKENDS)),
        "grid_thw": grid,
        "grid_form": form,
        "grid_dtype": dtype,
        "rotary_on": draw(st.sampled_from(["device", "cpu"])) if wide else "device",
        "num_pad": draw(st.sampled_from([0, 0, 1, 3, 7])) if wide else 0,
    }


class ErnieRotPosEmbInputs:
    """``Ernie4_5_VisionTransformer.rot_pos_emb(grid_thw)``: host-built ``pos_ids``
    gathered from a rotary table on the device."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _tower_specs(available, contract, CALLER_ROT_FORMS, ("numpy", "cpu_tensor", "device_tensor"))

    def materialize(self, spec: dict, impl: Impl) -> Callable[[], Any]:
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

    def materialize(self, spec: dict, impl: Impl) -> Callable[[], Any]:
        tower = _tower(_copy_module(impl, "Ernie4_5_VisionTransformer.prepare_encoder_metadata"), spec)
        grid = grid_in_form(spec["grid_thw"], spec["grid_form"], spec["grid_dtype"], spec["device"])
        device = torch.device(spec["device"])  # forward passes hidden_states.device
        num_pad = spec["num_pad"]  # the thunk closes over no spec lists: --stress poisons host lists it finds

        def call() -> dict[str, Any]:
            with torch.inference_mode():
                return impl.function(tower, grid, num_pad=num_pad, device=device)

        return call


@st.composite
def _resampler_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    conv = draw(st.sampled_from([1, 2]))
    if wide:
        grid = draw(grid_thws(min_size=0, max_size=3, max_t=4, merge=conv))
        form, dtype = draw(st.sampled_from(["cpu_tensor", "device_tensor"])), draw(int_dtypes())
    else:
        grid = draw(resampler_grid_thws(merge=conv, modality=draw(st.sampled_from(["image", "video"]))))
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

    def materialize(self, spec: dict, impl: Impl) -> Callable[[], Any]:
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
