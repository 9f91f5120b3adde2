"""Inputs for the keep-on-cpu targets (docs/design.md row 12): the consumers of the
multimodal fields PR #52369 marks ``keep_on_cpu=True``.

Which side gets the field where -- the rule every input model here follows
---------------------------------------------------------------------------
``keep_on_cpu`` is an engine-side switch: 0.27.1's ``group_and_batch_mm_items``
moved the field to the accelerator with the rest of the batch, 0.28.0's leaves it
on the host. The copies cannot show that by themselves (for interns1 and keye's
projector the consumer text is even identical in both versions), so the input
model hands each side the field where its own engine would have put it, and it
asks the side's own field configuration where that is:

* ``kept_on_host(module, processor, side)``: the input model calls the side's
  own ``<Processor>._get_mm_fields_config`` (``impl.module``: the copy, a planted
  or self-test mutant of it, a module rebuilt from another release, or vllm's)
  with an empty ``hf_inputs`` and reads which fields it marks ``keep_on_cpu``.
  For the copies that is nothing in 0.27.1 and exactly ``KEPT_FIELDS`` in
  0.28.0 (tests/unit/test_keep_on_cpu.py checks it). A module without that method
  (a release older than the copies) falls back to the side rule below.
* ``field_side(side)``: the engine says which side it builds inputs for
  (``materialize(spec, impl, side)``). ``"legacy"`` reads ``spec["field_on"]
  ["legacy"]``; ``"optimized"`` -- the optimized copy, and the planted and
  self-test mutants, one-edit variants of it run as the optimized side -- and
  ``"upstream"`` (the real vllm) read ``spec["field_on"]["optimized"]``; the
  fallback keeps ``KEPT_FIELDS`` on the host for these, on the device for legacy.
* ``spec["field_on"][side]`` says where that side's keep-on-cpu fields live:
  ``"engine"``: where the side's field config puts each one (the host if it is
  ``keep_on_cpu``, else ``spec["device"]``); ``"device"`` / ``"cpu"`` force
  every such field onto ``spec["device"]`` / the host. Under the ``caller``
  contract both sides get ``"engine"``, i.e. exactly what each version's engine
  passes. Under ``wide`` the legacy side may also get the field on the host
  (``"cpu"``, a form the 0.27.1 code accepted); the optimized side follows its
  config in both contracts, because ``keep_on_cpu`` is part of the 0.28.0
  contract (on a device it would still compute the same values, only with the
  syncs the PR removed -- see tests/unit/test_keep_on_cpu.py, which forces
  ``"device"``). Specs saved before the placement came from the configs name
  it outright (``{"legacy": "device", "optimized": "cpu"}``) and replay as before.

Everything else (pixel data, masks, other fields) is built identically for both
sides on ``spec["device"]``, so on a CPU-only host both sides see CPU tensors and
the targets compare the code changes alone; on CUDA they also compare the
field's device. Specs stay JSON-only; the heavy towers are replaced by the small
deterministic recording stand-ins defined below, which return (or record) what
they received.
"""

from __future__ import annotations

import copy
import functools
import math
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz.api import SIDES as ENGINE_SIDES
from fuzz.api import HarnessError, Impl, consumer_reads
from strategies.common import (
    INT_DTYPES,
    choice_of,
    devices,
    fixed_dict,
    float_dtypes,
    int_dtypes,
    seed_parameters,
    seeded_floats,
)
from strategies.field_batches import batched
from strategies.grids import grid_thws

SIDES = ("legacy", "optimized")
# spec["field_on"][side]: "engine" follows the side's own field config (the
# module docstring says how); "device" / "cpu" force the field there.
FIELD_PLACES = ("engine", "device", "cpu")
CALLER_PLACEMENT = {"legacy": "engine", "optimized": "engine"}
# The fields PR #52369 marks keep_on_cpu, by the processor whose
# _get_mm_fields_config marks them. The copies' configs say exactly this
# (tests/unit/test_keep_on_cpu.py); the placement reads the configs themselves and
# falls back to this table only for a module that has no config.
KEPT_FIELDS = {
    "UltravoxMultiModalProcessor": ("audio_lens",),
    "InternS1MultiModalProcessor": ("image_num_patches", "image_token_id", "video_num_patches", "video_token_id"),
    "Phi4MMMultiModalProcessor": ("image_sizes",),
    "KeyeMultiModalProcessor": ("image_grid_thw", "video_grid_thw"),
}


# --------------------------------------------------------------------------
# The side rule and field placement (shared by the four input models)
# --------------------------------------------------------------------------


def field_side(side: str) -> str:
    """Whose entry of ``spec["field_on"]`` (and whose fallback) ``side`` (an
    engine side) follows: ``"legacy"`` for the legacy copy, ``"optimized"`` for
    the optimized copy (and its mutants) and for the real vllm."""
    if side not in ENGINE_SIDES:
        raise HarnessError(f"side {side!r} is not one of {', '.join(ENGINE_SIDES)}")
    return "legacy" if side == "legacy" else "optimized"


def kept_on_host(module: ModuleType, processor: str, side: str) -> frozenset[str]:
    """The fields ``module``'s own ``processor._get_mm_fields_config`` marks
    ``keep_on_cpu``: called, as the engine calls it, on an empty ``hf_inputs``
    (every upstream config defaults the sizes it reads; none reads ``self``, so
    the processor is not constructed). A field config without the flag (a
    release before it existed) keeps nothing on the host.

    A module without the method (a release older than the copies, or a module
    rebuilt without it) falls back to the rule the input models used before they
    read the configs: ``KEPT_FIELDS[processor]`` on the host for the optimized
    side (``field_side``), nothing for legacy."""
    cls = getattr(module, processor, None)
    get_config = getattr(cls, "_get_mm_fields_config", None)
    if get_config is None:
        return frozenset(KEPT_FIELDS[processor]) if field_side(side) == "optimized" else frozenset()
    config = get_config(cls.__new__(cls), {}, {})
    return frozenset(name for name, field in config.items() if getattr(field, "keep_on_cpu", False))


class FieldPlacement:
    """Where one side's keep-on-cpu candidate fields go: ``spec["field_on"]
    [field_side(side)]`` and, for ``"engine"``, the fields the side's own config
    keeps on the host (``kept_on_host``)."""

    def __init__(self, spec: dict, side: str, kept: frozenset[str]) -> None:
        self.side = field_side(side)
        self.where = spec["field_on"][self.side]
        if self.where not in FIELD_PLACES:
            raise HarnessError(f"field_on[{self.side!r}] must be one of {', '.join(FIELD_PLACES)}, not {self.where!r}")
        self.spec, self.kept = spec, kept

    def device(self, name: str) -> str:
        if self.where == "engine":
            return "cpu" if name in self.kept else self.spec["device"]
        return self.spec["device"] if self.where == "device" else "cpu"

    def tensor(self, name: str, values: Any, *, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """The field ``name`` as this side's engine would pass it."""
        tensor = torch.tensor(values, dtype=INT_DTYPES[self.spec["field_dtype"]])
        if shape is not None:
            tensor = tensor.reshape(shape)
        return tensor.to(self.device(name))


def field_placement(spec: dict, impl: Impl, side: str, processor: str) -> FieldPlacement:
    """``side``'s placement, from ``impl.module``'s own ``processor`` config
    (always called, so every run enters the config the targets name)."""
    return FieldPlacement(spec, side, kept_on_host(_copy_module(impl), processor, side))


# Strategies with fixed arguments are built once: strategies/common.py says why.
CALLER_FIELD_PLACEMENTS = st.just(dict(CALLER_PLACEMENT))
WIDE_FIELD_PLACEMENTS = fixed_dict(
    {"legacy": st.sampled_from(["engine", "cpu"]), "optimized": st.just("engine")}
)
# How the wide contract may pass a list-valued field (interns1, phi4mm).
FIELD_FORMS = st.sampled_from(["tensor", "list"])


def field_placements(contract: str) -> st.SearchStrategy[dict[str, str]]:
    """Where each side's keep-on-cpu field lives (see the module docstring).
    The caller contract's dict is one shared object: copy it before changing it."""
    return CALLER_FIELD_PLACEMENTS if contract == "caller" else WIDE_FIELD_PLACEMENTS


def _copy_module(impl: Impl) -> ModuleType:
    """The module ``impl`` was resolved from (a copy or a planted mutant)."""
    if impl.owner is None:
        raise HarnessError(f"{impl.path} must be a method of a model stand-in class")
    return impl.module


def _common(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    return {
        "device": draw(devices(available)),
        "dtype": draw(float_dtypes()),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "field_dtype": draw(int_dtypes()) if wide else "int64",
        "field_on": dict(draw(field_placements(contract))),
    }


# --------------------------------------------------------------------------
# ultravox: audio_lens -> whisper encoder attention metadata
# --------------------------------------------------------------------------


def _attend(h: torch.Tensor, allowed_bias: torch.Tensor) -> torch.Tensor:
    """One parameter-free self-attention step (q = k = v = h) plus residual;
    ``allowed_bias`` is added to the scores (0 or very negative).

    Computed in float64: the two versions reach the same keys through different
    layouts (a (B, S, S) mask vs (B*S, B*S) segments), so the sums run in a
    different order; in float64 that noise stays far below a bf16/fp16 rounding
    step and cannot flip the cast back to the model dtype."""
    x = h.double()
    scores = x @ x.transpose(-1, -2) / math.sqrt(x.shape[-1]) + allowed_bias.double()
    return (x + scores.softmax(-1) @ x).to(h.dtype)


class DenseMaskWhisperLayer(nn.Module):
    """Stands in for transformers' ``WhisperEncoderLayer`` (0.27.1): attends over
    the key-padding mask it receives, additive ``(B, 1, 1, S)``.

    ``tupled``: return ``(hidden_states,)`` as transformers 4.x's layer did;
    0.27.1's ``ModifiedWhisperEncoder.forward`` still unpacks it ("BC version
    that allows for the old tupled output"). Only 0.27.1 ran that layer, so only
    the wide contract draws it."""

    def __init__(self, tupled: bool = False) -> None:
        super().__init__()
        self.tupled = tupled

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                layer_head_mask: Any = None, output_attentions: bool = False) -> torch.Tensor | tuple[torch.Tensor]:
        bias = torch.zeros((), device=hidden_states.device) if attention_mask is None else attention_mask[:, 0].float()
        out = _attend(hidden_states, bias)
        return (out,) if self.tupled else out


class VarlenWhisperLayer(nn.Module):
    """Stands in for vllm's ``WhisperEncoderLayer`` (0.28.0): attends within the
    ``cu_seqlens`` segments it receives over the flattened ``(B*S, D)`` tokens,
    as varlen flash attention would. Varlen kernels also require the segments
    to end exactly at the token count (``cu_seqlens[-1] == B*S``) and read out of
    bounds otherwise; the stand-in turns that case into NaNs so it shows up as a
    divergence. ``self_attn.attn.attn_backend`` is what ``_build_chunk_attn_metadata``
    reads off the first layer.

    It also makes the host read the real attention makes of that metadata
    (strategies/keep_on_cpu/oracles.py ``ultravox_attention_reads`` cites the upstream
    lines), inside ``consumer_reads()``: counted as the consumer's syncs, not the
    function's (docs/verdicts.md#consumer-syncs)."""

    def __init__(self, attn_backend: Any) -> None:
        super().__init__()
        self.self_attn = SimpleNamespace(attn=SimpleNamespace(attn_backend=attn_backend))

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                max_seqlen: torch.Tensor | None = None, sequence_lengths: torch.Tensor | None = None) -> torch.Tensor:
        with consumer_reads():
            if self.self_attn.attn.attn_backend.name == "TORCH_SDPA":
                (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # vit_attn_wrappers.torch_sdpa_wrapper
            elif max_seqlen is not None:
                max_seqlen.item()  # vit_attn_wrappers.flash_attn_maxseqlen_wrapper
        tokens = torch.arange(hidden_states.shape[0], device=cu_seqlens.device, dtype=cu_seqlens.dtype)
        if self.self_attn.attn.attn_backend.name == "FLASHINFER":
            same, covered = _flashinfer_segments(hidden_states, tokens, cu_seqlens, sequence_lengths)
        else:
            segment = torch.searchsorted(cu_seqlens, tokens, right=True)
            same = segment[:, None] == segment[None, :]
            covered = (cu_seqlens[0] == 0) & (cu_seqlens[-1] == hidden_states.shape[0])
        bias = torch.zeros(same.shape, device=hidden_states.device).masked_fill(~same, float("-inf"))
        return _attend(hidden_states, bias).masked_fill(~covered, float("nan"))


def _flashinfer_segments(hidden_states: torch.Tensor, tokens: torch.Tensor, cu_seqlens: torch.Tensor,
                         sequence_lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The segments FlashInfer's cuDNN prefill reads off 0.28.0's metadata
    (vllm/v1/attention/ops/vit_attn_wrappers.py ``flashinfer_wrapper``):
    ``cu_seqlens`` is two halves, ``batch_offsets_qko`` then ``batch_offsets_v``,
    element offsets (``maybe_recompute_cu_seqlens`` scales the token offsets by
    ``hidden_size // tp_size``, 3x that for V, and pads both to a batch bucket),
    and sequence ``i`` is ``sequence_lengths[i]`` tokens from ``qko[i]``. Returns
    the (N, N) same-segment matrix and, per token, whether exactly one segment
    covers it with consistent Q/K/V offsets (else its row is poisoned: cuDNN
    would leave it unwritten or read the wrong rows). Device ops only."""
    d = hidden_states.shape[-1]
    if sequence_lengths is None or len(cu_seqlens) % 2 or len(cu_seqlens) // 2 <= len(sequence_lengths):
        false = torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device)
        return false[:, None] & false[None, :], false[:, None]
    qko, v = cu_seqlens[: len(cu_seqlens) // 2].long(), cu_seqlens[len(cu_seqlens) // 2:].long()
    consistent = ((qko % d) == 0).all() & (v == 3 * qko).all()
    starts = (qko // d)[: len(sequence_lengths)]
    ends = starts + sequence_lengths.long().to(starts.device)
    inside = (tokens.long()[:, None] >= starts[None, :]) & (tokens.long()[:, None] < ends[None, :])
    segment = inside.long().argmax(dim=1)
    same = segment[:, None] == segment[None, :]
    covered = (inside.sum(dim=1) == 1) & consistent
    return same, covered[:, None]


class RecordingAudioProjector(nn.Module):
    """Stands in for the Ultravox projector: returns the tower output it received."""

    def forward(self, audio_features: torch.Tensor, audio_token_len: torch.Tensor) -> torch.Tensor:
        return audio_features


def feature_lengths(audio_lens: Sequence[int]) -> list[int]:
    """Whisper's conv output length per chunk (stride 2, kernel 3, padding 1)."""
    return [(n - 1) // 2 + 1 for n in audio_lens]


# More than _MAX_ENCODER_BATCH_SIZE (16) chunks exercises audio_lens[start:end].
ULTRAVOX_CHUNK_COUNTS = st.one_of(st.integers(0, 4), st.integers(15, 20))
# The whisper layers' WhisperEncoderAttention is an MMEncoderAttention, whose
# __init__ takes its backend from get_vit_attn_backend (--mm-encoder-attn-backend
# or the platform default). FLASHINFER is one 0.28.0's CUDA callers get:
# mm_encoder_attention.py MMEncoderAttention.__init__ / forward_cuda dispatch it, and
# ultravox.py _build_chunk_attn_metadata hands it to compute_max_seqlen (bucketed),
# maybe_compute_seq_lens and maybe_recompute_cu_seqlens (the BF16 path: ultravox
# passes no fp8_padded_hidden_size).
ULTRAVOX_ATTN_BACKENDS = st.sampled_from(["FLASH_ATTN", "TORCH_SDPA", "FLASHINFER"])
# How 0.27.1's layers return (DenseMaskWhisperLayer): wide only.
ULTRAVOX_LAYER_OUTPUTS = st.sampled_from(["tensor", "tuple"])


@st.composite
def _ultravox_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = _common(draw, available, contract)
    max_source = draw(st.integers(2, 8))
    # The batch is padded to the longest mel input; over-long input (wide) is
    # rejected by both versions with the same ValueError.
    frames = draw(st.integers(1, 2 * max_source + (1 if wide else 0)))
    chunks = draw(ULTRAVOX_CHUNK_COUNTS)
    # audio_lens counts mel frames of each chunk: 1..frames from the processor;
    # wide adds 0 and lengths past the padded input (accepted by 0.27.1).
    lens = st.integers(0, frames + 4) if wide else st.integers(1, frames)
    spec.update(
        num_mel_bins=draw(st.integers(1, 3)),
        # A LayerNorm over 1-3 features keeps little more than signs (hiding
        # differences) and amplifies rounding noise; whisper's is 384+ wide.
        d_model=draw(st.integers(4, 8)),
        max_source_positions=max_source,
        frames=frames,
        audio_lens=draw(st.lists(lens, min_size=chunks, max_size=chunks)),
        layers=draw(st.integers(1, 2)),
        attn_backend=draw(ULTRAVOX_ATTN_BACKENDS),
        pad_audio_to_max_context=draw(st.booleans()),
    )
    if wide:  # transformers 4.x's tupled layer output: 0.27.1's callers only
        spec["legacy_layer_output"] = draw(ULTRAVOX_LAYER_OUTPUTS)
    return spec


class UltravoxAudioLensInputs:
    """``UltravoxModel._audio_features_to_embeddings(input_features, audio_lens,
    audio_token_len)`` with the side's own whisper encoder and recording layers.

    Only the valid frames of each chunk are compared: 0.28.0 attends padding
    queries within the padding tail while 0.27.1 let them see the valid frames,
    and upstream documents those rows as garbage trimmed downstream. The valid
    count is whisper's conv formula on ``audio_lens``, capped at the sequence.
    """

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _ultravox_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _copy_module(impl)
        fields = field_placement(spec, impl, side, "UltravoxMultiModalProcessor")
        model = impl.owner(_whisper_encoder(module, spec), RecordingAudioProjector(),
                           pad_audio_to_max_context=spec["pad_audio_to_max_context"])
        device, lens = spec["device"], spec["audio_lens"]
        features = seeded_floats((len(lens), spec["num_mel_bins"], spec["frames"]), "float32", spec["seed"] + 1, device)
        audio_lens = fields.tensor("audio_lens", lens)
        token_len = torch.tensor([max(1, math.ceil(n / 8)) for n in feature_lengths(lens)], device=device)
        seq_len = (spec["frames"] - 1) // 2 + 1
        valid = [min(max(n, 0), seq_len) for n in feature_lengths(lens)]

        def call() -> list[torch.Tensor]:
            with torch.inference_mode():
                out = impl.function(model, features, audio_lens, token_len)
            return [out[b, : valid[b]] for b in range(len(valid))]

        return call


def _whisper_encoder(module: ModuleType, spec: dict) -> nn.Module:
    """The copy's own encoder (0.27.1 ``ModifiedWhisperEncoder`` or 0.28.0
    ``UltravoxWhisperEncoder``) with layers of the matching kind."""
    config = SimpleNamespace(num_mel_bins=spec["num_mel_bins"], d_model=spec["d_model"],
                             max_source_positions=spec["max_source_positions"], dropout=0.0)
    if hasattr(module, "UltravoxWhisperEncoder"):
        backend = module.AttentionBackendEnum[spec["attn_backend"]]
        layers = [VarlenWhisperLayer(backend) for _ in range(spec["layers"])]
        encoder = module.UltravoxWhisperEncoder(config, layers)
    else:
        tupled = spec.get("legacy_layer_output", "tensor") == "tuple"
        layers = [DenseMaskWhisperLayer(tupled) for _ in range(spec["layers"])]
        encoder = module.ModifiedWhisperEncoder(config, layers)
    return seed_parameters(encoder, spec["dtype"], spec["seed"], spec["device"])


# --------------------------------------------------------------------------
# interns1: image/video_num_patches and image/video_token_id
# --------------------------------------------------------------------------


class PoolingVisionTower(nn.Module):
    """Stands in for InternS1's vision tower: one token per ``patch`` x ``patch``
    pixel block (its mean colour) after a CLS token (the mean of those), so
    every tile's features are distinct and traceable to its pixels."""

    def __init__(self, patch: int) -> None:
        super().__init__()
        self.patch = patch

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        tokens = F.avg_pool2d(pixel_values, self.patch).flatten(2).transpose(1, 2)
        return torch.cat([tokens.mean(1, keepdim=True), tokens], dim=1)


class RecordingProjector(nn.Module):
    """Stands in for a multimodal projector: returns what it received."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return features


INTERNS1_HIDDEN = 12  # 3 colour channels x 4 after pixel_shuffle(0.5)
INTERNS1_GRIDS = st.sampled_from([2, 4])
PATCH_SIDES = st.sampled_from([1, 2])  # interns1's and keye's patch side in pixels
INTERNS1_TOKEN_FORMS = st.sampled_from(["0d", "1d", "int"])


@st.composite
def _interns1_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = _common(draw, available, contract)
    counts = st.integers(1, 4)
    spec.update(
        grid=draw(INTERNS1_GRIDS),
        patch=draw(PATCH_SIDES),
        image_tiles=draw(st.lists(counts, max_size=3)),
        video_frames=draw(st.lists(counts, max_size=2)),
        images_first=draw(st.booleans()),
        image_token_id=draw(st.integers(1, 200_000)),
        video_token_id=draw(st.integers(1, 200_000)),
        # Lists (num_patches) and ints / 1-D tensors (token ids) were accepted too.
        field_form=draw(FIELD_FORMS) if wide else "tensor",
        token_form=draw(INTERNS1_TOKEN_FORMS) if wide else "0d",
    )
    return spec


def _token_id(name: str, value: int, count: int, spec: dict, fields: FieldPlacement) -> Any:
    """A shared ``*_token_id`` field: a 0-d tensor from the processor, repeated
    per item (1-D) or a plain int under the wide contract."""
    form = spec["token_form"]
    if form == "int":
        return value
    if form == "1d":
        return fields.tensor(name, [value] * max(count, 1))
    return fields.tensor(name, value)


class InternS1NumPatchesInputs:
    """``InternS1ForConditionalGeneration.embed_multimodal(**kwargs)`` with the
    kwargs the engine batches: pixel tiles on the device, ``*_num_patches`` and
    ``*_token_id`` where the side's engine puts them."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _interns1_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        fields = field_placement(spec, impl, side, "InternS1MultiModalProcessor")
        side_px = spec["grid"] * spec["patch"]
        config = SimpleNamespace(vision_config=SimpleNamespace(image_size=(side_px, side_px)),
                                 text_config=SimpleNamespace(hidden_size=INTERNS1_HIDDEN))
        model = impl.owner(config, PoolingVisionTower(spec["patch"]), RecordingProjector(), 0.5)
        kwargs = self._kwargs(spec, fields, side_px)

        def call() -> dict:
            with torch.inference_mode():
                embeddings = impl.function(model, **kwargs)
            return {
                "embeddings": embeddings,
                "img_context_token_id": model.img_context_token_id,
                "video_context_token_id": model.video_context_token_id,
            }

        return call

    @staticmethod
    def _kwargs(spec: dict, fields: FieldPlacement, side_px: int) -> dict:
        groups = {
            "image": ("pixel_values", "image_num_patches", "image_token_id", spec["image_tiles"], 2),
            "video": ("pixel_values_videos", "video_num_patches", "video_token_id", spec["video_frames"], 3),
        }
        order = ["image", "video"] if spec["images_first"] else ["video", "image"]
        kwargs: dict[str, Any] = {}
        for name in order:
            pixels_key, count_key, token_key, counts, salt = groups[name]
            if not counts:
                continue
            shape = (sum(counts), 3, side_px, side_px)
            kwargs[pixels_key] = seeded_floats(shape, spec["dtype"], spec["seed"] + salt, spec["device"])
            kwargs[count_key] = list(counts) if spec["field_form"] == "list" else fields.tensor(count_key, counts)
            kwargs[token_key] = _token_id(token_key, spec[f"{name}_token_id"], len(counts), spec, fields)
        return kwargs


# --------------------------------------------------------------------------
# phi4mm: image_sizes
# --------------------------------------------------------------------------

PHI4MM_CROP = 448  # Phi4MMImageEncoder.crop_size: image_sizes are in pixels of 448-pixel crops
PHI4MM_FEATURES = 4  # stand-in tower width: mean colour (3) + the patch mask bit
PHI4MM_MAX_IMAGES = 3  # bounds the per-call sync count (expected_optimized_syncs)
MASK_DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}
PHI4MM_REMAINDERS = st.integers(0, PHI4MM_CROP - 1)
NO_REMAINDER = st.just(0)
PHI4MM_MASKS = st.sampled_from(["rectangle", "random"])
PHI4MM_MASK_DTYPES = st.sampled_from(sorted(MASK_DTYPES))
PHI4MM_BATCH_AS = st.sampled_from(["engine", "list"])


class RecordingNavitTower(nn.Module):
    """Stands in for phi4mm's SigLIP tower (``get_navit_vision_model``): one
    token per patch of a ``side`` x ``side`` grid holding the patch's mean colour
    and the ``patch_attention_mask`` bit it received. ``embeddings.position_embedding``
    is what ``Phi4MMImageEncoder.__init__`` sizes itself from."""

    def __init__(self, side: int) -> None:
        super().__init__()
        self.side = side
        self.embeddings = nn.Module()
        self.embeddings.position_embedding = nn.Embedding(side * side, PHI4MM_FEATURES)

    def forward(self, pixel_values: torch.Tensor, patch_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        colour = F.adaptive_avg_pool2d(pixel_values, self.side).flatten(2).transpose(1, 2)
        mask = patch_attention_mask.reshape(colour.shape[0], -1, 1).to(colour.dtype)
        return torch.cat([colour, mask], dim=-1)


@functools.lru_cache(maxsize=None)  # built once per (side, wide): strategies/common.py says why
@st.composite
def _phi4mm_image(draw: st.DrawFn, side: int, wide: bool) -> dict:
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    remainder = PHI4MM_REMAINDERS if wide else NO_REMAINDER
    return {
        "crops": [rows, cols],
        # The processor's mask marks the resized image: a top-left rectangle of
        # the rows*side x cols*side patch grid (at least one patch).
        "useful": [draw(st.integers(1, rows * side)), draw(st.integers(1, cols * side))],
        "remainder": [draw(remainder), draw(remainder)],
    }


@st.composite
def _phi4mm_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = _common(draw, available, contract)
    side = draw(choice_of([2, 3, 4] if wide else [2, 4]))  # patches per crop side (32 upstream)
    spec.update(
        side=side,
        hidden_size=draw(st.integers(1, 6)),
        images=draw(st.lists(_phi4mm_image(side, wide), min_size=1, max_size=PHI4MM_MAX_IMAGES)),
        mask=draw(PHI4MM_MASKS) if wide else "rectangle",
        # The HF processor builds the mask with torch.zeros (float32).
        mask_dtype=draw(PHI4MM_MASK_DTYPES) if wide else "float32",
        field_form=draw(FIELD_FORMS) if wide else "tensor",
        batch_as=draw(PHI4MM_BATCH_AS) if wide else "engine",
    )
    return spec



def _phi4mm_mask(image: dict, side: int, kind: str, generator: torch.Generator) -> torch.Tensor:
    """``(1 + rows*cols, side, side)`` patch mask: the global crop, then the
    sub-crops row-major over the valid rectangle."""
    rows, cols = image["crops"]
    if kind == "random":
        return torch.randint(0, 2, (1 + rows * cols, side, side), generator=generator)
    grid = torch.zeros(rows * side, cols * side, dtype=torch.long)
    grid[: image["useful"][0], : image["useful"][1]] = 1
    crops = grid.reshape(rows, side, cols, side).permute(0, 2, 1, 3).reshape(rows * cols, side, side)
    return torch.cat([torch.ones(1, side, side, dtype=torch.long), crops])


def _engine_batch(items: list[torch.Tensor], as_list: bool) -> torch.Tensor | list[torch.Tensor]:
    """A batched field as the engine hands it (strategies/field_batches.py ``batched``), or the items as a
    list where the caller passes one."""
    return items if as_list else batched(items)


def phi4mm_sync_budget(spec: dict) -> int:
    """Syncs the optimized side makes by design: the three mask counts per
    image that 0.28.0 reads back under ``gpu_sync_allowed``."""
    return 3 * len(spec["images"])


class Phi4MMImageSizesInputs:
    """``Phi4MMForCausalLM.embed_multimodal(**kwargs)`` on images: crops and
    masks on the device, ``image_sizes`` where the side's engine puts it."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _phi4mm_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _copy_module(impl)
        fields = field_placement(spec, impl, side, "Phi4MMMultiModalProcessor")
        config = SimpleNamespace(hidden_size=spec["hidden_size"], img_processor=None, vocab_size=1,
                                 img_processor_stand_in=RecordingNavitTower(spec["side"]))
        encoder = seed_parameters(module.Phi4MMImageEncoder(config, None), spec["dtype"], spec["seed"], spec["device"])
        model = impl.owner(encoder)
        kwargs = self._kwargs(spec, fields)

        def call() -> Any:
            with torch.inference_mode():
                return impl.function(model, **kwargs)

        return call

    @staticmethod
    def _kwargs(spec: dict, fields: FieldPlacement) -> dict:
        device, px = spec["device"], 2 * spec["side"]
        generator = torch.Generator().manual_seed(spec["seed"] + 7)
        pixels, masks, sizes = [], [], []
        for i, image in enumerate(spec["images"]):
            rows, cols = image["crops"]
            shape = (1 + rows * cols, 3, px, px)
            pixels.append(seeded_floats(shape, spec["dtype"], spec["seed"] + 11 * (i + 1), device))
            mask = _phi4mm_mask(image, spec["side"], spec["mask"], generator)
            masks.append(mask.to(device=device, dtype=MASK_DTYPES[spec["mask_dtype"]]))
            sizes.append([rows * PHI4MM_CROP + image["remainder"][0], cols * PHI4MM_CROP + image["remainder"][1]])
        as_list = spec["batch_as"] == "list"
        return {
            "input_image_embeds": _engine_batch(pixels, as_list),
            "image_attention_mask": _engine_batch(masks, as_list),
            "image_sizes": sizes if spec["field_form"] == "list" else fields.tensor("image_sizes", sizes),
            "num_img_tokens": torch.ones(len(sizes), dtype=torch.long, device=device),  # schema only
        }


# --------------------------------------------------------------------------
# keye: image_grid_thw / video_grid_thw
# --------------------------------------------------------------------------


class RecordingKeyeVisual(nn.Module):
    """Stands in for ``KeyeSiglipVisionModel``: records every call's arguments
    and returns each item's patches (flattened pixels) split by the host grid
    it received, as the real tower's tail does."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))  # carries the tower's dtype
        self.calls: list[dict] = []

    @property
    def dtype(self) -> torch.dtype:
        return self.scale.dtype

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: list, **kwargs: Any) -> list[torch.Tensor]:
        # A snapshot: the caller's buffers may be reused (or poisoned by
        # --stress) after the call, and the record must show what was received.
        received = {"pixel_values": pixel_values, "image_grid_thw": image_grid_thw, **kwargs}
        self.calls.append({k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                           for k, v in received.items()})
        sizes = [int(np.prod(thw)) for thw in image_grid_thw]
        return list(pixel_values.flatten(1).split(sizes))


KEYE_ITEM_FORMS = st.sampled_from(("pixels",) * 7 + ("embeds",))  # per modality: pixels, or embeddings 1 in 8


@st.composite
def _keye_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = _common(draw, available, contract)
    images = draw(grid_thws(min_size=0, max_size=3, max_t=2 if wide else 1, max_hw=6))
    spec.update(
        patch=draw(PATCH_SIDES),
        text_hidden=draw(st.integers(1, 6)),
        image_grid_thw=images,
        video_grid_thw=draw(grid_thws(min_size=0, max_size=2, max_t=3, max_hw=6)),
        images_first=draw(st.booleans()),
        # Precomputed embeddings with their grids: keye.py's KeyeMultiModalDataParser
        # (embedding_fields: "image_embeds" / "video_embeds" values, "*_grid_thw"
        # metadata) and _keye_field_config (flat_from_sizes by the grid) let a
        # 0.28.0 caller send them; _process_image_input / _process_video_embeds read
        # the kept grid, then raise ValueError ("not supported for this processing
        # path"), on both sides. Rare, so most examples still reach the towers.
        image_input=draw(KEYE_ITEM_FORMS),
        video_input=draw(KEYE_ITEM_FORMS),
    )
    return spec


class KeyeGridThwInputs:
    """``KeyeForConditionalGeneration.embed_multimodal(**kwargs)``: patches on
    the device, ``*_grid_thw`` where the side's engine puts them; the result
    and every call the vision tower saw are compared."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _keye_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _copy_module(impl)
        fields = field_placement(spec, impl, side, "KeyeMultiModalProcessor")
        patch_dim = 3 * spec["patch"] ** 2
        projector = module.Projector(SimpleNamespace(hidden_size=spec["text_hidden"]),
                                     SimpleNamespace(hidden_size=patch_dim))
        visual = seed_parameters(RecordingKeyeVisual(), spec["dtype"], spec["seed"], spec["device"])
        model = impl.owner(visual, seed_parameters(projector, spec["dtype"], spec["seed"], spec["device"]))
        kwargs = self._kwargs(spec, fields)

        def call() -> dict:
            with torch.inference_mode():
                embeddings = impl.function(model, **kwargs)
            return {"embeddings": embeddings, "visual_calls": visual.calls}

        return call

    @staticmethod
    def _kwargs(spec: dict, fields: FieldPlacement) -> dict:
        groups = {
            "image": ("pixel_values", "image_grid_thw", 2),
            "video": ("pixel_values_videos", "video_grid_thw", 3),
        }
        order = ["image", "video"] if spec["images_first"] else ["video", "image"]
        kwargs: dict[str, Any] = {}
        for name in order:
            pixels_key, grid_key, salt = groups[name]
            grids = spec[grid_key]
            if not grids:
                continue
            if spec.get(f"{name}_input", "pixels") == "embeds":  # one (patches, D) row per patch
                pixels_key = f"{name}_embeds"
            shape = (sum(t * h * w for t, h, w in grids), 3, spec["patch"], spec["patch"])
            values = seeded_floats(shape, spec["dtype"], spec["seed"] + salt, spec["device"])
            kwargs[pixels_key] = values.flatten(1) if pixels_key.endswith("_embeds") else values
            kwargs[grid_key] = fields.tensor(grid_key, grids, shape=(len(grids), 3))
        return kwargs
