"""Input model of keep-on-cpu-paddleocr-grid-thw (legacy/paddleocr_fields.py, vllm 0.28.0, vs
optimized/paddleocr_fields.py, vllm 0.34.0): the field config of PaddleOCR-VL's image fields and the model
code that consumes them, end to end.

The callers (vllm 0.34.0):

* ``vllm/v1/worker/gpu_model_runner.py`` ``_execute_mm_encoder`` batches the scheduled items with
  ``vllm/multimodal/utils.py`` ``group_and_batch_mm_kwargs`` (``MultiModalKwargsItems`` -> the fields'
  ``_reduce_data``) and calls ``model.embed_multimodal(**mm_kwargs_group)``; every field goes to the device
  except those the processor's ``_get_mm_fields_config`` marks ``keep_on_cpu``.
* ``PaddleOCRVLMultiModalProcessor._get_mm_fields_config`` (the copies) says how each field is sliced per item
  and batched: 0.28.0 ``pixel_values`` ``batched`` (its ``_call_hf_processor`` had already split the flat
  patches per image, ``processed_outputs["pixel_values"].split(num_patches_per_image.tolist())``) and
  ``image_grid_thw`` ``batched`` on the device; 0.34.0 ``pixel_values`` ``flat_from_sizes(grid.prod(-1))``
  (the processor's flat patches) and ``image_grid_thw`` ``batched(keep_on_cpu=True)``.
* ``PaddleOCRVLForConditionalGeneration.embed_multimodal(**kwargs)`` -> ``_parse_and_validate_image_input``
  -> ``_process_image_input`` -> ``encode_image`` (per image in 0.28.0, once for the batch in 0.34.0) and
  ``self.mlp_AR`` (``Projector.forward``, with the grid tensor itself).

So the input model is a small engine: it draws what the HF processor returns (flat patches and an
``(n, 3)`` grid of ``t == 1`` images with even ``h``, ``w``: the 2x2 merge needs them), asks the side's own
``_get_mm_fields_config`` (``impl.module``: the copy, a mutant or a rebuilt release) how to slice and batch
each field and whether to keep it on the host, and builds the kwargs the side's engine would pass:

* ``batched``: one item per image (the per-image patch tensors, the grid rows), reduced as
  ``MultiModalBatchedField._reduce_data`` does: stacked when all items have one shape, else a list;
* ``flat`` (``flat_from_sizes``): the flat tensor sliced by the config's own sizes, ``data[start:start +
  size]`` per item as ``MultiModalFlatField.build_elems`` does (sizes that disagree with the grid misslice
  the patches there too), then concatenated back (``MultiModalFlatField._reduce_data``);
* device: the host for a ``keep_on_cpu`` field, else ``spec["device"]``. ``spec["field_on"]`` is the
  keep-on-cpu family's rule (strategies/keep_on_cpu/inputs.py): ``"engine"`` on both sides under the caller
  contract; under ``wide`` the legacy side may get the grid on the host (``"cpu"``), a form its code accepts.

The vision tower (``SiglipVisionModel``) is a stand-in, the same on both sides: ``RecordingPaddleTower``
(below). The projector is the copies' own ``Projector``.

Wide contract: frames ``t`` up to 2 (0.28.0's ``encode_image`` and the projector take them), an int32 grid,
the legacy grid on the host.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import INT_DTYPES, devices, float_dtypes, int_dtypes, seed_parameters, seeded_floats
from strategies.field_batches import (
    CALLER_FIELD_PLACEMENTS,
    WIDE_FIELD_PLACEMENTS,
    engine_kwargs,
    field_configs,
    segment_ids,
)

PROCESSOR = "PaddleOCRVLMultiModalProcessor"
MAX_POSITIONS = 64  # the stand-in tower's position table: h * w <= 8 * 8
EVEN_SIDES = st.sampled_from([2, 4, 6, 8])
PATCH_SIDES = st.integers(1, 2)
WIDTHS = st.integers(1, 4)


class RecordingPaddleTower(nn.Module):
    """Stands in for ``SiglipVisionModel`` (the whole tower upstream), the same on both sides.

    Takes what ``encode_image`` passes it: the patches, the host grid list, ``position_ids`` (indexes a
    position table on the patches' device, as ``SiglipVisionEmbeddings`` does: ids left on the host fail on
    CUDA as upstream's would) and ``cu_seqlens`` (moved to the patches' device as upstream's
    ``SiglipEncoder.forward`` does: a host tensor with 0.34.0's ``async_tensor_h2d(cu_seqlens,
    dtype=torch.int32, device=device)``, a device one with ``.to(device=device, non_blocking=True)``).
    Each token is its patch projection plus its position row plus the mean of its segment (attention
    within ``cu_seqlens`` segments, in float64); a token outside exact segments is NaN.
    Returns ``(1, tokens, width)`` as the real tower's last hidden state. Every call is recorded (cloned)
    for the invariants."""

    def __init__(self, patch_dim: int, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(patch_dim, width, bias=False)
        self.positions = nn.Embedding(MAX_POSITIONS, width)
        self.calls: list[dict] = []

    @property
    def dtype(self) -> torch.dtype:
        return self.proj.weight.dtype

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: Any = None, position_ids: torch.Tensor | None = None,
                interpolate_pos_encoding: bool = False, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        device = pixel_values.device
        if cu_seqlens.is_cpu:  # 0.34.0 SiglipEncoder.forward: async_tensor_h2d(cu_seqlens, dtype=torch.int32, ...)
            source = cu_seqlens.pin_memory() if device.type == "cuda" else cu_seqlens
            cu_seqlens = source.to(device, dtype=torch.int32, non_blocking=True)
        else:  # both versions: cu_seqlens.to(device=device, non_blocking=True)
            cu_seqlens = cu_seqlens.to(device=device, non_blocking=True)
        self.calls.append({"image_grid_thw": [tuple(int(v) for v in g) for g in image_grid_thw],
                           "position_ids": position_ids.clone(), "cu_seqlens": cu_seqlens.clone()})
        hidden = self.proj(pixel_values.flatten(1)) + self.positions(position_ids)
        segment, covered = segment_ids(cu_seqlens.long(), hidden.shape[0])
        wide = hidden.double()
        sums = torch.zeros(len(cu_seqlens), wide.shape[1], dtype=torch.float64, device=device)
        counts = torch.zeros(len(cu_seqlens), dtype=torch.float64, device=device)
        index = segment.clamp(0, len(cu_seqlens) - 1)
        sums.index_add_(0, index, wide)
        counts.index_add_(0, index, torch.ones_like(index, dtype=torch.float64))
        mixed = wide + (sums / counts.clamp(min=1).unsqueeze(1))[index]
        return mixed.to(hidden.dtype).masked_fill(~covered, float("nan")).unsqueeze(0)


@functools.lru_cache(maxsize=None)  # built once per contract: strategies/common.py says why
def _grids(wide: bool) -> st.SearchStrategy[list[list[int]]]:
    frames = st.integers(1, 2) if wide else st.just(1)
    return st.lists(st.tuples(frames, EVEN_SIDES, EVEN_SIDES).map(list), min_size=1, max_size=4)


@st.composite
def _specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    return {
        "device": draw(devices(available)),
        "dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "field_dtype": draw(int_dtypes()) if wide else "int64",
        "field_on": dict(draw(WIDE_FIELD_PLACEMENTS if wide else CALLER_FIELD_PLACEMENTS)),
        "grids": draw(_grids(wide)),
        "patch": draw(PATCH_SIDES),
        "vision_hidden": draw(WIDTHS),
        "text_hidden": draw(WIDTHS),
    }


def grid_tokens(grid: Sequence[int]) -> int:
    """Patches of one image: ``t * h * w``."""
    return math.prod(grid)


def merged_tokens(grid: Sequence[int]) -> int:
    """Embeddings of one image after the projector's 2x2 merge: ``t * (h/2) * (w/2)``."""
    t, h, w = grid
    return t * (h // 2) * (w // 2)


class PaddleOCRGridThwInputs:
    """``PaddleOCRVLForConditionalGeneration.embed_multimodal(**kwargs)`` with the kwargs each side's engine
    builds from its own field config (module docstring); the embeddings and what the tower received are
    compared."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be a method of PaddleOCRVLForConditionalGeneration")
        module, device, dtype, seed = impl.module, spec["device"], spec["dtype"], spec["seed"]
        grids = spec["grids"]
        grid = torch.tensor(grids, dtype=INT_DTYPES[spec["field_dtype"]])
        sizes = [grid_tokens(g) for g in grids]
        patch_dim = 3 * spec["patch"] ** 2
        pixels = seeded_floats((sum(sizes), 3, spec["patch"], spec["patch"]), dtype, seed + 7, "cpu")
        configs = field_configs(module, PROCESSOR, {"image_grid_thw": grid.clone(), "pixel_values": pixels})
        kwargs = engine_kwargs(spec, side, configs, {"pixel_values": pixels, "image_grid_thw": grid},
                               {"pixel_values": sizes, "image_grid_thw": None})
        tower = seed_parameters(RecordingPaddleTower(patch_dim, spec["vision_hidden"]), dtype, seed, device)
        projector = module.Projector(SimpleNamespace(hidden_size=spec["text_hidden"]),
                                     SimpleNamespace(hidden_size=spec["vision_hidden"]))
        model = impl.owner(tower, seed_parameters(projector, dtype, seed + 1, device))

        def call() -> dict:
            with torch.inference_mode():
                embeddings = impl.function(model, **kwargs)
            return {"embeddings": embeddings, "tower": tower_record(tower.calls)}

        return call


def tower_record(calls: list[dict]) -> dict:
    """What the tower saw, the same however the side splits the work into calls (0.28.0 one call per
    image, 0.34.0 one for the batch): the grids in order, every token's position id and the segment
    lengths (``cu_seqlens`` differences), all concatenated. Device ops only."""
    if not calls:
        return {"grids": [], "position_ids": None, "seq_lens": None}
    return {
        "grids": [g for call in calls for g in call["image_grid_thw"]],
        "position_ids": torch.cat([call["position_ids"] for call in calls]),
        "seq_lens": torch.cat([call["cu_seqlens"][1:] - call["cu_seqlens"][:-1] for call in calls]).long(),
    }
