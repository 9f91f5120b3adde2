"""Oracles of ``BaseMultiModalField.reduce_data`` (vllm/multimodal/inputs.py, 0.29.0 / 0.30.0).

Upstream meaning: ``reduce_data`` "merge[s] the data from multiple instances of
MultiModalFieldElem", the inverse of ``build_elems``. A batched field's merge "produce[s]
exactly [the] same result as ``torch.stack(batch)``" when every element is a tensor of one
shape (the single-element shortcut says so), else the list of elements; a flat field's is
``torch.concat(batch, dim)`` when the other dimensions agree, else the zero-initialised
slice-assign of issue #31658 (each element at its offset along ``dim``, zeros elsewhere), and
for elements that are lists, the flattened list. The result goes to ``device`` ("the device to
place the grouped tensors on", ``group_and_batch_mm_items``), except a ``keep_on_cpu`` field,
which "is excluded from being moved to the accelerator" (it goes to the host); with no device
it stays where the elements are. ``pin_memory`` is "whether to pin memory for faster
host-to-device transfer": it is forced off for ``keep_on_cpu``, for a host target and for
elements already on a device.

The thunk (strategies/mm_inputs/inputs.py) returns ``{"out", "pinned", "aliases_item", "items"}``.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzz.api import Reference
from strategies.mm_inputs.inputs import call_arguments, flat_slices, item_sources


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, list):
        return [_cpu(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_cpu(v) for v in value)
    return value


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def _elements(spec: dict) -> list[Any]:
    """The elements ``build_elems`` hands over, on the host: ``data[index]`` of a batched
    field's data, the ``index``-th slice of a flat field's."""
    sources = _cpu(item_sources({**spec, "elems_on": "host"}))
    if spec["field"] == "batched":
        return [source[item["index"]] for item, source in zip(spec["items"], sources)]
    return [source[flat_slices(spec, item)[item["index"]]] for item, source in zip(spec["items"], sources)]


def _padded_concat(batch: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Each element at its offset along ``dim`` of a zero tensor as large as the largest in
    every other dimension (issue #31658's slice-assign, written independently)."""
    sizes = [max(t.shape[d] for t in batch) for d in range(batch[0].dim())]
    sizes[dim] = sum(t.shape[dim] for t in batch)
    out = torch.zeros(sizes, dtype=batch[0].dtype)
    offset = 0
    for t in batch:
        index = tuple(slice(offset, offset + t.shape[d]) if d == dim else slice(0, t.shape[d])
                      for d in range(t.dim()))
        out[index] = t
        offset += t.shape[dim]
    return out


def reduce_data_expected(spec: dict) -> Any:
    """The merged data, on the host, from the upstream meaning (module docstring)."""
    batch = _elements(spec)
    tensors = len(batch) > 0 and all(isinstance(b, torch.Tensor) for b in batch)
    if spec["field"] == "batched":
        if tensors and all(b.shape == batch[0].shape for b in batch):
            return torch.stack(batch)
        return batch
    if not tensors:
        return [e for elem in batch for e in elem]
    dim = spec["dim"] % batch[0].dim()
    rest = {(b.shape[:dim], b.shape[dim + 1:]) for b in batch}
    if len(rest) == 1:
        return torch.cat(batch, dim=dim)
    return _padded_concat(batch, dim)


def reduce_data_observed(output: Any) -> Any:
    return _cpu(output["out"]) if isinstance(output, dict) and "out" in output else output


REDUCE_DATA_REFERENCE = Reference(expected=reduce_data_expected, observed=reduce_data_observed, floats="exact")
"""The batch as ``torch.stack`` / ``torch.concat`` / the zero-padded concat / the flattened
list of the elements would make it (values, shapes, dtypes; the device is checked apart)."""


def _problem(output: Any) -> str | None:
    if not isinstance(output, dict) or not {"out", "pinned", "items"} <= set(output):
        return f"output is {type(output).__name__} without out/pinned/items"
    return None


def reduce_data_places_every_leaf(spec: dict, output: Any) -> str | None:
    """Every tensor of the batch is on ``device`` when one is given; on the host for a
    ``keep_on_cpu`` field ("excluded from being moved to the accelerator"); where the elements
    were when no device is given."""
    if problem := _problem(output):
        return problem
    keep_on_cpu, device, _ = call_arguments(spec)
    if keep_on_cpu and device is not None:
        want = "cpu"
    elif device is not None:
        want = device.type
    else:
        want = torch.device(spec["device"] if spec["elems_on"] == "device" else "cpu").type
    for leaf in _leaves(output["out"]):
        if leaf.device.type != want:
            return f"a batched tensor {tuple(leaf.shape)} is on {leaf.device}, expected {want}"
    return None


def reduce_data_leaves_the_items_alone(spec: dict, output: Any) -> str | None:
    """The items' data (the processor outputs, held by the multimodal cache) are only read:
    after the call they hold what they held, values and dtypes."""
    if problem := _problem(output):
        return problem
    want, got = _leaves(_cpu(item_sources({**spec, "elems_on": "host"}))), _leaves(_cpu(output["items"]))
    if len(want) != len(got):
        return f"the items hold {len(got)} tensors, built {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        if w.dtype != g.dtype or w.shape != g.shape or not torch.equal(w, g):
            return f"item tensor {i} changed by reduce_data"
    return None


def reduce_data_pins_only_when_asked(spec: dict, output: Any) -> str | None:
    """A host tensor of the batch is pinned only if pinning was asked and not forced off:
    ``pin_memory`` is off for a ``keep_on_cpu`` field, for a host ``device`` and for elements
    already on an accelerator, and pinned memory is for "faster host-to-device transfer".
    One exception, torch's and not the function's: accelerator elements brought to a host target by
    ``_nested_tensors_h2d``'s ``x.to(device=..., non_blocking=True)`` land in memory torch pins for an
    asynchronous device-to-host copy (both releases; seen on an H100, lab/gpu-runs/2026-12-06d-h100.md)."""
    if problem := _problem(output):
        return problem
    keep_on_cpu, device, pin_memory = call_arguments(spec)
    host_target = device is not None and (keep_on_cpu or device.type == "cpu")
    on_device = spec["elems_on"] == "device" and not spec["device"].startswith("cpu")
    if on_device and host_target:
        return None  # torch pins the destination of a non_blocking device-to-host copy
    allowed = pin_memory and not host_target and not on_device
    pinned = [p for p in _leaves_of_flags(output["pinned"]) if p]
    if pinned and not allowed:
        return f"{len(pinned)} host tensor(s) of the batch are pinned, with pin_memory off"
    return None


def _leaves_of_flags(value: Any) -> list[bool]:
    if isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)):
        return [flag for v in value for flag in _leaves_of_flags(v)]
    return []
