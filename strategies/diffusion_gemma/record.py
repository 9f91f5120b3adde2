"""docs/design.md rows 9 and 10: diffusion_gemma's per-slot state stores and its sampler."""

from fuzz.api import Comparison, Target

DESIGN_ROWS = (9, 10)
_DG = "vllm/model_executor/models/diffusion_gemma.py"

TARGETS = [
    Target(
        name="diffusion-gemma-states",
        upstream=(
            f"{_DG}::DiffusionGemmaRequestStates.add_request",
            f"{_DG}::DiffusionGemmaRequestStates.remove_request",
            f"{_DG}::DiffusionGemmaRequestStates.init_canvas",
            f"{_DG}::DiffusionGemmaModelState.add_request",
        ),
        legacy="legacy.diffusion_gemma:DiffusionGemmaModelState.add_request",
        optimized="optimized.diffusion_gemma:DiffusionGemmaModelState.add_request",
        inputs="strategies.diffusion_gemma.inputs:DiffusionStatesInputs",
        comparison=Comparison(floats="exact", layout=True),
        # fill_() on 0-dim views, a pinned non-blocking slot index, and a
        # Python-scalar store into a non-0-dim slice (a host-side fill_): none syncs.
        expected_optimized_syncs=0,
        description="per-slot fill_() stores and device slot indices, replayed as add/remove/init_canvas sequences",
        invariants=(
            "strategies.diffusion_gemma.oracles:states_slot_stores_follow_operations",
            "strategies.diffusion_gemma.oracles:states_reinitialized_canvas_is_tokens",
            "strategies.diffusion_gemma.oracles:states_req_map_follows_adds_and_removes",
            "strategies.diffusion_gemma.oracles:states_caller_operations_succeed",
        ),
        # No consumer: the state tensors are read on the device by the sampler's
        # compiled step and the model's attention metadata (index ops, no host
        # reads); add/remove_request return nothing.
    ),
    Target(
        name="diffusion-gemma-sampler",
        upstream=(
            f"{_DG}::DiffusionSampler.__call__",
            f"{_DG}::DiffusionSampler._finish_prefills",
        ),
        legacy="legacy.diffusion_gemma:DiffusionSampler.__call__",
        optimized="optimized.diffusion_gemma:DiffusionSampler.__call__",
        inputs="strategies.diffusion_gemma.inputs:DiffusionSamplerInputs",
        comparison=Comparison(floats="close", layout=True),
        # The decode expansion passes output_size and finished prefills index
        # with slots staged once, non-blocking: 0 syncs. A batch asking for
        # logprobs takes the branch 0.28.0 kept (.any()/.nonzero()/.item() reads
        # per tile and converged slot; callers reach it: SamplingStates stores a
        # request's logprobs per slot), drawn under caller since reach showed it
        # unfuzzed: sampler_sync_budget bounds that branch per spec (read off the
        # code; the H200 record says what it measured). 37: 6 decode requests in 6 tiles.
        expected_optimized_syncs=37,
        sync_budget="strategies.diffusion_gemma.inputs:sampler_sync_budget",
        description="repeat_interleave(output_size=host sum) for the top-k/top-p expansion; prefill slots staged once",
        invariants=(
            "strategies.diffusion_gemma.oracles:sampler_expansion_repeats_each_request",
            "strategies.diffusion_gemma.oracles:sampler_outputs_follow_the_batch",
            "strategies.diffusion_gemma.oracles:sampler_draft_tokens_mirror_canvas",
            "strategies.diffusion_gemma.oracles:sampler_finished_prefills_enter_denoising",
        ),
        reference="strategies.diffusion_gemma.oracles:SAMPLER_REFERENCE",
        # Sides from 0.31.0 on are called their release's way (the input model's fits(); 0.34.0 takes
        # hidden_states and compute_logits) and need vllm/model_executor/models/diffusion_gemma_sampler.py,
        # a catalog file through optimized/diffusion_gemma.py's docstring; docs/findings/drift.md F19.
        # No host-reading consumer: the GPU model runner hands the SamplerOutput
        # to vllm/v1/worker/gpu/async_utils.py AsyncOutput, which copies
        # sampled_token_ids / num_sampled with async_copy_to_np
        # (`x.to("cpu", non_blocking=True)`) on a copy stream and reads them
        # (`.tolist()`) only after `copy_event.synchronize()` in get_output, the
        # one wait per step by design.
    ),
]
