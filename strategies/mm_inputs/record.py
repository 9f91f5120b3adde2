"""vllm/multimodal/inputs.py, 0.29.0 -> 0.30.0: how ``BaseMultiModalField.reduce_data`` batches
the multimodal fields of every model and moves them to the device.

0.29.0 made the batch itself pinned when ``pin_memory`` was set: a single element was
``unsqueeze(0).pin_memory()`` (batched) or ``batch[0].pin_memory()`` (flat), a copy, and
``.contiguous()`` (a copy only when the element was not contiguous) when it was not; several
went into a ``torch.empty(..., pin_memory=pin_memory)`` buffer; ``_nested_tensors_h2d`` then did
``x.to(device, non_blocking=True)`` of every leaf, pinned or not (a list of variously shaped
tensors stayed pageable, so its copies were not truly asynchronous).
0.30.0 returns a single element as is (``batch[0].unsqueeze(0)`` / ``batch[0]``: zero-copy, no
``.contiguous()``), allocates with ``new_empty``/``new_zeros``, and moves the pinning into
``_nested_tensors_h2d(..., pin_memory=)``: every host leaf that is not both pinned and dense
(``_is_dense``) is copied into a fresh pinned buffer right before its ``non_blocking`` copy.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.29.0", "0.30.0")
DESIGN_ROWS = (99,)
_INPUTS = "vllm/multimodal/inputs.py"
_ORACLES = "strategies.mm_inputs.oracles"

# Both targets enter at reduce_data, on a field of their kind; every model's field goes there.
_COMMON = dict(
    legacy="legacy.mm_inputs:BaseMultiModalField.reduce_data",
    optimized="optimized.mm_inputs:BaseMultiModalField.reduce_data",
    upstream_impl="vllm.multimodal.inputs:BaseMultiModalField.reduce_data",
    # Values are copies (stack / concat / slice-assign): bitwise. Layout: the batched tensors go
    # to the model's encoder as they are, where ``.view()`` and kernels see their strides.
    comparison=Comparison(floats="exact", layout=True),
    # By design none: every leaf goes up with ``.to(device, non_blocking=True)`` from pinned
    # memory (0.30.0 pins each host leaf first); pinning is a host copy. To be confirmed on CUDA.
    expected_optimized_syncs=0,
    versions=VERSIONS,
    invariants=(
        f"{_ORACLES}:reduce_data_places_every_leaf",
        f"{_ORACLES}:reduce_data_leaves_the_items_alone",
        f"{_ORACLES}:reduce_data_pins_only_when_asked",
    ),
    reference=f"{_ORACLES}:REDUCE_DATA_REFERENCE",
    # No consumer: the batch is handed to the model's embed_multimodal on the device.
)

TARGETS = [
    Target(
        name="mm-batched-field-reduce-data",
        upstream=(
            f"{_INPUTS}::BaseMultiModalField.reduce_data",
            f"{_INPUTS}::MultiModalBatchedField._reduce_data",
            f"{_INPUTS}::_nested_tensors_h2d",
        ),
        inputs="strategies.mm_inputs.inputs:BatchedFieldInputs",
        description="reduce_data, batched field: zero-copy single item, pinning in the H2D step (0.29.0 -> 0.30.0)",
        **_COMMON,
    ),
    Target(
        name="mm-flat-field-reduce-data",
        upstream=(
            f"{_INPUTS}::BaseMultiModalField.reduce_data",
            f"{_INPUTS}::MultiModalFlatField._reduce_data",
            f"{_INPUTS}::_nested_tensors_h2d",
        ),
        inputs="strategies.mm_inputs.inputs:FlatFieldInputs",
        description="reduce_data, flat field: zero-copy single item, pinning in the H2D step (0.29.0 -> 0.30.0)",
        **_COMMON,
    ),
]
