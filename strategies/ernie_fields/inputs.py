"""Input model of keep-on-cpu-ernie-grid-thw (legacy/ernie_fields.py, vllm 0.28.0, vs optimized/ernie_fields.py,
vllm 0.34.0): ERNIE 4.5-VL's grid field config and the eager vision path that consumes the grids, end to end.

The callers (vllm 0.34.0):

* ``vllm/v1/worker/gpu_model_runner.py`` ``_execute_mm_encoder`` (eager path: the encoder CUDA graph takes
  images only and falls back to it for videos and when disabled) batches the scheduled items with
  ``group_and_batch_mm_kwargs`` and calls ``model.embed_multimodal(**mm_kwargs_group)``; every field goes to
  the device except those ``Ernie4_5VLMultiModalProcessor._get_mm_fields_config`` marks ``keep_on_cpu``:
  ``image_grid_thw`` / ``video_grid_thw`` since 0.29.0 (both ``batched``; ``pixel_values`` and
  ``pixel_values_videos`` are ``flat_from_sizes(grid.prod(-1))`` in both releases).
* ``Ernie4_5_VLMoeForConditionalGeneration.embed_multimodal`` -> ``_parse_and_validate_multimodal_inputs``
  (modalities in kwargs order) -> ``_process_image_input`` / ``_process_video_input`` -> ``_vision_forward``
  (per-frame grids) -> ``Ernie4_5_VisionTransformer.forward`` -> ``prepare_encoder_metadata`` ->
  ``rot_pos_emb`` / ``compute_attn_mask_seqlen`` -> the blocks; then ``VariableResolutionResamplerModel``
  (``fwd_placeholder`` reads the grid on the host) and the split by ``grid.prod(-1) // merge**2``
  (``// temporal_conv_size`` for videos) ``.tolist()``.

The processor's output, drawn here: image grids ``[1, h, w]`` and video grids ``[t, h, w]`` with even ``t > 1``
(``_postprocess_hf_mm_data`` splits ``grid_thw`` by ``t > 1`` into videos; frames come in pairs for the
temporal conv), ``h``, ``w`` multiples of the 2x2 spatial merge; flat patches ``(sum t*h*w, C*p*p)``.
Each side's engine (strategies/field_batches.py) slices, batches and places the fields by the side's own
``_get_mm_fields_config``.

The model is built as vLLM's loader builds it, under ``set_default_torch_dtype(dtype)`` and
``with torch.device(spec["device"])``: 0.28.0's rotary ``inv_freq`` is a plain attribute (0.29.0 made it a
buffer) and lives where it was created, float32 by its explicit dtype. The vision blocks
(attention + MLP upstream) are ``RecordingErnieBlock`` stand-ins, the same on both sides; patch embedding,
rotary table, layer norm and resampler are the copies' own.

Wide contract: an int32 grid and the legacy side's grids on the host.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn as nn
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl, consumer_reads
from strategies.common import FLOAT_DTYPES, INT_DTYPES, devices, float_dtypes, int_dtypes, seeded_floats
from strategies.field_batches import (
    CALLER_FIELD_PLACEMENTS,
    WIDE_FIELD_PLACEMENTS,
    engine_kwargs,
    field_configs,
    segment_ids,
)

PROCESSOR = "Ernie4_5VLMultiModalProcessor"
MERGE = 2  # vision_config.spatial_merge_size and the resampler's spatial_conv_size (2 upstream)
TEMPORAL = 2  # config.temporal_conv_size (2 upstream)
BACKENDS = ("FLASH_ATTN", "TORCH_SDPA")  # a backend that reads max_seqlen, and one that gets None
SIDES_HW = st.sampled_from([2, 4, 6])
IMAGE_GRIDS = st.lists(st.tuples(st.just(1), SIDES_HW, SIDES_HW).map(list), max_size=3)
_VIDEO = st.tuples(st.sampled_from([2, 4]), SIDES_HW, SIDES_HW).map(list)
VIDEO_GRIDS = st.lists(_VIDEO, max_size=2)
SOME_VIDEO_GRIDS = st.lists(_VIDEO, min_size=1, max_size=2)  # the engine calls with at least one item
HEAD_DIMS = st.sampled_from([4, 8])


class RecordingErnieBlock(nn.Module):
    """Stands in for ``Ernie4_5_VisionBlock`` (attention + MLP), the same on both sides.

    Takes what ``Ernie4_5_VisionTransformer.forward`` passes: ``(tokens, 1, dim)`` hidden states,
    ``cu_seqlens``, ``rotary_pos_emb`` and ``max_seqlen``. Makes the host read the real attention makes,
    inside ``consumer_reads()`` so it counts as the consumer's sync (strategies/ernie_fields/oracles.py
    ``ernie_fields_attention_reads`` cites them). Each token
    becomes itself plus its ``cu_seqlens`` segment's mean (float64) plus the mean cosine of its rotary row;
    a token outside exact segments is NaN. Records what it received (cloned)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict] = []

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, rotary_pos_emb: torch.Tensor,
                max_seqlen: torch.Tensor | None = None) -> torch.Tensor:
        read = None
        with consumer_reads():
            if max_seqlen is not None:  # flash_attn_maxseqlen_wrapper
                read = int(max_seqlen.item())
            else:  # torch_sdpa_wrapper
                (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        self.calls.append({"cu_seqlens": cu_seqlens.clone(), "rotary_pos_emb": rotary_pos_emb.clone(),
                           "max_seqlen": read})
        x = hidden_states.squeeze(1).double()
        segment, covered = segment_ids(cu_seqlens.long(), x.shape[0])
        index = segment.clamp(0, len(cu_seqlens) - 1)
        sums = torch.zeros(len(cu_seqlens), x.shape[1], dtype=torch.float64, device=x.device)
        counts = torch.zeros(len(cu_seqlens), dtype=torch.float64, device=x.device)
        sums.index_add_(0, index, x)
        counts.index_add_(0, index, torch.ones_like(index, dtype=torch.float64))
        rope = rotary_pos_emb.double().cos().mean(-1, keepdim=True)
        out = x + (sums / counts.clamp(min=1).unsqueeze(1))[index] + rope
        return out.to(hidden_states.dtype).masked_fill(~covered, float("nan")).unsqueeze(1)


@st.composite
def _specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    images = draw(IMAGE_GRIDS)
    videos = draw(VIDEO_GRIDS if images else SOME_VIDEO_GRIDS)
    return {
        "device": draw(devices(available)),
        "dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "field_dtype": draw(int_dtypes()) if wide else "int64",
        "field_on": dict(draw(WIDE_FIELD_PLACEMENTS if wide else CALLER_FIELD_PLACEMENTS)),
        "image_grids": images,
        "video_grids": videos,
        "images_first": draw(st.booleans()),
        "patch": draw(st.integers(1, 2)),
        "head_dim": draw(HEAD_DIMS),
        "blocks": draw(st.integers(1, 2)),
        "text_hidden": draw(st.integers(1, 4)),
        "attn_backend": draw(st.sampled_from(BACKENDS)),
    }


def image_tokens(grid: Sequence[int]) -> int:
    """Embeddings of one image: ``t*h*w / merge**2`` (``_process_image_input``'s split sizes)."""
    t, h, w = grid
    return t * h * w // MERGE // MERGE


def video_tokens(grid: Sequence[int]) -> int:
    """Embeddings of one video: ``(t*h*w / temporal_conv_size) / merge**2`` (``_process_video_input``)."""
    t, h, w = grid
    return t * h * w // TEMPORAL // MERGE // MERGE


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """``torch.set_default_dtype`` for the block, restored after (vllm/utils/torch_utils.py
    ``set_default_torch_dtype``, which the model loader wraps model construction in)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _seed(module: nn.Module, dtype: str, seed: int, device: str) -> nn.Module:
    """Every parameter from ``seeded_floats`` in the model dtype, by sorted name (both sides alike); buffers
    and plain attributes stay as built, as vLLM's weight loading leaves them."""
    with torch.no_grad():
        for i, (_, param) in enumerate(sorted(module.named_parameters(), key=lambda item: item[0])):
            param.data = seeded_floats(tuple(param.shape), dtype, seed + 101 * (i + 1), device)
    return module.eval()


class ErnieGridThwInputs:
    """``Ernie4_5_VLMoeForConditionalGeneration.embed_multimodal(**kwargs)`` with the kwargs each side's
    engine builds from its own field config; the embeddings and what the vision blocks received are
    compared."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be a method of Ernie4_5_VLMoeForConditionalGeneration")
        module = impl.module
        blocks = [RecordingErnieBlock() for _ in range(spec["blocks"])]
        model = self._model(spec, module, blocks)
        kwargs = self._kwargs(spec, module, side)

        def call() -> dict:
            with torch.inference_mode():
                embeddings = impl.function(model, **kwargs)
            return {"embeddings": embeddings, "blocks": [block.calls for block in blocks]}

        return call

    @staticmethod
    def _model(spec: dict, module: Any, blocks: list[nn.Module]) -> nn.Module:
        dim = spec["head_dim"]
        # vLLM's loader builds the model under set_default_torch_dtype(model dtype) and on its device.
        with default_dtype(FLOAT_DTYPES[spec["dtype"]]), torch.device(spec["device"]):
            vision = module.Ernie4_5_VisionTransformer(
                module.Ernie4_5_VisionPatchEmbed(patch_size=spec["patch"], in_channels=3, embed_dim=dim),
                module.Ernie4_5_VisionRotaryEmbedding(dim // 2),
                nn.ModuleList(blocks),
                nn.LayerNorm(dim, eps=1e-6),
                MERGE,
                module.AttentionBackendEnum[spec["attn_backend"]],
            )
            config = SimpleNamespace(use_temporal_conv=True, temporal_conv_size=TEMPORAL, rms_norm_eps=1e-6)
            resampler = module.VariableResolutionResamplerModel(dim, spec["text_hidden"], MERGE, TEMPORAL, config)
            model = module.Ernie4_5_VLMoeForConditionalGeneration(config, vision, resampler)
        return _seed(model, spec["dtype"], spec["seed"], spec["device"])

    @staticmethod
    def _kwargs(spec: dict, module: Any, side: str) -> dict:
        field_dtype, cps = INT_DTYPES[spec["field_dtype"]], 3 * spec["patch"] ** 2
        groups = {"image": ("pixel_values", "image_grid_thw", spec["image_grids"], 11),
                  "video": ("pixel_values_videos", "video_grid_thw", spec["video_grids"], 13)}
        order = ["image", "video"] if spec["images_first"] else ["video", "image"]
        hf_outputs: dict[str, torch.Tensor] = {}
        per_item: dict[str, list[int] | None] = {}
        for name in order:
            pixels_key, grid_key, grids, salt = groups[name]
            if not grids:
                continue
            sizes = [t * h * w for t, h, w in grids]
            hf_outputs[pixels_key] = seeded_floats((sum(sizes), cps), spec["dtype"], spec["seed"] + salt, "cpu")
            hf_outputs[grid_key] = torch.tensor(grids, dtype=field_dtype)
            per_item[pixels_key], per_item[grid_key] = sizes, None
        grids_only = {k: v.clone() for k, v in hf_outputs.items() if k.endswith("_grid_thw")}
        configs = field_configs(module, PROCESSOR, grids_only)
        return engine_kwargs(spec, side, configs, hf_outputs, per_item)

