"""Not changed by the PR: ``async_tensor_h2d``, which the optimized copies stage
through (``from optimized.torch_utils import async_tensor_h2d``). Its 0.27.1 and
0.28.0 bodies are identical; the target keeps the copy honest and, under
``--upstream``, compares it with the real ``vllm.utils.torch_utils.async_tensor_h2d``.

``caller`` follows the 0.28.0 callers; ``wide`` draws everything a caller can pass
(strategies/torch_utils/inputs.py, docs/verdicts.md#contracts). Layout is compared: callers
``.view()`` the result and hand it to Triton kernels (docs/verdicts.md#layout)."""

from fuzz.api import Comparison, Target

DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="async-tensor-h2d",
        upstream=("vllm/utils/torch_utils.py::async_tensor_h2d",),
        legacy="legacy.torch_utils:async_tensor_h2d",
        optimized="optimized.torch_utils:async_tensor_h2d",
        upstream_impl="vllm.utils.torch_utils:async_tensor_h2d",
        inputs="strategies.torch_utils.inputs:AsyncH2DInputs",
        comparison=Comparison(floats="exact", layout=True),
        expected_optimized_syncs=0,
        description="the staging helper every optimized copy uses (unchanged by the PR; upstream conformance)",
        invariants=(
            "strategies.torch_utils.oracles:h2d_lands_on_the_device",
            "strategies.torch_utils.oracles:h2d_dtype_and_shape",
            "strategies.torch_utils.oracles:h2d_keeps_the_values",
        ),
        # No consumer: its callers stage host metadata for device work (glm4_1v's target_h/target_w
        # enter device arithmetic, the coordinates go to grid_sample); none reads the result back.
    ),
]
