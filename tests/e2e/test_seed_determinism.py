"""One seed draws the same examples in every way a run can be made: in-process, in its worker process,
and under pytest-xdist workers (fuzz.engine.runner.no_local_constants; tests/unit/test_seed_determinism.py has
the mechanism). Before the pin, fla-chunk-indices at seed 0 had 7 inputs where both sides raise in a
worker process and 19 in-process."""

from __future__ import annotations

import json

from tests.support import cli

TARGETS = ("fla-chunk-indices", "keep-on-cpu-keye-grid-thw")


def _tallies(tmp_path, name: str, *mode: str, targets: tuple[str, ...] = TARGETS, exit_code: int = 0,
             extra_env: dict[str, str] | None = None) -> dict:
    report = tmp_path / f"{name}.json"
    done = cli("run", "--device", "cpu", "--seed", "0", "--max-examples", "100", "--quiet", "--confirm", "0",
               "--corpus", str(tmp_path / f"corpus-{name}"), "--report", str(report),
               *[arg for target in targets for arg in ("--target", target)], *mode, extra_env=extra_env)
    assert done.returncode == exit_code, done.stderr[-2000:]
    return {t["name"]: t["by_device"]["cpu"] for t in json.loads(report.read_text())["targets"]}


def test_worker_process_in_process_and_xdist_runs_of_one_seed_tally_alike(tmp_path):
    worker = _tallies(tmp_path, "worker")
    assert _tallies(tmp_path, "in-process", "--in-process") == worker
    assert _tallies(tmp_path, "xdist", "--workers", "2") == worker
    assert all(tally["examples"] == 100 for tally in worker.values())


def test_pieces_of_a_failing_target_draw_alike_one_after_another_and_in_parallel(tmp_path):
    """A target split into pieces whose first piece saves a failure: in-process the later pieces run after it,
    under xdist some run beside it. Each piece replays the example database as the run started (not what
    another piece saved meanwhile), so the two draw the same examples and shrink steps."""
    planted = {"extra_env": {"SYNCFUZZ_TARGET_MODULES": "tests.oracle_demo"}, "targets": ("demo-invariant",),
               "exit_code": 1}
    in_process = _tallies(tmp_path, "pieces-in-process", "--in-process", "--pieces", "4", **planted)
    assert in_process["demo-invariant"]["verdicts"].get("invariant-violation")  # a failure, saved by a piece
    assert _tallies(tmp_path, "pieces-xdist", "--workers", "2", "--pieces", "4", **planted) == in_process
