"""GPU-only: the sync rule on pairs of real upstream trees (docs/verdicts.md#which-sync-rule).

A tree whose claimed keep-on-cpu consumer is the 0.28.0 copy's but whose field configuration differs (a
``keep_on_cpu=True`` removed, so num_patches reaches the consumer on the device) syncs more than the budget
declared for 0.28.0 and fewer times than 0.27.1: no sync-regression. A planted extra host read in an
optimized tree still is one, against the release it starts from."""

from __future__ import annotations

from pathlib import Path

from fuzz.config import RunConfig
from fuzz.engine.runner import fuzz_target
from fuzz.records.verdicts import Verdict
from fuzz.targets import lookup
from tests.conftest import requires_cuda
from tests.e2e.test_sides import tree
from tests.e2e.test_sync_rule import FIELD_CONFIG, INTERNS1, INTERNS1_TARGET, KEPT, MOVED

pytestmark = requires_cuda
PLANTED = ("        num_patches = image_input[\"num_patches\"]\n",
           "        num_patches = image_input[\"num_patches\"]\n"
           "        _ = image_embeds.sum().item()  # planted: one more sync\n")


def fuzz_on_cuda(legacy: str, optimized: Path, examples: int = 60):
    (target,) = lookup([INTERNS1_TARGET])
    config = RunConfig(devices=("cuda",), seed=0, max_examples=examples, legacy=legacy, optimized=str(optimized),
                       isolated=False, confirm=0)
    return fuzz_target(target, config)


def test_a_field_moved_to_the_device_with_fewer_syncs_than_legacy_is_no_sync_regression(tmp_path):
    outcome = fuzz_on_cuda("vllm==0.27.1", tree(tmp_path, {INTERNS1: (KEPT, MOVED)}))
    entry = outcome.entry()
    assert entry.sync_rule == "relative" and dict(entry.sync_descent) == {"entry point": True, FIELD_CONFIG: False}
    assert not [f for f in outcome.failures if f.verdict is Verdict.SYNC_REGRESSION], outcome.failures[:1]
    tally = outcome.tallies["cuda"]
    # The budget of 0 declared for 0.28.0 would have failed these: the field is on the device now.
    assert max(tally.optimized_syncs) >= 1
    assert entry.examples >= 30


def test_a_planted_extra_sync_in_an_optimized_tree_is_a_sync_regression(tmp_path):
    outcome = fuzz_on_cuda("vllm==0.28.0", tree(tmp_path, {INTERNS1: PLANTED}))
    assert outcome.verdict is Verdict.SYNC_REGRESSION
    assert "legacy made" in outcome.failures[0].mismatches[0].detail
