"""Fewer Hypothesis choices per spec where a choice buys nothing (issue #25 item 4):
fixed dictionaries without Hypothesis' key-order shuffle, and caller-contract
``async_tensor_h2d`` values from one drawn seed (strategies/common.py)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from strategies.common import fixed_dict, seeded_ints
from strategies.torch_utils.inputs import AsyncH2DInputs

FIRST = settings(database=None, derandomize=True, phases=[Phase.generate], max_examples=5_000,
                 suppress_health_check=list(HealthCheck))
CALLER = AsyncH2DInputs().specs(("cpu",), "caller")


def _choices(strategy: st.SearchStrategy, examples: int = 50) -> list[int]:
    counts = []

    @settings(max_examples=examples, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def test(value: object) -> None:
        counts.append(len(current_build_context().data.choices))

    test()
    return counts


def test_fixed_dict_keeps_the_key_order_and_draws_one_choice_per_value():
    mapping = {"c": st.integers(1, 6), "a": st.booleans(), "b": st.sampled_from(["x", "y"])}
    seen = find(fixed_dict(mapping), lambda d: d["c"] == 6 and d["a"] and d["b"] == "y", settings=FIRST)
    assert list(seen) == ["c", "a", "b"]
    assert set(_choices(fixed_dict(mapping))) == {3}
    # Hypothesis' own fixed_dictionaries spends one more choice per key after the first on the order.
    assert min(_choices(st.fixed_dictionaries(mapping))) == 3 + 2


def test_seeded_ints_are_deterministic_in_range_and_zero_at_seed_zero():
    assert seeded_ints(5, 0, -1000, 1000) == [0] * 5
    assert seeded_ints(0, 7, -1000, 1000) == []
    first = seeded_ints(64, 12345, -1000, 1000, (-1000, 1000))
    assert first == seeded_ints(64, 12345, -1000, 1000, (-1000, 1000))
    assert first != seeded_ints(64, 12346, -1000, 1000, (-1000, 1000))
    assert all(-1000 <= v <= 1000 and type(v) is int for v in first)
    many = [v for seed in range(1, 40) for v in seeded_ints(16, seed, -1000, 1000, (-1000, 1000))]
    assert -1000 in many and 1000 in many  # the edges come up
    assert len(set(many)) > 200  # and the rest is spread over the range


def test_caller_h2d_specs_are_plain_json_with_values_in_the_caller_range():
    @settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(CALLER)
    def test(spec: dict) -> None:
        assert list(spec) == ["device", "values", "form", "dtype"]
        assert json.loads(json.dumps(spec)) == spec
        assert len(spec["values"]) <= 16 and all(-1000 <= v <= 1000 for v in spec["values"])

    test()


def test_caller_h2d_still_draws_empty_zero_extreme_and_full_length_values():
    find(CALLER, lambda s: s["values"] == [], settings=FIRST)
    find(CALLER, lambda s: len(s["values"]) == 16, settings=FIRST)
    find(CALLER, lambda s: 0 in s["values"], settings=FIRST)
    find(CALLER, lambda s: -1000 in s["values"] and 1000 in s["values"], settings=FIRST)
    find(CALLER, lambda s: len(set(s["values"])) < len(s["values"]), settings=FIRST)  # a duplicate


def test_caller_h2d_spec_costs_a_few_choices_whatever_its_length():
    # device (one choice when there are two), length, seed, form, dtype: at most 5; was 2 per value more.
    assert max(_choices(AsyncH2DInputs().specs(("cpu", "cuda"), "caller"), 100)) <= 5
