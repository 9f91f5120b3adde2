"""Probe (GPU host): the syncs per call each side of the EVS targets makes on CUDA, per example, to set their
declared budgets (H100, 2026-12-06: qwen25-vl-video-evs and qwen3vl-expanded-positions exceeded a budget of 0)."""

from __future__ import annotations

import collections

import fuzz.engine.runner as runner
from fuzz.config import RunConfig
from fuzz.engine.runner import fuzz_target
from fuzz.targets import lookup

for name in ("qwen25-vl-video-evs", "qwen3vl-expanded-positions", "qwen25-vl-image-evs", "qwen3vl-image-evs"):
    (target,) = lookup([name])
    seen: collections.Counter = collections.Counter()
    original = runner.run_example

    def recording(target, spec, **kwargs):  # noqa: ANN001, ANN202
        result = original(target, spec, **kwargs)
        keys = {k: spec[k] for k in ("kind", "grids", "grid", "merge", "timestamps", "pruning", "rate") if k in spec}
        seen[(result.legacy.syncs, result.optimized.syncs, result.optimized.allowed_syncs,
              target.syncs_allowed(spec), str(keys)[:120])] += 1
        return result

    runner.run_example = recording
    try:
        fuzz_target(target, RunConfig(devices=("cuda",), seed=0, max_examples=40, isolated=False, confirm=0))
    finally:
        runner.run_example = original
    print(f"== {name}: (legacy, optimized, optimized allowed, budget, spec) x count")
    for key, count in sorted(seen.items(), key=lambda kv: -kv[1])[:12]:
        print(count, key)
