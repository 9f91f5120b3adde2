"""Signals at random moments of real runs: every one must leave a report.

    python lab/scripts/interrupt_trials.py [--trials 10] [--seed 0]

Each trial starts ``fuzz run`` (a planted always-diverging target accepted in a
known-issues file, plus a real target; --confirm 1, --device cpu or cuda), waits a random time
drawn over the run's whole length, sends SIGTERM or SIGINT, and checks: the
process exits 128 + the signal (or finished first: then 0), the JSON report
exists and its exit code is the process's, the known issue is applied, and any
failure left unconfirmed says why. The phase the signal landed in comes from
the run's phase file (fuzz/run/interrupts.py). Prints one line per trial and a
tally; exit 1 if any trial broke a rule. Recorded in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KNOWN = {"format": "syncfuzz-known-issues/1",
         "issues": [{"target": "always-diverges", "verdict": "divergence", "reason": "planted (interrupt trials)"}]}


def trial(rng: random.Random, span: float, device: str) -> tuple[str, str, list[str]]:
    """One run signalled at a random moment: (signal, phase it landed in, broken rules)."""
    how = rng.choice(["SIGTERM", "SIGINT"])
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "known.json").write_text(json.dumps(KNOWN))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SYNCFUZZ_TARGET_MODULES": "tests.slow_targets",
               "SYNCFUZZ_PHASE_FILE": str(tmp / "phases")}
        command = [sys.executable, "-m", "fuzz", "run", "--target", "always-diverges", "--target", "fla-chunk-indices",
                   "--device", device, "--seed", "0", "--max-examples", "150", "--confirm", "1", "--in-process",
                   "--corpus", str(tmp / "corpus"), "--known-issues", str(tmp / "known.json"),
                   "--report", str(tmp / "r.json"), "--quiet"]
        child = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.0, span))
        phases = (tmp / "phases").read_text().split() if (tmp / "phases").exists() else []
        landed = phases[-2] if phases else "start-up"
        if child.poll() is None:
            child.send_signal(getattr(signal, how))
        else:
            landed = "after the end"
        out, err = child.communicate(timeout=300)
        broken = []
        if child.returncode not in (0, 128 + getattr(signal, how)):
            broken.append(f"exit {child.returncode}")
        if "Traceback" in out + err:
            tail = (out + err)[(out + err).index("Traceback"):][-1500:]
            broken.append("a traceback:\n" + tail)
        if not (tmp / "r.json").exists():
            if not phases and child.returncode == -getattr(signal, how):
                # Before `python -m fuzz` ran its first line (the interpreter's own start-up, tens of
                # milliseconds): nothing was done, and no process can catch a signal that early.
                return how, "interpreter start-up", broken[1:]
            return how, landed, [*broken, "no report"]
        report = json.loads((tmp / "r.json").read_text())
        if report["exit_code"] != child.returncode:
            broken.append(f"report says exit {report['exit_code']}, process {child.returncode}")
        for entry in report["targets"]:
            for failure in entry["failures"]:
                if entry["name"] == "always-diverges" and not failure["known"]:
                    broken.append("known issue not applied")
                if failure["repro"] and not failure["confirmed"] and not failure["unconfirmed"]:
                    broken.append("an unconfirmed failure does not say why")
        if child.returncode != 0:
            landed = report["run"].get("interrupted_in", landed)
        return how, landed, broken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--span", type=float, default=12.0, help="signal within this many seconds of the start")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tally: dict[str, int] = {}
    bad = 0
    for index in range(args.trials):
        how, landed, broken = trial(rng, args.span, args.device)
        tally[landed] = tally.get(landed, 0) + 1
        bad += bool(broken)
        print(f"trial {index + 1}: {how} in {landed}: " + ("ok" if not broken else "BROKEN: " + "; ".join(broken)),
              flush=True)
    print(f"{args.trials - bad}/{args.trials} trials kept every rule; phases hit: "
          + ", ".join(f"{phase} {n}" for phase, n in sorted(tally.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
