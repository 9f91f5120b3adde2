"""#25: what tracing reach costs a cheap target's example, and where (lab/benchmarks/history.md, "reach tracing at a
nightly item's length"). In the H200's mps nightly, async-tensor-h2d and cpu-gpu-buffer-copy-to-gpu ran 0.77x
their untraced examples, while one CPU process lost 1-6% to tracing them. This runs the engine with and
without reach (bench.run.engine, alternating), times the tracer's own start and stop (fuzz.reach.collect.Measure.on
and .off), and with --profile writes a cProfile of a traced and an untraced run. Run it once, and W at once
(lab/scripts/reach_cost_probe.sh), on cuda and cpu: which of "a traced CUDA call" and "W processes tracing"
costs the examples. Traced runs come once per reach collector the Python has (``modes``): coverage.py's C
tracer (``ctrace``) and, on 3.12+, the sys.monitoring collector (``sysmon``, fuzz/reach/monitor.py); the
order rotates, so no mode always runs first. With --profile, own time is also summed by package.

    PYTHONPATH=. python3 lab/scripts/reach_cost_probe.py --device cuda --target async-tensor-h2d [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

from bench.run import engine
from fuzz.reach.monitor import REACH_CORE_ENV
from fuzz.targets import lookup


def timed_tracer() -> dict[str, float]:
    """Wrap Measure.on/off: seconds spent starting and stopping coverage.py, and how many times."""
    import fuzz.reach.collect as reach

    spent = {"on_s": 0.0, "off_s": 0.0, "starts": 0}
    on, off = reach.Measure.on, reach.Measure.off

    def timed_on(self, device: str) -> None:  # noqa: ANN001
        start = time.perf_counter()
        was = self.running
        on(self, device)
        spent["on_s"] += time.perf_counter() - start
        spent["starts"] += int(self.running and not was)

    def timed_off(self) -> None:  # noqa: ANN001
        start = time.perf_counter()
        off(self)
        spent["off_s"] += time.perf_counter() - start

    reach.Measure.on, reach.Measure.off = timed_on, timed_off
    return spent


def profile(target, device: str, examples: int, coverage: bool, top: int) -> str:  # noqa: ANN001
    profiler = cProfile.Profile()
    profiler.enable()
    engine(target, device, examples, 7, coverage=coverage)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write(by_package(stats))
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


PACKAGES = ("hypothesis", "coverage", "torch", "numpy", "fuzz/oracles", "fuzz", "strategies", "legacy",
            "optimized", "bench")


def by_package(stats: pstats.Stats) -> str:
    """Own time (tottime) summed by where the function lives: which share of an example is Hypothesis, the
    tracer, torch, the engine. Built-ins (``~``) and the standard library count as "other"."""
    spent: dict[str, float] = {}
    for (path, _, _), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = next((p for p in PACKAGES if f"/{p}/" in path), "other")
        spent[where] = spent.get(where, 0.0) + own
    total = sum(spent.values()) or 1.0
    rows = sorted(spent.items(), key=lambda kv: -kv[1])
    return "own time by package: " + ", ".join(f"{k} {v / total:.0%}" for k, v in rows) + "\n"


def modes() -> tuple[str, ...]:
    """untraced, then each reach collector this Python has (fuzz/reach/monitor.py ``reach_core``)."""
    return ("untraced", "ctrace") + (("sysmon",) if sys.version_info >= (3, 12) else ())


def run_mode(target, device: str, examples: int, seed: int, mode: str) -> float:  # noqa: ANN001
    if mode != "untraced":
        os.environ[REACH_CORE_ENV] = mode
    return engine(target, device, examples, seed, coverage=mode != "untraced")[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target", action="append", required=True)
    parser.add_argument("--label", default="1")
    parser.add_argument("--profile", help="write cProfile tables of a traced and an untraced run here")
    parser.add_argument("--measure-every", type=int, help="trace one call in N after the first 32 (fuzz.reach.collect."
                        "MEASURE_EVERY, 8 in a run; 1 traces every call)")
    args = parser.parse_args()
    if args.measure_every:
        import fuzz.reach.collect as reach

        reach.MEASURE_EVERY = args.measure_every
    spent = timed_tracer()
    kinds = modes()
    for target in lookup(args.target):
        for mode in kinds:
            run_mode(target, args.device, 5, 99, mode)  # warm-up: lazy imports, the definitions cut once
        seconds: dict[str, list[float]] = {mode: [] for mode in kinds}
        tracer: list[dict[str, float]] = []
        for repeat in range(args.repeats):
            order = kinds[repeat % len(kinds):] + kinds[:repeat % len(kinds)]  # no mode always first
            for mode in order:
                before = dict(spent)
                seconds[mode].append(run_mode(target, args.device, args.examples, 1 + repeat, mode))
                if mode == "ctrace":
                    tracer.append({k: spent[k] - before[k] for k in spent})
        base = seconds["untraced"]
        starts = statistics.median(t["starts"] for t in tracer)
        start_stop = statistics.median((t["on_s"] + t["off_s"]) / max(t["starts"], 1) for t in tracer)
        line = (f"[{args.label} pid {os.getpid()}] {target.name:28} {args.device}"
                f" untraced {1e6 * statistics.median(base):7.1f} us")
        for mode in kinds[1:]:
            ratio = statistics.median(b / a for a, b in zip(base, seconds[mode]))
            runs = ", ".join(f"{b / a:.3f}" for a, b in zip(base, seconds[mode]))
            line += f" | {mode} {1e6 * statistics.median(seconds[mode]):7.1f} us x{ratio:5.3f} (runs {runs})"
        line += f" | ctrace: {starts:.0f} tracer starts, {1e6 * start_stop:5.1f} us per start+stop"
        print(line, flush=True)
        if args.profile:
            with open(args.profile, "a") as f:
                for mode in kinds[::-1]:
                    os.environ[REACH_CORE_ENV] = "ctrace" if mode == "untraced" else mode
                    f.write(f"==== {target.name} {args.device} {mode}\n")
                    f.write(profile(target, args.device, args.examples, mode != "untraced", 30))


if __name__ == "__main__":
    main()
