"""Inputs of ``Qwen2VisionTransformer.prepare_encoder_metadata(grid_thw, *, max_batch_size=None,
max_frames_per_batch=None, max_seqlen_override=None, device=None)`` (vllm/model_executor/models/qwen2_vl.py).

Callers (vllm 0.30.0; 0.34.0 the same), all passing ``grid_thw`` as a Python ``list[list[int]]``:

* ``Qwen2VisionTransformer.forward(x, grid_thw)`` with no ``encoder_metadata``:
  ``self.prepare_encoder_metadata(grid_thw if isinstance(grid_thw, list) else grid_thw.tolist())``, no
  keywords; ``_process_image_input`` / ``_process_video_input`` hand it the processor's ``[n, 3]`` grid
  (images ``t == 1``, videos ``t >= 1``) -- path ``eager``;
* ``Qwen2VLForConditionalGeneration.prepare_encoder_cudagraph_capture_inputs(token_budget, max_batch_size,
  max_frames_per_batch, device, dtype)``: ``grid_config``, ``max_batch_size`` identical strips
  (``[frames_per_item, m, ceil(per_item / frames_per_item) * m]`` when ``frames_per_item =
  max_frames_per_batch // max_batch_size > 1``, else ``[1, m, per_item * m]``, ``per_item =
  ceil(token_budget / max_batch_size)``), with ``max_batch_size=``, ``max_frames_per_batch=``,
  ``max_seqlen_override=token_budget * m**2`` and ``device=`` -- path ``capture``;
* ``prepare_encoder_cudagraph_replay_buffers(mm_kwargs, max_batch_size, max_frames_per_batch)``:
  ``_get_grid_thw_by_modality(mm_kwargs)`` (``grid_thw.tolist()``) with ``max_batch_size=`` for images, or
  ``max_frames_per_batch=`` for videos; the encoder CUDA-graph manager (vllm/v1/worker/encoder_cudagraph.py)
  hands it at most ``max_batch_size`` items / ``max_frames_per_batch`` frames -- paths ``replay-image`` and
  ``replay-video``.

``EncoderCudaGraphManager.__init__`` (vllm/v1/worker/encoder_cudagraph.py) sets ``max_frames_per_batch`` to 0
when videos are off, to the user's ``encoder_cudagraph_max_frames_per_batch``, or to ``max_batch_size *
max_frames_per_video``: any value from 0 up is drawn, not only multiples of ``max_batch_size``.

The tower's ``attn_backend`` is ``get_vit_attn_backend(head_size, dtype)``'s pick, drawn as an input
(``backend``): FLASH_ATTN, TRITON_ATTN, ROCM_AITER_FA get a ``max_seqlen`` tensor from
``compute_attn_mask_seqlen``, TORCH_SDPA and FLASHINFER get ``None``.

The wide contract adds what 0.29.0 also took: an empty grid (both raise), tuples, a numpy array and CPU or
device tensors as ``grid_thw``, a padding target below the number of frames (no padding), an override
outside capture, and ``device=None`` with keywords (the tower's own device).

``self`` is the copy's stand-in ``Qwen2VisionTransformer(spatial_merge_size, rotary_pos_emb, patch_embed,
attn_backend)`` built as strategies/qwen2_vl/inputs.py builds it (a seeded rope cache on the device, the
weights' device read from an empty tensor).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES, choice_of, devices, float_dtypes
from strategies.grids import grid_thws
from strategies.qwen2_vl.inputs import GRID_FORMS_WIDE, MAX_HW, MERGE_SIZES, grid_in_form, rope_table

BACKENDS = ("FLASH_ATTN", "TRITON_ATTN", "ROCM_AITER_FA", "TORCH_SDPA", "FLASHINFER")
FLASH_STYLE = frozenset({"FLASH_ATTN", "TRITON_ATTN", "ROCM_AITER_FA"})  # compute_attn_mask_seqlen's set
PATHS = ("eager", "capture", "replay-image", "replay-video")

BACKEND_CHOICES = choice_of(list(BACKENDS))
PATH_CHOICES = choice_of(list(PATHS))
ROTARY_HALVES = st.integers(1, 4)
SEEDS = st.integers(0, 2**31 - 1)
MAX_BATCH_SIZES = st.integers(1, 3)
BUDGET_PER_ITEM = st.integers(1, MAX_HW // 2)  # capture strips are per_item * m wide: at most MAX_HW
CAPTURE_FRAME_BUDGETS = st.integers(0, 8)  # max_frames_per_batch: 0 (video off), a user value, B * frames
EXTRA_SLOTS = st.integers(0, 3)
WIDE_PADS = st.one_of(st.none(), st.integers(0, 8))
WIDE_OVERRIDES = st.one_of(st.none(), st.integers(0, 10_000))
BOOLS = st.booleans()
EMPTY_ODDS = st.integers(0, 7)  # wide: an empty grid one draw in eight (both releases raise on it)


def capture_grid(token_budget: int, max_batch_size: int, max_frames_per_batch: int, merge: int) -> list[list[int]]:
    """``grid_config`` as prepare_encoder_cudagraph_capture_inputs (0.30.0) builds it."""
    per_mm_item_output = (token_budget + max_batch_size - 1) // max_batch_size
    frames_per_item = max_frames_per_batch // max_batch_size
    if frames_per_item > 1:
        tokens_per_frame = (per_mm_item_output + frames_per_item - 1) // frames_per_item
        return [[frames_per_item, merge, tokens_per_frame * merge] for _ in range(max_batch_size)]
    return [[1, merge, per_mm_item_output * merge] for _ in range(max_batch_size)]


@st.composite
def metadata_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    merge = draw(MERGE_SIZES)
    path = draw(PATH_CHOICES)
    kwargs: dict[str, Any] = {}
    if path == "capture":
        batch = draw(MAX_BATCH_SIZES)
        frames = draw(CAPTURE_FRAME_BUDGETS)
        token_budget = batch * draw(BUDGET_PER_ITEM) if merge == 2 else draw(BUDGET_PER_ITEM)
        grid = capture_grid(token_budget, batch, frames, merge)
        kwargs = {"max_batch_size": batch, "max_frames_per_batch": frames,
                  "max_seqlen_override": token_budget * merge**2, "device": "spec"}
    else:
        grid = draw(grid_thws(min_size=1, max_size=3, max_t=3, max_hw=12, merge=merge))
        if wide and draw(EMPTY_ODDS) == 5:  # a middle value: Hypothesis favours the ends of a range
            grid = []
        if path == "replay-image":
            grid = [[1, h, w] for _, h, w in grid]
            kwargs = {"max_batch_size": len(grid) + draw(EXTRA_SLOTS)}
        elif path == "replay-video":
            kwargs = {"max_frames_per_batch": sum(t for t, _, _ in grid) + draw(EXTRA_SLOTS)}
    if wide:
        if path != "capture" and draw(BOOLS):  # any padding target, any override, the tower's device
            kwargs = {"max_batch_size": draw(WIDE_PADS), "max_frames_per_batch": draw(WIDE_PADS),
                      "max_seqlen_override": draw(WIDE_OVERRIDES), "device": None}
        elif path == "capture" and draw(BOOLS):
            kwargs["device"] = None
    return {
        "device": draw(devices(available)),
        "merge": merge,
        "rotary_half": draw(ROTARY_HALVES),
        "dtype": draw(float_dtypes()),
        "seed": draw(SEEDS),
        "backend": draw(BACKEND_CHOICES),
        "path": path,
        "grid_thw": grid,
        "grid_form": draw(GRID_FORMS_WIDE) if wide else "list",
        "kwargs": kwargs,
    }


def pad_target(spec: dict) -> int | None:
    """The length prepare_encoder_metadata pads ``cu_seqlens``'s sequences to (``max_frames_per_batch``,
    else ``max_batch_size``), or None."""
    kwargs = spec["kwargs"]
    if kwargs.get("max_frames_per_batch") is not None:
        return kwargs["max_frames_per_batch"]
    return kwargs.get("max_batch_size")


def metadata_device(spec: dict) -> str:
    """Where ``cu_seqlens`` must land: the ``device=`` keyword, else the tower's (the spec's) device."""
    return spec["device"]


class Qwen2EncoderMetadataInputs:
    """``Qwen2VisionTransformer.prepare_encoder_metadata`` on the side's own class with a stand-in ``self``
    and the drawn backend; the thunk returns upstream's metadata dict."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return metadata_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Qwen2VisionTransformer.prepare_encoder_metadata")
        if spec["dtype"] not in FLOAT_DTYPES:
            raise HarnessError(f"unknown dtype {spec['dtype']!r}")
        device = spec["device"]
        weight = torch.empty(0, dtype=FLOAT_DTYPES[spec["dtype"]], device=device)
        patch_embed = SimpleNamespace(proj=SimpleNamespace(weight=weight))
        backend = impl.module.AttentionBackendEnum[spec["backend"]]
        tower = impl.owner(spec["merge"], rope_table(spec, device), patch_embed, backend)
        grid_thw = grid_in_form(spec["grid_thw"], spec["grid_form"], device)
        kwargs = dict(spec["kwargs"])
        if kwargs.get("device") == "spec":
            kwargs["device"] = torch.device(device)  # capture passes the runner's device

        def call() -> dict[str, Any]:
            return impl.function(tower, grid_thw, **kwargs)

        return call
