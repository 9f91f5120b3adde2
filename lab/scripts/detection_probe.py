"""Examples to detection of one planted bug over seeds (a probe for a host where a test missed it).

``PYTHONPATH=. python3 lab/scripts/detection_probe.py PLANT [CONTRACT] [MAX]``; prints one line per seed.
"""

from __future__ import annotations

import sys

import tests.planted as planted
from tests.support import fuzz

WIDE_BUGS = [p for p in planted.WIDE_BUGS if "-layout-" in p.name]

if __name__ == "__main__":
    name, contract, limit = sys.argv[1], (sys.argv[2:3] or ["caller"])[0], int((sys.argv[3:4] or ["600"])[0])
    plant = {p.name: p for p in [*planted.BUGS, *WIDE_BUGS]}[name]
    for seed in range(6):
        outcome = fuzz(plant.target(), max_examples=limit, contract=contract, seed=seed)
        print(seed, outcome.first_failure_at, [f.verdict.value for f in outcome.failures], flush=True)
