"""Inputs of ``Glm4vVisionTransformer.rot_pos_emb(grid_thw)`` (vllm/model_executor/models/glm4_1v.py).

Callers (vllm 0.29.0; 0.34.0 the same), all passing ``grid_thw`` as a Python ``list[list[int]]``: the one
caller is ``Glm4vVisionTransformer.prepare_encoder_metadata(grid_thw_list)``
(``rotary_cos, rotary_sin, _ = self.rot_pos_emb(grid_thw_list)``), reached from

* ``Glm4vVisionTransformer.forward``, with ``grid_thw.tolist()`` of the processor's ``[n, 3]`` grid tensor
  (``_process_image_input`` / ``_process_video_input`` hand it ``image_grid_thw`` / ``video_grid_thw``)
  or the list ``run_dp_sharded_mrope_vision_model`` passes;
* ``Glm4vForConditionalGeneration.prepare_encoder_cudagraph_replay_buffers``, with
  ``_get_grid_thw_by_modality(mm_kwargs)`` (``[list(row) for row in grid_thw.tolist()]``);
* ``prepare_encoder_cudagraph_capture_inputs``, with ``grid_config``: ``max_batch_size`` identical strips
  ``[frames_per_item, spatial_merge_size, tokens * spatial_merge_size]`` (``t == 1`` for images).

That is qwen2-vl's caller contract exactly (strategies/qwen2_vl/inputs.py), so the specs are its
``rope_grid_specs`` and the wide contract its forms: what 0.28.0 also took, an empty list (both releases
raise in ``torch.cat``), tuples, a numpy array and CPU or device tensors (iterating one yields 0-d tensors /
numpy ints). GLM-4.1V ships ``spatial_merge_size=2``; 1 is drawn too.

``self`` is the copy's stand-in ``Glm4vVisionTransformer(spatial_merge_size, rotary_pos_emb, patch_embed)``:
``rotary_pos_emb`` qwen2_vl's :class:`~strategies.qwen2_vl.inputs.RopeTable` (GLM builds the same
``get_rope(head_size=head_dim, max_position=8192, is_neox_style=True, rope_parameters={"partial_rotary_factor":
0.5})``) on the device, ``patch_embed.proj.weight`` an empty tensor on the same device (``device`` reads it;
a loaded model moves the weights and the cache buffer together).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES
from strategies.qwen2_vl.inputs import GRID_FORMS_WIDE, grid_in_form, rope_grid_specs, rope_table


@st.composite
def _glm_rot_pos_emb_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    spec = draw(rope_grid_specs(available, contract))
    spec["grid_form"] = draw(GRID_FORMS_WIDE) if contract == "wide" else "list"
    return spec


class Glm4vRotPosEmbInputs:
    """``Glm4vVisionTransformer.rot_pos_emb(grid_thw)`` on the side's own class with a stand-in ``self``;
    the thunk returns ``(cos_combined, sin_combined, pos_ids)`` as upstream does."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _glm_rot_pos_emb_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Glm4vVisionTransformer.rot_pos_emb")
        if spec["dtype"] not in FLOAT_DTYPES:
            raise HarnessError(f"unknown dtype {spec['dtype']!r}")
        device = spec["device"]
        weight = torch.empty(0, dtype=FLOAT_DTYPES[spec["dtype"]], device=device)
        patch_embed = SimpleNamespace(proj=SimpleNamespace(weight=weight))
        tower = impl.owner(spec["merge"], rope_table(spec, device), patch_embed)
        grid_thw = grid_in_form(spec["grid_thw"], spec["grid_form"], device)

        def call() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return impl.function(tower, grid_thw)

        return call
