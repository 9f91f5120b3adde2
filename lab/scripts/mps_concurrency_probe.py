"""Where a CUDA worker among N loses its rate (issue #25): the same phases, timed in N processes at once.

python3 lab/scripts/mps_concurrency_probe.py --procs N --window S [--out FILE]

Process i fuzzes glm4v-embeddings (even i) or fla-chunk-offsets (odd i) on CUDA. All processes start each
phase at the same wall-clock time and run it for S seconds:
  fuzz        fuzz.engine.runner.fuzz_target to a deadline (what the fuzzer runs)          -> examples/s
  rounds      fuzz.engine.execute.run_example on pre-drawn specs (no Hypothesis)           -> examples/s
  stages      the same under fuzz.engine.stagetimes.recording (a sync after each stage)    -> us per stage
  hypothesis  Hypothesis alone, the fuzzer's list shape (no CUDA: pure CPU)          -> specs/s
  sync        a one-element kernel then torch.cuda.synchronize()                     -> us per round trip
  h2d         torch.tensor(8 ints, device="cuda") then .tolist()                     -> us per round trip
Comparing N=1 with N=16, with and without MPS (the caller starts the daemon), says whether the loss is in
the CPU work (hypothesis), in GPU round trips (sync, h2d), or in a stage of the round. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGETS = ("glm4v-embeddings", "fla-chunk-offsets")
DEVICE = os.environ.get("PROBE_DEVICE", "cuda")  # cpu: a smoke test of the script without a GPU
PHASES = ("fuzz", "rounds", "stages", "hypothesis", "sync", "h2d")


def child(index: int, start_wall: float, window: float) -> dict:
    import torch

    from bench.run import STAGES, engine, hypothesis_alone
    from fuzz.config import RunConfig
    from fuzz.engine.execute import run_example
    from fuzz.engine.runner import SPECS_PER_CASE, fuzz_target
    from fuzz.engine.stagetimes import recording
    from fuzz.targets import lookup

    def sync() -> None:
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    (target,) = lookup([TARGETS[index % len(TARGETS)]])
    _, specs = engine(target, DEVICE, 60, 1 + index)  # the warm-up, keeping the specs the fuzzer drew
    sync()
    result: dict = {"index": index, "target": target.name, "specs": len(specs)}

    def until(phase: int) -> float:
        """The monotonic time phase ``phase`` ends; sleeps to its start first."""
        begin = start_wall + phase * window
        time.sleep(max(0.0, begin - time.time()))
        return time.monotonic() + (begin + window - time.time())

    # fuzz
    end = until(0)
    t0 = time.monotonic()
    outcome = fuzz_target(target, RunConfig(devices=(DEVICE,), seed=100 + index, budget=window), deadline=end)
    result["fuzz"] = outcome.examples / (time.monotonic() - t0)
    # rounds
    end = until(1)
    t0, done = time.monotonic(), 0
    while time.monotonic() < end:
        run_example(target, specs[done % len(specs)])
        done += 1
    sync()
    result["rounds"] = done / (time.monotonic() - t0)
    # stages
    end = until(2)
    done = 0
    with recording(sync=torch.cuda.synchronize if DEVICE == "cuda" else None) as recorder:
        while time.monotonic() < end:
            run_example(target, specs[done % len(specs)])
            done += 1
    result["stages_us"] = {name: 1e6 * recorder.seconds.get(name, 0.0) / max(done, 1) for name in STAGES}
    # hypothesis
    end = until(3)
    t0, drawn = time.monotonic(), 0
    while time.monotonic() < end:
        seconds, _ = hypothesis_alone(target, DEVICE, 20, drawn, batch=SPECS_PER_CASE)
        drawn += 1
    result["hypothesis_cases"] = drawn * 20 / (time.monotonic() - t0)
    # sync
    x = torch.zeros(1, device=DEVICE)
    end = until(4)
    t0, done = time.monotonic(), 0
    while time.monotonic() < end:
        x.add_(1)
        sync()
        done += 1
    result["sync_us"] = 1e6 * (time.monotonic() - t0) / done
    # h2d
    values = list(range(8))
    end = until(5)
    t0, done = time.monotonic(), 0
    while time.monotonic() < end:
        torch.tensor(values, device=DEVICE).tolist()
        done += 1
    result["h2d_us"] = 1e6 * (time.monotonic() - t0) / done
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument("--lead", type=float, default=25.0, help="seconds for every process to import and warm up")
    parser.add_argument("--child", type=int)
    parser.add_argument("--start", type=float)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.start, args.window)), flush=True)
        return
    start = time.time() + args.lead
    env = dict(os.environ, OMP_NUM_THREADS="1", SYNCFUZZ_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(i), "--start", str(start),
                               "--window", str(args.window)], stdout=subprocess.PIPE, text=True, env=env)
             for i in range(args.procs)]
    rows = []
    for proc in procs:
        out, _ = proc.communicate()
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if lines:
            rows.append(json.loads(lines[-1]))
    late = time.time() - (start + len(PHASES) * args.window)
    summary: dict = {"label": args.label, "procs": args.procs, "answered": len(rows), "late_s": round(late, 1)}
    for name in TARGETS:
        mine = [r for r in rows if r["target"] == name]
        if not mine:
            continue
        each = {key: round(statistics.mean(r[key] for r in mine), 1)
                for key in ("fuzz", "rounds", "hypothesis_cases", "sync_us", "h2d_us")}
        each["stages_us"] = {k: round(statistics.mean(r["stages_us"][k] for r in mine), 1)
                             for k in mine[0]["stages_us"]}
        summary[name] = each
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
