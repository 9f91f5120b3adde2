"""Which sync rule judges a target (fuzz/oracles/syncrule.py, docs/verdicts.md#which-sync-rule).

No GPU here: the verdicts are checked on constructed SideResults with a CUDA spec (nothing is launched),
the rule on sides built offline from the source packs shipped in sources/.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from fuzz.config import RunConfig
from fuzz.engine.execute import ExampleResult
from fuzz.engine.runner import TallyCounter, fuzz_target
from fuzz.oracles.compare import differential
from fuzz.oracles.outcome import Raised, SideResult
from fuzz.oracles.syncrule import descent_parts, function_syncs, optimized_descends, sync_rule
from fuzz.records.model import DeviceTally, ReportError
from fuzz.records.verdicts import Verdict, decide_example
from fuzz.releases import bind_sides
from fuzz.targets import lookup
from tests.e2e.test_sides import FLA, tree

OFFSETS = "fla-chunk-offsets"
CUDA_SPEC = {"device": "cuda", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2}
CPU_SPEC = {**CUDA_SPEC, "device": "cpu"}


def target(name: str = OFFSETS):
    (found,) = lookup([name])
    return found


def rule_of(legacy: str = "copy", optimized: str = "copy", sync_budget: str = "auto", name: str = OFFSETS) -> str:
    config = RunConfig(legacy=legacy, optimized=optimized, sync_budget=sync_budget)
    return sync_rule(bind_sides(target(name), config), config)


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("mode", ["auto", "apply", "ignore"])
def test_the_copies_are_judged_by_their_budget_whatever_the_flag_says(mode):
    assert rule_of(sync_budget=mode) == "budget"


def test_a_side_rebuilt_from_the_budgets_release_descends_from_it():
    assert rule_of("vllm==0.27.1", "vllm==0.28.0") == "relative+budget"
    config = RunConfig(legacy="vllm==0.27.1", optimized="vllm==0.28.0")
    bound = bind_sides(target(), config)
    assert bound.optimized.startswith("syncfuzz_sides.optimized_") and optimized_descends(bound, config)


def test_an_old_release_as_optimized_does_not_descend():
    # 0.27.1 is older than the optimized copy's release: it is rebuilt on legacy/, an old release's code.
    assert rule_of("vllm==0.28.0", "vllm==0.27.1") == "relative"
    assert rule_of("copy", "vllm==0.27.1") == "relative"


def test_a_copy_as_optimized_against_a_source_is_relative_plus_its_budget():
    assert rule_of("vllm==0.27.1", "copy") == "relative+budget"


def test_the_flag_applies_or_ignores_the_budget_whatever_the_descent():
    assert rule_of("vllm==0.28.0", "vllm==0.27.1", sync_budget="apply") == "relative+budget"
    assert rule_of("vllm==0.27.1", "vllm==0.28.0", sync_budget="ignore") == "relative"


def test_a_release_whose_reachable_code_changed_does_not_descend():
    # 0.33.0 rewrote prepare_chunk_indices but kept prepare_chunk_offsets (the shipped packs).
    assert rule_of("vllm==0.27.1", "vllm==0.33.0", name="fla-chunk-indices") == "relative"
    assert rule_of("vllm==0.27.1", "vllm==0.33.0", name=OFFSETS) == "relative+budget"


def test_an_inherited_entry_point_is_followed_to_the_code_that_runs():
    # KeyeForConditionalGeneration.embed_multimodal is BaseKeyeModule's: reach from the path's qualname
    # alone finds nothing, which would make any source "descend".
    assert rule_of("vllm==0.27.1", "vllm==0.28.0", name="keep-on-cpu-keye-grid-thw") == "relative+budget"
    assert rule_of("vllm==0.27.1", "vllm==0.33.0", name="keep-on-cpu-keye-grid-thw") == "relative"


def test_a_checkout_descends_when_only_comments_changed_and_not_when_code_did(tmp_path):
    old = "    ).cumsum(-1)"
    commented = tree(tmp_path / "a", {FLA: (old, "    ).cumsum(-1)  # a reviewer's note")})
    changed = tree(tmp_path / "b", {FLA: (old, "    ).cumsum(dim=-1)")})
    assert rule_of("vllm==0.27.1", str(commented)) == "relative+budget"
    assert rule_of("vllm==0.27.1", str(changed)) == "relative"


def test_the_report_row_names_the_rule(tmp_path):
    config = RunConfig(targets=(OFFSETS,), legacy="vllm==0.27.1", optimized="vllm==0.28.0", max_examples=3,
                       isolated=False, confirm=0)
    entry = fuzz_target(target(), config).entry()
    assert entry.examples >= 3 and entry.sync_rule == "relative+budget"
    assert json.loads(json.dumps(entry.to_json()))["sync_rule"] == "relative+budget"
    copies = fuzz_target(target(), RunConfig(max_examples=2, isolated=False, confirm=0)).entry()
    assert copies.sync_rule == "budget"


# --------------------------------------------------------------------------- the verdict


def side(syncs: int | None, value=None, raised: Raised | None = None) -> SideResult:
    return SideResult(value=torch.tensor([0, 2]) if value is None else value, raised=raised, syncs=syncs)


def verdict_of(legacy: SideResult, optimized: SideResult, rule: str, budget: int = 0, spec: dict = CUDA_SPEC,
               contract: str = "caller"):
    """The verdict under ``rule`` with the target's budget set to ``budget``: the differential and the sync
    rule only (the target's other oracles find nothing here)."""
    sides = {"budget": ("copy", "copy", "auto"), "relative": ("vllm==0.28.0", "vllm==0.27.1", "auto"),
             "relative+budget": ("vllm==0.27.1", "vllm==0.28.0", "auto"),
             "ignored": ("vllm==0.27.1", "vllm==0.28.0", "ignore")}[rule]
    config = RunConfig(legacy=sides[0], optimized=sides[1], sync_budget=sides[2], contract=contract)
    bound = dataclasses.replace(bind_sides(target(), config), expected_optimized_syncs=budget)
    decision = decide_example(differential(legacy, optimized, bound.comparison), legacy.ok and optimized.ok,
                              sync=lambda: function_syncs(bound, spec, legacy, optimized, config),
                              invariants=list, reference=list, consumer=list)  # list(): nothing found
    return decision.verdict, decision.mismatches


def test_the_wide_contract_allows_the_optimized_side_as_many_syncs_as_legacy():
    """Under the wide contract inputs arrive in forms the optimized code was never meant to take sync-free,
    so the budget is raised to legacy's count on the same input (never lowered below the declared one)."""
    assert verdict_of(side(4), side(2), "budget", contract="caller")[0] is Verdict.SYNC_REGRESSION
    assert verdict_of(side(4), side(2), "budget", contract="wide")[0] is Verdict.AGREE
    assert verdict_of(side(4), side(5), "budget", contract="wide")[0] is Verdict.SYNC_REGRESSION
    assert verdict_of(side(0), side(1), "budget", budget=1, contract="wide")[0] is Verdict.AGREE


def test_a_divergence_is_judged_before_the_syncs():
    verdict, mismatches = verdict_of(side(0), side(5, value=torch.tensor([0, 3])), "budget")
    assert verdict is Verdict.DIVERGENCE and mismatches[0].what == "values"


def test_as_many_syncs_as_legacy_agrees_under_the_relative_rule_whatever_the_budget():
    verdict, mismatches = verdict_of(side(4), side(4), "relative", budget=0)
    assert verdict is Verdict.AGREE and mismatches == []


def test_more_syncs_than_legacy_is_a_sync_regression_saying_why_the_budget_does_not_apply():
    verdict, (mismatch,) = verdict_of(side(4), side(5), "relative", budget=0)
    assert verdict is Verdict.SYNC_REGRESSION and mismatch.what == "syncs" and mismatch.path == ""
    _, (worded,) = verdict_of(side(2), side(3), "relative", budget=1)
    assert worded.detail == (
        "optimized made 3 GPU<->CPU syncs per call, legacy made 2 on the same input (rule: relative to legacy; "
        "the budget of 1 declared for vllm 0.28.0 does not apply: the optimized side's code is not that "
        "release's)")
    _, (ignored,) = verdict_of(side(2), side(3), "ignored", budget=1)
    assert "is ignored (--sync-budget ignore)" in ignored.detail


def test_fewer_syncs_than_legacy_agrees_and_is_counted_fewer():
    legacy, optimized = side(5), side(2)
    verdict, _ = verdict_of(legacy, optimized, "relative", budget=0)
    assert verdict is Verdict.AGREE
    counter = TallyCounter()
    counter.add(ExampleResult(CUDA_SPEC, verdict, [], legacy, optimized))
    assert counter.frozen().sync_pairs == {"fewer": 1, "same": 0, "more": 0}


def test_the_copies_keep_their_budget_and_name_the_rule():
    verdict, (mismatch,) = verdict_of(side(4), side(4), "budget", budget=0)
    assert verdict is Verdict.SYNC_REGRESSION
    assert mismatch.detail == ("optimized made 4 GPU<->CPU syncs per call, target allows 0 (legacy made 4; rule: "
                               "the budget declared for vllm 0.28.0, the optimized copy's release)")
    assert verdict_of(side(4), side(1), "budget", budget=1)[0] is Verdict.AGREE


def test_relative_plus_budget_flags_either_and_says_which():
    verdict, (by_budget,) = verdict_of(side(4), side(4), "relative+budget", budget=0)
    assert verdict is Verdict.SYNC_REGRESSION and "target allows 0" in by_budget.detail
    assert "rule: relative to legacy, plus the budget declared for vllm 0.28.0" in by_budget.detail
    verdict, (both,) = verdict_of(side(4), side(5), "relative+budget", budget=0)
    assert verdict is Verdict.SYNC_REGRESSION and both.detail.endswith("declared for vllm 0.28.0: also exceeded)")
    verdict, (relative,) = verdict_of(side(2), side(3), "relative+budget", budget=5)
    assert verdict is Verdict.SYNC_REGRESSION and relative.detail.endswith("within it)")
    assert verdict_of(side(2), side(2), "relative+budget", budget=5)[0] is Verdict.AGREE


def test_the_relative_rule_needs_cuda_and_two_returned_calls():
    assert verdict_of(side(None), side(None), "relative", spec=CPU_SPEC)[0] is Verdict.AGREE
    boom = Raised("ValueError", "no")
    assert verdict_of(side(1, raised=boom), side(5, raised=boom), "relative")[0] is Verdict.AGREE
    # Under --stress the optimized side's syncs are not counted (None): not judged.
    assert verdict_of(side(1), side(None), "relative")[0] is Verdict.AGREE


def test_a_divergence_outranks_a_sync_regression():
    verdict, (mismatch,) = verdict_of(side(1), side(5, value=torch.tensor([0, 3])), "relative")
    assert verdict is Verdict.DIVERGENCE and mismatch.what == "values"


# --------------------------------------------------------------------------- sync_pairs in the report


def result(legacy: SideResult, optimized: SideResult, spec: dict = CUDA_SPEC) -> ExampleResult:
    return ExampleResult(spec, Verdict.AGREE, [], legacy, optimized)


def test_sync_pairs_travel_from_the_counter_through_the_report_and_add_up():
    counter = TallyCounter()
    for legacy, optimized in ((5, 2), (4, 4), (4, 4), (4, 5)):
        counter.add(result(side(legacy), side(optimized)))
    counter.add(result(side(None), side(None), CPU_SPEC))  # CPU: nothing to compare
    counter.add(result(side(1, raised=Raised("ValueError", "x")), side(3)))  # legacy raised: not counted
    tally = counter.frozen()
    assert tally.sync_pairs == {"fewer": 1, "same": 2, "more": 1}
    back = DeviceTally.from_json(json.loads(json.dumps(tally.to_json())), "tally")
    assert back == tally
    total = back + DeviceTally(examples=2, verdicts={"agree": 2}, sync_pairs={"fewer": 0, "same": 1, "more": 1})
    assert total.sync_pairs == {"fewer": 1, "same": 3, "more": 2}
    assert (back + DeviceTally()).sync_pairs == tally.sync_pairs
    assert TallyCounter().frozen().sync_pairs == {}


def test_a_report_from_before_sync_pairs_reads_as_empty_and_damaged_counts_are_refused():
    old = DeviceTally(examples=3, verdicts={"agree": 3}).to_json()
    del old["sync_pairs"]
    assert DeviceTally.from_json(old, "old").sync_pairs == {}
    for pairs, message in (({"fewer": -1}, "non-negative"), ({"fewer": "1"}, "non-negative"),
                           ({"sideways": 1}, "not one of"), ({"same": 4}, "more than its 3 examples")):
        with pytest.raises(ReportError, match=message):
            DeviceTally.from_json({**old, "sync_pairs": pairs}, "damaged")


# --------------------------------------------------------------------------- what decides the syncs

INTERNS1 = "vllm/model_executor/models/interns1.py"
INTERNS1_TARGET = "keep-on-cpu-interns1-num-patches"
KEPT = 'image_num_patches=MultiModalFieldConfig.batched("image", keep_on_cpu=True)'
MOVED = 'image_num_patches=MultiModalFieldConfig.batched("image")'
FIELD_CONFIG = "InternS1MultiModalProcessor._get_mm_fields_config"


def parts_of(optimized: str, name: str = INTERNS1_TARGET) -> dict[str, bool]:
    config = RunConfig(legacy="vllm==0.27.1", optimized=optimized)
    return descent_parts(bind_sides(target(name), config), config)


def test_the_field_config_that_places_the_inputs_is_a_part_of_the_descent():
    # 0.28.0 itself: the consumer and the field config are the copy's, so the budget declared for it applies.
    assert parts_of("vllm==0.28.0") == {"entry point": True, FIELD_CONFIG: True}
    assert rule_of("vllm==0.27.1", "vllm==0.28.0", name=INTERNS1_TARGET) == "relative+budget"


def test_a_field_kept_on_cpu_no_more_takes_the_budget_off_though_the_consumer_is_the_copys(tmp_path):
    """#51738's tree: the claimed consumer descends from 0.28.0, the field configuration does not (a
    ``keep_on_cpu=True`` removed puts num_patches on the device); the budget of 0 declared for 0.28.0's
    placement would call its syncs a regression, so only the relative rule judges."""
    moved = tree(tmp_path, {INTERNS1: (KEPT, MOVED)})
    assert parts_of(str(moved)) == {"entry point": True, FIELD_CONFIG: False}
    assert rule_of("vllm==0.27.1", str(moved), name=INTERNS1_TARGET) == "relative"


def test_a_changed_consumer_with_the_copys_field_config_does_not_descend(tmp_path):
    changed = tree(tmp_path, {INTERNS1: ("        num_patches = image_input[\"num_patches\"]\n",
                                         "        num_patches = list(image_input[\"num_patches\"])\n")})
    assert parts_of(str(changed)) == {"entry point": False, FIELD_CONFIG: True}


def test_the_row_and_its_note_say_which_parts_descended(tmp_path):
    from fuzz.records.model import Report
    from fuzz.reports.report import report_notes

    moved = tree(tmp_path, {INTERNS1: (KEPT, MOVED)})
    config = RunConfig(targets=(INTERNS1_TARGET,), legacy="vllm==0.27.1", optimized=str(moved), max_examples=2,
                       isolated=False, confirm=0)
    entry = fuzz_target(target(INTERNS1_TARGET), config).entry()
    assert entry.sync_rule == "relative" and dict(entry.sync_descent) == {"entry point": True, FIELD_CONFIG: False}
    data = json.loads(json.dumps(entry.to_json()))
    assert data["sync_descent"] == {"entry point": True, FIELD_CONFIG: False}
    notes = report_notes(Report((entry,)))
    assert any(f"{INTERNS1_TARGET} (descended: entry point; not: {FIELD_CONFIG})" in note for note in notes)
    assert type(entry).from_json(data).sync_descent == entry.sync_descent
    with pytest.raises(ReportError, match="sync_descent"):
        type(entry).from_json({**data, "sync_descent": {"entry point": "yes"}})
