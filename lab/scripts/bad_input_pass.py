"""A second bad-input pass, as a user types them: mistakes the table in tests/unit/test_bad_inputs.py does not hold.

Each case runs ``python3 -m fuzz ...`` in a fresh process, in a folder holding what a user already has (a
corpus with a saved failure, a report, a shard report, known issues, notes). A case is one mistake; the
expected answer is exit 2 with one stderr line ``fuzz: error: ...``, no traceback and no file changed. Cases
marked ``accepted`` are inputs that look odd but are legitimate (the reason says why); they are run to see
they do what they say, not counted as mistakes.

    PYTHONPATH=. python3 lab/scripts/bad_input_pass.py [--json OUT]

Prints one line per case (clean / TRACEBACK / SILENT / other exit / TOUCHED) and a summary line. A lab
probe: the cases that proved a gap go into the table as tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TARGET = "fla-chunk-offsets"
REPRO = f"corpus/failures/{TARGET}-divergence-000000000000.json"
UPSTREAM = "vllm/v1/utils.py::CpuGpuBuffer.copy_to_gpu"
ELSEWHERE = ("--root", "checkout", "--module", "probe_module")  # never this checkout
UNKNOWN_RELEASE = ("only the registry knows a release does not exist: the labelled download line comes first, "
                   "then the one error line")
RUN = ["run", "--target", TARGET, "--device", "cpu", "--max-examples", "1", "--in-process", "--quiet",
       "--confirm", "0", "--corpus", "corpus"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    accepted: str = ""  # why an odd-looking input is legitimate ("" = a mistake: must exit 2, one line)


def cases() -> list[Case]:
    c = Case
    return [
        # trend
        c("trend-one-report", ("trend", "report.json")),
        c("trend-missing-report", ("trend", "report.json", "missing.json")),
        c("trend-not-json", ("trend", "report.json", "notes.txt")),
        c("trend-a-repro", ("trend", "report.json", REPRO)),
        c("trend-known-issues", ("trend", "report.json", "known.json")),
        c("trend-a-folder", ("trend", "report.json", "corpus")),
        c("trend-same-report-twice", ("trend", "report.json", "report.json")),
        c("trend-same-report-through-a-link", ("trend", "report.json", "report-link.json")),
        c("trend-two-shards", ("trend", "shard1.json", "shard2.json")),
        c("trend-threshold-negative", ("trend", "report.json", "report2.json", "--threshold", "-0.5")),
        c("trend-threshold-nan", ("trend", "report.json", "report2.json", "--threshold", "nan")),
        c("trend-threshold-above-one", ("trend", "report.json", "report2.json", "--threshold", "1.5")),
        c("trend-threshold-letters", ("trend", "report.json", "report2.json", "--threshold", "high")),
        c("trend-markdown-over-an-input", ("trend", "report.json", "report2.json", "--markdown", "report2.json")),
        c("trend-html-over-an-input", ("trend", "report.json", "report2.json", "--html", "report.json")),
        c("trend-html-a-folder", ("trend", "report.json", "report2.json", "--html", "corpus")),
        c("trend-markdown-over-known-issues", ("trend", "report.json", "report2.json", "--markdown", "known.json")),
        c("trend-markdown-and-html-same", ("trend", "report.json", "report2.json", "--markdown", "t.x",
                                           "--html", "t.x")),
        c("trend-html-in-proc", ("trend", "report.json", "report2.json", "--html", "/proc/t.html")),
        # merge-reports
        c("merge-html-a-folder", ("merge-reports", "merged.json", "report.json", "--html", "corpus")),
        c("merge-html-is-an-input", ("merge-reports", "merged.json", "report.json", "--html", "report.json")),
        c("merge-html-and-markdown-same", ("merge-reports", "merged.json", "report.json", "--html", "m.x",
                                           "--markdown", "m.x")),
        c("merge-junit-over-a-repro", ("merge-reports", "merged.json", "report.json", "--junit", REPRO)),
        c("merge-into-the-corpus-failures", ("merge-reports", "corpus/failures/m.json", "report.json"),
          "merge-reports knows no corpus; replay DIR lists a stray report as invalid and replays the rest"),
        # run
        c("run-html-a-folder", (*RUN, "--html", "corpus")),
        c("run-html-over-a-report-input", (*RUN, "--html", "report.json")),
        c("run-html-and-markdown-same", (*RUN, "--html", "o.x", "--markdown", "o.x")),
        c("run-html-over-known-issues", (*RUN, "--html", "known.json", "--known-issues", "known.json")),
        c("run-keep-journals-negative", (*RUN, "--keep-journals", "-1")),
        c("run-keep-journals-letters", (*RUN, "--keep-journals", "all")),
        c("run-pieces-negative", (*RUN, "--pieces", "-2")),
        c("run-workers-negative", (*RUN, "--workers", "-1")),
        c("run-workers-letters", (*RUN, "--workers", "many")),
        c("run-require-changes-bogus", (*RUN, "--require-changes-covered", "most")),
        c("run-device-cuda-without-gpu", (*RUN[:4], "cuda", *RUN[5:])),
        c("run-shard-three-parts", (*RUN, "--shard", "1/2/3")),
        c("run-shard-float", (*RUN, "--shard", "1.5/2")),
        c("run-target-twice", (*RUN, "--target", TARGET), "the same target named twice runs once"),
        c("run-legacy-and-optimized-same-release", (*RUN, "--legacy", "vllm==0.28.0", "--optimized",
                                                    "vllm==0.28.0")),
        c("run-legacy-unpinned", (*RUN, "--legacy", "vllm")),
        c("run-legacy-range", (*RUN, "--legacy", "vllm>=0.27")),
        c("run-optimized-version-typo", (*RUN, "--optimized", "vllm=0.28.0")),
        c("run-profile-and-max-examples", (*RUN, "--profile", "premerge"), "a profile's settings yield to flags"),
        c("run-known-issues-a-report", (*RUN, "--known-issues", "report.json")),
        c("run-known-issues-a-repro", (*RUN, "--known-issues", REPRO)),
        c("run-sources-a-report", (*RUN, "--sources", "report.json")),
        c("run-example-timeout-letters", (*RUN, "--example-timeout", "soon")),
        c("run-budget-and-profile", (*RUN[:5], *RUN[7:], "--budget", "5", "--profile", "premerge"),
          "a budget with a profile: the budget is the flag's"),
        # replay
        c("replay-a-report", ("replay", "report.json")),
        c("replay-known-issues-file", ("replay", "known.json")),
        c("replay-notes", ("replay", "notes.txt")),
        c("replay-empty-folder", ("replay", "empty")),
        c("replay-folder-of-notes", ("replay", "notes-only")),
        c("replay-two-files", ("replay", REPRO, REPRO)),
        c("replay-device-auto", ("replay", REPRO, "--device", "auto")),
        c("replay-device-cuda-without-gpu", ("replay", REPRO, "--device", "cuda")),
        # coverage
        c("coverage-side-bogus", ("coverage", "report.json", "--side", "both")),
        c("coverage-a-repro", ("coverage", REPRO)),
        c("coverage-a-folder", ("coverage", "corpus")),
        c("coverage-changes-without-sides", ("coverage", "report.json", "--changes")),
        c("coverage-two-reports", ("coverage", "report.json", "report2.json")),
        # selftest
        c("selftest-min-kill-rate-negative", ("selftest", "--target", TARGET, "--min-kill-rate", "-0.1")),
        c("selftest-min-kill-rate-letters", ("selftest", "--target", TARGET, "--min-kill-rate", "most")),
        c("selftest-limit-negative", ("selftest", "--target", TARGET, "--limit", "-3")),
        c("selftest-json-over-the-report", ("selftest", "--target", TARGET, "--json", "report.json")),
        c("selftest-max-examples-letters", ("selftest", "--target", TARGET, "--max-examples", "ten")),
        # provenance
        c("provenance-source-unused", ("provenance", "--source", "9.9.9=sourcetree")),
        c("provenance-against-a-report", ("provenance", "--against", "report.json")),
        c("provenance-against-unknown-release", ("provenance", "--against", "vllm==9.9.9"),
          UNKNOWN_RELEASE),
        c("provenance-target-twice-unknown", ("provenance", "--target", "nope", "--target", TARGET)),
        # sources
        c("sources-list-newest-in-empty", ("sources", "list", "--newest", "--sources", "empty"),
          "the shipped packs are still found; an empty extra folder adds none"),
        c("sources-list-sources-a-report", ("sources", "list", "--sources", "report.json")),
        c("sources-fetch-into-the-corpus", ("sources", "fetch", "sourcetree", "--into", "corpus/failures")),
        c("sources-fetch-unknown-release", ("sources", "fetch", "vllm==9.9.9", "--into", "packs"),
          UNKNOWN_RELEASE),
        c("sources-fetch-spec-typo", ("sources", "fetch", "vllm=0.30.0", "--into", "packs")),
        # new-target
        c("new-target-same-versions", ("new-target", "my-target", "--upstream", UPSTREAM,
                                       "--legacy-version", "0.30.0", "--optimized-version", "0.30.0", *ELSEWHERE)),
        c("new-target-taken-name-other-root", ("new-target", TARGET, "--upstream", UPSTREAM,
                                               "--legacy-version", "0.29.0", "--optimized-version", "0.30.0",
                                               "--root", "checkout")),
        c("new-target-versions-backwards", ("new-target", "my-target", "--upstream", UPSTREAM,
                                            "--legacy-version", "0.30.0", "--optimized-version", "0.29.0", *ELSEWHERE),
          "a newer legacy is how a revert is fuzzed (tests/e2e/test_sync_rule.py runs 0.28.0 -> 0.27.1)"),
        c("new-target-version-letters", ("new-target", "my-target", "--upstream", UPSTREAM,
                                         "--legacy-version", "old", "--optimized-version", "new", *ELSEWHERE)),
        c("new-target-upstream-not-vllm", ("new-target", "my-target", "--upstream", "torch/x.py::f",
                                           "--legacy-version", "0.29.0", "--optimized-version", "0.30.0", *ELSEWHERE)),
        c("new-target-also-same-as-upstream", ("new-target", "my-target", "--upstream", UPSTREAM,
                                               "--also", UPSTREAM, "--legacy-version", "0.29.0",
                                               "--optimized-version", "0.30.0", *ELSEWHERE)),
        # list
        c("list-json-extra", ("list", "--json", "x")),
    ]


def make_world(root: Path) -> None:
    """What a user already has: a corpus with a saved failure, reports (whole and shards), notes."""
    run = [sys.executable, "-m", "fuzz"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for name, extra in [("report.json", ["--seed", "0"]), ("report2.json", ["--seed", "1"]),
                        ("shard1.json", ["--seed", "2", "--pieces", "2", "--shard", "1/2", "--max-examples", "2"]),
                        ("shard2.json", ["--seed", "2", "--pieces", "2", "--shard", "2/2", "--max-examples", "2"])]:
        subprocess.run([*run, *RUN, "--corpus", "setup-corpus", "--report", name, *extra], cwd=root, env=env,
                       check=True, capture_output=True)
    (root / "corpus" / "failures").mkdir(parents=True)
    (root / "corpus" / "hypothesis").mkdir()
    repro = {"format": "syncfuzz-repro/1", "target": TARGET, "input": {"device": "cpu", "cu_seqlens": [0, 3],
             "dtype": "int32", "chunk_size": 2}, "device": "cpu", "contract": "caller", "verdict": "divergence",
             "seed": 0}
    (root / REPRO).write_text(json.dumps(repro))
    (root / "known.json").write_text(json.dumps({"format": "syncfuzz-known-issues/1", "issues": [
        {"target": TARGET, "verdict": "divergence", "reason": "accepted"}]}))
    (root / "report-link.json").symlink_to(root / "report.json")
    (root / "notes.txt").write_text("my notes\n")
    (root / "empty").mkdir()
    (root / "notes-only").mkdir()
    (root / "notes-only" / "notes.json").write_text("{}")
    (root / "sourcetree" / "vllm").mkdir(parents=True)
    # another checkout of this project (a user's second clone), holding the same targets
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{Path(__file__).resolve().parents[2]}",
                    str(root / "checkout")], check=True)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def judge(case: Case, code: int, out: str, err: str, touched: list[str]) -> str:
    if "Traceback" in out + err:
        return "TRACEBACK"
    if case.accepted:
        return f"accepted (exit {code})"
    lines = err.strip().splitlines()
    if code == 2 and len(lines) == 1 and lines[0].startswith("fuzz: error: "):
        return "clean" if not touched else "TOUCHED " + ", ".join(touched)
    if code == 0:
        return "SILENT"
    return f"other exit {code}, {len(lines)} stderr lines"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--only", default="", help="only the cases whose name holds this")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           # offline: no download is ever attempted by a case
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        template.mkdir()
        make_world(template)
        for case in [case for case in cases() if args.only in case.name]:
            world = Path(tmp) / case.name
            subprocess.run(["cp", "-a", str(template), str(world)], check=True)
            env["SYNCFUZZ_WHEEL_CACHE"] = str(world / "empty")
            before = snapshot(world)
            done = subprocess.run([sys.executable, "-m", "fuzz", *case.argv], cwd=world, env=env,
                                  capture_output=True, text=True, timeout=300)
            after = snapshot(world)
            touched = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
            verdict = judge(case, done.returncode, done.stdout, done.stderr, touched)
            first = (done.stderr.strip().splitlines() or [""])[-1][:150]
            print(f"{verdict:<28} {case.name:<40} {first}", flush=True)
            results.append({"case": case.name, "argv": list(case.argv), "verdict": verdict,
                            "exit": done.returncode, "stderr": done.stderr[-2000:], "accepted": case.accepted})
    tally: dict[str, int] = {}
    for row in results:
        key = row["verdict"].split(" ")[0]
        tally[key] = tally.get(key, 0) + 1
    print("pass:", len(results), "cases;", ", ".join(f"{n} {k}" for k, n in sorted(tally.items())))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
