"""Reads the reports of lab/scripts/gpu_share_bench.sh and lab/scripts/mps_fault_trials.sh and prints the
issue #25 figures, each with PASS or FAIL (docs/gpu-sharing.md, lab/gpu-runs/).

    python3 lab/scripts/mps_check.py nightly OFF.json MPS.json [MPS2.json ...]  # MPS >= 3x examples, every item served
    python3 lab/scripts/mps_check.py scale ONE.json MANY.json     # MANY workers >= 0.7 x N x one worker (CUDA)
    python3 lab/scripts/mps_check.py trial FAULT_TARGET REPORT.json  # the fault contained (see below)
    python3 lab/scripts/mps_check.py threads DEFAULT.json ONE.json   # examples with BLAS/OpenMP at 1 thread vs not

Exit 1 if a check fails. ``nightly`` with several MPS reports (runs bracketing the ``off`` run in one call,
``NIGHTLY_ORDER="mps off mps"``) checks each against ``off`` and passes only if every one does: two runs of
one mode in one call have differed by 12-18% (docs/gpu-sharing.md), so the ratio a single pair gives is read
with its spread, and the lower one decides.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def examples(report: dict, device: str | None = None) -> int:
    return sum(t["examples"] if device is None else t.get("by_device", {}).get(device, {}).get("examples", 0)
               for t in report["targets"])


def served(report: dict) -> tuple[bool, str]:
    """Every planned item came back and ran examples (placement: one per item under --workers)."""
    placements = [p for t in report["targets"] for p in t.get("placement", [])]
    planned = len(report["targets"]) * report["run"]["pieces"]
    idle = [p["item"] for p in placements if not p.get("examples")]
    ok = len(placements) == planned and not idle
    named = f": {', '.join(idle)}" if idle else ""
    return ok, f"{len(placements)}/{planned} items back, {len(idle)} without an example{named}"


def share(report: dict) -> dict:
    return report["run"].get("machine", {}).get("gpu_share", {})


def gpu_use(report: dict) -> str:
    gpu = report["run"].get("machine", {}).get("gpu", {})
    if "gpus" not in gpu:
        return gpu.get("unavailable", "GPU not sampled")
    return "; ".join(f"GPU {g['index']} busy {g['busy_pct']['mean']}% mean / {g['busy_pct']['max']}% max, "
                     f"memory {g['memory_used_mib']['max']} MiB max" for g in gpu["gpus"])


def check(ok: bool, line: str) -> bool:
    print(("PASS " if ok else "FAIL ") + line)
    return ok


def nightly(off_path: str, *mps_paths: str) -> bool:
    if not mps_paths:
        print("mps_check.py nightly: give the off report and at least one mps report "
              "(nightly OFF.json MPS.json [MPS2.json ...])", file=sys.stderr)
        sys.exit(2)
    good = True
    for mps_path in mps_paths:
        if len(mps_paths) > 1:
            print(f"== off {off_path} against mps {mps_path}")
        good &= nightly_pair(off_path, mps_path)
    if len(mps_paths) > 1:
        off = examples(load(off_path))
        ratios = [examples(load(path)) / max(off, 1) for path in mps_paths]
        spread = max(ratios) / min(ratios) - 1
        good &= check(min(ratios) >= 3.0, f"bracketed: {len(ratios)} mps runs against one off run: "
                      f"{', '.join(f'{r:.2f}x' for r in ratios)} (spread {spread:.0%}); the lowest, "
                      f"{min(ratios):.2f}x, decides (>= 3)")
    return good


def nightly_pair(off_path: str, mps_path: str) -> bool:
    off, mps = load(off_path), load(mps_path)
    good = check(share(mps).get("mode") == "mps" and share(off).get("mode") == "time-sliced",
                 f"modes: off run {share(off).get('mode')}, mps run {share(mps).get('mode')} "
                 f"(daemon {share(mps).get('daemon')}, victims replayed {share(mps).get('victims_replayed')})")
    for device in ("cpu", "cuda"):
        print(f"     {device}: off {examples(off, device):,}, mps {examples(mps, device):,}")
    ratio = examples(mps) / max(examples(off), 1)
    good &= check(ratio >= 3.0, f"nightly examples: off {examples(off):,}, mps {examples(mps):,} = {ratio:.2f}x (>= 3)")
    gains(off, mps)
    for name, report in (("off", off), ("mps", mps)):
        print(f"     {name}: {pace(report)}")
        ok, said = served(report)
        good &= check(ok, f"{name}: every item served: {said}")
        print(f"     {name}: {gpu_use(report)}; exit verdicts {sorted({t['verdict'] for t in report['targets']})}")
    return good


def pace(report: dict) -> str:
    """How much of workers x budget the items fuzzed, and at what rate: the rate is what MPS changes, the
    share is start-up, item changes and the slots a last round leaves empty (the same in both runs)."""
    seconds = sum(p.get("seconds") or 0 for t in report["targets"] for p in t.get("placement", []))
    run = report["run"]
    capacity = (run.get("workers") or 1) * (run.get("budget") or 0)
    share = "no budget"
    if capacity:
        share = f"{seconds / capacity:.2f} of {run.get('workers')} workers x {run.get('budget'):g} s"
    rate = examples(report) / max(seconds, 1e-9)
    return f"items fuzzed {seconds:,.0f} s ({share}), {rate:,.0f} examples per item-second"


def gains(off: dict, mps: dict) -> None:
    """Per target: every target gets the same share of the budget, so the sum of examples is weighted by the
    cheapest targets; this says which ones hold the ratio down (docs/gpu-sharing.md)."""
    mine = {t["name"]: t["examples"] for t in mps["targets"]}
    total = max(examples(off), 1)
    print("     per target (off examples, share of off, mps examples, gain), most examples first:")
    for t in sorted(off["targets"], key=lambda t: -t["examples"]):
        theirs = mine.get(t["name"], 0)
        print(f"       {t['name']:40s} {t['examples']:8,} {t['examples'] / total:6.1%} {theirs:8,} "
              f"{theirs / max(t['examples'], 1):5.2f}x")


def scale(one_path: str, many_path: str) -> bool:
    one, many = load(one_path), load(many_path)
    workers = many["run"]["workers"]
    a, b = examples(one, "cuda"), examples(many, "cuda")
    ratio = b / max(a, 1)
    per_target = ", ".join(f"{t['name']} {examples({'targets': [t]}, 'cuda'):,}" for t in many["targets"])
    print(f"     per target, {workers} workers: {per_target}")
    good = check(share(many).get("mode") == "mps", f"{workers} workers' mode: {share(many).get('mode')}")
    good &= check(ratio >= 0.7 * workers, f"CUDA examples: 1 worker {a:,}, {workers} workers {b:,} = {ratio:.1f}x "
                                          f"(>= 0.7 x {workers} = {0.7 * workers:.1f}); {gpu_use(many)}")
    return good


def trial(fault: str, path: str) -> bool:
    """The faulting target: a crash with its input saved. Every other target: examples, no failure of
    its own. The examples another client's fault ended: re-run and counted (victims_replayed)."""
    report = load(path)
    by_name = {t["name"]: t for t in report["targets"]}
    faulty = by_name.pop(fault)
    crashes = [f for f in faulty["failures"] if f["verdict"] == "crash"]
    saved = [f for f in crashes if f.get("repro") and Path(f["repro"]).exists()]
    good = check(bool(saved), f"{fault}: {faulty['verdict']}, {len(crashes)} crash(es), input saved: {bool(saved)}"
                              + (f" ({crashes[0]['mismatches'][0]['detail'][:90]})" if crashes else ""))
    for name, entry in by_name.items():
        own = [f["verdict"] for f in entry["failures"] if not f.get("known")]
        good &= check(entry["examples"] > 0 and not own and entry["verdict"] in ("agree", "same-code"),
                      f"{name}: {entry['verdict']}, {entry['examples']} examples, failures {own}")
    print(f"     sharing: {share(report)}")
    return good


def threads(default_path: str, one_path: str) -> bool:
    a, b = examples(load(default_path)), examples(load(one_path))
    print(f"     examples: threads default {a:,}, BLAS/OpenMP at 1 thread {b:,} = {b / max(a, 1):.2f}x")
    return True


if __name__ == "__main__":
    kind, *paths = sys.argv[1:]
    ok = {"nightly": nightly, "scale": scale, "trial": trial, "threads": threads}[kind](*paths)
    sys.exit(0 if ok else 1)
