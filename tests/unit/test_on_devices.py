"""One draw, every device (fuzz.engine.devices.on_devices): which devices a drawn spec runs on, and the input
models that refuse a device (``runs_on``)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz.engine.devices import on_devices
from fuzz.engine.runner import no_local_constants
from fuzz.targets import CONTRACTS, lookup
from strategies.paddleocr_vl.inputs import PaddleOCREncoderInputs
from strategies.torch_utils.inputs import CUDA_ONLY_FORMS, AsyncH2DInputs

RUN = ("cpu", "cuda")


class EveryDevice:
    """A model without ``runs_on``."""


class CpuOnly:
    def runs_on(self, spec: dict, device: str) -> bool:
        return device == "cpu"


class NoOtherDevice:
    def runs_on(self, spec: dict, device: str) -> bool:
        return False


def test_a_spec_runs_on_every_device_in_the_run_order_with_only_its_device_replaced():
    spec = {"device": "cuda", "n": [1, 2]}
    on = on_devices(EveryDevice(), spec, RUN)
    assert on == [{"device": "cpu", "n": [1, 2]}, spec]
    assert on[1] is spec and list(on[0]) == list(spec)  # the drawn one as drawn; key order kept


def test_a_model_refuses_other_devices_but_never_the_one_it_drew_for():
    assert on_devices(CpuOnly(), {"device": "cpu"}, RUN) == [{"device": "cpu"}]
    assert on_devices(CpuOnly(), {"device": "cuda"}, RUN) == [{"device": "cpu"}, {"device": "cuda"}]
    assert on_devices(NoOtherDevice(), {"device": "cuda"}, RUN) == [{"device": "cuda"}]
    assert on_devices(EveryDevice(), {"device": "cpu"}, ("cpu",)) == [{"device": "cpu"}]


def test_ids_past_the_grid_stay_off_cuda():
    model = PaddleOCREncoderInputs()
    assert model.runs_on({"ids": "past_grid"}, "cpu") and not model.runs_on({"ids": "past_grid"}, "cuda")
    assert all(model.runs_on({"ids": ids}, d) for ids in ("none", "grid", "bounded") for d in RUN)


@pytest.mark.parametrize("form", ["list", "numpy", "cpu_tensor", *CUDA_ONLY_FORMS])
def test_pinned_and_device_tensor_sources_need_cuda(form):
    model = AsyncH2DInputs()
    assert model.runs_on({"form": form}, "cuda")
    assert model.runs_on({"form": form}, "cpu") == (form not in CUDA_ONLY_FORMS)


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
