"""Planted bugs and benign refactors for the mm-batched-field-reduce-data and
mm-flat-field-reduce-data targets (optimized/mm_inputs.py).

The flat field's plants are judged on ``FlatFieldBesideF21Inputs`` (strategies/mm_inputs/inputs.py): the real
copies differ on a one-element batch sliced along ``dim`` > 0 (F21, docs/findings/README.md), which would
report every plant there, whatever it changed."""

from fuzz.api import Plant

_OPT = "optimized.mm_inputs"
_BESIDE_F21 = "strategies.mm_inputs.inputs:FlatFieldBesideF21Inputs"

BUGS = [
    Plant("planted-mm-batched-single-item-no-batch-dim", "mm-batched-field-reduce-data", _OPT,
          "return batch[0].unsqueeze(0)", "return batch[0]",
          "the flat field's zero-copy shortcut pasted into the batched one: a batch of one item "
          "loses its leading batch dimension (torch.stack would add it)"),
    Plant("planted-mm-flat-ragged-offset-on-dim0", "mm-flat-field-reduce-data", _OPT,
          "concat_offset += tensor.shape[dim]", "concat_offset += tensor.shape[0]",
          "slice-assign advances along dim 0 whatever the concat dim: ragged dim=1 items "
          "(qwen3_asr / qwen2_5_omni audio features) overwrite each other or leave zero gaps",
          inputs=_BESIDE_F21),
]

BENIGN = [
    Plant("benign-mm-h2d-no-device-shortcut", "mm-batched-field-reduce-data", _OPT,
          "    if device is None:\n        return tensors\n\n    def _h2d", "    def _h2d",
          "without the shortcut every leaf goes through x.to(device=None, non_blocking=True), "
          "which returns the tensor itself"),
    Plant("benign-mm-flat-single-item-contiguous", "mm-flat-field-reduce-data", _OPT,
          "                return batch[0]\n", "                return batch[0].contiguous()\n",
          "0.29.0's unpinned single element: a copy only for a non-contiguous element; the values "
          "are the same (and this is the layout 0.29.0 gave a host target)",
          inputs=_BESIDE_F21),
]
