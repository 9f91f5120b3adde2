"""Planted bugs and benign refactors for the tensor-data target (optimized/v1_tensor_data.py): one-edit mutants
of the optimized copy, Plant(name, base_target, module, old, new, why); ``old`` occurs once in the copy."""

from fuzz.api import Plant

_OPT = "optimized.v1_tensor_data"
_T = "tensor-data"
# The fast path (`tensor.is_cpu and tensor.is_contiguous()`) only a host tensor takes: a CUDA example never reaches
# these edits (H100, 2026-12-06: silent there).
_HOST_PATH = ("cpu",)

BUGS: list[Plant] = [
    Plant("planted-tensor-data-no-byte-cast", _T, _OPT,
          'return memoryview(tensor.numpy()).cast("B")', "return memoryview(tensor.numpy())",
          "the fast path returns the array's own memoryview: format 'f'/'q'/..., one item per element, "
          "not uint8", shows_on=_HOST_PATH),
    Plant("planted-tensor-data-signed-bytes", _T, _OPT,
          'return memoryview(tensor.numpy()).cast("B")', 'return memoryview(tensor.numpy()).cast("b")',
          "signed bytes ('b'): a decoder reading uint8 sees negative values", shows_on=_HOST_PATH),
    Plant("planted-tensor-data-narrow-fallback", _T, _OPT,
          "except (TypeError, RuntimeError):", "except TypeError:",
          "a 0-d bfloat16 tensor's uint8 view raises RuntimeError, which no longer falls back to 0.33.0's path",
          shows_on=_HOST_PATH),
    Plant("planted-tensor-data-copies", _T, _OPT,
          'return memoryview(tensor.numpy()).cast("B")', 'return memoryview(tensor.numpy().copy()).cast("B")',
          "a copy: the buffer the encoder sends zero-copy later no longer reads the tensor (0.33.0's does, for a "
          "contiguous CPU tensor)", shows_on=_HOST_PATH),
]

BENIGN: list[Plant] = [
    Plant("benign-tensor-data-no-contiguity-guard", _T, _OPT,
          "if tensor.is_cpu and tensor.is_contiguous():", "if tensor.is_cpu:",
          "a non-contiguous tensor's array is not C-contiguous, and memoryview.cast refuses it (TypeError, caught): "
          "the old path runs as before"),
]
