"""Where a fuzz worker's time went, from py-spy's raw samples (``py-spy record -f raw``, with or without
``--native``): the sides (building inputs and the upstream calls, fuzz.engine.execute.run_side), judging
(fuzz.engine.execute.judge_example), Hypothesis (everything inside the Hypothesis test that is neither), and the rest
(reports, journals, start-up). With --native, also by where the innermost frame lives.

    python3 lab/scripts/spy_split.py spy-py-1.txt [spy-native-3.txt ...]

#25 used it on a worker of the 16-worker nightly under MPS (lab/gpu-runs/2026-12-03e-h200.md).
"""

from __future__ import annotations

import sys
from collections import Counter

STAGES = (("run_side", "sides: inputs and calls"), ("judge_example", "judging"))


def stage(frames: list[str]) -> str:
    names = [frame.split(" (")[0] for frame in frames]
    for name, label in STAGES:
        if any(n == name or n.endswith("." + name) for n in names):
            return label
    if any("hypothesis/" in frame for frame in frames):
        return "Hypothesis"
    return "other"


def where(leaf: str) -> str:
    if ".py:" in leaf:
        return "Python"
    if "libcuda" in leaf:
        return "libcuda"
    if any(mark in leaf for mark in ("libtorch", "libc10", "at::", "c10::", "torch::")):
        return "torch C++"
    return "other native"


def main(paths: list[str]) -> None:
    for path in paths:
        stages: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        total = 0
        with open(path) as f:
            for line in f:
                stack, _, count = line.rstrip().rpartition(" ")
                frames, n = stack.split(";"), int(count)
                total += n
                stages[stage(frames)] += n
                leaves[where(frames[-1])] += n
        print(f"{path}: {total} samples")
        print("  " + ", ".join(f"{k} {v / total:.0%}" for k, v in stages.most_common()))
        if leaves["torch C++"] or leaves["libcuda"]:  # sampled with --native
            print("  innermost frame: " + ", ".join(f"{k} {v / total:.0%}" for k, v in leaves.most_common()))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python3 lab/scripts/spy_split.py SAMPLES.txt [...]  (py-spy record -f raw output)")
    main(sys.argv[1:])
