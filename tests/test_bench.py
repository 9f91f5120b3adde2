"""The benchmark script runs and writes its JSON (it is measured, never asserted on: no timing here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


def test_bench_scaling_under_a_budget_reports_examples_and_efficiency(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "bench.run", "--device", "cpu", "--parts", "c", "--workers", "1",
                           "--budget", "3", "--target", "fla-chunk-offsets", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["c_cpu"]
    assert row["workers"] == 1 and row["budget"] == 3 and row["examples"] > 0
    # The rate is per second of budget (what the user gave), not per wall second with start-up in it.
    assert row["examples_per_s"] == pytest.approx(row["examples"] / 3)
    assert row["seconds"] > 3


def test_bench_says_why_when_a_scaling_run_cannot_start(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.run", "--device", "cpu", "--parts", "c", "--workers", "1",
                           "--budget", "0.2", "--target", "fla-chunk-offsets"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    (line,) = [l for l in done.stderr.splitlines() if l.startswith("bench:")]
    assert "--budget 0.2" in line and "use --budget 1 or more" in line


@pytest.mark.parametrize("bad, says", [(["--workers", "1,x"], "give worker counts like 1,4,16"),
                                       (["--repeats", "0"], "1 or more"), (["--examples", "-5"], "1 or more")])
def test_bench_rejects_malformed_counts(bad, says):
    done = subprocess.run([sys.executable, "-m", "bench.run", "--parts", "c", *bad],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and says in done.stderr
