"""logprobs-tensors-to-cpu: ``LogprobsTensors.to_cpu_nonblocking`` then ``tolists`` (vllm/v1/outputs.py),
vllm 0.28.0 -> 0.34.0.

The change (0.29.0, vLLM PR #52242): the request boundaries may live on the device
(``cu_num_generated_tokens_tensor``, adaptive verification); ``to_cpu_nonblocking`` copies them to the host
with the logprobs (``non_blocking`` D2H into pinned memory) and ``tolists`` turns the host copy into a list,
right only once the caller waited for the copy's event. 0.30.0-0.34.0 left these methods alone. The entry
point is ``to_cpu_nonblocking``; the thunk waits on the copy's event and calls ``tolists`` as
``AsyncOutput.get_output`` does (strategies/outputs/inputs.py). ``empty_cpu`` (pinned in 0.29.0) has its own
target, logprobs-tensors-empty-cpu (0.28.0's caller: 0.34.0 has none left).
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.34.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="logprobs-tensors-to-cpu",
        upstream=(
            "vllm/v1/outputs.py::LogprobsTensors.to_cpu_nonblocking",
            "vllm/v1/outputs.py::LogprobsTensors.tolists",
        ),
        legacy="legacy.outputs:LogprobsTensors.to_cpu_nonblocking",
        optimized="optimized.outputs:LogprobsTensors.to_cpu_nonblocking",
        upstream_impl="vllm.v1.outputs:LogprobsTensors.to_cpu_nonblocking",
        inputs="strategies.outputs.inputs:LogprobsToHostInputs",
        comparison=Comparison(floats="exact"),
        # By design none: non_blocking D2H copies into pinned memory, the caller's wait is on an event (not a
        # sync torch's detector counts), and tolists reads host tensors only. To be confirmed on CUDA.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="PR #52242: device request boundaries ride along on the logprobs D2H copy (0.28.0 -> 0.34.0)",
        invariants=(
            "strategies.outputs.oracles:lists_hold_the_sampled_values",
            "strategies.outputs.oracles:lists_carry_the_request_boundaries",
            "strategies.outputs.oracles:host_copy_is_on_the_host",
        ),
        # No consumer: tolists is the host read; the scheduler only slices the numpy arrays it returns.
    ),
    Target(
        name="sampling-mask-lists-to-nested-list",
        upstream=("vllm/v1/outputs.py::SamplingMaskLists.to_nested_list",),
        legacy="legacy.outputs:SamplingMaskLists.to_nested_list",
        optimized="optimized.outputs:SamplingMaskLists.to_nested_list",
        upstream_impl="vllm.v1.outputs:SamplingMaskLists.to_nested_list",
        inputs="strategies.outputs.inputs:MaskSliceNestedListInputs",
        comparison=Comparison(floats="exact"),
        # Host numpy only: nothing to sync on any device.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="to_nested_list converts once with .tolist() and takes one-position slices "
                    "(offsets=None) (0.28.0 -> 0.34.0)",
        invariants=(
            "strategies.outputs.oracles:nested_list_is_the_requests_masks",
            "strategies.outputs.oracles:nested_list_holds_python_ints",
        ),
        # No consumer: the output processor hands the nested list to the user as SamplingMask.
    ),
    Target(
        name="logprobs-tensors-empty-cpu",
        upstream=("vllm/v1/outputs.py::LogprobsTensors.empty_cpu",),
        legacy="legacy.outputs:LogprobsTensors.empty_cpu",
        optimized="optimized.outputs:LogprobsTensors.empty_cpu",
        upstream_impl="vllm.v1.outputs:LogprobsTensors.empty_cpu",
        inputs="strategies.outputs.inputs:PromptLogprobsInputs",
        comparison=Comparison(floats="exact"),
        # The caller's own torch.cuda.synchronize() (0.28.0 _get_prompt_logprobs_dict: "Must synchronize the
        # non-blocking GPU->CPU transfers"), by design; the chunk copies into pinned memory add none.
        expected_optimized_syncs=1,
        versions=VERSIONS,
        description="empty_cpu allocates its host tensors pinned, so the runner's D2H chunk copies run async "
                    "(0.28.0 -> 0.34.0)",
        invariants=(
            "strategies.outputs.oracles:prompt_logprobs_have_the_promised_layout",
            "strategies.outputs.oracles:prompt_logprobs_hold_every_chunk",
        ),
        # Pinnedness is not compared: pageable (0.28.0) against pinned (0.34.0) on CUDA is the change itself.
    ),
]
