"""Why reach tracing costs more on Python 3.12 (#25): time coverage.py's C tracer started and stopped around a
tiny call, as fuzz/reach.py does for each traced side's call, under a deep stack and with other code run between
calls (Hypothesis, the harness). Since 3.12, ``sys.settrace`` sits on sys.monitoring (PEP 669): each start and
each stop re-instruments the code on the stack, and every function that runs afterwards is instrumented again
on its next call. On 3.11 a start+stop is a few tens of microseconds.

    python scripts/settrace_toggle_probe.py          # any Python with coverage.py installed
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import coverage

DEPTH = 60  # about the fuzz process' stack at a side's call (isolation, runner, Hypothesis, execute)
BODY = "\n".join(f"    v{i} = n + {i}" for i in range(150))
SOURCE = "\n".join(
    [f"def frame{d}(n, leaf):\n{BODY}\n    return {'leaf(n)' if d == DEPTH - 1 else f'frame{d + 1}(n, leaf)'}\n"
     for d in range(DEPTH)]
    + [f"def helper{k}(n):\n    a = n + {k}\n    b = a * 2\n    return b - a\n" for k in range(300)]
    + ["HELPERS = [" + ", ".join(f"helper{k}" for k in range(300)) + "]\n",
       "def between(n):\n    s = 0\n    for h in HELPERS:\n        s += h(n)\n    return s\n",
       "def side_call(x):\n    total = 0\n    for i in range(x):\n        if i % 2:\n            total += i\n"
       "        else:\n            total -= 1\n    return total\n"])


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    (folder / "probe_code.py").write_text(SOURCE)
    sys.path.insert(0, str(folder))
    import probe_code as code  # noqa: PLC0415 -- written just above

    cov = coverage.Coverage(data_file=None, branch=True, include=[str(folder / "probe_code.py")],
                            config_file=False)
    try:
        cov.set_option("run:core", "ctrace")  # as fuzz/reach.py
    except coverage.CoverageException:
        pass

    def example(toggle: bool) -> None:
        code.between(1)  # what runs between traced calls
        for _ in ("legacy", "optimized"):
            if toggle:
                cov.start()
            code.side_call(10)
            if toggle:
                cov.stop()

    def timed(toggle: bool, reps: int = 1000) -> float:
        def leaf(_: int) -> float:
            start = time.perf_counter()
            for _ in range(reps):
                example(toggle)
            return (time.perf_counter() - start) / reps
        return code.frame0(1, leaf)

    plain, toggled = [], []
    for _ in range(3):
        plain.append(timed(False))
        toggled.append(timed(True))
    p, t = statistics.median(plain), statistics.median(toggled)
    print(f"Python {sys.version.split()[0]}, coverage {coverage.__version__}, stack {DEPTH} frames: an example "
          f"{1e6 * p:.1f} us untraced, {1e6 * t:.1f} us with both calls traced: "
          f"{1e6 * (t - p) / 2:.1f} us per start+stop")


if __name__ == "__main__":
    main()
