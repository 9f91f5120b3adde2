"""Each oracle of the mm-encoder-seq-lens target, broken by hand (strategies/mm_encoder_attention/oracles.py)."""

from __future__ import annotations

import numpy as np
import torch

from strategies.mm_encoder_attention import oracles as oracles
from strategies.mm_encoder_attention.inputs import cu_seqlens_of

_SPEC = {"device": "cpu", "backend": "FLASHINFER", "lengths": [3, 5, 2], "pad": 2, "start": 0, "empty": False,
         "dtype": "int32", "form": "numpy"}


def _good(spec: dict = _SPEC) -> dict:
    lengths = oracles.seq_lens_expected(spec)["seq_lens"]
    return {"seq_lens": torch.tensor(lengths, dtype=torch.int32), "cu_seqlens": torch.from_numpy(cu_seqlens_of(spec))}


def test_reference_pads_to_the_bucket():
    assert oracles.seq_lens_expected(_SPEC) == {"seq_lens": [3, 5, 2, 0, 0, 0, 0, 0]}
    nine = {**_SPEC, "lengths": [1] * 9, "pad": 0}
    assert len(oracles.seq_lens_expected(nine)["seq_lens"]) == 16
    past = {**_SPEC, "lengths": [1] * 65, "pad": 0}
    assert len(oracles.seq_lens_expected(past)["seq_lens"]) == 72
    assert oracles.seq_lens_observed(_good()) == oracles.seq_lens_expected(_SPEC)


def test_only_for_flashinfer_catches_lengths_for_another_backend_and_none_for_flashinfer():
    assert oracles.seq_lens_only_for_flashinfer(_SPEC, _good()) is None
    assert "expected None" in oracles.seq_lens_only_for_flashinfer({**_SPEC, "backend": "FLASH_ATTN"}, _good())
    assert "expected a tensor" in oracles.seq_lens_only_for_flashinfer(_SPEC, {**_good(), "seq_lens": None})


def test_device_and_dtype_catches_int64_and_2d():
    assert oracles.seq_lens_on_the_device_in_the_input_dtype(_SPEC, _good()) is None
    wide = {**_good(), "seq_lens": _good()["seq_lens"].long()}
    assert "int64" in oracles.seq_lens_on_the_device_in_the_input_dtype(_SPEC, wide)
    flat = {**_good(), "seq_lens": _good()["seq_lens"][None]}
    assert "1-D" in oracles.seq_lens_on_the_device_in_the_input_dtype(_SPEC, flat)
    meta = {**_good(), "seq_lens": _good()["seq_lens"].to("meta")}
    assert "expected cpu" in oracles.seq_lens_on_the_device_in_the_input_dtype(_SPEC, meta)


def test_leave_cu_seqlens_alone_catches_a_write():
    output = _good()
    assert oracles.seq_lens_leave_cu_seqlens_alone(_SPEC, output) is None
    output["cu_seqlens"][1] = 99
    assert "changed" in oracles.seq_lens_leave_cu_seqlens_alone(_SPEC, output)
    assert "without" in oracles.seq_lens_leave_cu_seqlens_alone(_SPEC, np.zeros(3))
