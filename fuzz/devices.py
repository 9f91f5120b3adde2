"""Which devices a run may draw: ``auto`` means cpu, plus cuda when present."""

from __future__ import annotations

from fuzz.errors import UsageError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def cuda_available() -> bool:
    import torch  # here: devices_for is imported by an xdist worker that needs no torch (fuzz/orchestrate.py)

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
