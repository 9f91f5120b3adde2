# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.30.0: vllm/model_executor/models/qwen2_5_vl.py ::
Qwen2_5_VLForConditionalGeneration._postprocess_image_embeds_evs and
Qwen2_5_VLForConditionalGeneration._postprocess_video_embeds_evs (definitions verbatim); vllm/utils/torch_utils.py :: async_tensor_h2d (verbatim, 0.30.0's).

Change 0.29.0 -> 0.30.0 (issue #43): both methods copy the host-built mrope positions
(`compute_mrope_for_media`) with `async_tensor_h2d` (staged through a pinned buffer, then a non-blocking
copy) instead of a pageable `.to(emb.device, non_blocking=True)`.

`Qwen2_5_VLForConditionalGeneration` is the whole Qwen2.5-VL model (vision tower, language model,
weights); its `__init__` is not copied: the input model (strategies/qwen2_5_vl_evs/inputs.py) makes the
instance with `nn.Module.__init__` only and sets the state these methods read (`config.vision_config.
tokens_per_second`, `visual.spatial_merge_size`, `video_pruning_rate`), so the real vllm class works too.
The class is a stand-in (bases, class fields and the processor registry decorator dropped: they
change between releases and none is read here) holding the verbatim methods. The EVS helpers
`compute_retained_tokens_count`, `compute_retention_mask` and `compute_mrope_for_media` are copied verbatim
from vllm/multimodal/video_prune/evs.py (identical in 0.29.0 and 0.30.0). `gpu_sync_allowed`
(vllm/utils/gpu_sync_debug.py) is stood in by an allow region of this module (`sync_allowed_depth`), since the
shared `gpu_sync_debug` helper serves the 0.27.1/0.28.0 pair and a copy module serves one pair.
"""

from contextlib import contextmanager  # ADAPTED: for the gpu_sync_allowed stand-in
from contextvars import ContextVar  # ADAPTED: for the gpu_sync_allowed stand-in
from typing import Annotated, Any, Literal, TypeAlias
import torch
import torch.nn as nn
import typing  # ADAPTED: vllm/multimodal/video_prune/evs.py's import, for the helpers copied below
import numpy as np  # ADAPTED: vllm/utils/torch_utils.py's import, for async_tensor_h2d below
# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.30.0
# from vllm.utils.platform_utils import is_pin_memory_available  # ADAPTED: vllm's platform layer
# Upstream (vllm/utils/torch_utils.py): PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms.
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer
# from vllm.multimodal.video_prune.evs import compute_mrope_for_media  # ADAPTED: copied below from vllm/multimodal/video_prune/evs.py
# from vllm.multimodal.video_prune.evs import compute_retention_mask  # ADAPTED: copied below from vllm/multimodal/video_prune/evs.py
# from ...utils.gpu_sync_debug import gpu_sync_allowed  # ADAPTED: stood in below (vllm/utils/gpu_sync_debug.py)

# Depth of the open gpu_sync_allowed() regions: the record's sync_allow_region, read by the sync oracle.
sync_allowed_depth: ContextVar[int] = ContextVar("optimized_qwen2_5_vl_evs_sync_allow_depth", default=0)  # ADAPTED: this module's allow region


@contextmanager  # ADAPTED: part of the stand-in below
def gpu_sync_allowed(first_only: bool = False):  # ADAPTED: stands in for vllm's gpu_sync_allowed(): always opens the allow region
    token = sync_allowed_depth.set(sync_allowed_depth.get() + 1)  # ADAPTED: upstream _allow_syncs()
    try:  # ADAPTED
        yield  # ADAPTED
    finally:  # ADAPTED
        sync_allowed_depth.reset(token)  # ADAPTED


# The typed-dict input schemas only annotate the methods' arguments; the input model passes a dict.
class Qwen2_5_VLImagePixelInputs:  # ADAPTED: stand-in for the TensorSchema, only named in annotations
    pass  # ADAPTED
class Qwen2_5_VLImageEmbeddingInputs:  # ADAPTED: stand-in for the TensorSchema, only named in annotations
    pass  # ADAPTED
class Qwen2_5_VLVideoPixelInputs:  # ADAPTED: stand-in for the TensorSchema, only named in annotations
    pass  # ADAPTED
class Qwen2_5_VLVideoEmbeddingInputs:  # ADAPTED: stand-in for the TensorSchema, only named in annotations
    pass  # ADAPTED


Qwen2_5_VLImageInputs: TypeAlias = (
    Qwen2_5_VLImagePixelInputs | Qwen2_5_VLImageEmbeddingInputs
)


Qwen2_5_VLVideoInputs: TypeAlias = (
    Qwen2_5_VLVideoPixelInputs | Qwen2_5_VLVideoEmbeddingInputs
)


class Qwen2_5_VLForConditionalGeneration(nn.Module):  # ADAPTED: stand-in holding only the EVS methods (its bases, class fields and registry decorator change from release to release and none is read here)
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
            Resulting embeddings will have extra 4 channels for
            computed mrope positions.
        """
        merge_size = self.visual.spatial_merge_size
        grid_thw = image_input["image_grid_thw"]
        grid_thw_list = grid_thw.tolist()
        image_embeds_out = []
        for emb, size in zip(image_embeds_split, grid_thw_list):
            positions = async_tensor_h2d(
                compute_mrope_for_media(size, merge_size), emb.device
            )
            emb = torch.cat([emb, positions], dim=1)
            image_embeds_out.append(emb)
        image_embeds_split = image_embeds_out
        return tuple(image_embeds_split)

    def _postprocess_video_embeds_evs(
        self,
        video_embeds_split: tuple[torch.Tensor, ...],
        video_input: Qwen2_5_VLVideoInputs,
    ) -> tuple[torch.Tensor, ...]:
        """
        Prunes video embeddings via Efficient Video Sampling (EVS)
        and then appends mrope positions for each retained embeddings

        Args:
            video_embeds_split: Tuple of video embeddings for each video item.
            video_input: Video input data.

        Returns:
            Tuple of video embeddings for each video item.
            Resulting embeddings will have extra 4 channels for
            computed mrope positions.
        """
        grid_thw = video_input["video_grid_thw"]
        assert grid_thw.ndim == 2
        grid_thw_list = grid_thw.tolist()
        merge_size = self.visual.spatial_merge_size

        # Cast to long to match the original code
        # https://github.com/huggingface/transformers/blob/41980ce93e775f6c88500c51c8db7946fc6a2add/src/transformers/models/qwen2_5_vl/modular_qwen2_5_vl.py#L491 # noqa
        second_per_grid_ts = video_input.get("second_per_grid_ts")
        if second_per_grid_ts is None:
            raise ValueError(
                "second_per_grid_ts is required when video_pruning_rate > 0 "
                "is enabled for video inputs, including the video_embeds path."
            )
        second_per_grid_ts = second_per_grid_ts.long()
        tokens_per_second = self.config.vision_config.tokens_per_second

        video_embeds_out = []
        for emb, size, video_second_per_grid_t in zip(
            video_embeds_split, grid_thw_list, second_per_grid_ts
        ):
            # For each video, we compute retention mask using EVS
            retention_mask = compute_retention_mask(
                emb,
                size,
                spatial_merge_size=self.visual.spatial_merge_size,
                q=self.video_pruning_rate,
            )
            positions_cpu = compute_mrope_for_media(
                size,
                merge_size,
                tokens_per_second=tokens_per_second,
                video_second_per_grid=video_second_per_grid_t.item(),
            )
            positions = async_tensor_h2d(positions_cpu, emb.device)

            with gpu_sync_allowed():
                emb = emb[retention_mask]
                positions = positions[retention_mask]
            emb = torch.cat([emb, positions], dim=1)
            video_embeds_out.append(emb)
        return tuple(video_embeds_out)


def compute_retained_tokens_count(
    tokens_per_frame: int, num_frames: int, q: float
) -> int:
    """
    Compute the number of retained tokens for a given video.
    Method ensures that we retain all the tokens from the first frame
    regardless of the pruning rate.

    Args:
        tokens_per_frame: The number of tokens per frame.
        num_frames: The total number of frames.
        q: The pruning rate.

    Returns:
        The number of retained tokens.
    """
    total_tokens = tokens_per_frame * num_frames
    evs_num_tokens = int(total_tokens * (1 - q))
    min_num_tokens = tokens_per_frame
    return max(min_num_tokens, evs_num_tokens)


def compute_retention_mask(
    video_embeds: torch.Tensor,
    video_size_thw: torch.LongTensor | tuple[int, int, int],
    spatial_merge_size: int,
    q: float,
) -> torch.Tensor:
    """
    Computes the retention mask for input video embeddings.

    Args:
        video_embeds (`torch.Tensor`): The input video embeddings
            of shape `(T * H * W // spatial_merge_size ^ 2, hidden_size)`
        video_size_thw (`torch.LongTensor` of shape `(3)`):
            The temporal, height and width of video.
        spatial_merge_size: Size reduction for rows & cols dimensions.
        q: (`float`): Pruning rate factor [0,1)

    Returns:
        `torch.Tensor`: The retention mask for the video embeddings of
            `(T * H * W // spatial_merge_size ^ 2)` shape.
    """
    T, H, W = map(int, video_size_thw)

    # Use reshape instead of einops to avoid graph breaks
    video_embeds = video_embeds.reshape(
        T,
        H // spatial_merge_size,
        W // spatial_merge_size,
        video_embeds.size(-1),
    )
    tokens_per_frame = (H // spatial_merge_size) * (W // spatial_merge_size)
    # Core EVS
    similarity = torch.nn.functional.cosine_similarity(
        video_embeds[1:, ...], video_embeds[:-1, ...], dim=-1
    )
    dissimilarity = 1 - similarity

    # Always ensure we include all tokens from the first frame
    dissimilarity = torch.cat(
        [255 * torch.ones_like(video_embeds[:1, :, :, 0]), dissimilarity], dim=0
    )

    dissimilarity_flat = dissimilarity.view(-1)
    order = torch.argsort(dissimilarity_flat, dim=-1, descending=True, stable=True)
    retain_num_tokens = compute_retained_tokens_count(
        tokens_per_frame=tokens_per_frame, num_frames=T, q=q
    )
    topk_indices = order[:retain_num_tokens]

    retention_mask = torch.zeros_like(dissimilarity_flat, dtype=torch.bool)
    retention_mask.index_fill_(0, topk_indices, True)
    retention_mask = retention_mask.reshape(dissimilarity.size())

    mask = retention_mask.view(-1)  # "T H W -> (T H W)"
    return mask


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



def async_tensor_h2d(
    data: list | np.ndarray | torch.Tensor,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,


) -> torch.Tensor:
    """Copy list/numpy array/tensor async from host to device."""
    if dtype is None and out is not None:
        dtype = out.dtype
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        t = data
        if PIN_MEMORY and not t.is_pinned():
            # Stage in pinned, contiguous buffer to ensure fully async copy.
            t = torch.empty(
                t.shape, dtype=dtype or t.dtype, device="cpu", pin_memory=True
            ).copy_(t)
    else:
        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")
    assert t.is_cpu

    if out is not None:
        assert out.dtype == dtype
        return out.copy_(t, non_blocking=True)
    assert device is not None, "must provide destination tensor or device"
    return t.to(device=device, dtype=dtype, non_blocking=True)
