"""Issue #17's table from two `bench.run --parts ad` JSON files (before, after) and,
optionally, a `--parts s` JSON of the after tree: per target the fuzzer's
examples/s, overhead against a bare @given test, fuzzer/round rate, and, from
part s, the best fuzzer/round rate Hypothesis leaves (its cost per spec against
a round's). Prints Markdown and a summary line against the issue's targets.

    python lab/scripts/throughput_table.py BEFORE_AD.json AFTER_AD.json [AFTER_S.json]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _rows(path: str, part: str) -> dict[str, dict]:
    return {row["target"]: row for row in json.loads(Path(path).read_text())[part]}


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    before, after = _rows(argv[0], "a_d"), _rows(argv[1], "a_d")
    split = _rows(argv[2], "s") if len(argv) == 3 else {}
    print("| target | fuzzer examples/s before -> after | overhead vs bare `@given` | fuzzer / round rate | "
          "Hypothesis: choices/spec, us each, best fuzzer/round |")
    print("|---|---|---|---|---|")
    for name, new in after.items():
        old = before[name]
        s = split.get(name)
        bound = f"{s['choices_per_spec']:.1f}, {s['us_per_choice']:.0f}, {s['bound']:.2f}" if s else "-"
        print(f"| {name} | {1 / old['fuzz_s']:.0f} -> {1 / new['fuzz_s']:.0f} | {old['overhead']:.2f}x -> "
              f"{new['overhead']:.2f}x | {old['fraction_of_limit']:.2f} -> {new['fraction_of_limit']:.2f} | {bound} |")
    for label, rows in (("before", before), ("after", after)):
        fractions = [r["fraction_of_limit"] for r in rows.values()]
        overheads = [r["overhead"] for r in rows.values()]
        print(f"\n{label}: fuzzer/round median {statistics.median(fractions):.2f} (>= 0.8 wanted), "
              f"under 0.5: {sum(f < 0.5 for f in fractions)} of {len(fractions)}; overhead median "
              f"{statistics.median(overheads):.2f}x, over 1.0x: {sum(o > 1.0 for o in overheads)} of {len(overheads)}")
    speedups = [before[n]["fuzz_s"] / after[n]["fuzz_s"] for n in after]
    print(f"\nspeed-up of the fuzzer, median {statistics.median(speedups):.2f}x "
          f"({min(speedups):.2f}-{max(speedups):.2f}x)")


if __name__ == "__main__":
    main(sys.argv[1:])
