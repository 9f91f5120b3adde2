"""Planted bugs and benign refactors for the keep-on-cpu targets (optimized/keep_on_cpu.py).

Each is one edit a reviewer could plausibly have made while moving the field to
the host. As mutants of the optimized copy they run as the optimized side and get
its inputs (the field on the CPU; strategies/keep_on_cpu.py ``field_side``).
"""

from tests.planted.plant import Plant

_MOD = "optimized.keep_on_cpu"

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
