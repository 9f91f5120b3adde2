"""Where the host's CPU went over a window: overall busy %, and the busiest processes (by name and args).

python3 lab/scripts/cpu_sample.py SECONDS  -- prints one line for the host and one per process group
(#25: are CUDA workers under MPS CPU-bound, spinning, or waiting?)."""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

TICK = os.sysconf("SC_CLK_TCK")


def host() -> tuple[int, int]:
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def processes() -> dict[int, tuple[str, int]]:
    seen = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            args = open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        seen[int(pid)] = (args[:90] or stat[stat.index("(") + 1:stat.rindex(")")], int(rest[11]) + int(rest[12]))
    return seen


def main() -> None:
    window = float(sys.argv[1])
    busy0, total0 = host()
    before = processes()
    time.sleep(window)
    busy1, total1 = host()
    after = processes()
    cores = os.cpu_count() or 1
    print(f"host busy {100 * (busy1 - busy0) / max(total1 - total0, 1):.0f}% of {cores} cores over {window:.0f} s")
    groups: dict[str, list[float]] = defaultdict(list)
    for pid, (name, ticks) in after.items():
        if pid in before:
            share = (ticks - before[pid][1]) / TICK / window
            key = " ".join(name.split()[:4])
            groups[key].append(share)
    for key, shares in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:12]:
        if sum(shares) >= 0.02:
            print(f"  {len(shares):3d} x {key[:80]:80}  cores {sum(shares):5.2f}  each {max(shares):4.2f} max")


if __name__ == "__main__":
    main()
