"""The benchmark script runs and writes its JSON (it is measured, never asserted on: no timing here)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT


def test_bench_writes_every_row_it_measured(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "bench.run", "--device", "cpu", "--parts", "a",
                           "--examples", "3", "--target", "fla-chunk-offsets", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["a_d"]
    assert row["target"] == "fla-chunk-offsets" and row["device"] == "cpu"
    assert {"bare_s", "fuzz_s", "overhead", "round_s", "fraction_of_limit"} <= set(row)
