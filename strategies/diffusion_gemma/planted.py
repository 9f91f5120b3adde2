"""Planted bugs and benign refactors of the diffusion_gemma targets, collected by tests/planted (fuzz/plants.py).

From diffusion_gemma: Planted bugs and benign refactors for diffusion_gemma's slot stores and sampler.

From shared_keep_diffusion: Bugs planted in both copies at once, for the keep-on-cpu and diffusion_gemma
targets (docs/design.md rows 9, 10 and 12).

The differential check cannot see them (legacy and optimized share the slip);
strategies/keep_on_cpu/oracles.py's and strategies/diffusion_gemma/oracles.py's invariants
and references must.
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant

_MOD = "optimized.diffusion_gemma"


BUGS = [
    Plant("planted-dg-prompt-len-advanced-index", "diffusion-gemma-states", _MOD,
          "self.diffusion_states.prompt_len[req_index].fill_(prompt_len)",
          "self.diffusion_states.prompt_len[[req_index]].fill_(prompt_len)",
          "fill_() on an advanced-indexing copy: the prompt length is never stored"),
    Plant("planted-dg-step-reset-slice", "diffusion-gemma-states", _MOD,
          "self.step[slot_idx].fill_(0)", "self.step[slot_idx:].fill_(0)",
          "a slice instead of an index: adding a request resets every later slot's step"),
    Plant("planted-dg-canvas-one-row", "diffusion-gemma-states", _MOD,
          "(n, self.canvas_length),", "(1, self.canvas_length),",
          "one random canvas row broadcast to every slot (only visible with two or more slots)"),
    Plant("planted-dg-output-size-off-by-one", "diffusion-gemma-sampler", _MOD,
          "output_size=int(valid_canvas_len_np.sum())", "output_size=int(valid_canvas_len_np.sum()) - 1",
          "output_size one short of the expansion (RuntimeError on CPU, device assert on CUDA)"),
    Plant("planted-dg-output-size-full-canvas", "diffusion-gemma-sampler", _MOD,
          "output_size=int(valid_canvas_len_np.sum())", "output_size=num_decode * CL",
          "assumes every canvas is full: wrong once a canvas is truncated near max_model_len"),
    Plant("planted-dg-prefill-slots-int32", "diffusion-gemma-sampler", _MOD,
          "ps.astype(np.int64), device=states.is_encoder_phase.device",
          "ps.astype(np.int32), device=states.is_encoder_phase.device",
          "finished-prefill slots staged as int32: index_fill_ rejects them"),
]

BENIGN = [
    Plant("benign-dg-step-zero", "diffusion-gemma-states", _MOD,
          "self.step[slot_idx].fill_(0)", "self.step[slot_idx].zero_()",
          "the same in-place store of 0"),
    Plant("benign-dg-slot-index-int64", "diffusion-gemma-states", _MOD,
          "async_tensor_h2d([slot_idx], device=self.device)",
          "async_tensor_h2d([slot_idx], device=self.device, dtype=torch.int64)",
          "the dtype torch.tensor infers for an int slot, spelled out"),
    Plant("benign-dg-output-size-by-index", "diffusion-gemma-sampler", _MOD,
          "output_size=int(valid_canvas_len_np.sum())",
          "output_size=int(per_req_nlogits_np[decode_indices_np].sum())",
          "the same host counts, selected by decode index instead of by mask"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-diffusion-remove-keeps-history",
        base_target="diffusion-gemma-states",
        legacy=("legacy.diffusion_gemma",
                "        self.is_encoder_phase[slot_idx] = False\n"
                "        self.accepted_canvas_history_len[slot_idx] = 0\n",
                "        self.is_encoder_phase[slot_idx] = False\n"),
        optimized=("optimized.diffusion_gemma",
                   "        self.is_encoder_phase[slot_idx].fill_(False)\n"
                   "        self.accepted_canvas_history_len[slot_idx].fill_(0)\n",
                   "        self.is_encoder_phase[slot_idx].fill_(False)\n"),
        why="remove_request forgets to reset the slot's accepted-canvas history length: the next request "
        "given the slot before an add inherits a stale stability count",
    ),
    SharedPlant(
        name="shared-diffusion-expand-batch-positions",
        base_target="diffusion-gemma-sampler",
        legacy=("legacy.diffusion_gemma", "decode_slots.repeat_interleave(valid_canvas_len)",
                "decode_idx.repeat_interleave(valid_canvas_len)"),
        optimized=("optimized.diffusion_gemma", "decode_slots.repeat_interleave(\n",
                   "decode_idx.repeat_interleave(\n"),
        why="the top-k/top-p expansion repeats each request's batch position instead of its slot: every "
        "logit row is filtered with another request's top-k/top-p whenever slots are not 0..n-1 in order",
    ),
]
