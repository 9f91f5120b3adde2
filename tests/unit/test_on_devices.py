"""One draw, every device (fuzz.engine.devices.on_devices): which devices a drawn spec runs on, and the input
models that refuse a device (``runs_on``). Every target's models drawn for each device:
tests/e2e/test_devices_drawn.py."""

from __future__ import annotations

import pytest

from fuzz.engine.devices import on_devices
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
