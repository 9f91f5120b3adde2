# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Copyright (c) 2025 PaddlePaddle Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Copied from vllm 0.28.0: vllm/model_executor/models/paddleocr_vl.py ::
PaddleOCRVLMultiModalProcessor._get_mm_fields_config, Projector (__init__ and forward),
PaddleOCRVLForConditionalGeneration._parse_and_validate_image_input, .encode_image,
._process_image_input and .embed_multimodal (definitions verbatim; a method with its class's own lines).

Target keep-on-cpu-paddleocr-grid-thw (strategies/paddleocr_fields/): the field config decides how the
engine batches ``pixel_values`` and where ``image_grid_thw`` lives (0.29.0 keeps it on the host; 0.33.0
makes ``pixel_values`` flat and encodes the batch in one tower call), so the input model batches each
side by this module's own ``_get_mm_fields_config``. Stand-ins, marked ADAPTED: the
``MultiModalFieldConfig`` records kind, ``keep_on_cpu`` and the flat sizes; the model class holds only
``visual`` (a deterministic stand-in tower the input model hands in) and ``mlp_AR`` (the real
``Projector``); einops' ``rearrange`` is the one pattern the projector uses; ``GELUActivation`` is
``nn.GELU``; the TensorSchema is a namespace without shape checks.
``async_tensor_h2d`` and ``PIN_MEMORY`` are vllm/utils/torch_utils.py's 0.28.0 text (helpers from
vllm/utils/torch_utils.py), used by ``encode_image``.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
import numpy as np
import torch
import torch.nn as nn

from types import SimpleNamespace  # ADAPTED: config and schema stand-ins
# from einops import rearrange  # ADAPTED: einops is not a dependency here; rearrange stood in below
def rearrange(tensor, pattern, **axes):  # ADAPTED: stands in for einops.rearrange, for the one pattern Projector.forward uses
    if pattern != "(t h p1 w p2) d -> (t h w) (p1 p2 d)":  # ADAPTED
        raise NotImplementedError(pattern)  # ADAPTED
    t, h, p1, w, p2 = (int(axes[k]) for k in ("t", "h", "p1", "w", "p2"))  # ADAPTED: einops takes the axis sizes as ints
    d = tensor.shape[-1]  # ADAPTED
    if tensor.shape[0] != t * h * p1 * w * p2:  # ADAPTED: einops refuses a length that does not factor so
        raise ValueError(f"cannot rearrange {tuple(tensor.shape)} as {pattern} with {axes}")  # ADAPTED
    return tensor.reshape(t, h, p1, w, p2, d).permute(0, 1, 3, 2, 4, 5).reshape(t * h * w, p1 * p2 * d)  # ADAPTED
# from transformers import BatchFeature  # ADAPTED: annotation only; the input model passes a dict
BatchFeature = dict  # ADAPTED: hf_inputs is read with .get() only
# from transformers.activations import GELUActivation  # ADAPTED: transformers' GELUActivation is the exact (erf) GELU
GELUActivation = nn.GELU  # ADAPTED: the same function without transformers
# from vllm.multimodal import MULTIMODAL_REGISTRY  # ADAPTED: the registry decorator is commented out below
# from vllm.multimodal.inputs import MultiModalFieldConfig  # ADAPTED: stood in below


class MultiModalFieldConfig:  # ADAPTED: stands in for vllm.multimodal.inputs.MultiModalFieldConfig; records what the input model batches by
    def __init__(self, kind, modality, keep_on_cpu=False, sizes=None):  # ADAPTED
        self.kind, self.modality, self.keep_on_cpu, self.sizes = kind, modality, keep_on_cpu, sizes  # ADAPTED

    @staticmethod  # ADAPTED
    def batched(modality, *, keep_on_cpu=False):  # ADAPTED: same signature as upstream
        return MultiModalFieldConfig("batched", modality, keep_on_cpu)  # ADAPTED

    @staticmethod  # ADAPTED
    def flat_from_sizes(modality, size_per_item, dim=0, *, keep_on_cpu=False):  # ADAPTED: same signature as upstream
        return MultiModalFieldConfig("flat", modality, keep_on_cpu, size_per_item)  # ADAPTED


# from vllm.multimodal.processing import BaseMultiModalProcessor  # ADAPTED: stood in below
class BaseMultiModalProcessor:  # ADAPTED: stands in for vllm's generic processor base; only _get_mm_fields_config runs
    def __class_getitem__(cls, item):  # ADAPTED: BaseMultiModalProcessor[Info] as upstream writes it
        return cls  # ADAPTED
# from .interfaces import MultiModalEmbeddings  # ADAPTED: a type alias, annotations only
MultiModalEmbeddings = object  # ADAPTED: annotation only


class SupportsMultiModal:  # ADAPTED: stands in for the interface mixin (class attributes only upstream)
    pass  # ADAPTED


class SupportsMRoPE:  # ADAPTED: stands in for the interface mixin (class attributes only upstream)
    pass  # ADAPTED
# from .utils import WeightsMapper  # ADAPTED: weight loading only
WeightsMapper = dict  # ADAPTED: stands in for vllm's WeightsMapper (only hf_to_vllm_mapper's construction uses it)


class PaddleOCRVLProcessingInfo:  # ADAPTED: stand-in for upstream vllm/model_executor/models/paddleocr_vl.py::PaddleOCRVLProcessingInfo (only named)
    pass  # ADAPTED


class PaddleOCRVLDummyInputsBuilder:  # ADAPTED: stand-in for upstream vllm/model_executor/models/paddleocr_vl.py::PaddleOCRVLDummyInputsBuilder (only named)
    pass  # ADAPTED


class PaddleOCRImagePixelInputs(SimpleNamespace):  # ADAPTED: stands in for the TensorSchema; holds the fields, no shape check
    pass  # ADAPTED
# from transformers import PretrainedConfig  # ADAPTED: annotation only
PretrainedConfig = SimpleNamespace  # ADAPTED: transformers' config; only hidden_size is read
# from vllm.utils.torch_utils import async_tensor_h2d  # ADAPTED: copied below from vllm/utils/torch_utils.py 0.28.0
# from vllm.utils.platform_utils import is_pin_memory_available  # ADAPTED: vllm's platform layer
# Upstream (vllm/utils/torch_utils.py): PIN_MEMORY = is_pin_memory_available(), true on CUDA platforms.
PIN_MEMORY = torch.cuda.is_available()  # ADAPTED: the same answer without vllm's platform layer


def async_tensor_h2d(
    data: list | np.ndarray | torch.Tensor,
    device: str | torch.device,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Copy list/numpy array/tensor async from host to device."""
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        t = data.pin_memory() if PIN_MEMORY else data
    else:
        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")
    assert t.is_cpu
    return t.to(device=device, dtype=dtype, non_blocking=True)


class PaddleOCRVLMultiModalProcessor(
    BaseMultiModalProcessor[PaddleOCRVLProcessingInfo]


):

    def _get_mm_fields_config(
        self,
        hf_inputs: BatchFeature,
        hf_processor_mm_kwargs: Mapping[str, object],
    ) -> Mapping[str, MultiModalFieldConfig]:
        return dict(
            pixel_values=MultiModalFieldConfig.batched("image"),
            image_grid_thw=MultiModalFieldConfig.batched("image"),
        )


class Projector(nn.Module):
    def __init__(
        self,
        text_config: PretrainedConfig,
        vision_config: PretrainedConfig,
        prefix: str = "",
    ):
        super().__init__()
        self.text_config = text_config
        self.vision_config = vision_config
        self.merge_kernel_size = (2, 2)

        self.hidden_size = (
            self.vision_config.hidden_size
            * self.merge_kernel_size[0]
            * self.merge_kernel_size[1]
        )

        self.pre_norm = torch.nn.LayerNorm(self.vision_config.hidden_size, eps=1e-05)
        self.linear_1 = nn.Linear(self.hidden_size, self.hidden_size, bias=True)
        self.act = GELUActivation()
        self.linear_2 = nn.Linear(
            self.hidden_size, self.text_config.hidden_size, bias=True
        )

    def forward(
        self,
        image_features: torch.Tensor,
        image_grid_thw: torch.Tensor,
    ) -> torch.Tensor:
        m1, m2 = self.merge_kernel_size
        if isinstance(image_features, (list, tuple)):
            processed_features = list()
            for image_feature, image_grid in zip(image_features, image_grid_thw):
                image_feature = self.pre_norm(image_feature)
                t, h, w = image_grid

                image_feature = rearrange(
                    image_feature,
                    "(t h p1 w p2) d -> (t h w) (p1 p2 d)",
                    t=t,
                    h=h // m1,
                    p1=m1,
                    w=w // m2,
                    p2=m2,
                )
                hidden_states = self.linear_1(image_feature)
                hidden_states = self.act(hidden_states)
                hidden_states = self.linear_2(hidden_states)
                processed_features.append(hidden_states)

            return processed_features

        dims = image_features.shape[:-1]
        dim = image_features.shape[-1]
        image_features = image_features.view(np.prod(dims), dim)
        hidden_states = self.pre_norm(image_features).view(-1, self.hidden_size)
        hidden_states = self.linear_1(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.linear_2(hidden_states)

        return hidden_states.view(*dims, -1)


# @MULTIMODAL_REGISTRY.register_processor(  # ADAPTED: vllm decorator, not run here
    # PaddleOCRVLMultiModalProcessor,  # ADAPTED: vllm decorator, not run here
    # info=PaddleOCRVLProcessingInfo,  # ADAPTED: vllm decorator, not run here
    # dummy_inputs=PaddleOCRVLDummyInputsBuilder,  # ADAPTED: vllm decorator, not run here
#   # ADAPTED: vllm decorator, not run here
#   # ADAPTED: vllm decorator, not run here
# )  # ADAPTED: vllm decorator, not run here
class PaddleOCRVLForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsMRoPE):
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_prefix={
            "model.": "language_model.model.",
            "lm_head.": "language_model.lm_head.",
        }
    )

    def __init__(self, visual: nn.Module, mlp_AR: nn.Module) -> None:  # ADAPTED: stand-in holding only what the copied methods read
        super().__init__()  # ADAPTED
        self.visual = visual  # ADAPTED: the vision tower (a deterministic stand-in from the input model)
        self.mlp_AR = mlp_AR  # ADAPTED: the real Projector copied above

    def _parse_and_validate_image_input(
        self, **kwargs: object
    ) -> PaddleOCRImagePixelInputs | None:
        pixel_values = kwargs.pop("pixel_values", None)
        image_grid_thw = kwargs.pop("image_grid_thw", None)

        if pixel_values is None:
            return None

        return PaddleOCRImagePixelInputs(
            type="pixel_values",
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
        )

    def encode_image(
        self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
    ) -> torch.Tensor:
        pixel_values = pixel_values.type(self.visual.dtype)
        siglip_position_ids = list()
        image_grid_hws = list()
        cu_seqlens = [0]

        thw_tuple = tuple(image_grid_thw.tolist())
        numel = np.prod(thw_tuple)
        image_grid_hws.append(thw_tuple)
        image_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])
        siglip_position_ids.append(image_position_ids)
        cu_seqlens.append(cu_seqlens[-1] + numel)

        # Both are built on the host; stage them over non-blocking.
        siglip_position_ids = torch.concat(siglip_position_ids, dim=0).to(
            pixel_values.device, non_blocking=True
        )
        cu_seqlens = async_tensor_h2d(
            cu_seqlens, dtype=torch.int32, device=pixel_values.device
        )

        vision_outputs = self.visual(
            pixel_values=pixel_values,
            image_grid_thw=image_grid_hws,
            position_ids=siglip_position_ids,
            interpolate_pos_encoding=True,
            cu_seqlens=cu_seqlens,
        )
        return vision_outputs

    def _process_image_input(
        self, image_input: PaddleOCRImagePixelInputs
    ) -> MultiModalEmbeddings:
        pixel_values = image_input.pixel_values
        image_grid_thw = image_input.image_grid_thw
        vision_outputs = tuple(
            self.encode_image(pixel, grid).squeeze(0)
            for pixel, grid in zip(pixel_values, image_grid_thw)
        )
        image_embeds = self.mlp_AR(vision_outputs, image_grid_thw)
        return image_embeds

    def embed_multimodal(self, **kwargs) -> MultiModalEmbeddings:
        image_input = self._parse_and_validate_image_input(**kwargs)
        if image_input is None:
            return ()

        multimodal_embeddings: tuple[torch.Tensor, ...] = ()
        image_embeds = self._process_image_input(image_input)
        multimodal_embeddings += tuple(image_embeds)

        return multimodal_embeddings
