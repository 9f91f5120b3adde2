"""Planted bugs and benign refactors for the idefics2-position-ids and idefics2-embeddings-forward targets
(optimized/idefics2_vision_model.py).

Each is a one-edit mutant of the optimized copy, judged with the untied input model
(strategies/idefics2_vision_model/inputs.py ``Idefics2PositionIdsUntiedInputs``: the same callers, every image size
coprime with ``num_patches_per_side``): the real copies differ where a patch coordinate sits exactly on a
bucket boundary (docs/findings/README.md, F20), which would report every plant, benign ones included.
"""

from fuzz.api import Plant, SharedPlant

_OPT = "optimized.idefics2_vision_model"
_TARGET = "idefics2-position-ids"
_UNTIED = "strategies.idefics2_vision_model.inputs:Idefics2PositionIdsUntiedInputs"
_LEG = "legacy.idefics2_vision_model"
# idefics2-embeddings-forward: its own input model is untied already (no inputs= needed)
_FORWARD = "idefics2-embeddings-forward"
_CALL_IDS = "position_ids = self.get_position_ids(patch_attention_mask, tgt_sizes)"
_ADD_ROWS = "embeddings += self.position_embedding(position_ids)"
_TGT_UP = "tgt_sizes = async_tensor_h2d(tgt_sizes, device)"
_FLATTEN = "embeddings = patch_embeds.flatten(2).transpose(1, 2)"
_COLUMN_MAJOR = "embeddings = patch_embeds.transpose(2, 3).flatten(2).transpose(1, 2)"

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
          inputs=_UNTIED),    Plant("planted-idefics2-forward-grid-stride-off-by-one", _FORWARD, _OPT,
          "stride_w = patch_attention_mask.shape[2]  # padded 2D grid width",
          "stride_w = patch_attention_mask.shape[2] - 1  # padded 2D grid width",
          "host-derived grid width off by one: every grid row after the first is read one column early, "
          "so patches take their neighbours' position rows"),
    Plant("planted-idefics2-forward-drops-tgt-sizes", _FORWARD, _OPT, _CALL_IDS,
          "position_ids = self.get_position_ids(patch_attention_mask)",
          "the forward no longer hands tgt_sizes on: MiniCPM-V 2.6 slices are bucketed as one row of h * w "
          "patches (the 2.5 layout)"),
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
          inputs=_UNTIED),    Plant("benign-idefics2-forward-out-of-place-add", _FORWARD, _OPT, _ADD_ROWS,
          "embeddings = embeddings + self.position_embedding(position_ids)",
          "an out-of-place add: the same values in a fresh tensor (layout is not compared)"),
    Plant("benign-idefics2-forward-permute", _FORWARD, _OPT, _FLATTEN,
          "embeddings = patch_embeds.flatten(2).permute(0, 2, 1)",
          "permute(0, 2, 1) is transpose(1, 2) of a 3-d tensor"),
]

# CUDA only: on the CPU the mask's device is the host and no copy is made.
SYNC_BUGS = [
    Plant("planted-idefics2-forward-blocking-tgt-sizes", _FORWARD, _OPT, _TGT_UP, "tgt_sizes = tgt_sizes.to(device)",
          "MiniCPM-V's host tgt_sizes copied up with a blocking H2D from pageable memory: the sync 0.30.0 removed",
          shows_on=("cuda",)),
]

POLICY_BUGS = [
    Plant("planted-policy-idefics2-forward-pageable-tgt-sizes", _FORWARD, _OPT, _TGT_UP,
          "tgt_sizes = tgt_sizes.to(device, non_blocking=True)",
          "non_blocking from pageable memory (no pinned staging): vLLM's CI copy check rejects it",
          shows_on=("cuda",)),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-idefics2-forward-patches-column-major",
        base_target=_FORWARD,
        legacy=(_LEG, _FLATTEN, _COLUMN_MAJOR),
        optimized=(_OPT, _FLATTEN, _COLUMN_MAJOR),
        why="both forwards flatten the conv's patch grid column by column: the sides agree, but position k "
            "carries the projection of another patch than the mask's and the ids' row-major k; only the "
            "bucket invariant and the reference see it (a grid of more than one row and column)",
    ),
]
