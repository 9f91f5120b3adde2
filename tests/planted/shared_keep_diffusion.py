"""Bugs planted in both copies at once, for the keep-on-cpu and diffusion_gemma
targets (docs/design.md rows 9, 10 and 12).

The differential check cannot see them (legacy and optimized share the slip);
fuzz/oracles/keep_on_cpu.py's and fuzz/oracles/diffusion_gemma.py's invariants
and references must.
"""

from __future__ import annotations

from tests.planted.plant import SharedPlant


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the lines are shared text in 0.27.1 and 0.28.0."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


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
    SharedPlant(
        name="shared-interns1-image-id-stored-as-video",
        base_target="keep-on-cpu-interns1-num-patches",
        **_both("keep_on_cpu", "self.img_context_token_id = image_token_id",
                "self.video_context_token_id = image_token_id"),
        why="a copy-paste slip stores the image token id as the video context id: image placeholders are "
        "never replaced, and a video batch's id is overwritten",
    ),
    SharedPlant(
        name="shared-interns1-drops-last-token",
        base_target="keep-on-cpu-interns1-num-patches",
        **_both("keep_on_cpu", "vit_embeds = vit_embeds[:, 1:, :]", "vit_embeds = vit_embeds[:, :-1, :]"),
        why="the tower's last patch token is dropped instead of the leading CLS token: same shapes, every "
        "tile's features shifted by one patch (only the reference sees values)",
    ),
    SharedPlant(
        name="shared-phi4mm-useful-hw-swapped",
        base_target="keep-on-cpu-phi4mm-image-sizes",
        legacy=("legacy.keep_on_cpu",
                "useful_height = int(reshaped_image_attention_mask[0, :, 0].sum().item())\n"
                "                useful_width = int(reshaped_image_attention_mask[0, 0, :].sum().item())",
                "useful_height = int(reshaped_image_attention_mask[0, 0, :].sum().item())\n"
                "                useful_width = int(reshaped_image_attention_mask[0, :, 0].sum().item())"),
        optimized=("optimized.keep_on_cpu",
                   "reshaped_image_attention_mask[0, :, 0].sum().item()\n"
                   "                    )\n"
                   "                    useful_width = int(\n"
                   "                        reshaped_image_attention_mask[0, 0, :].sum().item()",
                   "reshaped_image_attention_mask[0, 0, :].sum().item()\n"
                   "                    )\n"
                   "                    useful_width = int(\n"
                   "                        reshaped_image_attention_mask[0, :, 0].sum().item()"),
        why="the useful height and width read off the mask's row and column swapped: upstream's own "
        "temp_len check still balances, but a non-square useful area yields the wrong token count",
    ),
    SharedPlant(
        name="shared-keye-image-position-ids-per-row",
        base_target="keep-on-cpu-keye-grid-thw",
        **_both("keep_on_cpu", "image_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])",
                "image_position_ids = torch.arange(numel) % np.prod(thw_tuple[2:])"),
        why="image position ids restart every row (mod w) instead of every frame (mod h*w): the packed "
        "position embedding sees each row as the first",
    ),
]
