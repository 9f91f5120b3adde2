"""Inputs of ``BaseMultiModalField.reduce_data`` (vllm/multimodal/inputs.py, 0.29.0 / 0.30.0)
for a ``MultiModalBatchedField`` and a ``MultiModalFlatField``: every multimodal model's
inputs are batched here.

Callers (0.30.0):
* vllm/multimodal/utils.py:_batch_mm_items (from ``group_and_batch_mm_items`` /
  ``group_and_batch_mm_kwargs``) calls ``elems[0].field.reduce_data(elems, device=device,
  pin_memory=pin_memory)`` with the elements of one key over consecutive items, possibly of
  different requests, so each element comes from its own processor output;
* vllm/v1/worker/gpu_model_runner.py:_execute_mm_encoder (and _batch_mm_inputs_from_scheduler,
  the profiling dummy batch) and vllm/v1/worker/gpu/mm/encoder_runner.py pass
  ``device=self.device, pin_memory=PIN_MEMORY`` (PIN_MEMORY: true where CUDA is; the CPU
  runner subclasses the GPU one with ``device="cpu"``);
* vllm/multimodal/inputs.py:MultiModalKwargsItems.get_data (processors: ultravox, internvl,
  qwen3_asr ... ``out_mm_kwargs.get_data()``) passes neither: ``device=None, pin_memory=False``.
A field may be ``keep_on_cpu=True`` (115 fields in 0.30.0's models, e.g. ``image_grid_thw``,
``audio_feature_lengths``): reduce_data then targets the host and does not pin.

The elements are what ``build_elems`` makes of a processor output (the copies' own
``build_elems``): a batched field iterates its data (rows ``data[i]`` of a stacked tensor, views
at a storage offset, 0-dim for a 1-D ``data`` such as ``audio_lens``; or the entries of a list of
variously shaped tensors; or lists of tensors); a flat field slices it as ``flat_from_sizes`` does,
``(slice(None),) * dim + (slice(a, b),)`` -- ``dim=1`` for qwen3_asr's and qwen2_5_omni's
``input_audio_features``, so those elements are non-contiguous views -- or with plain slices over
a list of tensors. The items' other dimensions may differ (ultravox's audio lengths: the
slice-assign path of issue #31658). Elements sit on the host, or on the device when a device-side
HF processor handed them over (the comment in reduce_data).

Wide contract, beyond that: a non-contiguous processor output (a transposed or gapped tensor),
empty slices, an empty ``elems`` list, ``dim=-1``, ``pin_memory=True`` with no device (CUDA only:
pinning needs it) and a device target with pinning off.

``FlatFieldBesideF21Inputs``: the flat field's inputs less F21's (a one-element batch sliced along
``dim`` > 0, where the real copies differ in layout), for the mutation self-test.

A spec is JSON: ``field`` ("batched" | "flat"), ``placement`` ("runner" | "keep_on_cpu" |
"get_data" | wide "pin_no_device" | "runner_unpinned"), ``elems_on`` ("host" | "device"),
``dtype``, ``dim`` (flat), ``form`` ("rows" | "entries" | "nested" for batched; "tensor" |
"list" for flat), ``layout`` ("plain" | "transposed" | "gapped") and ``items``: per item the
processor output's shape (``shape``, or ``shapes`` for lists), which element is taken
(``index``) and a ``seed``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import FLOAT_DTYPES, devices, seeded_floats

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}
DTYPE_NAMES = st.sampled_from(sorted(_DTYPES))
CALLER_PLACEMENTS = st.sampled_from(["runner", "keep_on_cpu", "get_data"])
WIDE_PLACEMENTS = st.sampled_from(["runner", "keep_on_cpu", "get_data", "runner_unpinned"])
CUDA_WIDE_PLACEMENTS = st.sampled_from(["runner", "keep_on_cpu", "get_data", "pin_no_device", "runner_unpinned"])
ELEMS_ON = st.sampled_from(["host", "device"])
SEEDS = st.integers(0, 2**31 - 1)
CALLER_LAYOUTS = st.just("plain")
WIDE_LAYOUTS = st.sampled_from(["plain", "transposed", "gapped"])


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _dims(low: int, high: int, rank_low: int, rank_high: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(low, high), min_size=rank_low, max_size=rank_high)


def seeded_values(shape: Sequence[int], dtype: str, seed: int) -> torch.Tensor:
    """A processor output's values on the host: deterministic, never all zeros."""
    if dtype in FLOAT_DTYPES:
        return seeded_floats(tuple(shape), dtype, seed, "cpu")
    generator = torch.Generator().manual_seed(seed)
    if dtype == "bool":
        return torch.rand(tuple(shape), generator=generator) < 0.5
    return torch.randint(-1000, 1000, tuple(shape), generator=generator, dtype=_DTYPES[dtype])


def _laid_out(shape: Sequence[int], dtype: str, seed: int, layout: str) -> torch.Tensor:
    """A tensor of ``shape`` with the drawn memory layout (same values for every layout)."""
    values = seeded_values(shape, dtype, seed)
    if layout == "transposed" and values.dim() >= 2:  # dense, permuted: a transposed buffer
        return values.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "gapped":  # strided: every other element of a wider buffer
        wide = torch.zeros((*values.shape[:-1], 2 * values.shape[-1]) if values.dim() else (2,),
                           dtype=values.dtype)
        if values.dim() == 0:
            wide[0] = values
            return wide[0]
        wide[..., ::2] = values
        return wide[..., ::2]
    return values


def _where(spec: dict) -> str:
    return spec["device"] if spec["elems_on"] == "device" else "cpu"


def item_sources(spec: dict) -> list[Any]:
    """Each item's processor output (a tensor, a list of tensors or a list of lists), on the
    host or the device as ``elems_on`` says: what ``build_elems`` slices or iterates."""
    dtype, layout, where = spec["dtype"], spec["layout"], _where(spec)
    sources: list[Any] = []
    for item in spec["items"]:
        if "shape" in item:
            sources.append(_laid_out(item["shape"], dtype, item["seed"], layout).to(where))
        elif spec.get("form") == "nested":
            sources.append([[_laid_out(s, dtype, item["seed"] + 7 * i + j, layout).to(where)
                             for j, s in enumerate(group)] for i, group in enumerate(item["shapes"])])
        else:
            sources.append([_laid_out(s, dtype, item["seed"] + i, layout).to(where)
                            for i, s in enumerate(item["shapes"])])
    return sources


def flat_slices(spec: dict, item: dict) -> list[Any]:
    """The item's field slices as ``MultiModalFieldConfig.flat_from_sizes`` builds them:
    ``(slice(None),) * dim + (slice(a, b),)``; plain slices for a list (``flat(modality, slices)``)."""
    bounds = [0]
    for size in item["sizes"]:
        bounds.append(bounds[-1] + size)
    if "shapes" in item:  # a list of tensors: plain slices over the list
        return [slice(bounds[i], bounds[i + 1]) for i in range(len(item["sizes"]))]
    dim = spec["dim"] % len(item["shape"])
    return [(slice(None, None, None),) * dim + (slice(bounds[i], bounds[i + 1]),)
            for i in range(len(item["sizes"]))]


def call_arguments(spec: dict) -> tuple[bool, Any, bool]:
    """``(keep_on_cpu, device, pin_memory)`` of the call, as each placement's caller passes them."""
    placement, device = spec["placement"], spec["device"]
    pinned = device.startswith("cuda")  # PIN_MEMORY = is_pin_memory_available(): true where CUDA is
    if placement == "runner":
        return False, torch.device(device), pinned
    if placement == "keep_on_cpu":
        return True, torch.device(device), pinned
    if placement == "get_data":
        return False, None, False
    if placement == "pin_no_device":
        return False, None, True
    if placement == "runner_unpinned":
        return False, torch.device(device), False
    raise HarnessError(f"unknown placement {placement!r}")


def _placements(device: str, wide: bool) -> st.SearchStrategy[str]:
    """The placements for a spec drawn for ``device``: pinning needs CUDA, so ``pin_no_device`` is drawn for
    CUDA specs only (``runs_on`` refuses it on the CPU; a spec always runs on the device it was drawn for)."""
    if not wide:
        return CALLER_PLACEMENTS
    return CUDA_WIDE_PLACEMENTS if device.startswith("cuda") else WIDE_PLACEMENTS


@st.composite
def _batched_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    device = draw(devices(available))
    count = draw(st.integers(0 if wide else 1, 4))
    form = draw(st.sampled_from(["rows", "entries", "nested"]))
    same = draw(st.booleans())  # every item's element of one shape: the stack path
    rank = draw(st.integers(0 if form == "rows" else 1, 3))
    low = 0 if wide else 1
    first = draw(_dims(low, 4, rank, rank))
    items = []
    for _ in range(count):
        elem = first if same else draw(_dims(low, 4, rank, rank))
        rows = draw(st.integers(1, 3))
        index = draw(st.integers(0, rows - 1))
        seed = draw(SEEDS)
        if form == "rows":  # a stacked processor output; the element is the row data[index]
            items.append({"shape": [rows, *elem], "index": index, "seed": seed})
        elif form == "entries":  # a list of tensors of various shapes; the element is one entry
            shapes = [elem if i == index else draw(_dims(1, 4, rank, rank)) for i in range(rows)]
            items.append({"shapes": shapes, "index": index, "seed": seed})
        else:  # a list of lists of tensors (e.g. frames per video); the element is a list
            groups = [[elem] * draw(st.integers(1, 2)) for _ in range(rows)]
            items.append({"shapes": groups, "index": index, "seed": seed})
    return {
        "device": device,
        "field": "batched",
        "form": form,
        "placement": draw(_placements(device, wide)),
        "elems_on": draw(ELEMS_ON),
        "dtype": draw(DTYPE_NAMES),
        "layout": draw(WIDE_LAYOUTS if wide else CALLER_LAYOUTS),
        "items": items,
    }


@st.composite
def _flat_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    device = draw(devices(available))
    count = draw(st.integers(0 if wide else 1, 4))
    form = draw(st.sampled_from(["tensor", "tensor", "list"]))
    dim = 0 if form == "list" else draw(st.sampled_from([0, 1, -1] if wide else [0, 1]))
    rank = draw(st.integers(max(1, dim + 1), 3))
    same = draw(st.booleans())  # other dimensions equal across items: the concat path
    other = draw(_dims(1, 3, rank - 1, rank - 1))
    low = 0 if wide else 1
    items = []
    for _ in range(count):
        sizes = draw(st.lists(st.integers(low, 4), min_size=1, max_size=3))
        index = draw(st.integers(0, len(sizes) - 1))
        seed = draw(SEEDS)
        if form == "list":  # plain slices over a list of tensors: elements are lists
            shapes = [other if same else draw(_dims(1, 3, rank - 1, rank - 1)) for _ in range(sum(sizes))]
            items.append({"shapes": shapes, "sizes": sizes, "index": index, "seed": seed})
            continue
        rest = other if same else draw(_dims(1, 3, rank - 1, rank - 1))
        axis = dim % rank
        shape = [*rest[:axis], sum(sizes), *rest[axis:]]
        items.append({"shape": shape, "sizes": sizes, "index": index, "seed": seed})
    return {
        "device": device,
        "field": "flat",
        "form": form,
        "dim": dim,
        "placement": draw(_placements(device, wide)),
        "elems_on": draw(ELEMS_ON),
        "dtype": draw(DTYPE_NAMES),
        "layout": draw(WIDE_LAYOUTS if wide else CALLER_LAYOUTS),
        "items": items,
    }


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def _map(func: Callable[[torch.Tensor], Any], value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return func(value)
    if isinstance(value, list):
        return [_map(func, v) for v in value]
    if isinstance(value, tuple):
        return tuple(_map(func, v) for v in value)
    return value


class _ReduceDataInputs:
    """Elements built by the side's own ``build_elems`` from fresh processor outputs; the thunk
    calls ``reduce_data`` on the first element's field, as ``_batch_mm_items`` does, and returns
    the batched data with what a caller can tell of each leaf: ``pinned`` (a host leaf),
    ``aliases_item`` (shares memory with an item's processor output: the model sees the cached
    item's memory) and the processor outputs themselves (``reduce_data`` only reads them)."""

    field = ""

    def runs_on(self, spec: dict, device: str) -> bool:
        if spec["placement"] == "pin_no_device":  # pinning needs CUDA
            return device.startswith("cuda")
        return True

    def _elems(self, spec: dict, module: Any, sources: list[Any], keep_on_cpu: bool) -> list[Any]:
        raise NotImplementedError

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        keep_on_cpu, device, pin_memory = call_arguments(spec)
        if pin_memory and not torch.cuda.is_available():
            raise HarnessError("pin_memory=True needs CUDA")
        sources = item_sources(spec)
        elems = self._elems(spec, impl.module, sources, keep_on_cpu)
        owner_field = elems[0].field if elems else self._empty_field(impl.module, keep_on_cpu)
        reduce_data = impl.function
        storages = {leaf.untyped_storage().data_ptr() for leaf in _leaves(sources) if leaf.numel()}

        def call() -> dict[str, Any]:
            out = reduce_data(owner_field, elems, device=device, pin_memory=pin_memory)
            return {
                "out": out,
                "pinned": _map(lambda t: bool(t.is_cpu and t.is_pinned()), out),
                "aliases_item": _map(lambda t: bool(t.numel()) and t.untyped_storage().data_ptr() in storages, out),
                # The items as the call left them, copied as it returns (``reduce_data`` only reads them).
                "items": _map(lambda t: t.clone(), sources),
            }

        # The items are the processor cache's: no caller rewrites them after the call (vllm/multimodal/cache.py
        # hands the same item to every request that hits it), and 0.30.0's zero-copy outputs alias them by
        # design (F21). --stress and --race poison only memory a caller rewrites: none here.
        call.caller_never_rewrites = True  # type: ignore[attr-defined]
        return call

    def _empty_field(self, module: Any, keep_on_cpu: bool) -> Any:
        raise NotImplementedError


class BatchedFieldInputs(_ReduceDataInputs):
    __doc__ = _ReduceDataInputs.__doc__

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _batched_specs(available, contract)

    def _elems(self, spec: dict, module: Any, sources: list[Any], keep_on_cpu: bool) -> list[Any]:
        elems = []
        for item, source in zip(spec["items"], sources):
            field = module.MultiModalBatchedField(keep_on_cpu=keep_on_cpu)
            elems.append(field.build_elems("image", "pixel_values", source)[item["index"]])
        return elems

    def _empty_field(self, module: Any, keep_on_cpu: bool) -> Any:
        return module.MultiModalBatchedField(keep_on_cpu=keep_on_cpu)


class FlatFieldInputs(_ReduceDataInputs):
    __doc__ = _ReduceDataInputs.__doc__

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _flat_specs(available, contract)

    def _elems(self, spec: dict, module: Any, sources: list[Any], keep_on_cpu: bool) -> list[Any]:
        elems = []
        for item, source in zip(spec["items"], sources):
            field = module.MultiModalFlatField(slices=flat_slices(spec, item), dim=spec["dim"],
                                               keep_on_cpu=keep_on_cpu)
            elems.append(field.build_elems("audio", "input_audio_features", source)[item["index"]])
        return elems

    def _empty_field(self, module: Any, keep_on_cpu: bool) -> Any:
        return module.MultiModalFlatField(slices=[], dim=0, keep_on_cpu=keep_on_cpu)


def _not_a_strided_single(spec: dict) -> bool:
    """False for a batch of one tensor element sliced along a dimension other than the first: the
    element is then a strided column slice, which 0.30.0 returns as is and 0.29.0 copied (F21)."""
    items = spec["items"]
    if len(items) != 1 or spec["form"] != "tensor":
        return True
    return spec["dim"] % len(items[0]["shape"]) == 0


class FlatFieldBesideF21Inputs(FlatFieldInputs):
    """The flat field's inputs less F21's (docs/findings/README.md): no one-element batch whose element
    is sliced along ``dim`` > 0. There the real copies differ in layout and aliasing (accepted), which
    would report every mutant of ``reduce_data`` whatever it changed; on every other input they agree, so
    the mutation self-test (its figure in lab/selftest/2026-12-06-issue43.md) is judged here."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _flat_specs(available, contract).filter(_not_a_strided_single)
