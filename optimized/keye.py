# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.28.0: vllm/model_executor/models/keye.py ::
SigLIPRotaryEmbedding, KeyeSiglipEncoder and KeyeSiglipVisionTransformer (whole
classes, verbatim), BaseKeyeModule._process_image_input and
BaseKeyeModule._process_video_embeds (method bodies verbatim).

Everything these reach that is a neural layer or the model shell is a small
stand-in marked ADAPTED below, under the upstream class name so the verbatim
``__init__`` bodies build them: KeyeVisionEmbeddings (pass-through: the caller
hands in the patch features), KeyeSiglipEncoderLayer (records what the encoder
hands each layer: hidden states, cu_seqlens and the rope cos/sin),
KeyeSiglipVisionModel and Projector (record what the image/video paths hand
the vision tower and the projector) and BaseKeyeModule (holds only ``visual``
and ``mlp_AR``). Upstream KeyeSiglipVisionModel/Projector/BaseKeyeModule are
far larger (tensor-parallel layers, the language model).
"""

from types import SimpleNamespace  # ADAPTED: config stand-in (PretrainedConfig below)
from typing import Any, Literal  # ADAPTED: upstream also imports Annotated, TypeAlias, TypeVar for code not copied

import numpy as np
import torch
import torch.nn as nn

from optimized.torch_utils import async_tensor_h2d  # ADAPTED: upstream `from vllm.utils.torch_utils import async_tensor_h2d`

PretrainedConfig = SimpleNamespace  # ADAPTED: transformers' config; hidden_size, num_attention_heads, num_hidden_layers, layer_norm_eps are read
QuantizationConfig = object  # ADAPTED: vllm's quantization config, only named in annotations here
BaseModelOutput = torch.Tensor  # ADAPTED: transformers' output type, only named in an annotation (forward returns the tensor)
BaseModelOutputWithPooling = list  # ADAPTED: transformers' output type, only named in an annotation (forward returns a list)


def _snapshot(value: Any) -> Any:  # ADAPTED: recording stand-ins keep a copy of what they were handed, as a real consumer reads it then
    if isinstance(value, torch.Tensor):  # ADAPTED
        return value.clone()  # ADAPTED: stream-ordered on the device, immediate on the host
    if isinstance(value, (list, tuple)):  # ADAPTED
        return type(value)(_snapshot(v) for v in value)  # ADAPTED
    if isinstance(value, dict):  # ADAPTED
        return {k: _snapshot(v) for k, v in value.items()}  # ADAPTED
    return value  # ADAPTED


class KeyeVisionEmbeddings(nn.Module):  # ADAPTED: stand-in; the patch conv and position interpolation are not under test
    def __init__(self, config: PretrainedConfig):  # ADAPTED
        super().__init__()  # ADAPTED
        self.config = config  # ADAPTED

    def forward(self, pixel_values, position_ids=None, image_grid_thw=None, interpolate_pos_encoding=False):  # ADAPTED: upstream signature
        return pixel_values  # ADAPTED: the harness passes the packed patch features [1, L, hidden] upstream would compute


class KeyeSiglipEncoderLayer(nn.Module):  # ADAPTED: recording stand-in; attention + MLP are not under test, what they are handed is
    def __init__(self, config: PretrainedConfig, quant_config: QuantizationConfig | None = None, prefix: str = ""):  # ADAPTED
        super().__init__()  # ADAPTED
        self.received: list[dict[str, Any]] = []  # ADAPTED: one entry per forward call

    def forward(self, hidden_states, attention_mask, output_attentions=False, cu_seqlens=None, rope_emb=None):  # ADAPTED: upstream signature
        self.received.append(  # ADAPTED
            _snapshot(dict(hidden_states=hidden_states, attention_mask=attention_mask, output_attentions=output_attentions, cu_seqlens=cu_seqlens, rope_emb=rope_emb))  # ADAPTED
        )  # ADAPTED
        return hidden_states.clone()  # ADAPTED: a fresh tensor like upstream's residual sum, same values, so every layer is handed the same hidden states


class SigLIPRotaryEmbedding(nn.Module):
    def __init__(self, dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.dim = dim
        self.theta = theta
        self.rope_init()

    def rope_init(self):
        inv_freq = 1.0 / (
            self.theta ** (torch.arange(0, self.dim, 2, dtype=torch.float) / self.dim)
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seqlen: int) -> torch.Tensor:
        seq = torch.arange(
            seqlen,
            device=self.inv_freq.device,
            dtype=self.inv_freq.dtype,
        )
        freqs = torch.outer(seq, self.inv_freq)
        return freqs


class KeyeSiglipEncoder(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ):
        super().__init__()
        self.config = config
        embed_dim = config.hidden_size
        num_heads = config.num_attention_heads
        head_dim = embed_dim // num_heads
        self.layers = nn.ModuleList(
            [
                KeyeSiglipEncoderLayer(
                    config,
                    quant_config=quant_config,
                    prefix=f"{prefix}.layers.{layer_idx}",
                )
                for layer_idx in range(config.num_hidden_layers)
            ]
        )
        self.rotary_pos_emb = SigLIPRotaryEmbedding(head_dim // 2)

    @staticmethod
    def flatten_list(image_grid_thw):
        tmp_image_grid_thw = list()
        for image_grid in image_grid_thw:
            if isinstance(image_grid, list):
                tmp_image_grid_thw.extend(image_grid)
            else:
                tmp_image_grid_thw.append(image_grid)
        return tmp_image_grid_thw

    def forward(
        self,
        inputs_embeds,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        cu_seqlens: list[torch.Tensor] | None = None,
        image_grid_thw: list[tuple[int, int, int] | list[tuple[int, int, int]]]
        | None = None,
        height_position_ids: torch.Tensor | None = None,
        width_position_ids: torch.Tensor | None = None,
        use_rope: bool | None = False,
        window_size: bool | None = -1,
        vision_or_text: str = "vision",
    ) -> BaseModelOutput:
        device = inputs_embeds.device
        hidden_states = inputs_embeds
        if use_rope is True:
            flatten_image_grid_thw = self.flatten_list(image_grid_thw)

            if width_position_ids is None or height_position_ids is None:
                split_hids = list()
                split_wids = list()
                for t, h, w in flatten_image_grid_thw:
                    image_pids = torch.arange(t * h * w, device=device) % (h * w)
                    sample_hids = image_pids // w
                    sample_wids = image_pids % w
                    split_hids.append(sample_hids)
                    split_wids.append(sample_wids)
                width_position_ids = torch.concat(split_wids, dim=0)
                height_position_ids = torch.concat(split_hids, dim=0)

            pids = torch.stack(
                [height_position_ids, width_position_ids],
                dim=-1,
            )
            # The ids are built from the grids above, so `h`/`w` bound them
            # and the table size is known on the host.
            max_grid_size = max(max(h, w) for _, h, w in flatten_image_grid_thw)
            rope_emb_max_grid = self.rotary_pos_emb(max_grid_size)
            rope_emb = rope_emb_max_grid[pids].flatten(1)
            rope_emb = rope_emb.repeat(1, 2)
            rope_emb = (rope_emb.cos(), rope_emb.sin())
        else:
            rope_emb = None

        attn_cu_seqlens = cu_seqlens
        hidden_states = inputs_embeds
        assert attention_mask is None

        for encoder_layer in self.layers:
            hidden_states = encoder_layer(
                hidden_states,
                attention_mask,
                output_attentions=output_attentions,
                cu_seqlens=attn_cu_seqlens,
                rope_emb=rope_emb,
            )
        return hidden_states


class KeyeSiglipVisionTransformer(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ):
        super().__init__()
        self.config = config
        embed_dim = config.hidden_size

        self.embeddings = KeyeVisionEmbeddings(config)
        self.encoder = KeyeSiglipEncoder(
            config,
            quant_config=quant_config,
            prefix=f"{prefix}.encoder",
        )
        self.post_layernorm = nn.LayerNorm(embed_dim, eps=config.layer_norm_eps)

    def forward(
        self,
        pixel_values,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        interpolate_pos_encoding: bool | None = False,
        attention_mask: torch.Tensor | None = None,
        sample_indices: torch.Tensor | None = None,
        image_indices: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        height_position_ids: torch.Tensor | None = None,
        width_position_ids: torch.Tensor | None = None,
        cu_seqlens: list[torch.Tensor] | None = None,
        padding_mask: torch.Tensor | None = None,
        vision_return_embed_list: bool | None = False,
        image_grid_thw: list[tuple[int, int, int] | list[tuple[int, int, int]]]
        | None = None,
        return_pooler_output: bool | None = True,
        use_rope: bool | None = False,
        window_size: bool | None = -1,
    ) -> BaseModelOutputWithPooling:
        hidden_states = self.embeddings(
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            position_ids=position_ids,
            image_grid_thw=image_grid_thw,
        )

        last_hidden_state = self.encoder(
            inputs_embeds=hidden_states,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            attention_mask=attention_mask,
            cu_seqlens=cu_seqlens,
            image_grid_thw=image_grid_thw,
            use_rope=use_rope,
            height_position_ids=height_position_ids,
            width_position_ids=width_position_ids,
            window_size=window_size,
            vision_or_text="vision",
        )

        last_hidden_state = self.post_layernorm(last_hidden_state)

        if cu_seqlens is None:
            raise ValueError(
                "cu_seqlens cannot be None for "
                "SiglipVisionTransformer output processing."
            )
        # `cu_seqlens` is the running sum of the per-image `t * h * w`, so the
        # split sizes are known on the host and slicing needs no device read.
        split_sizes = [
            int(np.prod(thw)) for thw in self.encoder.flatten_list(image_grid_thw)
        ]
        return [
            tensor.squeeze(0) for tensor in last_hidden_state.split(split_sizes, dim=1)
        ]



class KeyeSiglipVisionModel(nn.Module):  # ADAPTED: recording stand-in for the vision tower (upstream wraps KeyeSiglipVisionTransformer)
    def __init__(self, dtype: torch.dtype):  # ADAPTED
        super().__init__()  # ADAPTED
        self._dtype = dtype  # ADAPTED: upstream reads vision_model.embeddings.patch_embedding.weight.dtype

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype  # ADAPTED

    def forward(self, **kwargs: Any) -> dict[str, Any]:  # ADAPTED: returns what it was handed
        return _snapshot(kwargs)  # ADAPTED


class Projector(nn.Module):  # ADAPTED: recording stand-in for the mlp_AR projector
    def forward(self, image_features, image_grid_thw):  # ADAPTED: upstream signature
        return [_snapshot(image_features), _snapshot(image_grid_thw)]  # ADAPTED: what it was handed, as a sequence like upstream's per-item list


class BaseKeyeModule(nn.Module):  # ADAPTED: stand-in holding only what the two methods read (upstream: + SupportsMultiModal, the language model)
    def __init__(self, visual: nn.Module, mlp_AR: nn.Module):  # ADAPTED: upstream builds both from VllmConfig
        super().__init__()  # ADAPTED
        self.visual = visual  # ADAPTED
        self.mlp_AR = mlp_AR  # ADAPTED

    def _process_image_input(self, image_input: Any) -> tuple[torch.Tensor, ...]:
        siglip_position_ids = list()
        image_grid_hws = list()
        sample_indices = list()
        cu_seqlens = [0]

        image_grid_thw = image_input["image_grid_thw"]
        assert image_grid_thw.ndim == 2

        image_grid_thw_list = image_grid_thw.tolist()
        for idx, thw in enumerate(image_grid_thw_list):
            thw_tuple = tuple(thw)
            numel = np.prod(thw_tuple)
            image_grid_hws.append(thw_tuple)
            image_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])
            siglip_position_ids.append(image_position_ids)
            sample_indices.append(torch.full((numel,), idx, dtype=torch.int64))
            cu_seqlens.append(cu_seqlens[-1] + numel)

        if image_input["type"] == "image_embeds":
            raise ValueError(
                "Image embeddings are not supported for this processing path."
            )
        else:
            pixel_values = image_input["pixel_values"].type(self.visual.dtype)
            # These are all built on the host, so stage them over
            # non-blocking rather than forcing a sync per transfer.
            siglip_position_ids = torch.concat(siglip_position_ids, dim=0).to(
                pixel_values.device, non_blocking=True
            )
            cu_seqlens = async_tensor_h2d(
                cu_seqlens, dtype=torch.int32, device=pixel_values.device
            )
            sample_indices = torch.concat(sample_indices, dim=0).to(
                pixel_values.device, non_blocking=True
            )

            image_embeds = self.visual(
                pixel_values=pixel_values,
                image_grid_thw=image_grid_hws,
                position_ids=siglip_position_ids,
                vision_return_embed_list=False,
                interpolate_pos_encoding=True,
                sample_indices=sample_indices,
                cu_seqlens=cu_seqlens,
                use_rope=True,
                window_size=-1,
            )
            image_embeds = tuple(self.mlp_AR(image_embeds, image_grid_thw))
            return image_embeds

    def _process_video_embeds(
        self,
        video_type: Literal["video_embeds", "pixel_values_videos"],
        video_grid_thw: list[torch.Tensor],
        pixel_values_videos: torch.Tensor | None = None,
    ) -> torch.Tensor | list[torch.Tensor]:
        siglip_position_ids = list()
        video_grid_hws = list()
        sample_indices = list()
        cu_seqlens = [0]

        assert video_grid_thw.ndim == 2
        for idx, sub_thw in enumerate(video_grid_thw):
            thw_tuple = tuple(sub_thw.detach().cpu().numpy().tolist())
            numel = np.prod(thw_tuple)

            video_grid_hws.append(thw_tuple)
            video_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])
            siglip_position_ids.append(video_position_ids)
            sample_indices.append(torch.full((numel,), idx, dtype=torch.int64))
            cu_seqlens.append(cu_seqlens[-1] + numel)

        if video_type == "video_embeds":
            raise ValueError(
                "Video embeddings are not supported for this processing path."
            )
        else:
            pixel_values_videos = pixel_values_videos.type(self.visual.dtype)
            # These are host-built; stage them over non-blocking.
            siglip_position_ids = torch.concat(siglip_position_ids, dim=0).to(
                pixel_values_videos.device, non_blocking=True
            )
            cu_seqlens = async_tensor_h2d(
                cu_seqlens, dtype=torch.int32, device=pixel_values_videos.device
            )
            sample_indices = torch.concat(sample_indices, dim=0).to(
                pixel_values_videos.device, non_blocking=True
            )

            video_embeds = self.visual(
                pixel_values=pixel_values_videos,
                image_grid_thw=video_grid_hws,
                position_ids=siglip_position_ids,
                vision_return_embed_list=True,
                interpolate_pos_encoding=True,
                sample_indices=sample_indices,
                cu_seqlens=cu_seqlens,
                use_rope=True,
                window_size=-1,
            )
            video_embeds = self.mlp_AR(video_embeds, video_grid_thw)
            return video_embeds
