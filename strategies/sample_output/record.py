"""sampling-mask-tensors-to-cpu: ``SamplingMaskTensors.to_cpu_nonblocking`` then ``tolists``
(vllm/v1/worker/gpu/sample/output.py) and ``SamplingMaskLists.to_nested_list`` (vllm/v1/outputs.py),
vllm 0.28.0 -> 0.34.0.

The changes: 0.30.0 added the compact ``token_ids`` rows, copied to the host by ``to_cpu_nonblocking``'s
``non_blocking`` D2H beside the bitmask, and ``tolists`` reads them (the bitmask only for rows wider than
``max_num_kept``), keeping every request's row; ``to_nested_list`` converts once with ``.tolist()`` and takes a
one-position slice (``offsets=None``); 0.32.0 added ``rows_per_request`` (spec decode). The entry point is
``to_cpu_nonblocking``; the thunk waits on the copy's event and makes the engine's reads
(strategies/sample_output/inputs.py), ``to_nested_list`` included; that one is claimed by its own target,
sampling-mask-lists-to-nested-list (strategies/outputs/record.py), whose copy module holds it.
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("0.28.0", "0.34.0")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="sampling-mask-tensors-to-cpu",
        upstream=(
            "vllm/v1/worker/gpu/sample/output.py::SamplingMaskTensors.to_cpu_nonblocking",
            "vllm/v1/worker/gpu/sample/output.py::SamplingMaskTensors.tolists",
        ),
        legacy="legacy.sample_output:SamplingMaskTensors.to_cpu_nonblocking",
        optimized="optimized.sample_output:SamplingMaskTensors.to_cpu_nonblocking",
        upstream_impl="vllm.v1.worker.gpu.sample.output:SamplingMaskTensors.to_cpu_nonblocking",
        inputs="strategies.sample_output.inputs:SamplingMaskToHostInputs",
        comparison=Comparison(floats="exact"),
        # By design none: non_blocking D2H copies into pinned memory, the caller waits on an event (not a sync
        # torch's detector counts), and tolists reads host tensors only. To be confirmed on CUDA.
        expected_optimized_syncs=0,
        versions=VERSIONS,
        description="compact sampling-mask ids ride along on the mask D2H copy; CSR keeps every row "
                    "(0.28.0 -> 0.34.0)",
        invariants=(
            "strategies.sample_output.oracles:each_sampled_request_gets_its_support",
            "strategies.sample_output.oracles:flat_ids_are_the_sampled_supports_in_order",
            "strategies.sample_output.oracles:host_copy_keeps_counts_and_bitmask",
        ),
        # No consumer: the scheduler's slice and the output processor's to_nested_list are in the thunk.
    ),
]
