"""Why reach tracing costs more on Python 3.12 (#25): time coverage.py's C tracer started and stopped around a
tiny call, as fuzz/reach/collect.py does for each traced side's call, under a deep stack and with other code run between
calls (Hypothesis, the harness). Since 3.12, ``sys.settrace`` sits on sys.monitoring (PEP 669): each start and
each stop re-instruments the code on the stack, and every function that runs afterwards is instrumented again
on its next call. On 3.11 a start+stop is a few tens of microseconds.

    python lab/scripts/settrace_toggle_probe.py          # any Python with coverage.py installed
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
        cov.set_option("run:core", "ctrace")  # as fuzz/reach/collect.py
    except coverage.CoverageException:
        pass

    def example(how: str) -> None:
        """``plain``: no tracing; ``toggled``: a start and stop around each side's call (fuzz/reach/collect.py before
        the tracer was kept); ``kept``: one start and stop, the harness' context in between (as now)."""
        code.between(1)  # what runs between examples (Hypothesis, the oracles)
        if how == "kept":
            cov.start()  # the context is still "cpu" from the example before (set once, below)
        for side in ("legacy", "optimized"):
            if how == "toggled":
                cov.start()
            code.side_call(10)
            if how == "toggled":
                cov.stop()
            if how == "kept" and side == "legacy":
                cov.switch_context("harness")
                code.side_call(3)  # the harness' work between the sides (a consumer's reads)
                cov.switch_context("cpu")
        if how == "kept":
            cov.stop()

    def timed(how: str, reps: int = 1000) -> float:
        def leaf(_: int) -> float:
            start = time.perf_counter()
            for _ in range(reps):
                example(how)
            return (time.perf_counter() - start) / reps
        return code.frame0(1, leaf)

    cov.start()
    cov.switch_context("cpu")  # as fuzz.reach.collect.Measure: the device's context, switched only when it changes
    cov.stop()
    runs: dict[str, list[float]] = {"plain": [], "toggled": [], "kept": []}
    for _ in range(3):
        for how, times in runs.items():
            times.append(timed(how))
    p, t, k = (statistics.median(runs[how]) for how in ("plain", "toggled", "kept"))
    print(f"Python {sys.version.split()[0]}, coverage {coverage.__version__}, stack {DEPTH} frames: an example "
          f"{1e6 * p:.1f} us untraced, {1e6 * t:.1f} us with each side's call traced ({1e6 * (t - p) / 2:.1f} us "
          f"per start+stop), {1e6 * k:.1f} us with the tracer kept between the sides")


if __name__ == "__main__":
    main()
