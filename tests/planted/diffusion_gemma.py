"""Planted bugs and benign refactors for diffusion_gemma's slot stores and sampler."""

from tests.planted.plant import Plant

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
