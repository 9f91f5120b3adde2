"""Not a PR function: our local ``async_tensor_h2d`` (fuzz/upstream_shims.py),
which every optimized copy stages through. Under ``--upstream`` it is compared
with the real ``vllm.utils.torch_utils.async_tensor_h2d``."""

from fuzz.targets import Comparison, Target

DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="shim-async-tensor-h2d",
        upstream=("vllm/utils/torch_utils.py::async_tensor_h2d",),
        legacy="fuzz.upstream_shims:async_tensor_h2d",
        optimized="fuzz.upstream_shims:async_tensor_h2d",
        upstream_impl="vllm.utils.torch_utils:async_tensor_h2d",
        inputs="strategies.shims:AsyncH2DInputs",
        comparison=Comparison(floats="exact"),
        expected_optimized_syncs=0,
        description="the local async_tensor_h2d every optimized copy uses (upstream conformance, not a PR change)",
    ),
]
