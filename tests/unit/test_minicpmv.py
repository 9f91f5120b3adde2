"""Resampler2_5.forward beyond the agreement fuzz (strategies/minicpmv/inputs.py says why these are not drawn)."""


import pytest
import torch

import legacy.minicpmv
import optimized.minicpmv
from strategies.minicpmv.inputs import resampler_of, tgt_sizes_of, x_of
from strategies.minicpmv.oracles import per_slice_expected

SPEC = {"device": "cpu", "images": [[2, 3], [4, 1], [1, 1]], "embed_dim": 8, "num_heads": 2, "kv_dim": 12,
        "num_queries": 2, "max_size": [3, 2], "dtype": "float32", "tgt_on": "cpu", "tgt_dtype": "int64",
        "seed": 11}


@pytest.mark.parametrize("side", [legacy.minicpmv, optimized.minicpmv], ids=["legacy", "optimized"])
def test_both_copies_match_the_per_slice_reference_and_grow_the_cache(side):
    resampler = resampler_of(side, SPEC)
    out = resampler(x_of(SPEC), tgt_sizes_of(SPEC))
    torch.testing.assert_close(out, per_slice_expected(SPEC))
    assert resampler.max_size == (4, 3)


def test_the_optimized_copy_takes_x_padded_past_the_longest_slice():
    """The CUDA graph path pads x to its bucket (L > max h*w): 0.30.0 masks the extra rows, which hold data."""
    longer = x_of(SPEC, length=9)
    out = resampler_of(optimized.minicpmv, SPEC)(longer, tgt_sizes_of(SPEC))
    torch.testing.assert_close(out, per_slice_expected(SPEC, x=longer))


def test_the_legacy_copy_refuses_x_padded_past_the_longest_slice():
    """Why the input model never draws that form: 0.29.0 sizes its mask from patch_len.max()."""
    with pytest.raises(Exception):
        resampler_of(legacy.minicpmv, SPEC)(x_of(SPEC, length=9), tgt_sizes_of(SPEC))
