"""Each input model passes Hypothesis' health checks, which the engine itself suppresses.

The fuzzer turns them off (fuzz.engine.runner: a slow target's first draws would otherwise fail a run), so
nothing else would notice an input model whose data generation became too slow, filtered too much or
drew oversized examples. Here each model's spec strategy is drawn with every health check on but the
timing one: the specs only, as plain data, on both devices' names (no tensors are built).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz.targets import CONTRACTS, lookup

TARGETS = lookup([])


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_the_input_model_passes_the_health_checks(target, contract):
    strategy = target.input_model().specs(("cpu", "cuda"), contract)

    # derandomize: the same draws on every machine. Every check that judges what is drawn is on
    # (filter_too_much, data_too_large, large_base_example, ...); too_slow stays off, as in
    # tests/conftest.py's profile: it judges the host's speed, and a busy CI host must not fail a test.
    @settings(max_examples=30, database=None, derandomize=True, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def draw(spec: dict) -> None:
        assert spec["device"] in ("cpu", "cuda")

    draw()
