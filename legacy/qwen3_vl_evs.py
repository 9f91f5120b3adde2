# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.29.0: vllm/model_executor/models/qwen3_vl.py ::
Qwen3VLForConditionalGeneration._get_expanded_positions, ._postprocess_image_embeds_evs,
.get_mrope_input_positions, ._get_mrope_input_positions, ._iter_mm_grid_hw, Qwen3VLMultiModalProcessor.get_video_repl
and _cached_tensor (definitions verbatim). The text of the two claimed methods is the same in 0.28.0 and 0.29.0:
each copies host-built positions with a pageable `.to(device, non_blocking=True)`.

`Qwen3VLForConditionalGeneration` (the whole Qwen3-VL model) and `Qwen3VLMultiModalProcessor` are stand-ins
holding the verbatim methods (their bases, class fields and the processor registry decorator dropped: they
change between releases and none is read here); `__init__` is not copied: the input model
(strategies/qwen3_vl_evs/inputs.py) makes the instance with `nn.Module.__init__` only and sets the state the
methods read (`config` with `video_token_id`, `vision_start_token_id`, `vision_end_token_id` and
`vision_config.spatial_merge_size`; `visual.spatial_merge_size`; `_tokenizer`, a stand-in with `encode`;
`is_multimodal_pruning_enabled`). The multimodal containers `_get_expanded_positions` builds
(`MultiModalFeatureSpec`, `MultiModalKwargsItem`, `MultiModalFieldElem`, `PlaceholderRange`,
vllm/multimodal/inputs.py; `PromptUpdateDetails`, vllm/multimodal/processing.py; `MultiModalFieldConfig`, which
0.31.0+ text names) are stood in by records with the fields the copied code reads. `compute_mrope_for_media` is
copied verbatim from vllm/multimodal/video_prune/evs.py (the same in 0.29.0 and 0.30.0); `gpu_sync_allowed`
(vllm/utils/gpu_sync_debug.py) is stood in by this module's allow region (`sync_allowed_depth`): the shared
`gpu_sync_debug` helper serves the 0.27.1/0.28.0 pair, and a copy module serves one pair.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager  # ADAPTED: for the gpu_sync_allowed stand-in
from contextvars import ContextVar  # ADAPTED: for the gpu_sync_allowed stand-in
from dataclasses import dataclass  # ADAPTED: for the multimodal record stand-ins
from functools import lru_cache, partial
from typing import Any  # ADAPTED: for the stand-ins' annotations
import numpy as np
import torch
import torch.nn as nn

# from vllm.multimodal.video_prune.evs import compute_mrope_for_media  # ADAPTED: copied below from vllm/multimodal/video_prune/evs.py
# from ...utils.gpu_sync_debug import gpu_sync_allowed  # ADAPTED: stood in below (vllm/utils/gpu_sync_debug.py)
# from vllm.tokenizers.protocol import TokenizerLike  # ADAPTED: annotation only
TokenizerLike = Any  # ADAPTED: annotation only; the input model hands in a stand-in with encode()
# from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig  # ADAPTED: annotation only
Qwen3VLConfig = Any  # ADAPTED: annotation only; the input model hands in a SimpleNamespace with the ids read
# from .qwen2_5_vl import Qwen2_5_VLImageInputs  # ADAPTED: annotation only
Qwen2_5_VLImageInputs = dict  # ADAPTED: annotation only; the input model passes a dict

# Depth of the open gpu_sync_allowed() regions: the record's sync_allow_region, read by the sync oracle.
sync_allowed_depth: ContextVar[int] = ContextVar("legacy_qwen3_vl_evs_sync_allow_depth", default=0)  # ADAPTED: this module's allow region


@contextmanager  # ADAPTED: part of the stand-in below
def gpu_sync_allowed(first_only: bool = False):  # ADAPTED: stands in for vllm's gpu_sync_allowed(): always opens the allow region
    token = sync_allowed_depth.set(sync_allowed_depth.get() + 1)  # ADAPTED: upstream _allow_syncs()
    try:  # ADAPTED
        yield  # ADAPTED
    finally:  # ADAPTED
        sync_allowed_depth.reset(token)  # ADAPTED


@dataclass  # ADAPTED: part of the stand-in below
class PlaceholderRange:  # ADAPTED: stand-in for vllm/multimodal/inputs.py's record: the fields read
    offset: int  # ADAPTED
    length: int  # ADAPTED


@dataclass  # ADAPTED: part of the stand-in below
class MultiModalFieldElem:  # ADAPTED: stand-in for vllm/multimodal/inputs.py's record: the fields read
    data: Any  # ADAPTED
    field: Any = None  # ADAPTED


class MultiModalKwargsItem(dict):  # ADAPTED: stand-in for vllm/multimodal/inputs.py's item, a mapping key -> MultiModalFieldElem
    pass  # ADAPTED


@dataclass  # ADAPTED: part of the stand-in below
class MultiModalFeatureSpec:  # ADAPTED: stand-in for vllm/multimodal/inputs.py's record: the fields read
    data: Any  # ADAPTED
    modality: str  # ADAPTED
    identifier: str  # ADAPTED
    mm_position: PlaceholderRange  # ADAPTED


class MultiModalFieldConfig:  # ADAPTED: stand-in for vllm/multimodal/inputs.py's config (0.31.0+ text names batched(...).field)
    def __init__(self, field=None):  # ADAPTED
        self.field = field  # ADAPTED

    @staticmethod  # ADAPTED
    def batched(modality, *, keep_on_cpu=False):  # ADAPTED: the field is only stored, never read here
        return MultiModalFieldConfig(("batched", modality, keep_on_cpu))  # ADAPTED


class PromptUpdateDetails:  # ADAPTED: stand-in for vllm/multimodal/processing.py's record: `full` only is read here
    def __init__(self, full):  # ADAPTED
        self.full = full  # ADAPTED

    def __class_getitem__(cls, item):  # ADAPTED: 0.28.0 annotates PromptUpdateDetails[list[int]]
        return cls  # ADAPTED

    @staticmethod  # ADAPTED
    def from_seq(seq):  # ADAPTED
        return PromptUpdateDetails(seq)  # ADAPTED

    @staticmethod  # ADAPTED
    def select_token_id(seq, embed_token_id):  # ADAPTED: the embed selection is not read here
        return PromptUpdateDetails(seq)  # ADAPTED


class Qwen3VLMultiModalProcessor:  # ADAPTED: stand-in holding get_video_repl (base class, fields and other methods not read here)
    @staticmethod
    def get_video_repl(
        *,
        tokens_per_frame: list[int],
        timestamps: list[float | int] | torch.Tensor,
        tokenizer: TokenizerLike,
        vision_start_token_id: int,
        vision_end_token_id: int,
        video_token_id: int,
        select_token_id: bool = False,
    ) -> PromptUpdateDetails:
        """Build prompt replacement for a video in Qwen3VL format.

        The replacement structure for each frame is:
        timestamp_tokens + vision_start_token + video_tokens + vision_end_token

        Args:
            tokens_per_frame: Number of video tokens per frame (can vary per frame for
                EVS).
            timestamps: List of timestamps in seconds for each frame
            tokenizer: Tokenizer to encode timestamp strings
            vision_start_token_id: Token ID for vision start marker
            vision_end_token_id: Token ID for vision end marker
            video_token_id: Token ID for video content

        Returns:
            PromptUpdateDetails with full token sequence
        """
        assert len(timestamps) == len(tokens_per_frame), (
            "timestamps and tokens_per_frame must have the same length"
        )

        # Tokenize timestamp strings independently to avoid tokenizer merging
        # tokens across boundaries.
        timestamp_token_ids = [
            tokenizer.encode(f"<{timestamp:.1f} seconds>", add_special_tokens=False)
            for timestamp in timestamps
        ]

        # Build the full token sequence
        all_token_ids = []
        for frame_timestamp_ids, num_tokens in zip(
            timestamp_token_ids, tokens_per_frame
        ):
            # Add timestamp tokens
            all_token_ids.extend(frame_timestamp_ids)

            # Add vision tokens: vision_start + video_tokens + vision_end
            all_token_ids.append(vision_start_token_id)
            all_token_ids.extend([video_token_id] * num_tokens)
            all_token_ids.append(vision_end_token_id)

        if select_token_id:
            return PromptUpdateDetails.select_token_id(all_token_ids, video_token_id)

        # NOTE: we use `from_seq` instead of `select_token_id` because we want all
        # tokens in the placeholder to be initially marked as candidates. Then
        # in `get_input_embeddings``, we refine the mask to only replace
        # `video_token_id` / `image_token_id`` positions with video/image embeddings,
        # keeping text embeddings for timestamps and structural tokens.
        return PromptUpdateDetails.from_seq(all_token_ids)


class Qwen3VLForConditionalGeneration(nn.Module):  # ADAPTED: stand-in holding only the copied methods (its bases, class fields and registry decorator change from release to release and none is read here)
    def _postprocess_image_embeds_evs(
        self,
        image_embeds_split: tuple[torch.Tensor, ...],
        image_input: Qwen2_5_VLImageInputs,
    ) -> tuple[torch.Tensor, ...]:
        """
        Append mrope positions for each for images.
        This is necessary to recover correct mrope
        positions after video pruning

        Args:
            image_embeds_split: Tuple of image embeddings for
                each image item.
            image_input: Image input data.

        Returns:
            Tuple of image embeddings for each image item.
            Resulting embeddings will have extra 5 channels for
            computed mrope positions, consistent with video embeddings.
        """
        if self.is_multimodal_pruning_enabled:
            merge_size = self.visual.spatial_merge_size
            grid_thw = image_input["image_grid_thw"]
            grid_thw_list = grid_thw.tolist()
            image_embeds_out = []
            for emb, size in zip(image_embeds_split, grid_thw_list):
                positions = compute_mrope_for_media(size, merge_size).to(
                    emb.device, non_blocking=True
                )
                positions = torch.cat(
                    [
                        positions,
                        torch.zeros_like(
                            positions[:, 0:1]
                        ),  # Dummy extra fifth channel
                    ],
                    dim=1,
                )
                emb = torch.cat([emb, positions], dim=1)
                image_embeds_out.append(emb)
            image_embeds_split = tuple(image_embeds_out)
        return image_embeds_split

    def _get_expanded_positions(
        self,
        device,
        seq_len,
        video_grid_thw,
        num_tokens_per_frame,
        timestamps,
        is_video_embed,
        is_vision_start,
        retention_mask,
    ):
        embed_token_id = _cached_tensor(self.config.video_token_id, device=device)

        # Expand positions to match the full sequence length
        # (includes both video tokens and indicator tokens)
        # Shape: [full_length, 5] where positions are filled for video tokens
        # and zeros for indicator tokens.
        # Channel 3 flags VISION_START tokens so that
        # recompute_mrope_positions can reliably count timestamp tokens
        # (even when early frames have all video tokens pruned).
        # Channel 4 flags video-embedding tokens.
        expanded_positions = torch.zeros(
            seq_len,
            5,  # [t_index, h_index, w_index, is_vision_start, is_video]
            device=device,
            dtype=torch.long,
        )
        _, h, w = video_grid_thw
        merge_size = self.visual.spatial_merge_size
        num_frames = len(num_tokens_per_frame)
        unpruned_token_ids = Qwen3VLMultiModalProcessor.get_video_repl(
            tokens_per_frame=[(h // merge_size) * (w // merge_size)] * num_frames,
            tokenizer=self._tokenizer,
            timestamps=timestamps,
            vision_start_token_id=self.config.vision_start_token_id,
            vision_end_token_id=self.config.vision_end_token_id,
            video_token_id=self.config.video_token_id,
        ).full
        unpruned_token_ids_tensor = torch.tensor(unpruned_token_ids, device=device)
        mm_feature = MultiModalFeatureSpec(
            data=MultiModalKwargsItem(
                {
                    "video_grid_thw": MultiModalFieldElem(
                        data=torch.tensor(video_grid_thw),
                        field=None,  # HACK.
                    ),
                }
            ),
            modality="video",
            identifier="DUMMY",
            mm_position=PlaceholderRange(offset=0, length=len(unpruned_token_ids)),
        )
        original_mrope = (
            self.get_mrope_input_positions(
                input_tokens=unpruned_token_ids,
                mm_features=[mm_feature],
            )[0]
            .to(device, non_blocking=True)
            .permute(1, 0)
        )
        full_is_video_embed = unpruned_token_ids_tensor == embed_token_id

        with gpu_sync_allowed():
            expanded_positions[is_video_embed, :3] = original_mrope[
                full_is_video_embed
            ][retention_mask]
            expanded_positions[~is_video_embed, :3] = original_mrope[
                ~full_is_video_embed
            ]
        expanded_positions[..., 3] = is_vision_start
        expanded_positions[..., 4] = is_video_embed

        return expanded_positions

    @staticmethod
    def _iter_mm_grid_hw(
        input_tokens: list[int],
        mm_features: list[MultiModalFeatureSpec],
        video_token_id: int,
        vision_start_token_id: int,
        vision_end_token_id: int,
        spatial_merge_size: int,
    ) -> Iterator[tuple[int, int, int, int]]:
        """Iterate over multimodal features and yield position info.

        Args:
            input_tokens: List of token IDs in the input sequence.
            mm_features: List of multimodal feature specifications containing
                image/video data and position information.
            video_token_id: Token ID used for video tokens.
            vision_start_token_id: Token ID marking the start of a vision sequence.
            vision_end_token_id: Token ID marking the end of a vision sequence.
            spatial_merge_size: Size of the spatial merge operation used to
                compute logical grid dimensions from the original feature grid.

        Yields:
            offset: Position of the first video/image token in the sequence.
            llm_grid_h: Logical grid height (may not match actual token count with EVS).
            llm_grid_w: Logical grid width (may not match actual token count with EVS).
            actual_num_tokens: Actual number of video/image tokens in the placeholder.
        """
        for mm_feature in sorted(mm_features, key=lambda f: f.mm_position.offset):
            offset = mm_feature.mm_position.offset
            if mm_feature.modality == "image":
                t, h, w = mm_feature.data["image_grid_thw"].data.tolist()
                assert t == 1, f"Image must have 1 frame, got {t}"
                llm_grid_h = h // spatial_merge_size
                llm_grid_w = w // spatial_merge_size
                yield offset, llm_grid_h, llm_grid_w, llm_grid_h * llm_grid_w
            elif mm_feature.modality == "video":
                t, h, w = mm_feature.data["video_grid_thw"].data.tolist()
                llm_grid_h = h // spatial_merge_size
                llm_grid_w = w // spatial_merge_size

                for _ in range(t):
                    # When EVS is enabled, some frames may have 0 video tokens in the
                    # placeholder. We use `vision_start_token_id` to locate each frame
                    # since it is always present for every frame.
                    # We then look for the first `video_token_id` after
                    # `vision_start_token_id` and before `vision_end_token_id`.
                    offset = input_tokens.index(vision_start_token_id, offset)
                    vision_end_offset = input_tokens.index(vision_end_token_id, offset)

                    try:
                        actual_num_tokens = 0
                        video_offset = input_tokens.index(
                            video_token_id, offset, vision_end_offset
                        )
                        # NOTE: looking at the
                        # `Qwen3VLMultiModalProcessor.get_video_repl` code, we can
                        # see that we can use the below formula to get the token
                        # count, since everything in between `video_offset` and
                        # `vision_end_offset` is populated as `video_token_id`.
                        # This saves us from manually counting the number tokens
                        # that match `video_token_id` in between.
                        actual_num_tokens += vision_end_offset - video_offset
                    except ValueError:
                        # No `video_token_id` in this frame (EVS with 0 tokens for
                        # this frame) -> use `offset + 1`` to move past
                        # `vision_start_token_id`.
                        video_offset = offset + 1

                    yield video_offset, llm_grid_h, llm_grid_w, actual_num_tokens
                    # Move offset past this frame for next iteration.
                    offset = vision_end_offset + 1
            else:
                raise ValueError(f"Unsupported modality: {mm_feature.modality}")

    def get_mrope_input_positions(
        self,
        input_tokens: list[int],
        mm_features: list[MultiModalFeatureSpec],
    ) -> tuple[torch.Tensor, int]:
        return self._get_mrope_input_positions(
            input_tokens=input_tokens,
            mm_features=mm_features,
            config=self.config,
        )

    @staticmethod
    def _get_mrope_input_positions(
        input_tokens: list[int],
        mm_features: list[MultiModalFeatureSpec],
        config: Qwen3VLConfig,
    ):
        llm_pos_ids_list = []
        st = 0
        for (
            offset,
            llm_grid_h,
            llm_grid_w,
            actual_num_tokens,
        ) in Qwen3VLForConditionalGeneration._iter_mm_grid_hw(
            input_tokens,
            mm_features,
            video_token_id=config.video_token_id,
            vision_start_token_id=config.vision_start_token_id,
            vision_end_token_id=config.vision_end_token_id,
            spatial_merge_size=config.vision_config.spatial_merge_size,
        ):
            # Skip frames with 0 tokens (EVS placeholder with tokens lumped elsewhere)
            if actual_num_tokens == 0:
                continue

            text_len = offset - st
            st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
            llm_pos_ids_list.append(
                np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx
            )

            # Check if this is a "lumped placeholder" (all tokens from multiple frames
            # assigned to the 0-th frame - see
            # `Qwen3VLMultiModalProcessor.get_video_repl`.
            expected_tokens_per_frame = llm_grid_h * llm_grid_w
            if actual_num_tokens > expected_tokens_per_frame:
                # Lumped placeholder: create grid positions for all "logical" frames
                # represented.
                num_logical_frames = actual_num_tokens // expected_tokens_per_frame
                remainder = actual_num_tokens % expected_tokens_per_frame

                # Create positions for complete frames.
                for _ in range(num_logical_frames):
                    grid_indices = np.indices((1, llm_grid_h, llm_grid_w)).reshape(
                        3, -1
                    )
                    llm_pos_ids_list.append(grid_indices + text_len + st_idx)
                    st_idx = llm_pos_ids_list[-1].max() + 1
                    text_len = 0  # No text between frames within the lump

                # Handle remainder tokens if any (partial frame).
                # NOTE: this should never be the case. Should we have an assert?
                if remainder > 0:
                    # Create a partial grid - take first 'remainder' positions
                    full_grid = np.indices((1, llm_grid_h, llm_grid_w)).reshape(3, -1)
                    grid_indices = full_grid[:, :remainder]
                    llm_pos_ids_list.append(grid_indices + text_len + st_idx)
            else:
                # Normal case: frame has exactly the expected tokens (after actual EVS
                # pruning).
                grid_indices = np.indices((1, llm_grid_h, llm_grid_w)).reshape(3, -1)
                llm_pos_ids_list.append(grid_indices + text_len + st_idx)

            st = offset + actual_num_tokens

        if st < len(input_tokens):
            st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
            text_len = len(input_tokens) - st
            llm_pos_ids_list.append(
                np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx
            )

        llm_positions = np.concatenate(llm_pos_ids_list, axis=1).reshape(3, -1)
        mrope_position_delta = (llm_positions.max() + 1 - len(input_tokens)).item()
        return torch.from_numpy(llm_positions), mrope_position_delta


@lru_cache
def _cached_tensor(x, device) -> torch.Tensor:
    return torch.tensor(x, device=device)


def compute_mrope_for_media(
    video_size_thw: torch.LongTensor,
    spatial_merge_size: int,
    tokens_per_second: float = 1.0,
    video_second_per_grid: float = 1.0,
) -> torch.Tensor:
    """
    Computes the mrope for video embeddings based on the grid dimensions.
    Computed mrope positions match original qwen 2.5 implementation,
    but positions are built for media being the first element in sequence.

    Args:
        video_size_thw: Media size (num frames, rows, cols)
        spatial_merge_size: Size reduction for rows & cols dimensions.
        tokens_per_second: Number of tokens per second.
        video_second_per_grid: Number of seconds per video.

    Returns:
        Tensor of shape `(T * H * W, 4)` where last dimension
        represents mrope positions [0:3), while the last channel
        contains value of llm_grid_w repeated for all positions.
    """
    llm_grid_t = video_size_thw[0]
    llm_grid_h = video_size_thw[1] // spatial_merge_size
    llm_grid_w = video_size_thw[2] // spatial_merge_size

    t_index = (
        (
            torch.arange(llm_grid_t)
            .view(-1, 1)
            .expand(-1, llm_grid_h * llm_grid_w)
            .mul(tokens_per_second * video_second_per_grid)
        )
        .long()
        .flatten()
    )
    h_index = (
        torch.arange(llm_grid_h)
        .view(1, -1, 1)
        .expand(llm_grid_t, -1, llm_grid_w)
        .flatten()
    )
    w_index = (
        torch.arange(llm_grid_w)
        .view(1, 1, -1)
        .expand(llm_grid_t, llm_grid_h, -1)
        .flatten()
    )
    llm_grid_w = (
        torch.tensor([llm_grid_w])
        .view(1, 1, 1)
        .expand(llm_grid_t, llm_grid_h, llm_grid_w)
        .flatten()
    )

    positions = torch.stack([t_index, h_index, w_index, llm_grid_w], dim=1)
    return positions
