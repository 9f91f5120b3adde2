"""Every target's input models, drawn 300 times for each device: a value drawn for one device only must be
refused on the other (``runs_on``). A whole-catalog check (about 2 s a target and contract on the 2-core host),
so it lives with the end-to-end tests, not in the inner loop (tests/unit/test_on_devices.py has the rule's own
tests)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz.engine.devices import on_devices
from fuzz.engine.runner import no_local_constants
from fuzz.targets import CONTRACTS, lookup

RUN = ("cpu", "cuda")


def _drawn(target, device: str, contract: str, count: int = 300) -> list[dict]:
    """The same draws in any process: derandomized, and without Hypothesis' pool of constants from the
    modules imported so far (fuzz.engine.runner.no_local_constants says why)."""
    specs: list[dict] = []

    @settings(max_examples=count, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(target.input_model().specs((device,), contract))
    def draw(spec: dict) -> None:
        specs.append(spec)

    with no_local_constants():
        draw()
    return specs


ENOUGH = 10
"""Seen this often for one device and never for the other: a value drawn for that device only. A value both
devices draw alike, with the chance p of each draw, misses one device's 300 draws while showing 10 times in
the other's with a chance under e**-10 (the threshold keeps rare shared values, a uint32 source, apart)."""


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("target", lookup([]), ids=lambda t: t.name)
def test_a_value_drawn_for_one_device_only_is_refused_on_the_other(target, contract):
    """The guard for the next input model: one whose draws depend on the device must say so in ``runs_on``,
    or the engine would run, say, a CUDA-only form on cpu. Spec by spec, a top-level string value drawn
    ENOUGH times in 300 draws for one device and never for the other must be refused on that other device.
    Only names (forms, modes, dtypes) are compared: numbers differ between any two samples."""
    if not set(RUN) <= set(target.devices):
        pytest.skip(f"{target.name} runs on {', '.join(target.devices)} only")
    drawn = {device: _drawn(target, device, contract) for device in RUN}
    counts = {device: Counter((k, v) for spec in specs for k, v in spec.items()
                              if isinstance(v, str) and k != "device")
              for device, specs in drawn.items()}
    model = target.input_model()
    for device, other in (RUN, RUN[::-1]):
        only_here = {kv for kv, n in counts[device].items() if n >= ENOUGH and not counts[other][kv]}
        for spec in drawn[device]:
            mine = {(k, v) for k, v in spec.items() if isinstance(v, str) and (k, v) in only_here}
            assert not mine or on_devices(model, spec, RUN) == [spec], (
                f"{target.name} ({contract}) drew {sorted(mine)} for {device} only, yet its model lets the "
                f"spec run on {other}: define runs_on(spec, device) in its input model")
