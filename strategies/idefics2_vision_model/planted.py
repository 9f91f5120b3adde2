"""Planted bugs and benign refactors for the idefics2-position-ids target (optimized/idefics2_vision_model.py).

Each is a one-edit mutant of the optimized copy, judged with the untied input model
(strategies/idefics2_vision_model/inputs.py ``Idefics2PositionIdsUntiedInputs``: the same callers, every image size
coprime with ``num_patches_per_side``): the real copies differ where a patch coordinate sits exactly on a
bucket boundary (docs/findings/README.md, F20), which would report every plant, benign ones included.
"""

from fuzz.api import Plant

_OPT = "optimized.idefics2_vision_model"
_TARGET = "idefics2-position-ids"
_UNTIED = "strategies.idefics2_vision_model.inputs:Idefics2PositionIdsUntiedInputs"

BUGS = [
    Plant("planted-idefics2-flat-mask-as-grid", _TARGET, _OPT,
          "if patch_attention_mask.dim() == 3 and patch_attention_mask.shape[1] > 1:",
          "if patch_attention_mask.dim() == 3:",
          "MiniCPM-V's [B, 1, L] mask taken for a padded grid: stride L puts every patch in row 0",
          inputs=_UNTIED),
    Plant("planted-idefics2-tgt-sizes-column-twice", _TARGET, _OPT,
          "nb_patches_h = tgt_sizes[:, 0]", "nb_patches_h = tgt_sizes[:, 1]",
          "patch rows read from tgt_sizes' column count: a non-square MiniCPM-V slice is bucketed as square",
          inputs=_UNTIED),
    Plant("planted-idefics2-padding-not-zeroed", _TARGET, _OPT,
          "position_ids = torch.where(flat_patch_attention_mask, pos_ids.to(torch.long), 0)",
          "position_ids = pos_ids.to(torch.long)",
          "padding positions keep the ids of the grid they would have had instead of 0",
          inputs=_UNTIED),
]

BENIGN = [
    Plant("benign-idefics2-searchsorted", _TARGET, _OPT,
          "bucket_h = torch.bucketize(fractional_h, boundaries, right=True)",
          "bucket_h = torch.searchsorted(boundaries, fractional_h, right=True)",
          "searchsorted(sorted, values, right=True) is bucketize(values, sorted, right=True)",
          inputs=_UNTIED),
    Plant("benign-idefics2-index-unsqueeze", _TARGET, _OPT,
          "nb_h = nb_patches_h.clamp(min=1).unsqueeze(1)", "nb_h = nb_patches_h.clamp(min=1)[:, None]",
          "[:, None] is unsqueeze(1)",
          inputs=_UNTIED),
]
