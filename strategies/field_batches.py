"""Multimodal fields as the engine hands them to a model: sliced per item, batched and placed by the
processor's own ``_get_mm_fields_config`` (vllm/multimodal/inputs.py ``MultiModalKwargsItems.from_hf_inputs``,
the fields' ``build_elems`` and ``_reduce_data``; vllm/multimodal/utils.py ``group_and_batch_mm_kwargs``,
which leaves ``keep_on_cpu`` fields on the host). Used by the input models of the keep-on-cpu targets of the
0.28.0 -> 0.34.0 pair (strategies/paddleocr_fields/, strategies/ernie_fields/), whose copies' field configs
are ``MultiModalFieldConfig`` stand-ins recording ``kind``, ``keep_on_cpu`` and the flat ``sizes``.

``spec["field_on"][side]`` follows the keep-on-cpu family's rule (strategies/keep_on_cpu/inputs.py):
``"engine"``: where the side's own config puts the field; ``"device"`` / ``"cpu"``: the keep-on-cpu
candidates -- the grid fields, one row per item -- forced there. The data fields (pixels) always go where
the engine puts them: no engine hands a model its pixels on the host beside device weights (forcing them
there too made the wide contract's host-grid form raise on CUDA in 0.28.0's tower, a form no caller passes).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError

FIELD_PLACES = ("engine", "device", "cpu")
CALLER_PLACEMENT = {"legacy": "engine", "optimized": "engine"}
# Built once (strategies/common.py says why). Under the caller contract both sides follow their configs;
# under wide the legacy side may also get the kept fields on the host, a form its code accepts.
CALLER_FIELD_PLACEMENTS = st.just(dict(CALLER_PLACEMENT))
WIDE_FIELD_PLACEMENTS = st.fixed_dictionaries(
    {"legacy": st.sampled_from(["engine", "cpu"]), "optimized": st.just("engine")}
)


def field_side(side: str) -> str:
    """Whose ``spec["field_on"]`` entry ``side`` follows: the optimized copy, its mutants and the rebuilt
    newer release run as ``"optimized"``."""
    return "legacy" if side == "legacy" else "optimized"


def field_configs(module: ModuleType, processor: str, hf_inputs: dict) -> dict[str, Any]:
    """The side's own ``processor._get_mm_fields_config(hf_inputs, {})``, called as the engine calls it
    (no processor state is read, so the processor is not constructed)."""
    cls = getattr(module, processor, None)
    if cls is None or not hasattr(cls, "_get_mm_fields_config"):
        raise HarnessError(f"{module.__name__} has no {processor}._get_mm_fields_config")
    return dict(cls._get_mm_fields_config(cls.__new__(cls), hf_inputs, {}))


def field_items(config: Any, name: str, value: torch.Tensor, per_item: Sequence[int] | None) -> list[torch.Tensor]:
    """One field's per-item elements, as the engine slices the processor's output. ``per_item``: the rows
    of each item in a flat ``value``, or None for one row per item (a grid). ``batched``: one element per
    item (a flat value split per item first, as 0.28.0's ``_call_hf_processor`` did); ``flat``: sliced by
    the config's own sizes."""
    if config.kind == "batched":
        return list(value) if per_item is None else list(value.split(list(per_item)))
    if config.kind == "flat":
        sizes = [int(s) for s in config.sizes.tolist()]
        items = len(value) if per_item is None else len(per_item)
        if len(sizes) != items:  # MultiModalKwargsItems.from_hf_inputs refuses fields of unequal batch sizes
            raise ValueError(f"Cannot merge different batch sizes for modality: {name} has {len(sizes)} items, "
                             f"the batch {items}")
        # MultiModalFlatField.build_elems: data[start:start + size] per item, whatever the sizes add up to.
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [value[start:start + size] for start, size in zip(starts, sizes)]
    raise HarnessError(f"{name}: field kind {config.kind!r} is not drawn here")


def batched(items: list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """A batched field as ``MultiModalBatchedField._reduce_data`` builds it: stacked when every item has the
    same shape, else a list."""
    if all(item.shape == items[0].shape for item in items):
        return torch.stack(items)
    return items


def reduce_items(config: Any, items: list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """``_reduce_data`` of the field's kind: ``batched`` (above), ``flat`` concatenates."""
    return torch.cat(items) if config.kind == "flat" else batched(items)


def field_device(spec: dict, side: str, config: Any, candidate: bool = True) -> str:
    """Where ``side``'s engine puts a field (module docstring); ``candidate``: a grid field, which a
    ``"device"`` / ``"cpu"`` placement forces (a data field always follows the engine)."""
    where = spec["field_on"][field_side(side)]
    if where not in FIELD_PLACES:
        raise HarnessError(f"field_on must be one of {FIELD_PLACES}, not {where!r}")
    if where == "engine" or not candidate:
        return "cpu" if getattr(config, "keep_on_cpu", False) else spec["device"]
    return spec["device"] if where == "device" else "cpu"


def engine_kwargs(spec: dict, side: str, configs: dict[str, Any], hf_outputs: dict[str, torch.Tensor],
                  per_item: dict[str, Sequence[int] | None]) -> dict[str, Any]:
    """The kwargs ``side``'s engine hands ``embed_multimodal``: each field sliced, batched and placed by
    its config. ``per_item[name]``: the rows of each item in the flat ``hf_outputs[name]`` (None: one row
    per item)."""
    kwargs: dict[str, Any] = {}
    for name, value in hf_outputs.items():
        if name not in configs:
            raise HarnessError(f"the field config has no {name!r}")
        batch = reduce_items(configs[name], field_items(configs[name], name, value, per_item[name]))
        device = field_device(spec, side, configs[name], candidate=per_item[name] is None)
        kwargs[name] = batch.to(device) if isinstance(batch, torch.Tensor) else [t.to(device) for t in batch]
    return kwargs


def segment_ids(cu_seqlens: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's segment in ``cu_seqlens`` and whether the segments tile ``[0, count)`` exactly
    (varlen attention reads out of bounds otherwise). Device ops only."""
    tokens = torch.arange(count, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    segment = torch.searchsorted(cu_seqlens, tokens, right=True) - 1
    covered = (cu_seqlens[0] == 0) & (cu_seqlens[-1] == count)
    return segment, covered
