"""Planted bugs and benign refactors of the keep_on_cpu targets, collected by tests/planted (fuzz/plants.py).

From keep_on_cpu: Planted bugs and benign refactors for the keep-on-cpu targets (optimized/keep_on_cpu.py).

Each is one edit a reviewer could plausibly have made while moving the field to
the host. As mutants of the optimized copy they run as the optimized side and get
its inputs (the field on the CPU; strategies/keep_on_cpu/inputs.py ``field_side``).

From shared_keep_diffusion: Bugs planted in both copies at once, for the keep-on-cpu and diffusion_gemma
targets (docs/design.md rows 9, 10 and 12).

The differential check cannot see them (legacy and optimized share the slip);
strategies/keep_on_cpu/oracles.py's and strategies/diffusion_gemma/oracles.py's invariants
and references must.
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant

_MOD = "optimized.keep_on_cpu"


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the lines are shared text in 0.27.1 and 0.28.0."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


BUGS = [
    Plant("planted-koc-ultravox-feat-len", "keep-on-cpu-ultravox-audio-lens", _MOD,
          "return (input_lengths - 1) // 2 + 1", "return input_lengths // 2 + 1",
          "stride-2 conv output length off by one for even audio_lens: one padding frame joins the valid segment"),
    Plant("planted-koc-ultravox-unsliced-lens", "keep-on-cpu-ultravox-audio-lens", _MOD,
          "audio_lens[start:end]", "audio_lens[start:]",
          "every encoder sub-batch gets the lens of all later chunks too (only visible past 16 chunks)"),
    Plant("planted-koc-interns1-split-per-tile", "keep-on-cpu-interns1-num-patches", _MOD,
          "return image_embeds.split(image_feature_sizes)", "return image_embeds.split(feature_size)",
          "one output per tile instead of per image (only visible when an image has several tiles)"),
    Plant("planted-koc-phi4mm-swapped-hw", "keep-on-cpu-phi4mm-image-sizes", _MOD,
          "h, w = img_sizes[_bs]", "w, h = img_sizes[_bs]",
          "image_sizes read as (w, h) (only visible when the crop grid is not square)"),
    Plant("planted-koc-phi4mm-mask-count-no-global", "keep-on-cpu-phi4mm-image-sizes", _MOD,
          "image_attention_mask[_bs, : B_ + 1, 0::2, 0::2].sum().item()",
          "image_attention_mask[_bs, 1 : B_ + 1, 0::2, 0::2].sum().item()",
          "mask token count leaves out the global crop, so the length check fails"),
    Plant("planted-koc-keye-swapped-hw", "keep-on-cpu-keye-grid-thw", _MOD,
          "t, h, w = image_grid", "t, w, h = image_grid",
          "projector merges 2x2 windows with h and w swapped (only visible when h != w)"),
    Plant("planted-koc-keye-wrong-modulo", "keep-on-cpu-keye-grid-thw", _MOD,
          "image_position_ids = torch.arange(numel) % np.prod(thw_tuple[1:])",
          "image_position_ids = torch.arange(numel) % np.prod(thw_tuple[2:])",
          "image position ids wrap every row (w) instead of every frame (h*w)"),
]

BENIGN = [
    Plant("benign-koc-ultravox-unique-int32", "keep-on-cpu-ultravox-audio-lens", _MOD,
          "np.unique(cu_seqlens_np).astype(np.int32)", "np.unique(cu_seqlens_np.astype(np.int32))",
          "cast before deduplicating: the same sorted boundaries"),
    Plant("benign-koc-interns1-host-sizes", "keep-on-cpu-interns1-num-patches", _MOD,
          "image_feature_sizes = [\n            num_patches * feature_size for num_patches in num_patches\n        ]",
          "image_feature_sizes = (torch.as_tensor(num_patches) * feature_size).tolist()",
          "split sizes as one host op on the CPU field"),
    Plant("benign-koc-phi4mm-sizes-tolist", "keep-on-cpu-phi4mm-image-sizes", _MOD,
          "img_sizes = img_sizes.view(-1, 2)", "img_sizes = img_sizes.view(-1, 2).tolist()",
          "image_sizes as Python ints up front (free now that the field is on the host)"),
    Plant("benign-koc-keye-cpu-tolist", "keep-on-cpu-keye-grid-thw", _MOD,
          "image_grid_thw_list = image_grid_thw.tolist()", "image_grid_thw_list = image_grid_thw.cpu().tolist()",
          "a defensive .cpu(): a no-op on the kept-on-CPU grid"),
]

SHARED_BUGS = [
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
