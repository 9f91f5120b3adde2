"""keep-on-cpu-paddleocr-grid-thw: the plant only the wide contract reaches (frames t > 1) is reported there and
not under the caller contract, which draws PaddleOCR's t == 1 images only."""

from __future__ import annotations

import pytest

from strategies.paddleocr_fields.planted import WIDE_BUGS
from tests.support import fuzz


@pytest.mark.parametrize("plant", WIDE_BUGS, ids=lambda p: p.name)
def test_wide_only_planted_bug_is_reported(plant):
    target = plant.target()
    assert not fuzz(target, max_examples=50).failures, "caller inputs should not reach this bug"
    outcome = fuzz(target, max_examples=200, contract="wide")
    assert outcome.failures and outcome.first_failure_at <= 200
