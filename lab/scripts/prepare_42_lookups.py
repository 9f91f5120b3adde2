"""Count how often one in-process ``fuzz run`` builds the target registry and binds sides (issue #42 item 3,
lab/cpu-runs/2026-12-06-prepare-42.md). Run from a checkout's root: ``PYTHONPATH=. python3
lab/scripts/prepare_42_lookups.py [FLAGS]``; works on trees from before ``fuzz.targets._registry`` too."""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import fuzz.releases.sides as sides
import fuzz.targets as targets

counts = {"registry builds": 0, "bind": 0}


def counted(name: str, function: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return function(*args, **kwargs)
    return call


if hasattr(targets, "_registry"):  # the branch: built by _registry, once per set of modules
    targets._registry = counted("registry builds", targets._registry)
else:  # before: every all_targets call built it
    targets.all_targets = counted("registry builds", targets.all_targets)
sides.bind = counted("bind", sides.bind)

if __name__ == "__main__":
    from fuzz.cli import main

    folder = tempfile.mkdtemp()
    code = main(["run", "--target", "fla-chunk-offsets", "--target", "fla-chunk-indices", "--device", "cpu",
                 "--max-examples", "5", "--in-process", "--quiet", "--confirm", "0", "--corpus", folder + "/c",
                 "--known-issues", "known-issues.json", "--report", folder + "/r.json", *sys.argv[1:]])
    print("exit", code, counts, file=sys.stderr)
