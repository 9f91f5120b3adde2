"""Planted bugs and benign refactors for the mm-encoder-seq-lens target (optimized/mm_encoder_attention.py)."""

from fuzz.api import Plant

_OPT = "optimized.mm_encoder_attention"

BUGS = [
    Plant("planted-mm-seq-lens-pad-count-from-cu", "mm-encoder-seq-lens", _OPT,
          "sequence_lengths, len(sequence_lengths), 0", "sequence_lengths, len(cu_seqlens), 0",
          "the batch size taken from cu_seqlens (one entry more than sequences): the lengths are "
          "padded to the wrong bucket, one short of it"),
    Plant("planted-mm-seq-lens-h2d-as-int64", "mm-encoder-seq-lens", _OPT,
          "return async_tensor_h2d(sequence_lengths, device=device)",
          "return async_tensor_h2d(sequence_lengths, device=device, dtype=torch.long)",
          "the lengths sent as int64: FlashInfer's cuDNN prefill takes the int32 of cu_seqlens"),
]

BENIGN = [
    Plant("benign-mm-seq-lens-np-diff", "mm-encoder-seq-lens", _OPT,
          "sequence_lengths = cu_seqlens[1:] - cu_seqlens[:-1]", "sequence_lengths = np.diff(cu_seqlens)",
          "np.diff of a 1-D array is the same subtraction, in the same dtype"),
]
