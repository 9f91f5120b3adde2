"""Which examples raised on both sides, and with what: one line per such example, then a count per exception.

    PYTHONPATH=. python3 lab/scripts/both_raised_probe.py --device cuda --seed 0 --max-examples 100 \
        --target fla-chunk-indices --target keep-on-cpu-keye-grid-thw

Runs `fuzz run --in-process` with the arguments given (so the items and their seeds are the CLI's) and
reports each both-raised example: target, the spec's hash and the two exceptions. On the H200, the same
seed gave these two targets 9 and 13 both-raised CUDA examples in some calls and 7 and 9 in others, with the
same code (lab/gpu-runs/2026-12-03-h200.md); on CPU they give 7 and 9. Run it on two machines and compare:
the same spec hashes with other exceptions point at the machine, other hashes at the drawing.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections import Counter


def main(argv: list[str]) -> int:
    import fuzz.engine.runner as runner
    from fuzz.cli import main as fuzz_main

    seen: Counter = Counter()
    original = runner.run_example

    def watching(target, spec, config=runner.run_example.__defaults__[0]):  # noqa: ANN001, ANN202
        result = original(target, spec, config=config)
        if result.legacy.raised and result.optimized.raised:
            digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
            pair = (result.legacy.raised.type_name, result.optimized.raised.type_name)
            message = result.legacy.raised.message.splitlines()[0][:100] if result.legacy.raised.message else ""
            print(f"both-raised {target.name} {digest} {pair[0]} / {pair[1]}: {message}", flush=True)
            seen[(target.name, *pair, message)] += 1
        return result

    runner.run_example = watching
    with tempfile.TemporaryDirectory() as corpus:
        code = fuzz_main(["run", "--in-process", "--quiet", "--confirm", "0", "--corpus", corpus,
                          "--report", f"{corpus}/report.json", *argv])
    for (target, legacy, optimized, message), count in sorted(seen.items()):
        print(f"{count:5d}  {target}: {legacy} / {optimized}: {message}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
