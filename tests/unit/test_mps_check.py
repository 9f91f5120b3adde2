"""lab/scripts/mps_check.py reads issue #25's nightly pair and says PASS or FAIL for each figure, with the
per-target gains and each run's pace (docs/gpu-sharing.md). Checked on a recorded H200 pair."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "lab" / "gpu-runs" / "data"


def _nightly(off: str, mps: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "mps_check.py"), "nightly", str(DATA / off),
                           str(DATA / mps)], capture_output=True, text=True, timeout=60)


def test_a_pair_short_of_3x_fails_with_its_figures_per_target_and_pace():
    done = _nightly("2026-12-03b-nightly-off-summary.json", "2026-12-03b-nightly-mps-summary.json")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAIL nightly examples: off 183,085, mps 381,359 = 2.08x (>= 3)" in out
    assert "PASS off: every item served: 44/44 items back" in out
    # Every target gets a row, most off examples first: the two cheapest lead.
    rows = [line.split() for line in out.splitlines() if line.strip().endswith("x") and "%" in line]
    assert len(rows) == 22 and [r[0] for r in rows[:2]] == ["async-tensor-h2d", "cpu-gpu-buffer-copy-to-gpu"]
    assert "off: items fuzzed 1,850 s (0.77 of 16 workers x 150 s), 99 examples per item-second" in out


def test_a_run_against_itself_fails_the_modes_and_the_ratio():
    # mps against itself: the modes check fails (both say mps), the ratio is 1.00x: exit 1, not a false PASS.
    done = _nightly("2026-12-03b-nightly-mps-summary.json", "2026-12-03b-nightly-mps-summary.json")
    assert done.returncode == 1
    assert "FAIL modes" in done.stdout and "= 1.00x" in done.stdout


def test_mps_runs_bracketing_off_are_each_checked_and_the_lowest_decides():
    # 2026-12-03d: mps, off, mps in one call. Each mps run gets its pair's figures, then the bracket line.
    done = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "mps_check.py"), "nightly",
                           str(DATA / "2026-12-03d-nightly-off-summary.json"),
                           str(DATA / "2026-12-03d-nightly-mps-summary.json"),
                           str(DATA / "2026-12-03d-nightly-mps-2-summary.json")],
                          capture_output=True, text=True, timeout=60)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAIL nightly examples: off 175,560, mps 452,759 = 2.58x (>= 3)" in out
    assert "FAIL nightly examples: off 175,560, mps 396,781 = 2.26x (>= 3)" in out
    assert ("FAIL bracketed: 2 mps runs against one off run: 2.58x, 2.26x (spread 14%); the lowest, 2.26x, "
            "decides") in out


def test_nightly_without_an_mps_report_is_one_line_and_exit_2():
    done = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "mps_check.py"), "nightly",
                           str(DATA / "2026-12-03d-nightly-off-summary.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "at least one mps report" in done.stderr


def test_a_pair_of_this_tree_at_3x_passes():
    done = _nightly("2026-12-03e-C-nightly-off-summary.json", "2026-12-03e-C-nightly-mps-summary.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS nightly examples: off 186,866, mps 564,902 = 3.02x (>= 3)" in done.stdout


def _share_bench(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(["bash", str(ROOT / "lab" / "scripts" / "gpu_share_bench.sh")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OUT": str(tmp_path), **env})


def test_the_share_bench_exits_with_its_checks_alone(tmp_path):
    """A part left out of PARTS is no failure (it exited 1 when `threads` was left out, whatever the checks
    said: lab/gpu-runs/2026-12-03e-h200.md); a check that fails or cannot run is."""
    assert _share_bench(tmp_path, PARTS="none").returncode == 0
    cannot = _share_bench(tmp_path, PARTS="nightly", NIGHTLY_ORDER=" ")  # no run: nothing for the check to read
    assert cannot.returncode == 1 and "give the off report" in cannot.stdout
