"""Is a non_blocking H2D copy from pageable memory a sync? (finding F4)

Measured directly: keep the GPU busy with a ~50 ms sleep kernel, then time the
host-side return of ``x.to("cuda", non_blocking=True)`` for a pageable and a
pinned ``x`` (and a blocking copy for reference). A copy that returns only
after the sleep waited for the GPU: it is a sync whatever its name says.

Then the two hidden-sync detectors (the current TorchFunctionMode and the
TorchDispatchMode it replaced) count the copies of the two examples whose
counts changed between them, with the line of each counted copy.
Run on a GPU host from the repo root: ``python scripts/gpu_pageable_probe.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fuzz.oracles.syncs  # noqa: E402
from fuzz.oracles.copywatch import caller_site  # noqa: E402
from fuzz.oracles.syncs import _pageable_host, counting_syncs  # noqa: E402
from fuzz.targets import lookup  # noqa: E402

SLEEP_CYCLES = 100_000_000  # ~50 ms at the H200's 1.98 GHz


def host_return_ms(copy) -> float:  # noqa: ANN001
    times = []
    for _ in range(7):
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        start = time.perf_counter()
        copy()
        times.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    return statistics.median(times)


class OldDispatchDetector(TorchDispatchMode):
    """The detector before 2026-11-29 (fuzz/oracles/syncs.py history), kept here for comparison."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            device = kwargs.get("device")
            if kwargs.get("non_blocking") and device is not None and torch.device(device).type == "cuda" \
                    and _pageable_host(args[0]):
                self.sites.append(caller_site(2))
        elif func is torch.ops.aten.copy_.default:
            non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
            if non_blocking and args[0].device.type == "cuda" and _pageable_host(args[1]):
                self.sites.append(caller_site(2))
        return func(*args, **kwargs)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_pageable_probe: needs a CUDA device")
    torch.cuda.init()
    sleep_only = host_return_ms(lambda: None)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(SLEEP_CYCLES)
    torch.cuda.synchronize()
    print(f"sleep kernel: {(time.perf_counter() - t0) * 1e3:.1f} ms on the GPU; launch returns in {sleep_only:.3f} ms")
    for size in (16, 4096, 1 << 18, 1 << 19, 1 << 20):
        pageable = torch.arange(size)
        pinned = pageable.pin_memory()
        pageable_ms = host_return_ms(lambda: pageable.to('cuda', non_blocking=True))
        print(f"{size:8} int64 ({size * 8 / 1024:7.0f} KiB): non_blocking pageable {pageable_ms:8.3f} ms"
              f" | non_blocking pinned {host_return_ms(lambda: pinned.to('cuda', non_blocking=True)):8.3f} ms"
              f" | blocking pageable {host_return_ms(lambda: pageable.to('cuda')):8.3f} ms")
    examples = {
        "paddleocr-encode-image": {"device": "cuda", "grids": [[1, 2, 2]], "image": 0, "grid_form": "device_tensor",
                                   "grid_dtype": "int64", "patch_size": 1, "pixel_dtype": "float32",
                                   "visual_dtype": "float32", "seed": 0},
        "ernie-encoder-metadata": {"device": "cuda", "merge": 1, "head_dim": 4, "backend": "FLASH_ATTN",
                                   "grid_thw": [[1, 1, 1]] * 6, "grid_form": "device_tensor", "grid_dtype": "int64",
                                   "rotary_on": "device", "num_pad": 0},
        "fla-chunk-indices": None,
    }
    # Count every non-empty pageable copy here, whatever its size, so both
    # detectors' reach is compared on these small tables (the fuzzer itself
    # counts only copies past PAGEABLE_STAGED_BYTES, the measured limit above).
    fuzz.oracles.syncs.PAGEABLE_STAGED_BYTES = 0
    for name, spec in examples.items():
        (target,) = lookup([name])
        if spec is None:
            spec = {"device": "cuda", "cu_seqlens": [0, 3, 70], "dtype": "int32", "chunk_size": 16}
        for side in ("legacy", "optimized"):
            model = target.input_model()
            try:
                thunk = model.materialize(spec, target.impl(side), side)
            except Exception as exc:  # noqa: BLE001
                print(f"{name} {side}: cannot build {spec}: {exc!r}")
                break
            torch.cuda.synchronize()
            with counting_syncs(True) as tally:
                thunk()
            thunk = model.materialize(spec, target.impl(side), side)
            torch.cuda.synchronize()
            old = OldDispatchDetector()
            with old:
                thunk()
            print(f"{name:24} {side:9} syncs {tally.total:3} hidden (function mode) {tally.hidden} at "
                  f"{tally.hidden_sites} | hidden (old dispatch mode) {len(old.sites)} at {old.sites}")


if __name__ == "__main__":
    main()
