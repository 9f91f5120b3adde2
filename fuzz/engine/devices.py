"""Which devices a run may draw (``auto`` means cpu, plus cuda when present), and which of them an input
runs on."""

from __future__ import annotations

from collections.abc import Sequence

from fuzz.errors import UsageError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def cuda_available() -> bool:
    import torch  # here: devices_for is imported by an xdist worker that needs no torch (fuzz/run/orchestrate.py)

    return torch.cuda.is_available()


def resolve_devices(choice: str) -> tuple[str, ...]:
    if choice not in DEVICE_CHOICES:
        raise UsageError(f"--device {choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if choice == "cpu":
        return ("cpu",)
    if choice == "cuda":
        if not cuda_available():
            raise UsageError("--device cuda: this torch sees no CUDA device; use --device cpu or auto")
        return ("cuda",)
    return ("cpu", "cuda") if cuda_available() else ("cpu",)


def devices_for(target_devices: tuple[str, ...], run_devices: tuple[str, ...]) -> tuple[str, ...]:
    """The devices a target runs on in this run (empty: skipped, say why)."""
    return tuple(d for d in run_devices if d in target_devices)


def on_devices(model: object, spec: dict, devices: Sequence[str]) -> list[dict]:
    """``spec`` as an input for each of ``devices`` it may run on, in the run's order: the engine draws an input
    once and runs it on every device of the run (docs/design.md, "One draw, every device"). It always runs on
    the device it was drawn for, and on another unless the input model's optional ``runs_on(spec, device)``
    says no (fuzz.api.InputModel: a form only CUDA has, an input kept off CUDA because it kills the process
    there)."""
    runs_on = getattr(model, "runs_on", None)
    return [spec if device == spec["device"] else {**spec, "device": device}
            for device in devices
            if device == spec["device"] or runs_on is None or runs_on(spec, device)]
