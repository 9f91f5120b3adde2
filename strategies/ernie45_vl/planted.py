"""Planted bugs and benign refactors of the ernie45_vl targets, collected by tests/planted (fuzz/plants.py).

From ernie45_vl: Planted bugs and benign refactors for ernie45_vl (docs/design.md rows 6-8).

From shared_ernie: Bugs planted in both ernie45_vl copies at once (docs/design.md rows 6-8).

The differential check cannot see them (legacy and optimized share the slip);
strategies/ernie45_vl/oracles.py's invariants and references must.
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant

_MOD = "optimized.ernie45_vl"


def _both(old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy: the lines are shared text in 0.27.1 and 0.28.0."""
    return {"legacy": ("legacy.ernie45_vl", old, new), "optimized": ("optimized.ernie45_vl", old, new)}


BUGS = [
    Plant("planted-ernie-rot-swapped-hw", "ernie-rot-pos-emb", _MOD,
          "torch.stack([hpos_ids, wpos_ids], dim=-1)", "torch.stack([wpos_ids, hpos_ids], dim=-1)",
          "row and column rotary ids swapped (visible on any grid larger than 1x1)"),
    Plant("planted-ernie-rot-table-from-width", "ernie-rot-pos-emb", _MOD,
          "max_grid_size = grid_thw[:, 1:].max()", "max_grid_size = grid_thw[:, 2].max()",
          "rotary table sized by the widest grid only: the gather runs off its end when h > w"),
    Plant("planted-ernie-metadata-dropped-dtype", "ernie-encoder-metadata", _MOD,
          ").cumsum(dim=0, dtype=torch.int32)", ").cumsum(dim=0)",
          "cu_seqlens come out in grid_thw's dtype (int64 from the processor) instead of int32"),
    Plant("planted-ernie-metadata-h-squared", "ernie-encoder-metadata", _MOD,
          "grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]", "grid_thw[:, 1] * grid_thw[:, 1], grid_thw[:, 0]",
          "sequence length h*h instead of h*w (only visible when h != w)"),
    Plant("planted-ernie-graph-pads-with-zeros", "ernie-encoder-metadata-graph", _MOD,
          "(max_batch_size - num_seqs,), cu_seqlens[-1]", "(max_batch_size - num_seqs,), 0",
          "graph padding appends offset 0: negative-length sequences instead of empty ones"),
    Plant("planted-ernie-graph-override-int64", "ernie-encoder-metadata-graph", _MOD,
          "max_seqlen = torch.tensor(max_seqlen_override, dtype=torch.int32)",
          "max_seqlen = torch.tensor(max_seqlen_override)",
          "the captured max_seqlen comes out int64 (the eager path's is int32)"),
    Plant("planted-ernie-resampler-odd-frames-from-0", "ernie-resampler-placeholder", _MOD,
          "1 if temporoal_size > 1 else 0", "0",
          "the second frame stream starts at frame 0, pairing each even frame with itself (videos only)"),
    Plant("planted-ernie-resampler-batch-offset", "ernie-resampler-placeholder", _MOD,
          "batch_offset[1:] = tokens_per_img_or_vid.cumsum()[:-1]",
          "batch_offset[1:] = tokens_per_img_or_vid.cumsum()[1:]",
          "each item's offset includes its own tokens (inclusive cumsum): only visible with 2+ items"),
]

# ernie-encoder-output: judged beside the 0.28.0 eager finding (known-issues.json): the graph path as
# EncoderCudaGraphManager replays it, and encoder_eager_forward's output scattered as its comment promises
# (strategies.ernie45_vl.inputs.ErnieEncoderGraphOutputInputs).
_GRAPH_OUTPUT = "strategies.ernie45_vl.inputs:ErnieEncoderGraphOutputInputs"
BUGS += [
    Plant("planted-ernie-output-valid-off-by-one", "ernie-encoder-output", _MOD,
          "num_valid = int((grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]).sum())",
          "num_valid = int((grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]).sum()) - 1",
          "host-derived valid-token count one short: the resampler gets the graph output minus its last row",
          inputs=_GRAPH_OUTPUT),
    Plant("planted-ernie-output-sorted-indices", "ernie-encoder-output", _MOD,
          "scatter_output_slices(image_embeds, indices, per_item_out_tokens, dest, clone)",
          "scatter_output_slices(image_embeds, sorted(indices), per_item_out_tokens, dest, clone)",
          "pieces scattered in item order instead of batch order: wrong images once the manager reorders the batch",
          inputs=_GRAPH_OUTPUT),
    Plant("planted-ernie-output-eager-vit-only", "ernie-encoder-output", _MOD,
          "return self.resampler_model(image_features, grid_thw)", "return image_features",
          "the eager fallback returns the ViT's features (0.34.0's half of the fix) where its result is "
          "scattered directly: pre-merge rows at the ViT's width", inputs=_GRAPH_OUTPUT),
]

BENIGN = [
    Plant("benign-ernie-rot-gather-flat", "ernie-rot-pos-emb", _MOD,
          "rotary_pos_emb = rotary_pos_emb_full[pos_ids].flatten(1)",
          "rotary_pos_emb = rotary_pos_emb_full[pos_ids.flatten()].reshape(pos_ids.shape[0], -1)",
          "gather flat ids, then fold the (h, w) pair back: same rows"),
    Plant("benign-ernie-metadata-prod", "ernie-encoder-metadata", _MOD,
          "grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]", "grid_thw[:, 1:].prod(-1), grid_thw[:, 0]",
          "h*w via prod (int64 in between), cumsum still casts to int32"),
    Plant("benign-ernie-graph-pad-test", "ernie-encoder-metadata-graph", _MOD,
          "if num_seqs < max_batch_size:", "if max_batch_size - num_seqs > 0:",
          "the same padding condition, rearranged"),
    Plant("benign-ernie-resampler-int32-index", "ernie-resampler-placeholder", _MOD,
          "np.concatenate(slice_offsets, axis=-1), device=x.device",
          "np.concatenate(slice_offsets, axis=-1), device=x.device, dtype=torch.int32",
          "index_select takes int32 indices as well"),
    Plant("benign-ernie-output-prod", "ernie-encoder-output", _MOD,
          "num_valid = int((grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]).sum())",
          "num_valid = int(grid_thw.prod(-1).sum())",
          "the valid-token count as a product along the row", inputs=_GRAPH_OUTPUT),
    Plant("benign-ernie-output-whole-buffer", "ernie-encoder-output", _MOD,
          "image_embeds = self.resampler_model(output[:num_valid], grid_thw)",
          "image_embeds = self.resampler_model(output, grid_thw)",
          "the padded graph rows go through the row-wise layers too, but fwd_placeholder gathers only the "
          "grid's rows (temporal conv on, Ernie's config)", inputs=_GRAPH_OUTPUT),
    Plant("benign-ernie-output-eager-uncast-pixels", "ernie-encoder-output", _MOD,
          'pixel_values = mm_kwargs["pixel_values"].type(self.vision_model.dtype)',
          'pixel_values = mm_kwargs["pixel_values"]',
          "the eager fallback leaves the processor's pixel dtype: Ernie4_5_VisionPatchEmbed.forward casts to "
          "its weight's dtype first thing", inputs=_GRAPH_OUTPUT),
]

# Only visible on CUDA (a sync regression, outputs unchanged).
SYNC_BUGS = [
    Plant("planted-ernie-resampler-blocking-offsets", "ernie-resampler-placeholder", _MOD,
          "slice_offsets2 = async_tensor_h2d(", "slice_offsets2 = torch.as_tensor(",
          "second offset table copied from pageable memory with a blocking H2D"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-ernie-rot-swapped-hw",
        base_target="ernie-rot-pos-emb",
        **_both("torch.stack([hpos_ids, wpos_ids], dim=-1)", "torch.stack([wpos_ids, hpos_ids], dim=-1)"),
        why="the (h, w) position columns stacked in the wrong order: every token's rotary row holds its "
        "w position in the h half, so a frame with h != w points outside its grid and the merge windows "
        "come transposed",
    ),
    SharedPlant(
        name="shared-ernie-metadata-h-times-h",
        base_target="ernie-encoder-metadata",
        **_both("grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]", "grid_thw[:, 1] * grid_thw[:, 1], grid_thw[:, 0]"),
        why="per-frame sequence length h*h instead of h*w: cu_seqlens no longer adds up to the tokens the "
        "rotary table and hidden states hold whenever h != w",
    ),
    SharedPlant(
        name="shared-ernie-graph-max-seqlen-total",
        base_target="ernie-encoder-metadata-graph",
        **_both("max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()",
                "max_seqlen = cu_seqlens[-1] - cu_seqlens[0]"),
        why="max_seqlen taken as the packed length of the whole batch, not its longest sequence: flash "
        "attention is told every image may be the total long (replay with two or more images)",
    ),
]
