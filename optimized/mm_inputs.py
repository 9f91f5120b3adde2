# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Copied from vllm 0.30.0:
vllm/multimodal/inputs.py :: BaseMultiModalField.reduce_data, MultiModalBatchedField._reduce_data, MultiModalFlatField._reduce_data, _nested_tensors_h2d, MultiModalFieldElem, BaseMultiModalField._field_factory, MultiModalBatchedField.build_elems, MultiModalFlatField.build_elems, _nested_tensors_are_cpu
(definitions verbatim; a method with its class's own lines). Scaffolded by `python -m fuzz new-target`:
every line that departs from upstream ends with `# ADAPTED: <why>` (docs/adding-a-target.md).
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeAlias,
    TypedDict,
    Union,
    cast,
)
import torch

# from vllm.utils.collection_utils import is_list_of  # ADAPTED: copied below
# from vllm.utils.jsontree import json_iter_leaves, json_map_leaves  # ADAPTED: copied below
from collections.abc import Callable, Iterable  # ADAPTED: for the helpers' annotations (vllm/utils/jsontree.py)
from typing import TypeVar, assert_never  # ADAPTED: upstream imports TypeVar from typing and assert_never from typing_extensions (vllm/utils/collection_utils.py)

T = TypeVar("T")


# Helpers copied from vllm/utils/collection_utils.py (is_list_of) and
# vllm/utils/jsontree.py (json_iter_leaves, json_map_leaves), unchanged between
# 0.29.0 and 0.30.0; their typing overloads are left out.
def is_list_of(
    value: object,
    typ: type[T] | tuple[type[T], ...],
    *,
    check: Literal["first", "all"] = "first",
) -> "list[T]":  # ADAPTED: upstream annotates TypeIs[list[T]] (typing_extensions)
    if not isinstance(value, list):
        return False

    if check == "first":
        return len(value) == 0 or isinstance(value[0], typ)
    elif check == "all":
        return all(isinstance(v, typ) for v in value)

    assert_never(check)


def json_iter_leaves(value: Any) -> Iterable[Any]:  # ADAPTED: upstream annotates JSONTree[_T] -> Iterable[_T]
    """Iterate through each leaf in a nested JSON structure."""
    if isinstance(value, dict):
        for v in value.values():
            yield from json_iter_leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from json_iter_leaves(v)
    else:
        yield value


def json_map_leaves(
    func: Callable[[Any], Any],  # ADAPTED: upstream annotates Callable[[_T], _U]
    value: Any,
) -> Any:  # ADAPTED: upstream annotates "BatchedTensorInputs" | _JSONTree[_U]
    """Apply a function to each leaf in a nested JSON structure."""
    if isinstance(value, dict):
        return {k: json_map_leaves(func, v) for k, v in value.items()}  # type: ignore
    elif isinstance(value, list):
        return [json_map_leaves(func, v) for v in value]  # type: ignore
    elif isinstance(value, tuple):
        return tuple(json_map_leaves(func, v) for v in value)
    else:
        return func(value)


NestedTensors: TypeAlias = Union[
    list["NestedTensors"],
    list["torch.Tensor"],
    "torch.Tensor",
    tuple["torch.Tensor", ...],
]


def nested_tensors_equal(
    a: NestedTensors,
    b: NestedTensors,
    check_dtype: bool = True,
) -> bool:
    """
    Equality check between
    [`NestedTensors`][vllm.multimodal.inputs.NestedTensors] objects.

    If `check_dtype` is `True`, the tensors must have the same dtype.
    """
    check_dtype_func = (
        lambda a, b, check_dtype: a.dtype == b.dtype if check_dtype else True
    )
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and torch.equal(a, b)
            and check_dtype_func(a, b, check_dtype)
        )
    elif isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and torch.equal(b, a)
            and check_dtype_func(b, a, check_dtype)
        )

    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(nested_tensors_equal(a_, b_, check_dtype) for a_, b_ in zip(a, b))
        )
    if isinstance(b, list):
        return (
            isinstance(a, list)
            and len(b) == len(a)
            and all(nested_tensors_equal(b_, a_, check_dtype) for b_, a_ in zip(b, a))
        )

    if isinstance(a, tuple):
        return (
            isinstance(b, tuple)
            and len(a) == len(b)
            and all(nested_tensors_equal(a_, b_, check_dtype) for a_, b_ in zip(a, b))
        )
    if isinstance(b, tuple):
        return (
            isinstance(a, tuple)
            and len(b) == len(a)
            and all(nested_tensors_equal(b_, a_, check_dtype) for b_, a_ in zip(b, a))
        )

    # Both a and b are scalars
    return a == b


def _is_dense(t: torch.Tensor) -> bool:
    """Whether `t`'s elements fill a contiguous storage range, possibly
    permuted (e.g. a transposed matrix). Such layouts can be copied with
    pitched cudaMemcpy2D/3DAsync directly from pinned memory, whereas
    gapped layouts (e.g. strided slices) stage through a pageable temp."""
    if not t.is_contiguous():
        expected_stride = 1
        for stride, size in sorted(zip(t.stride(), t.shape)):
            if size > 1:
                if stride != expected_stride:
                    return False
                expected_stride *= size
    return True


def _nested_tensors_are_cpu(tensors: NestedTensors) -> bool:
    """Whether every tensor in `tensors` lives in host memory."""
    return not any(
        isinstance(x, torch.Tensor) and not x.is_cpu for x in json_iter_leaves(tensors)
    )


def _nested_tensors_h2d(
    tensors: NestedTensors,
    device: torch.types.Device,
    *,
    pin_memory: bool = False,
) -> NestedTensors:
    if device is None:
        return tensors

    def _h2d(x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            return x
        if pin_memory and x.is_cpu and not (x.is_pinned() and _is_dense(x)):
            # Ensure tensor is pinned and dense for non_blocking H2D copy.
            x = x.new_empty(x.shape, pin_memory=True).copy_(x)
        return x.to(device=device, non_blocking=True)

    return json_map_leaves(_h2d, tensors)


@dataclass
class MultiModalFieldElem:
    """
    Represents a processed keyword argument to pass to a model for a
    [`MultiModalKwargsItem`][vllm.multimodal.inputs.MultiModalKwargsItem].
    """

    data: NestedTensors
    """
    The tensor data of this field in
    [`MultiModalKwargsItem`][vllm.multimodal.inputs.MultiModalKwargsItem],
    i.e. the value of the keyword argument to be passed to the model.

    It may be set to `None` if it is determined that the item is cached
    in `EngineCore`.
    """

    field: "BaseMultiModalField"
    """
    Defines how to combine the tensor data of this field with others
    in order to batch multi-modal items together for model inference.
    """

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self.__class__):
            return False

        if self.data is None:
            data_equal = other.data is None
        elif other.data is None:
            data_equal = self.data is None
        else:
            data_equal = nested_tensors_equal(self.data, other.data)

        return data_equal and type(self.field) is type(other.field)  # noqa: E721


@dataclass(frozen=True, kw_only=True)
class BaseMultiModalField(ABC):
    """
    Defines how to interpret tensor data belonging to a keyword argument for
    [`MultiModalKwargsItems`][vllm.multimodal.inputs.MultiModalKwargsItems],
    and vice versa.
    """

    keep_on_cpu: bool = False
    """
    If `True`, then this field is excluded from being moved to the accelerator when
    [`group_and_batch_mm_items`][vllm.multimodal.utils.group_and_batch_mm_items]
    is called to batch the data.
    """

    def _field_factory(self):
        f = partial(MultiModalFieldElem, field=self)

        # Allow passing data as positional argument
        def factory(data: NestedTensors) -> MultiModalFieldElem:
            return f(data=data)

        return factory

    def reduce_data(
        self,
        elems: list[MultiModalFieldElem],
        *,
        device: torch.types.Device = None,
        pin_memory: bool = False,
    ) -> NestedTensors:
        """
        Merge the data from multiple instances of
        [`MultiModalFieldElem`][vllm.multimodal.inputs.MultiModalFieldElem].

        This is the inverse of
        [`build_elems`][vllm.multimodal.inputs.BaseMultiModalField.build_elems].
        """
        field_types = [type(item.field) for item in elems]
        if len(set(field_types)) > 1:
            raise ValueError(f"Cannot merge different {field_types=}")

        if device is not None and self.keep_on_cpu:
            device = "cpu"
        if pin_memory and self.keep_on_cpu:
            pin_memory = False
        if device == "cpu" or device == torch.device("cpu"):
            pin_memory = False

        batch = [elem.data for elem in elems]
        if pin_memory and not _nested_tensors_are_cpu(batch):
            # Data already sits on an accelerator (e.g. a device-side HF
            # processor handed it over by IPC). Pinning is a host-memory
            # concept, and `pin_memory()` rejects device tensors outright.
            pin_memory = False
        out = self._reduce_data(batch, pin_memory=pin_memory)
        return _nested_tensors_h2d(out, device=device, pin_memory=pin_memory)


@dataclass(frozen=True, kw_only=True)
class MultiModalBatchedField(BaseMultiModalField):
    """
    Info:
        [`MultiModalFieldConfig.batched`][vllm.multimodal.inputs.MultiModalFieldConfig.batched]
    """

    def build_elems(
        self,
        modality: str,
        key: str,
        data: NestedTensors,
    ) -> Sequence[MultiModalFieldElem]:
        field_factory = self._field_factory()
        return [field_factory(item) for item in data]

    def _reduce_data(
        self, batch: list[NestedTensors], *, pin_memory: bool
    ) -> NestedTensors:
        if len(batch) > 0 and is_list_of(batch, torch.Tensor, check="all"):
            batch = cast(list[torch.Tensor], batch)
            if len(batch) == 1:
                # An optimization when `batch` contains only one tensor:
                # - produce exactly same result as `torch.stack(batch)`
                # - will achieve zero-copy if the tensor is contiguous
                return batch[0].unsqueeze(0)
            first_shape = batch[0].shape
            if all(elem.shape == first_shape for elem in batch):
                out = batch[0].new_empty(
                    (len(batch), *first_shape), pin_memory=pin_memory
                )
                return torch.stack(batch, out=out)

        return batch


@dataclass(frozen=True, kw_only=True)
class MultiModalFlatField(BaseMultiModalField):
    """
    Info:
        [`MultiModalFieldConfig.flat`][vllm.multimodal.inputs.MultiModalFieldConfig.flat]
        [`MultiModalFieldConfig.flat_from_sizes`][vllm.multimodal.inputs.MultiModalFieldConfig.flat_from_sizes]
    """

    slices: Sequence[slice] | Sequence[Sequence[slice]]
    dim: int = 0

    def build_elems(
        self,
        modality: str,
        key: str,
        data: NestedTensors,
    ) -> Sequence[MultiModalFieldElem]:
        field_factory = self._field_factory()
        if not is_list_of(self.slices, slice, check="all"):
            assert isinstance(data, torch.Tensor), (
                "torch.Tensor is required for multiple slices"
            )
        return [field_factory(data[cast(slice, s)]) for s in self.slices]

    def _reduce_data(
        self, batch: list[NestedTensors], *, pin_memory: bool
    ) -> NestedTensors:
        if len(batch) > 0 and is_list_of(batch, torch.Tensor, check="all"):
            batch = cast(list[torch.Tensor], batch)
            if len(batch) == 1:
                # An optimization when `batch` contains only one tensor:
                # - produce exactly same result as `torch.concat(batch)`
                # - will achieve zero-copy if the tensor is contiguous
                return batch[0]

            dim = self.dim + (self.dim < 0) * len(batch[0].shape)

            def _shape_before_after(tensor: torch.Tensor):
                return tensor.shape[:dim], tensor.shape[dim + 1 :]

            first_shape = _shape_before_after(batch[0])

            if all(_shape_before_after(elem) == first_shape for elem in batch):
                shape_before, shape_after = first_shape
                shape_concat = sum(item.shape[dim] for item in batch)
                out = batch[0].new_empty(
                    (*shape_before, shape_concat, *shape_after), pin_memory=pin_memory
                )
                return torch.concat(batch, dim=self.dim, out=out)

            # Variable-length case: non-concat dimensions differ
            # (e.g., Ultravox with different audio durations).
            # Use slice-assign approach (more efficient than padding).
            # See: https://github.com/vllm-project/vllm/issues/31658

            ndim = batch[0].ndim

            # Step 1: Compute output shape
            # - Non-concat dims: take max across batch
            # - Concat dim: sum across batch
            max_sizes: list[int] = []
            for d in range(ndim):
                if d == dim:
                    max_sizes.append(sum(t.shape[d] for t in batch))
                else:
                    max_sizes.append(max(t.shape[d] for t in batch))

            # Step 2: Create zero-initialized output tensor
            out = batch[0].new_zeros(max_sizes, pin_memory=pin_memory)

            # Step 3: Slice-assign each tensor to its proper position
            concat_offset = 0
            for tensor in batch:
                slices: list[slice] = []
                for d in range(ndim):
                    if d == dim:
                        slices.append(
                            slice(concat_offset, concat_offset + tensor.shape[d])
                        )
                    else:
                        slices.append(slice(0, tensor.shape[d]))
                out[tuple(slices)] = tensor
                concat_offset += tensor.shape[dim]

            return out

        assert self.dim == 0, "dim == 0 is required for nested list"
        return [e for elem in batch for e in elem]
