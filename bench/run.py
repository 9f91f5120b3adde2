"""Benchmarks (ratios, never asserted by tests): ``python -m bench.run``.

a. harness overhead: seconds per example of the fuzzer (in-process engine)
   against a bare Hypothesis ``@given`` differential test of the same pair and
   strategy, per target and device;
b. examples-to-detection of the planted bugs (median and max);
c. scaling of ``--workers`` 1 -> N (efficiency = speedup / N), on a fixed
   number of examples or, with ``--budget``, for a fixed time (the nightly shape);
v. the cost of measuring reach (--coverage, fuzz/reach/collect.py): seconds per example with coverage.py
   on against off, alternating, per target and device (the median of the per-pair ratios), and the
   one-time cost per process of cutting the sides' files into definitions;
r. the cost of the race oracle (--race, fuzz/oracles/races.py): seconds per example on CUDA with it on
   against off, alternating, per target (the median of the per-pair ratios);
d. the launch-bound limit: one legacy+optimized+compare round per target
   without Hypothesis, on pre-drawn specs, and the fuzzer's examples/s as a
   fraction of it;
s. where one example's time goes, per target and device: Hypothesis alone
   (the fuzzer's settings, a body that does nothing), spec -> tensors, the two
   calls (with the sync counting armed on CUDA), the comparison, the oracles
   beyond agreement (fuzz/oracles/), the consumer's reads (targets with one),
   each timed by the engine's own hooks (fuzz/engine/stagetimes.py) in
   fuzz.engine.execute.run_example, and the fuzzer's own bookkeeping (its
   seconds per example less all of those); Hypothesis is measured in the
   fuzzer's shape (1..SPECS_PER_CASE specs per test case) and, for comparison,
   at one spec per case; with the choices Hypothesis makes per spec, its
   cost per choice, and the best fuzzer/round rate that leaves (a round's
   stages over the stages plus Hypothesis alone).

Prints a table per part and writes everything as JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fuzz.config import RunConfig  # noqa: E402
from fuzz.engine.execute import run_example  # noqa: E402
from fuzz.engine.runner import fuzz_target, single_threaded  # noqa: E402
from fuzz.engine.stagetimes import recording  # noqa: E402
from fuzz.targets import Target, lookup  # noqa: E402


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bare_given(target: Target, device: str, examples: int, seed: int) -> float:
    """Seconds per example of the test a user would write by hand."""
    model = target.input_model()
    legacy, optimized = target.impl("legacy"), target.impl("optimized")

    def outcome(impl, side, spec):  # noqa: ANN001, ANN202
        try:
            return model.materialize(spec, impl, side)()
        except Exception as exc:  # noqa: BLE001
            return type(exc)

    @settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(model.specs((device,), "caller"))
    def test(spec: dict) -> None:
        a, b = outcome(legacy, "legacy", spec), outcome(optimized, "optimized", spec)
        if isinstance(a, type) or isinstance(b, type):
            assert a == b
        else:
            torch.testing.assert_close(b, a, equal_nan=True)

    start = time.perf_counter()
    test()
    _sync(device)
    return (time.perf_counter() - start) / examples


def engine(target: Target, device: str, examples: int, seed: int, coverage: bool = False, race: bool = False
           ) -> tuple[float, list[dict]]:
    """Seconds per example of the fuzzer's engine (``coverage``: measuring reach; ``race``: the race oracle), and
    the specs it drew."""
    import fuzz.engine.runner as runner

    specs: list[dict] = []
    original = runner.run_example

    def keeping_specs(target, spec, **kwargs):  # noqa: ANN001, ANN202
        specs.append(spec)
        return original(target, spec, **kwargs)

    runner.run_example = keeping_specs
    try:
        start = time.perf_counter()
        outcome = fuzz_target(target, RunConfig(devices=(device,), seed=seed, max_examples=examples,
                                                coverage=coverage, race=race))
        if coverage and outcome.measure:
            outcome.entry()  # the report's reach is cut at the end of the target: part of the cost
        _sync(device)
        elapsed = time.perf_counter() - start
    finally:
        runner.run_example = original
    return elapsed / max(outcome.examples, 1), specs


def rounds(target: Target, specs: list[dict], device: str, oracle: bool = True) -> float:
    """Seconds per legacy+optimized+compare round on pre-drawn specs (no
    Hypothesis); ``oracle=False`` leaves the sync counting unarmed, so the
    difference is what the sync oracle costs per example (CUDA only)."""
    import fuzz.engine.execute as execute

    armed = execute.counting_syncs
    if not oracle:
        execute.counting_syncs = lambda enabled: armed(False)
    try:
        for spec in specs[:5]:
            run_example(target, spec)  # warm-up: lazy CUDA/module init
        _sync(device)
        start = time.perf_counter()
        for spec in specs:
            run_example(target, spec)
        _sync(device)
    finally:
        execute.counting_syncs = armed
    return (time.perf_counter() - start) / max(len(specs), 1)


def part_a_d(targets: list[Target], devices: list[str], examples: int, repeats: int, rows: list[dict],
             save: Callable[[], None]) -> None:
    """Fills ``rows`` as it measures (``save`` after each), so a run cut short keeps its data.

    Bare and fuzzer runs alternate ``repeats`` times and the overhead is the
    median of the per-pair ratios: one pair of 100-example runs (~0.3 s each)
    varied by +-40% on the H200 host, more than the effect measured."""
    for device in devices:
        for target in targets:
            # Warm both up first: a process's first examples pay lazy CUDA
            # and module start-up (one warm-up of the bare test only made the
            # fuzzer look 12x slower on glm4v-embeddings, H200 2026-11-29).
            bare_given(target, device, 5, 99)
            engine(target, device, 5, 99)
            pairs = []
            for repeat in range(repeats):
                # Alternate which runs first, so neither always gets the warmer GPU clocks and caches.
                if repeat % 2:
                    ours, specs = engine(target, device, examples, 1 + repeat)
                    bare = bare_given(target, device, examples, 1 + repeat)
                else:
                    bare = bare_given(target, device, examples, 1 + repeat)
                    ours, specs = engine(target, device, examples, 1 + repeat)
                pairs.append((bare, ours))
            bare = statistics.median(b for b, _ in pairs)
            ours = statistics.median(o for _, o in pairs)
            overhead = statistics.median(o / b for b, o in pairs)
            limit = rounds(target, specs, device)
            row = {"target": target.name, "device": device, "bare_s": bare, "fuzz_s": ours,
                   "overhead": overhead, "overheads": [o / b for b, o in pairs], "round_s": limit,
                   "fraction_of_limit": limit / ours}
            oracle = ""
            if device == "cuda":  # the sync oracle is armed on CUDA only
                row["round_unarmed_s"] = rounds(target, specs, device, oracle=False)
                oracle = f"  oracle {(limit - row['round_unarmed_s']) * 1e3:5.2f} ms/example"
            rows.append(row)
            save()  # a run stopped by a time limit keeps what it measured
            print(f"{target.name:32} {device:5} bare {1 / bare:8.1f}/s  fuzz {1 / ours:8.1f}/s  "
                  f"overhead {overhead:5.2f}x (of {repeats}: {min(o / b for b, o in pairs):.2f}-"
                  f"{max(o / b for b, o in pairs):.2f})  rounds {1 / limit:8.1f}/s  fuzz/limit {limit / ours:5.2f}"
                  + oracle, flush=True)
    overheads = [row["overhead"] for row in rows]
    if overheads:
        print(f"median overhead {statistics.median(overheads):.2f}x; over 1.10x: "
              f"{sum(o > 1.10 for o in overheads)} of {len(overheads)}", flush=True)


def part_v(targets: list[Target], devices: list[str], examples: int, repeats: int, rows: list[dict],
           save: Callable[[], None]) -> None:
    """Coverage on vs off, alternating which runs first; the ratio is the median of the pairs'."""
    import fuzz.reach.collect as reach

    for device in devices:
        for target in targets:
            reach._CODES.clear()
            reach._MAPS.clear()
            start = time.perf_counter()
            reach.measure_for(target, RunConfig(devices=(device,)))
            cut = time.perf_counter() - start
            engine(target, device, 5, 99)
            engine(target, device, 5, 99, coverage=True)
            pairs = []
            for repeat in range(repeats):
                order = (False, True) if repeat % 2 == 0 else (True, False)
                seconds = {on: engine(target, device, examples, 1 + repeat, coverage=on)[0] for on in order}
                pairs.append((seconds[False], seconds[True]))
            ratio = statistics.median(on / off for off, on in pairs)
            rows.append({"target": target.name, "device": device, "off_s": statistics.median(p[0] for p in pairs),
                         "on_s": statistics.median(p[1] for p in pairs), "overhead": ratio,
                         "ratios": [on / off for off, on in pairs], "cut_once_s": cut})
            save()
            print(f"{target.name:32} {device:5} off {1 / rows[-1]['off_s']:8.1f}/s  on {1 / rows[-1]['on_s']:8.1f}/s  "
                  f"coverage costs {100 * (ratio - 1):+5.1f}%  (cutting the files once: {cut:.2f} s)", flush=True)
    ratios = [row["overhead"] for row in rows]
    if ratios:
        print(f"median coverage overhead {100 * (statistics.median(ratios) - 1):+.1f}%; "
              f"highest {100 * (max(ratios) - 1):+.1f}%; over +15%: {sum(r > 1.15 for r in ratios)} of {len(ratios)}",
              flush=True)


def part_r(targets: list[Target], examples: int, repeats: int, rows: list[dict], save: Callable[[], None]) -> None:
    """The race oracle (--race, CUDA only) on vs off, alternating which runs first; the median of the pairs'
    ratios. Off, the engine already arms the copy watch (hidden syncs, copy policy); on, each example runs the
    optimized side once more held behind a sleeping stream (and legacy too where the optimized side changed)."""
    for target in targets:
        if "cuda" not in target.devices:
            continue
        engine(target, "cuda", 5, 99)
        engine(target, "cuda", 5, 99, race=True)
        pairs = []
        for repeat in range(repeats):
            order = (False, True) if repeat % 2 == 0 else (True, False)
            seconds = {on: engine(target, "cuda", examples, 1 + repeat, race=on)[0] for on in order}
            pairs.append((seconds[False], seconds[True]))
        ratio = statistics.median(on / off for off, on in pairs)
        rows.append({"target": target.name, "device": "cuda", "off_s": statistics.median(p[0] for p in pairs),
                     "on_s": statistics.median(p[1] for p in pairs), "overhead": ratio,
                     "ratios": [on / off for off, on in pairs]})
        save()
        print(f"{target.name:32} cuda  off {rows[-1]['off_s'] * 1e3:7.2f} ms/example  on {rows[-1]['on_s'] * 1e3:7.2f}"
              f" ms/example  --race costs {ratio:5.2f}x", flush=True)
    ratios = [row["overhead"] for row in rows]
    if ratios:
        print(f"median --race cost {statistics.median(ratios):.2f}x; highest {max(ratios):.2f}x", flush=True)


def hypothesis_alone(target: Target, device: str, examples: int, seed: int, batch: int = 1) -> tuple[float, float]:
    """Seconds per spec of Hypothesis alone: the fuzzer's settings, a test body
    that only counts; ``batch`` > 1 draws lists of 1..batch specs per test case,
    as the fuzzer does (fuzz.engine.runner.SPECS_PER_CASE). Also the choices Hypothesis
    made per spec (its cost grows with them: every choice is recorded, spanned
    and stored in its data tree)."""
    from hypothesis import strategies as st
    from hypothesis.control import current_build_context

    from fuzz.engine.runner import hypothesis_settings, no_local_constants

    strategy = target.input_model().specs((device,), "caller")
    if batch > 1:
        strategy = st.lists(strategy, min_size=1, max_size=batch)
    drawn, choices = [0], [0]

    @hypothesis_settings(examples, None)
    @hypothesis_seed(seed)
    @given(strategy)
    def test(spec: object) -> None:
        drawn[0] += len(spec) if batch > 1 else 1
        choices[0] += len(current_build_context().data.choices)

    start = time.perf_counter()
    with no_local_constants():  # as fuzz.engine.runner draws
        test()
    return (time.perf_counter() - start) / max(drawn[0], 1), choices[0] / max(drawn[0], 1)


STAGES = ("materialize", "calls", "compare", "oracles")  # always printed; "consumer" only where a target has one


def stages(target: Target, specs: list[dict], device: str) -> dict[str, float]:
    """Seconds per example of each stage of fuzz.engine.execute.run_example, on pre-drawn specs: the engine's own
    path, timed by its own hooks (fuzz/engine/stagetimes.py), so the split cannot drift from what the fuzzer runs.
    On CUDA each stage syncs before its clock stops, so the kernels it queued count in it."""
    for spec in specs[:3]:
        run_example(target, spec)  # warm-up, unrecorded
    with recording(sync=torch.cuda.synchronize if device == "cuda" else None) as recorder:
        for spec in specs:
            run_example(target, spec)
    spent = {name: recorder.seconds.get(name, 0.0) for name in STAGES}
    if recorder.counts.get("consumer"):
        spent["consumer"] = recorder.seconds["consumer"]
    return {name: seconds / max(len(specs), 1) for name, seconds in spent.items()}


def part_s(targets: list[Target], devices: list[str], examples: int, rows: list[dict],
           save: Callable[[], None]) -> None:
    """Where an example's time goes (fractions of the fuzzer's seconds per example)."""
    for device in devices:
        for target in targets:
            engine(target, device, 5, 99)  # warm-up
            ours, specs = engine(target, device, examples, 1)
            from fuzz.engine.runner import MEAN_SPECS_PER_CASE, SPECS_PER_CASE

            alone, choices = hypothesis_alone(target, device, max(examples // MEAN_SPECS_PER_CASE, 1), 1,
                                              batch=SPECS_PER_CASE)
            single, _ = hypothesis_alone(target, device, examples, 1)
            parts = stages(target, specs, device)
            rest = ours - alone - sum(parts.values())
            # The best fuzzer/round rate Hypothesis leaves: a round's work plus Hypothesis' own per spec.
            round_s = sum(parts.values())
            row = {"target": target.name, "device": device, "fuzz_s": ours, "hypothesis_s": alone,
                   "hypothesis_one_spec_per_case_s": single, **{f"{k}_s": v for k, v in parts.items()},
                   "bookkeeping_s": rest, "choices_per_spec": choices,
                   "us_per_choice": alone / max(choices, 1) * 1e6, "bound": round_s / (round_s + alone)}
            rows.append(row)
            save()
            shares = {"hypothesis": alone, **parts, "rest": rest}
            print(f"{target.name:32} {device:5} {ours * 1e3:7.2f} ms/example: "
                  + "  ".join(f"{k} {v / ours:5.0%}" for k, v in shares.items())
                  + f"  | one spec per case: hypothesis {single / ours:5.0%}"
                  + f"  | {choices:4.1f} choices/spec, {row['us_per_choice']:4.0f} us each;"
                  f" fuzz/round at most {row['bound']:4.2f}", flush=True)


def part_b(limit: int, names: list[str] | None = None) -> list[dict]:
    """``names``: only the planted bugs of those targets (``--target``; all if none)."""
    import tests.planted as planted

    rows = []
    for plant in planted.BUGS:
        if names and plant.base_target not in names:
            continue
        detections = []
        for seed in range(5):
            outcome = fuzz_target(plant.target(), RunConfig(devices=("cpu",), seed=seed, max_examples=limit))
            detections.append(outcome.first_failure_at or float("inf"))
        rows.append({"bug": plant.name, "median": statistics.median(detections), "max": max(detections)})
        print(f"{plant.name:45} median {statistics.median(detections):6} max {max(detections):6}", flush=True)
    return rows


def _pinned(count: int) -> Callable[[], None] | None:
    """Pin a child to ``count`` of this host's cores (when it has that many), so
    N workers get N cores and one worker one: efficiency per core, not per host."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < count:
        return None
    return lambda: os.sched_setaffinity(0, cores[:count])


def part_c(workers: list[int], examples: int, budget: float | None, device: str, names: list[str],
           rows: list[dict], save: Callable[[], None]) -> None:
    """``fuzz run --workers N`` on the same work for each N, each pinned to N cores.

    With ``budget``: the targets (``names``; all if none) for that many seconds;
    efficiency = examples / N / the one-worker run's examples. Without: a fixed
    number of examples of the targets (four cheap ones if none named); two rates, wall (start-up included) and
    steady (examples over the busiest worker's fuzzing seconds, from the
    report's placement). Fixed work of a few seconds per worker is dominated by
    start-up and the slowest item (H200 host, 16 workers: steady 0.60, while a
    60 s budget gave 1.03), so prefer a budget for more than a few workers."""
    four = ["fla-chunk-offsets", "fla-chunk-indices", "glm4v-embeddings", "glm4v-pos-embeds"]
    base, base_steady = None, None
    for count in workers:
        with tempfile.TemporaryDirectory() as corpus:
            command = [sys.executable, "-m", "fuzz", "run", "--device", device, "--seed", "0", "--quiet",
                       "--workers", str(count), "--corpus", corpus, "--confirm", "0", "--report", f"{corpus}/r.json"]
            if budget is None:
                command += ["--max-examples", str(examples), "--pieces", str(max(workers))]
            else:
                command += ["--budget", str(budget), "--pieces", "2"]
            for name in names or (four if budget is None else []):
                command += ["--target", name]
            # Every count runs isolated fuzz processes, so the comparison is like for like.
            start = time.perf_counter()
            done_run = subprocess.run(command, cwd=ROOT, check=False, capture_output=True, text=True,
                                      preexec_fn=_pinned(count))
            elapsed = time.perf_counter() - start
            if not Path(f"{corpus}/r.json").exists():  # e.g. a budget too short for the items: fuzz said why
                lines = (done_run.stderr or done_run.stdout).strip().splitlines()
                sys.stderr.write(f"bench: part c, {count} workers: fuzz run wrote no report "
                                 f"(exit {done_run.returncode}): {lines[-1] if lines else 'no output'}\n")
                raise SystemExit(2)
            report = json.loads(Path(f"{corpus}/r.json").read_text())
        done = sum(t["examples"] for t in report["targets"])
        busy: dict[str, float] = {}
        for entry in report["targets"]:
            for place in entry.get("placement", []):
                busy[place["worker"]] = busy.get(place["worker"], 0.0) + place["seconds"]
        busiest = max(busy.values()) if busy else sum(t["seconds"] for t in report["targets"])
        if not done or not busiest:  # nothing ran: no rate to compare (say so, do not divide by zero)
            sys.stderr.write(f"bench: part c, {count} workers: the run did no example (exit {done_run.returncode}); "
                             "give it a larger --budget or --examples\n")
            raise SystemExit(2)
        rate = done / (budget or elapsed)
        steady = done / busiest
        base, base_steady = base or rate, base_steady or steady
        rows.append({"workers": count, "examples": done, "seconds": elapsed, "budget": budget,
                     "examples_per_s": rate, "efficiency": rate / base / count, "busiest_worker_s": busiest,
                     "steady_per_s": steady, "steady_efficiency": steady / base_steady / count})
        print(f"workers {count:3}  {done} examples in {elapsed:6.1f}s  {rate:8.1f}/s  "
              f"efficiency {rate / base / count:5.2f}"
              f"  | steady {steady:8.1f}/s  efficiency {steady / base_steady / count:5.2f}", flush=True)
        save()


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, 1 or more")
    return int(text)


def _worker_counts(text: str) -> list[int]:
    try:
        counts = [int(w) for w in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give worker counts like 1,4,16")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=_at_least_one, default=200)
    parser.add_argument("--device", action="append", choices=("cpu", "cuda"))
    parser.add_argument("--target", action="append", default=[],
                        help="only these targets (part b: only their planted bugs); repeatable")
    parser.add_argument("--repeats", type=_at_least_one, default=3,
                        help="alternating bare/fuzzer runs per target (part a)")
    parser.add_argument("--workers", default="1,2", type=_worker_counts,
                        help="comma-separated worker counts for part c")
    parser.add_argument("--budget", type=float, help="part c: fuzz every target this many seconds per worker count "
                        "(the nightly shape) instead of a fixed number of examples")
    parser.add_argument("--parts", default="abcd")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    single_threaded()
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    result: dict = {"host": os.uname().nodename, "torch": torch.__version__, "cpus": os.cpu_count(),
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))

    if "a" in args.parts or "d" in args.parts:
        print("== a/d: per-example cost, fuzzer vs bare @given, and vs rounds without Hypothesis")
        part_a_d(lookup(args.target), devices, args.examples, args.repeats, result.setdefault("a_d", []), save)
    if "v" in args.parts:
        print("== v: the cost of measuring reach (--coverage on vs off)")
        part_v(lookup(args.target), devices, args.examples, args.repeats, result.setdefault("v", []), save)
    if "r" in args.parts:
        if torch.cuda.is_available():
            print("== r: the cost of the race oracle (--race on vs off, CUDA)")
            part_r(lookup(args.target), args.examples, args.repeats, result.setdefault("r", []), save)
        else:
            print("== r: skipped: the race oracle runs on CUDA only")
    if "s" in args.parts:
        print("== s: where an example's time goes (shares of the fuzzer's time per example)")
        part_s(lookup(args.target), devices, args.examples, result.setdefault("s", []), save)
    if "b" in args.parts:
        print("== b: examples to detection of the planted bugs (5 seeds, CPU)")
        result["b"] = part_b(200, args.target)
        save()
    if "c" in args.parts:
        for device in devices:
            print(f"== c: --workers scaling on {device}")
            part_c(args.workers, args.examples, args.budget, device, args.target,
                   result.setdefault(f"c_{device}", []), save)
    save()


if __name__ == "__main__":
    main()
