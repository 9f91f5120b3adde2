"""The benchmark script runs and writes its JSON (it is measured, never asserted on: no timing here).

``bench.run`` is called in this process (one slow test starts it as a script,
as a user would). The scaling arithmetic is checked against a stand-in ``fuzz run`` whose
report is fixed, so no verdict here depends on how many examples this host
manages in a budget (a busy CI host once fitted none into 3 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.run as bench
from tests.support import ROOT


def _bench(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["bench.run", *argv])
    bench.main()


def test_bench_writes_every_row_it_measured(tmp_path, monkeypatch):
    out = tmp_path / "bench.json"
    _bench(monkeypatch, "--device", "cpu", "--parts", "a", "--examples", "3", "--target", "fla-chunk-offsets",
           "--json", str(out))
    (row,) = json.loads(out.read_text())["a_d"]
    assert row["target"] == "fla-chunk-offsets" and row["device"] == "cpu"
    assert {"bare_s", "fuzz_s", "overhead", "round_s", "fraction_of_limit"} <= set(row)


def test_bench_splits_an_examples_time_and_bounds_the_round_rate(tmp_path, monkeypatch):
    out = tmp_path / "bench.json"
    _bench(monkeypatch, "--device", "cpu", "--parts", "s", "--examples", "8", "--target", "fla-chunk-offsets",
           "--json", str(out))
    (row,) = json.loads(out.read_text())["s"]
    assert {"hypothesis_s", "materialize_s", "calls_s", "compare_s", "oracles_s", "bookkeeping_s"} <= set(row)
    assert row["choices_per_spec"] >= 1  # an fla spec draws at least its cu_seqlens list and chunk size
    assert 0 < row["bound"] < 1 and row["us_per_choice"] > 0


def test_bench_scaling_under_a_budget_reports_the_rate_per_budget_second(tmp_path, monkeypatch):
    """Part c with --budget, on a stand-in `fuzz run`: 1 worker fuzzes 30
    examples, 2 workers 45 (each worker busy 2.5 s)."""
    commands = []

    def fuzz_run(command, **kwargs):
        commands.append(command)
        workers = int(command[command.index("--workers") + 1])
        report = {"targets": [{"name": "fla-chunk-offsets", "examples": 15 + 15 * workers, "seconds": 2.5 * workers,
                               "placement": [{"worker": f"gw{i}", "seconds": 2.5} for i in range(workers)]}]}
        Path(command[command.index("--report") + 1]).write_text(json.dumps(report))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(bench, "subprocess", SimpleNamespace(run=fuzz_run))
    out = tmp_path / "bench.json"
    _bench(monkeypatch, "--device", "cpu", "--parts", "c", "--workers", "1,2", "--budget", "3",
           "--target", "fla-chunk-offsets", "--json", str(out))
    for command, workers in zip(commands, ("1", "2"), strict=True):
        assert command[command.index("--workers") + 1] == workers
        assert float(command[command.index("--budget") + 1]) == 3
        assert command[command.index("--target") + 1] == "fla-chunk-offsets"
    one, two = json.loads(out.read_text())["c_cpu"]
    assert (one["workers"], one["budget"], one["examples"], two["examples"]) == (1, 3, 30, 45)
    # The rate is per second of budget (what the user gave), not per wall second with start-up in it.
    assert (one["examples_per_s"], two["examples_per_s"]) == pytest.approx((10, 15))
    assert (one["efficiency"], two["efficiency"]) == pytest.approx((1, 0.75))
    assert (one["steady_per_s"], two["steady_per_s"]) == pytest.approx((12, 18))  # over the busiest worker's 2.5 s
    assert two["steady_efficiency"] == pytest.approx(0.75)


@pytest.mark.slow
def test_bench_scaling_runs_fuzz_with_workers(tmp_path):
    """`python -m bench.run`, part c end to end on a fixed number of examples (a
    count, not a budget: the row is the same however busy the host)."""
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "bench.run", "--device", "cpu", "--parts", "c", "--workers", "1",
                           "--examples", "4", "--target", "fla-chunk-offsets", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["c_cpu"]
    assert (row["workers"], row["budget"], row["examples"]) == (1, None, 4)
    assert row["examples_per_s"] == pytest.approx(4 / row["seconds"]) and row["efficiency"] == pytest.approx(1)


def test_bench_says_why_when_a_scaling_run_cannot_start(monkeypatch, capsys):
    # fuzz refuses the budget before any work (too short for its items): no timing involved.
    with pytest.raises(SystemExit) as exited:
        _bench(monkeypatch, "--device", "cpu", "--parts", "c", "--workers", "1", "--budget", "0.2",
               "--target", "fla-chunk-offsets")
    assert exited.value.code == 2
    (line,) = [text for text in capsys.readouterr().err.splitlines() if text.startswith("bench:")]
    assert "--budget 0.2" in line and "use --budget 6 or more" in line  # 2 pieces, --confirm 0: limits.min_budget


@pytest.mark.parametrize("bad, says", [(["--workers", "1,x"], "give worker counts like 1,4,16"),
                                       (["--repeats", "0"], "1 or more"), (["--examples", "-5"], "1 or more")])
def test_bench_rejects_malformed_counts(bad, says, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exited:
        _bench(monkeypatch, "--parts", "c", *bad)
    assert exited.value.code == 2 and says in capsys.readouterr().err
