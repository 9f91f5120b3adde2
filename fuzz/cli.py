"""syncfuzz's command line: differential fuzzing of legacy vs optimized copies (docs/design.md).

Subcommands: list, run, replay, coverage, merge-reports, corpus-merge, trend, selftest, provenance, sources, new-target.
The one module that uses argparse: every command's flags are parsed here and handed to its function of the
Python API (fuzz/commands/__init__.py), which does the work (lint-imports forbids argparse elsewhere).

Exit codes: 0 no failure, 1 a failing verdict found (or a replayed failure still fails), 2 usage or input
error -- one line on stderr naming the problem and the fix, before any work --, 4 a fuzzer bug, 3 incomplete
(some target x device ran no example, could not be built, or a check asked for could not run; a merge holding
an interrupted part or missing shards), 128 + N stopped by signal N (the report of what finished is still
written: fuzz/run/interrupts.py; merge-reports exits by what it merged, never by an input's signal).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from fuzz import commands as api
from fuzz.config import DEFAULT_MAX_EXAMPLES, PROFILES, RunConfig, apply_profile
from fuzz.engine import journals
from fuzz.errors import FuzzError, HarnessError, UsageError
from fuzz.records.model import EXIT_FUZZER_BUG, EXIT_OK, EXIT_USAGE
from fuzz.releases import CACHE_ENV, SIDE_VERSIONS, SIDES, SOURCES_ENV
from fuzz.reports.preflight import (
    check_environment,
    check_no_collisions,
    check_outputs,
)
from fuzz.reports.trend import DEFAULT_THRESHOLD
from fuzz.run.session import markdown_images
from fuzz.targets import CONTRACTS

EXIT_CODES_HELP = ("exit codes: 0 no failure, 1 a failing verdict (or a replayed failure still fails), "
                   "2 usage or input error (one line naming the problem and the fix), "
                   "3 incomplete: no failure found, but some target x device ran no example, "
                   "4 a fuzzer bug (please report it)")
DEFAULT_CORPUS = "fuzz-corpus"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text} must be between 0 and 2**63-1")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be a kill rate between 0 and 1 (e.g. 0.9)")
    return value


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive, finite number of seconds")
    return value


def _threshold(text: str) -> float:
    """``trend --threshold``: the fall in examples worth reporting, as a fraction of the night before."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be a fraction between 0 and 1 (0.3: fell by more than 30%)")
    return value


def _require_changes(value: str) -> bool | str:
    """--require-changes-covered=MODE as RunConfig keeps it: "reached" is the flag alone (True)."""
    if value == "reached":
        return True
    if value not in ("all", "sync"):
        raise argparse.ArgumentTypeError(f"{value!r} is not one of reached, all, sync")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m fuzz", description=__doc__.splitlines()[0], epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=_version_line())
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="list the targets")
    listing.add_argument("--json", action="store_true", help="print the JSON interface instead of a table")

    run = commands.add_parser("run", help="fuzz targets: legacy vs optimized", epilog=EXIT_CODES_HELP)
    run.add_argument("--target", action="append", default=[], metavar="NAME", help="a target (repeatable; default all)")
    amount = run.add_mutually_exclusive_group()
    amount.add_argument("--max-examples", type=_positive_int, metavar="N",
                        help=f"examples per target (default {DEFAULT_MAX_EXAMPLES}, or the profile's)")
    amount.add_argument("--budget", type=_budget, metavar="SECONDS", help="wall-clock budget shared by all targets")
    run.add_argument("--seed", type=_seed, help="run seed (default random; recorded in the report)")
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    run.add_argument("--contract", default="caller", choices=CONTRACTS,
                     help="caller: inputs as today's callers pass them; wide: every form the legacy code accepted")
    run.add_argument("--corpus", default=DEFAULT_CORPUS, metavar="DIR",
                     help=f"example database and saved failures (default ./{DEFAULT_CORPUS})")
    run.add_argument("--report", metavar="FILE", help="write the JSON report here")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument("--example-timeout", type=_budget, default=120.0, metavar="SECONDS",
                     help="watchdog: an example running longer is a hang (default 120)")
    run.add_argument("--max-restarts", type=int, default=3, metavar="N",
                     help="fresh workers per target after a crash or hang (default 3)")
    run.add_argument("--stress", action="store_true",
                     help="async-hazard stress: optimized side behind a sleeping CUDA stream, host inputs "
                          "poisoned as soon as it returns")
    run.add_argument("--race", action="store_true",
                     help="the race oracle (CUDA): each side also run held behind a sleeping stream while the host "
                          "rewrites memory its pending copies use; a change the held run shows is a `race` "
                          "(docs/verdicts.md#races)")
    run.add_argument("--upstream", action="store_true",
                     help="also run the real vllm function (vllm installed) and compare it with the optimized copy")
    run.add_argument("--legacy", default="copy", metavar="SIDE",
                     help="the legacy side: copy (legacy/, default), vllm==X.Y.Z (a release, from --sources or the "
                          "wheel cache) or a PATH (a vllm checkout, an unpacked wheel, a .whl)")
    run.add_argument("--optimized", default="copy", metavar="SIDE",
                     help="the optimized side, as --legacy (copy: optimized/); e.g. --legacy vllm==0.33.0 "
                          "--optimized ~/src/vllm fuzzes a branch against the release")
    run.add_argument("--sync-budget", choices=("auto", "apply", "ignore"), default="auto",
                     help="with a side from a source a sync regression is optimized syncing more than legacy on "
                          "the same input; the targets' declared sync budgets (for the optimized copy's release) "
                          "then: auto (default) = the budget judges only code that descends from the release it "
                          "was declared for; apply = always on top of the relative rule; ignore = relative only. "
                          "Copy-vs-copy runs are judged by the budget whatever this says")
    run.add_argument("--sources", action="append", default=[], metavar="DIR",
                     help="source packs (python -m fuzz sources fetch) where vllm==X sides resolve, before "
                          "$SYNCFUZZ_SOURCES and the packs shipped in sources/ (repeatable)")
    run.add_argument("--in-process", action="store_true",
                     help="no worker processes: faster start, but a crash or hang ends the run")
    run.add_argument("--profile", choices=sorted(PROFILES),
                     help="premerge: seed 0, 100 examples/target, deterministic; nightly: 1 h budget, "
                          "seed rotating daily (explicit flags win)")
    run.add_argument("--keep-journals", type=_positive_int, default=journals.DEFAULT_KEEP_JOURNALS, metavar="N",
                     help=f"keep the journal folders of the last N runs in the corpus, this one included "
                          f"(default {journals.DEFAULT_KEEP_JOURNALS}); older ones are deleted as the run starts, "
                          "never a live run's")
    run.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                     help="pytest-xdist workers (one GPU each, round-robin); 1 runs here")
    run.add_argument("--gpu-share", choices=("auto", "mps", "off"), default="auto",
                     help="workers sharing a GPU: auto (default) = through CUDA MPS when two or more workers land "
                          "on one GPU (a private MPS daemon, stopped at the end; one already running is used); "
                          "mps = always; off = time-sliced CUDA contexts (docs/gpu-sharing.md)")
    run.add_argument("--pieces", type=_positive_int, default=1, metavar="K",
                     help="split each target's examples into K seeded items (for workers and shards)")
    run.add_argument("--shard", metavar="I/N", help="run only shard I of N of the items (hosts split a run)")
    run.add_argument("--markdown", metavar="FILE", help="write a Markdown summary here")
    run.add_argument("--junit", metavar="FILE", help="write JUnit XML here (one test case per target and device)")
    run.add_argument("--html", metavar="FILE", help=HTML_HELP)
    run.add_argument("--known-issues", metavar="FILE",
                     help="accepted findings (JSON): matching failures are reported as known and do not fail the run")
    run.add_argument("--confirm", type=int, default=3, metavar="N",
                     help="replay each failure N times in fresh processes; not every time = flaky (default 3)")
    run.add_argument("--coverage", action=argparse.BooleanOptionalAction, default=None,
                     help="measure the lines and branches each side ran (docs/reach.md; default: on for "
                          "--profile nightly, and for --profile premerge with a side from a source; off otherwise)")
    run.add_argument("--require-changes-covered", nargs="?", const=True, default=False, type=_require_changes,
                     metavar="reached|all|sync",
                     help="with sides from sources: a changed definition that no target reached makes the run "
                          "incomplete (exit 3); =all also a changed branch no example took in a definition that "
                          "ran; =sync as =all, for the sync-relevant definitions only (docs/reach.md); the flag "
                          "alone is =reached; implies --coverage")

    selftest = commands.add_parser("selftest", help="mutate the optimized copies and measure the kill rate")
    selftest.add_argument("--target", action="append", default=[], metavar="NAME")
    selftest.add_argument("--max-examples", type=_positive_int, default=100, metavar="N",
                          help="examples per mutant (default 100)")
    selftest.add_argument("--seed", type=_seed, default=0)
    selftest.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    selftest.add_argument("--limit", type=_positive_int, metavar="N", help="at most N mutants per target")
    selftest.add_argument("--contract", default="caller", choices=CONTRACTS)
    selftest.add_argument("--json", metavar="FILE", help="write the results as JSON")
    selftest.add_argument("--shared", action="store_true",
                          help="plant each mutant in both copies: measures the invariants and references alone")
    selftest.add_argument("--min-kill-rate", type=_rate, metavar="R",
                          help="exit 1 if a target's kill rate (equivalents excluded) is below R")

    merge = commands.add_parser("merge-reports", help="merge JSON reports of shards or hosts into one",
                                epilog="exit codes, judged on the merged content: 0 no failure, 1 a failing verdict, "
                                       "2 refused (one line, nothing written), 4 a fuzzer bug, 3 incomplete, also a "
                                       "partial merge (a part stopped by a signal, or missing shards): an input's "
                                       "signal is said in every output, never passed on as 128 + N")
    merge.add_argument("output", metavar="OUT.json")
    merge.add_argument("inputs", metavar="IN.json", nargs="+")
    merge.add_argument("--markdown", metavar="FILE")
    merge.add_argument("--junit", metavar="FILE")
    merge.add_argument("--html", metavar="FILE", help=HTML_HELP)

    for add in (_add_corpus_merge, _add_replay, _add_trend, _add_provenance, _add_new_target, _add_sources,
                _add_coverage):
        add(commands)
    return parser


def _add_corpus_merge(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "corpus-merge", help="merge the corpora of shards or hosts into the one the next run starts from",
        description="Merge the corpora (fuzz run --corpus) of a run's shards or hosts into OUT: the union of "
                    "their example databases (hypothesis/, each saved example once) and of their repro files "
                    "(failures/, by name; the same name with other content keeps both, the second as "
                    "NAME.<hash>.json). OUT is created if missing; what it holds is kept. journal/ and reports/ "
                    "are not merged.",
        epilog="exit codes: 0 merged, 2 refused: one line naming the problem, nothing written")
    p.add_argument("out", metavar="OUT_CORPUS", help="the merged corpus (e.g. fuzz-corpus); created if missing")
    p.add_argument("inputs", metavar="SHARD_CORPUS", nargs="+", help="the corpus folders of the shards")


REPLAY_EXIT_CODES = (
    "exit codes: FILE: 0 no longer fails (or still fails as a --known-issues entry accepts), 1 still fails, "
    "2 unusable (one line, nothing replayed). DIR, the first that applies: 1 a file still fails and no known "
    "issue accepts it; 4 a fuzzer error; 2 no file of the folder can be replayed (one line, nothing replayed); "
    "3 incomplete: a file was invalid or needs a GPU this host lacks, the others replayed and none still fails; "
    "0 every file replayed, none still fails. With --strict, a file that cannot be replayed exactly as saved "
    "(a changed side included) is one line and exit 2 before anything is replayed, as for FILE.")


def _add_replay(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser("replay", help="re-run a saved failure in a fresh process", epilog=REPLAY_EXIT_CODES)
    replay.add_argument("file", metavar="FILE|DIR",
                        help="a repro file, or a folder (e.g. fuzz-corpus/failures): every *.json in it, in a table")
    replay.add_argument("--device", choices=("cpu", "cuda"), help="replay on this device instead of the saved one")
    replay.add_argument("--strict", action="store_true",
                        help="for audits: a failure whose side from a source (a path or a release) changed "
                             "since it was saved is refused (exit 2, one line) instead of replayed on the side as "
                             "it is now; with DIR, every file is checked first and any that cannot be replayed "
                             "refuses the whole folder (the copies' code tree is compared either way: a warning)")
    replay.add_argument("--known-issues", metavar="FILE",
                        help="accepted findings (the file of run --known-issues): one that still fails is "
                             "reported as accepted and does not make the exit 1")


def _add_trend(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "trend", help="nightly reports side by side, oldest first: what changed since the night before",
        description="Compare nightly JSON reports: per night and target the examples, examples/s, verdict, "
                    "syncs per call (CUDA) and failures (new / still failing / not seen tonight / known), and what "
                    "the last night changed. A night is a whole run: merge a night's shards first (merge-reports); "
                    "a partial night (interrupted, or a merge missing shards) is marked so. Nights are ordered by "
                    "each report's run start time (run.started); if a report records none (written by an older "
                    "syncfuzz), the order given here is kept: give them oldest first.",
        epilog="exit codes: 0 the trend was shown (it reports, it does not judge: a new failure does not change "
               "it; the nightly run's own exit code does), 2 refused: one line, nothing written")
    p.add_argument("reports", metavar="REPORT", nargs="+", help="nightly JSON reports (fuzz run --report), two or more")
    p.add_argument("--markdown", metavar="FILE",
                   help="write the trend as Markdown here (with PNG charts beside it when matplotlib is installed)")
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML page here (inline CSS and SVG)")
    p.add_argument("--threshold", type=_threshold, default=DEFAULT_THRESHOLD, metavar="R",
                   help=f"report examples falling by more than R of the night before (default {DEFAULT_THRESHOLD:g}: "
                        "more than 30%%)")


def _add_provenance(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "provenance", help="check every copy line against the vllm releases it was copied from; --against: drift",
        description="Verify that every line of legacy/ and optimized/ appears in its upstream definition in the vllm "
                    "release its targets were copied from (Target.versions; by default "
                    f"{SIDE_VERSIONS['legacy']} / {SIDE_VERSIONS['optimized']}), in order, modulo whitespace, "
                    "unless marked `# ADAPTED: <why>`. With --against, report which upstream functions changed since "
                    "those versions instead.")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="only this target's copy modules (repeatable; default: every copy module)")
    for side in SIDES:
        env = f"SYNCFUZZ_{side.upper()}_SOURCE"
        p.add_argument(f"--{side}-source", metavar="PATH",
                       help=f"the {side} release: a .whl, a directory holding vllm/ (checkout, site-packages) or "
                            f"'installed'. It replaces vllm {SIDE_VERSIONS[side]} (the default pair's), or, when "
                            f"--target names targets of one other pair only, that pair's {side} release "
                            f"(default: ${env} for vllm {SIDE_VERSIONS[side]}, else the repo's source pack, else "
                            "pip download into the cache)")
    p.add_argument("--source", action="append", default=[], metavar="VERSION=PATH",
                   help="the source of vllm VERSION for whichever side and target was copied from it "
                        "(repeatable; PATH as for --legacy-source)")
    p.add_argument("--cache", metavar="DIR",
                   help=f"wheel cache (default ${CACHE_ENV}, else ~/.cache/syncfuzz/wheels)")
    p.add_argument("--against", metavar="vllm==X|PATH",
                   help="drift: compare the upstream functions with this version (vllm==X, a .whl, a directory or "
                        "'installed') instead of verifying the copies")
    p.add_argument("--sources", action="append", default=[], metavar="DIR",
                   help="source packs (python -m fuzz sources fetch) where vllm==X resolves, before "
                        "$SYNCFUZZ_SOURCES and the packs shipped in sources/ (repeatable); a release found in a "
                        "pack is never downloaded")
    p.add_argument("--legacy-diffs", action="store_true",
                   help="with --against: also print the legacy side's diffs (they mostly show the PR itself)")


def _add_new_target(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "new-target", help="scaffold a target: verbatim copies from two vllm releases, a record, stubs",
        description="Write legacy/MODULE.py and optimized/MODULE.py (the --upstream definitions sliced verbatim "
                    "out of the two releases, vllm imports mapped to ADAPTED placeholders), the target's own folder "
                    "strategies/MODULE/ (inputs.py, record.py, oracles.py, planted.py) and "
                    "tests/unit/test_oracles_MODULE.py. Never overwrites a file (docs/adding-a-target.md).")
    p.add_argument("name", metavar="NAME", help="the target's name, e.g. cpu-gpu-buffer-copy-to-gpu")
    p.add_argument("--upstream", action="append", default=[], required=True, metavar="vllm/PATH.py::QUAL",
                   help="an upstream definition the target covers (repeatable; the first is the entry point)")
    p.add_argument("--also", action="append", default=[], metavar="vllm/PATH.py::QUAL",
                   help="copy this definition too without naming it in the record (e.g. the class's __init__)")
    p.add_argument("--legacy-version", required=True, metavar="X", help="the vllm release before the change")
    p.add_argument("--optimized-version", required=True, metavar="Y", help="the vllm release with the change")
    p.add_argument("--module", metavar="MODULE", help="copy module name (default: from the upstream file)")
    p.add_argument("--root", metavar="DIR", help="the checkout to write into (default: this one)")
    p.add_argument("--legacy-source", metavar="PATH", help="the legacy release: a .whl or a directory holding vllm/")
    p.add_argument("--optimized-source", metavar="PATH", help="the optimized release (as --legacy-source)")
    p.add_argument("--cache", metavar="DIR", help="wheel cache (default $SYNCFUZZ_WHEEL_CACHE, else "
                                                  "~/.cache/syncfuzz/wheels)")


def _add_sources(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("sources", help="offline source packs: the vllm files the catalog needs",
                            description="Keep the upstream files that sides and provenance read, per release, "
                                        "so a host without network can build --legacy/--optimized vllm==X.")
    actions = p.add_subparsers(dest="sources_command", required=True)
    fetch = actions.add_parser("fetch", help="write packs for releases (vllm==X, a .whl or a vllm tree)")
    fetch.add_argument("specs", nargs="+", metavar="vllm==X|PATH")
    fetch.add_argument("--into", required=True, metavar="DIR", help="where the packs go (DIR/vllm-X/)")
    fetch.add_argument("--cache", metavar="DIR", help="wheel cache (default $SYNCFUZZ_WHEEL_CACHE, else "
                                                     "~/.cache/syncfuzz/wheels); missing wheels are downloaded")
    listing = actions.add_parser("list", help="the packs found and whether their files match their manifests")
    listing.add_argument("--sources", action="append", default=[], metavar="DIR",
                         help=f"also look here (and in ${SOURCES_ENV})")
    listing.add_argument("--newest", action="store_true",
                         help="print only the newest release found, as a side (vllm==X): what a nightly against "
                              "today's vLLM passes to --optimized")


def _add_coverage(commands: argparse._SubParsersAction) -> None:
    cover = commands.add_parser("coverage", help="the lines of the claimed definitions no example ran (docs/reach.md)")
    cover.add_argument("report", metavar="REPORT", help="a JSON report of a run with --coverage")
    cover.add_argument("--target", action="append", default=[], metavar="NAME", help="only this target (repeatable)")
    cover.add_argument("--device", choices=("cpu", "cuda"), help="only this device")
    cover.add_argument("--side", choices=("legacy", "optimized"), help="only this side")
    cover.add_argument("--all", action="store_true", help="also list the definitions every line of which ran")
    cover.add_argument("--changes", action="store_true",
                       help="instead: the change's coverage (a run with a side from a source): every changed "
                            "definition, sync-relevant first, and the changed lines and branches no example took")


def _version_line() -> str:
    """syncfuzz's version and the code tree it runs (no torch import: --version answers at once)."""
    from fuzz.versions import FUZZ_VERSION, code_tree

    tree = code_tree()
    return f"syncfuzz {FUZZ_VERSION} (code {tree['code_sha256']}, {tree['root']}; python {sys.version.split()[0]})"


def cmd_list(args: argparse.Namespace) -> int:
    from fuzz.targets import lookup

    targets = lookup([])
    if args.json:
        print(json.dumps([t.as_json() for t in targets], indent=2))
        return EXIT_OK
    rows = [("name", "devices", "opt. syncs", "legacy", "optimized", "inputs", "upstream")]
    for t in targets:
        files = t.files()
        paths = tuple(files[key] or getattr(t, key).partition(":")[0] for key in ("legacy", "optimized", "inputs"))
        rows.append((t.name, ",".join(t.devices), str(t.expected_optimized_syncs), *paths, t.upstream[0]))
        rows.extend(("", "", "", "", "", "", extra) for extra in t.upstream[1:])
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:6], widths)) + "  " + row[6])
    return EXIT_OK


# Each command: its arguments, parsed, handed to its function of the Python API (fuzz/commands/__init__.py).
def cmd_replay(args: argparse.Namespace) -> int:
    return api.replay(args.file, device=args.device, strict=args.strict, known_issues=args.known_issues)


def cmd_coverage(args: argparse.Namespace) -> int:
    return api.coverage(args.report, targets=args.target, device=args.device, side=args.side, show_all=args.all,
                        changes=args.changes)


def cmd_trend(args: argparse.Namespace) -> int:
    return api.trend(args.reports, markdown=args.markdown, html=args.html, threshold=args.threshold)


def cmd_corpus_merge(args: argparse.Namespace) -> int:
    return api.corpus_merge(args.out, args.inputs)


def cmd_merge_reports(args: argparse.Namespace) -> int:
    return api.merge_reports(args.inputs, output=args.output, markdown=args.markdown, junit=args.junit,
                             html=args.html)


def cmd_selftest(args: argparse.Namespace) -> int:
    return api.selftest(args.target, device=args.device, seed=args.seed, max_examples=args.max_examples,
                        contract=args.contract, limit=args.limit, shared=args.shared, json=args.json,
                        min_kill_rate=args.min_kill_rate)


def cmd_provenance(args: argparse.Namespace) -> int:
    return api.provenance(targets=args.target, legacy_source=args.legacy_source,
                          optimized_source=args.optimized_source, version_sources=args.source, cache=args.cache,
                          against=args.against, sources=args.sources, legacy_diffs=args.legacy_diffs)


def cmd_sources(args: argparse.Namespace) -> int:
    if args.sources_command == "fetch":
        return api.sources("fetch", specs=args.specs, into=args.into, cache=args.cache)
    return api.sources("list", sources=args.sources, newest=args.newest)


def cmd_new_target(args: argparse.Namespace) -> int:
    return api.new_target(args.name, upstream=args.upstream, also=args.also, legacy_version=args.legacy_version,
                          optimized_version=args.optimized_version, module=args.module, root=args.root,
                          legacy_source=args.legacy_source, optimized_source=args.optimized_source,
                          cache=args.cache)


def _apply_profile(args: argparse.Namespace) -> None:
    """The profile's seed, examples, budget and coverage where the flags left them open (fuzz.config)."""
    settings = apply_profile(args.profile, seed=args.seed, max_examples=args.max_examples, budget=args.budget,
                             coverage=args.coverage, legacy=args.legacy, optimized=args.optimized,
                             require_changes_covered=args.require_changes_covered)
    args.seed, args.max_examples, args.budget, args.coverage = (settings.seed, settings.max_examples,
                                                                settings.budget, settings.coverage)


def _check_flags(args: argparse.Namespace) -> None:
    """What only the command line can get wrong: flags that exclude each other. The settings themselves are
    checked once, with the run's targets, where the run starts (fuzz.run.session.check_run), still before
    any work: one line, exit 2."""
    if args.workers > 1 and args.in_process:
        raise UsageError("--workers runs items in pytest-xdist workers; drop --in-process or use --workers 1")


def _check_run_collisions(args: argparse.Namespace, outputs: dict[str, Path]) -> None:
    """No output of the run replaces another, --known-issues, a side's wheel or anything the corpus keeps."""
    from fuzz.releases import release_version
    from fuzz.reports.preflight import refuse_empty

    refuse_empty({"--known-issues": args.known_issues})  # "" was silently no known issues at all
    inputs: dict[str, Path | list[Path]] = {"--known-issues": [Path(args.known_issues)] if args.known_issues else []}
    for role in ("legacy", "optimized"):
        spec = getattr(args, role)
        if spec != "copy" and spec.strip() and release_version(spec) is None:
            inputs[f"--{role}"] = Path(spec).expanduser()
    corpus = Path(args.corpus) if args.corpus.strip() else None
    check_no_collisions({**{f"--{name}": path for name, path in outputs.items()}, **markdown_images(outputs)},
                        inputs, corpus)


def run_config(args: argparse.Namespace, devices: tuple[str, ...], seed: int) -> RunConfig:
    """The run as the command line asked for it (profile applied). The corpus stays as given: the session
    hands the workers its absolute path, and the outputs show repro paths the way the user named it."""
    from fuzz.targets import plugin_modules

    return RunConfig(
        targets=tuple(args.target), target_modules=tuple(plugin_modules()), devices=devices,
        coverage=bool(args.coverage), require_changes_covered=args.require_changes_covered,
        contract=args.contract, seed=seed, max_examples=args.max_examples, budget=args.budget,
        corpus=args.corpus, stress=args.stress, race=args.race, upstream=args.upstream, confirm=args.confirm,
        isolated=not args.in_process, example_timeout=args.example_timeout, max_restarts=args.max_restarts,
        workers=args.workers, pieces=args.pieces, shard=args.shard, profile=args.profile,
        legacy=args.legacy, optimized=args.optimized, sources=tuple(args.sources), sync_budget=args.sync_budget,
        gpu_share=args.gpu_share)


def cmd_run(args: argparse.Namespace) -> int:
    """``fuzz run``: the arguments checked and turned into a RunConfig, then fuzz.run.session.run."""
    from fuzz.engine.devices import resolve_devices
    from fuzz.run.session import run

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")  # this run's, not the process's
    _apply_profile(args)
    _check_flags(args)
    outputs = check_outputs({"report": args.report, "markdown": args.markdown, "junit": args.junit, "html": args.html})
    _check_run_collisions(args, outputs)
    # What the arguments name, each one line and exit 2 when wrong (a signal meanwhile is held, and the
    # session's first phase acts on it: fuzz/run/interrupts.py hold_early_signals). The run's settings and
    # targets are checked once, by the session's set-up (fuzz.run.session.check_run), before any work.
    _resolve_sides(args)
    devices = resolve_devices(args.device)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    result = run(run_config(args, devices, seed), outputs=outputs, known_issues=args.known_issues or None,
                 fallback=Path(args.corpus) / "reports" if args.corpus.strip() else None,
                 keep_journals=args.keep_journals, quiet=args.quiet, say=print, started=started)
    return result.exit_code


def _resolve_sides(args: argparse.Namespace) -> None:
    """--legacy/--optimized checked (one line and exit 2 for a bad one) before any work."""
    from fuzz.releases import check_side

    for folder in args.sources:
        if not folder.strip() or not Path(folder).expanduser().is_dir():  # "" would be the current folder
            raise UsageError(f"--sources {folder!r} is not a directory; pass the --into folder of "
                             "python -m fuzz sources fetch")
    args.sources = [str(Path(folder).expanduser().resolve()) for folder in args.sources]
    args.legacy = check_side(args.legacy, "--legacy", args.sources)
    args.optimized = check_side(args.optimized, "--optimized", args.sources)


HTML_HELP = ("write the report as one self-contained HTML page here (summary, charts, failures, run; inline CSS "
             "and SVG, opens offline)")


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the console script: python -m fuzz did this before its imports
        from fuzz.run.interrupts import hold_early_signals

        hold_early_signals(sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
        check_environment()  # before any command reads a variable deep inside its work
        commands = {"list": cmd_list, "run": cmd_run, "replay": cmd_replay, "merge-reports": cmd_merge_reports,
                    "corpus-merge": cmd_corpus_merge,
                    "trend": cmd_trend,
                    "selftest": cmd_selftest, "provenance": cmd_provenance,
                    "sources": cmd_sources, "new-target": cmd_new_target,
                    "coverage": cmd_coverage}
        return commands[args.command](args)
    except HarnessError as exc:
        print(f"fuzz: internal error (a fuzzer bug, please report it): {exc}", file=sys.stderr)
        return EXIT_FUZZER_BUG
    except UsageError as exc:
        print(f"fuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FuzzError as exc:
        print(f"fuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("fuzz: interrupted; saved failures and the example database are kept", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 -- an unforeseen exception is a fuzzer bug, not a failing verdict (1)
        traceback.print_exc()
        print("fuzz: internal error (a fuzzer bug, please report it with the traceback above)", file=sys.stderr)
        return EXIT_FUZZER_BUG
