#!/usr/bin/env bash
# Issue #43/#44 on a GPU host: the sampler's host-copy targets (logprobs-tensors-to-cpu,
# sampling-mask-tensors-to-cpu, sampling-mask-lists-to-nested-list) on CUDA: syncs per call (expected 0: an event
# wait is not a sync torch's detector counts -- checked first), the race oracle, and the D2H race plant and its
# safe twin (tests/gpu/test_races.py). Unrun when written (2026-12-06): no GPU run reached this branch.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
T="--target logprobs-tensors-to-cpu --target sampling-mask-tensors-to-cpu --target sampling-mask-lists-to-nested-list"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 - <<'PY'
import warnings, torch
torch.cuda.set_sync_debug_mode("warn")
x = torch.arange(10, device="cuda")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    host = x.to("cpu", non_blocking=True)
    event = torch.cuda.Event(blocking=True)
    event.record()
    event.synchronize()
print("sync warnings from a non_blocking D2H plus an event wait:", len(caught), "pinned:", host.is_pinned())
PY
  python3 -m pytest -q -n 0 -p no:cacheprovider tests/gpu/test_races.py -k "logprobs" -rfE 2>&1 | tail -20
  python3 -m fuzz run --device cuda $T --max-examples 500 2>&1 | tail -7
  python3 -m fuzz run --device cuda --stress $T --max-examples 200 2>&1 | tail -4
  python3 -m fuzz run --device cuda --race $T --max-examples 200 2>&1 | tail -4
} 2>&1 | tee "$OUT/host-copies.log"
