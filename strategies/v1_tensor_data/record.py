"""vllm/v1/utils.py, 0.33.0 -> 0.34.0: ``tensor_data``.

0.33.0 always runs ``tensor.flatten().cpu().contiguous().view(torch.uint8).numpy().data``. 0.34.0 first tries a
fast path for a contiguous CPU tensor ("Avoid several torch ops, each of which releases and re-acquires the
GIL"): a dtype NumPy cannot export (bfloat16) is viewed as uint8, then ``memoryview(tensor.numpy()).cast("B")``;
a TypeError or RuntimeError there (a 0-d bfloat16 tensor's uint8 view, a tensor that requires grad) falls
back to the old expression. The caller, the msgpack encoder (vllm/v1/serial_utils.py), sends the bytes inline
or zero-copy later: bytes, format and aliasing of the tensor's memory are what it could tell apart.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.33.0", "0.34.0")
DESIGN_ROWS = (99,)
_ORACLES = "strategies.v1_tensor_data.oracles"

TARGETS = [
    Target(
        name="tensor-data",
        upstream=(
            "vllm/v1/utils.py::tensor_data",
        ),
        legacy="legacy.v1_tensor_data:tensor_data",
        optimized="optimized.v1_tensor_data:tensor_data",
        upstream_impl="vllm.v1.utils:tensor_data",
        inputs="strategies.v1_tensor_data.inputs:V1TensorDataInputs",
        # Bytes (a uint8 tensor), the memoryview's format and shape, whether it aliases the input.
        comparison=Comparison(floats="exact"),
        # By design one per call for a CUDA tensor (its bytes are copied to the host, .cpu(), as in 0.33.0),
        # none for a CPU tensor: tensor_data_syncs. To be confirmed on CUDA.
        expected_optimized_syncs=1,
        sync_budget=f"{_ORACLES}:tensor_data_syncs",
        versions=VERSIONS,
        description="0.34.0: tensor_data takes a contiguous CPU tensor's bytes straight off tensor.numpy()",
        invariants=(
            f"{_ORACLES}:tensor_data_is_the_elements_in_order",
            f"{_ORACLES}:tensor_data_is_a_flat_byte_buffer",
            f"{_ORACLES}:tensor_data_leaves_the_tensor_alone",
        ),
    ),
]
