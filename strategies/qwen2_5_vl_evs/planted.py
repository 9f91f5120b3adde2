"""Planted bugs and benign refactors of the qwen25-vl-image-evs / qwen25-vl-video-evs targets
(optimized/qwen2_5_vl_evs.py), collected by tests/planted (fuzz/plants.py).

Each is a one-edit mutant of the optimized copy; ``old`` occurs once in it. ``SHARED_BUGS`` are slips in
both copies, which only the oracles of strategies/qwen2_5_vl_evs/oracles.py can see.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.qwen2_5_vl_evs"
_LEG = "legacy.qwen2_5_vl_evs"
_IMAGE = "qwen25-vl-image-evs"
_VIDEO = "qwen25-vl-video-evs"

BUGS = [
    Plant("planted-q25-image-evs-positions-first", _IMAGE, _OPT,
          "            emb = torch.cat([emb, positions], dim=1)\n            image_embeds_out.append(emb)",
          "            emb = torch.cat([positions, emb], dim=1)\n            image_embeds_out.append(emb)",
          "positions prepended: the language model reads them as embedding channels"),
    Plant("planted-q25-image-evs-positions-as-bool", _IMAGE, _OPT,
          "compute_mrope_for_media(size, merge_size), emb.device\n",
          "compute_mrope_for_media(size, merge_size), emb.device, dtype=torch.bool\n",
          "the staging dtype squashes every position to 0/1"),
    Plant("planted-q25-video-evs-pruning-rate-inverted", _VIDEO, _OPT,
          "q=self.video_pruning_rate,", "q=1 - self.video_pruning_rate,",
          "keeps the fraction it should drop: the count no longer fills the prompt's placeholders"),
    Plant("planted-q25-video-evs-seconds-ignored", _VIDEO, _OPT,
          "video_second_per_grid=video_second_per_grid_t.item(),", "video_second_per_grid=1.0,",
          "the video's time scale dropped: t positions as if every grid lasted one second"),
    Plant("planted-q25-video-evs-positions-unpruned", _VIDEO, _OPT,
          "positions = positions[retention_mask]", "positions = positions[: emb.shape[0]]",
          "the first positions instead of the kept tokens' positions"),
]

BENIGN = [
    Plant("benign-q25-image-evs-stage-in-embedding-dtype", _IMAGE, _OPT,
          "compute_mrope_for_media(size, merge_size), emb.device\n",
          "compute_mrope_for_media(size, merge_size), emb.device, dtype=emb.dtype\n",
          "torch.cat promotes the int64 positions to the embeddings' dtype anyway: same values, cast on the host"),
    Plant("benign-q25-video-evs-cat-last-dim", _VIDEO, _OPT,
          "            emb = torch.cat([emb, positions], dim=1)\n            video_embeds_out.append(emb)",
          "            emb = torch.cat((emb, positions), dim=-1)\n            video_embeds_out.append(emb)",
          "dim=-1 is dim=1 of a 2-D tensor"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-q25-video-evs-no-first-frame-floor",
        base_target=_VIDEO,
        legacy=(_LEG, "return max(min_num_tokens, evs_num_tokens)", "return evs_num_tokens"),
        optimized=(_OPT, "return max(min_num_tokens, evs_num_tokens)", "return evs_num_tokens"),
        why="a high pruning rate keeps less than one frame: fewer tokens than the processor's placeholders",
    ),
    SharedPlant(
        name="shared-q25-image-evs-h-w-swapped",
        base_target=_IMAGE,
        legacy=(_LEG, "torch.stack([t_index, h_index, w_index, llm_grid_w], dim=1)",
                "torch.stack([t_index, w_index, h_index, llm_grid_w], dim=1)"),
        optimized=(_OPT, "torch.stack([t_index, h_index, w_index, llm_grid_w], dim=1)",
                   "torch.stack([t_index, w_index, h_index, llm_grid_w], dim=1)"),
        why="h and w position channels swapped: the language model's rope sees the image transposed",
    ),
    SharedPlant(
        name="shared-q25-video-evs-seconds-dropped",
        base_target=_VIDEO,
        legacy=(_LEG, ".mul(tokens_per_second * video_second_per_grid)", ".mul(tokens_per_second)"),
        optimized=(_OPT, ".mul(tokens_per_second * video_second_per_grid)", ".mul(tokens_per_second)"),
        why="the grid's duration left out of the temporal positions",
    ),
]
