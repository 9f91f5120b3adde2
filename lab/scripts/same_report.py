"""Same seed, same report (issue #42's check of a no-behaviour-change refactor): two JSON reports of
``fuzz run --profile premerge --device cpu --seed 0``, before and after, compared on what the run found.

``python3 lab/scripts/same_report.py BEFORE.json AFTER.json``: prints each difference and exits 1 if any.
Ignored: what differs from run to run by design -- times, rates, the run id and start, the code digest
(the refactor changes the code's text) and the plan digest that hashes it.
"""

from __future__ import annotations

import json
import sys

VOLATILE = {"seconds", "started", "run_id", "code_sha256", "plan_digest", "examples_per_s", "machine",
            "finished", "wall_seconds", "host"}


def differences(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key in VOLATILE:
                continue
            if key not in a or key not in b:
                out.append(f"{path}/{key}: only in {'after' if key in b else 'before'}")
            else:
                out += differences(a[key], b[key], f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} before, {b!r} after"]


if __name__ == "__main__":
    before, after = (json.load(open(p)) for p in sys.argv[1:3])
    found = differences(before, after)
    for line in found:
        print(line)
    print(f"{len(found)} differences in verdicts, examples, tallies and failures "
          f"({len(before['targets'])} targets before, {len(after['targets'])} after)")
    sys.exit(1 if found else 0)
