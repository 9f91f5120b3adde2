"""Command line: ``python -m fuzz list | run | replay`` (interfaces in DESIGN.md).

Exit codes: 0 no divergence, 1 divergence (or any failing verdict) found,
2 usage or input error -- one line on stderr naming the problem and the fix.
A fuzzer bug is reported as such, also with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from fuzz.errors import FuzzError, HarnessError, UsageError
from fuzz.provenance import add_parser as add_provenance_parser, cmd_provenance
from fuzz.targets import CONTRACTS

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
DEFAULT_MAX_EXAMPLES = 200
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


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive, finite number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="list the targets")
    listing.add_argument("--json", action="store_true", help="print the JSON interface instead of a table")

    run = commands.add_parser("run", help="fuzz targets: legacy vs optimized")
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
    run.add_argument("--upstream", action="store_true",
                     help="also run the real vllm function (vllm installed) and compare it with the optimized copy")
    run.add_argument("--in-process", action="store_true",
                     help="no worker processes: faster start, but a crash or hang ends the run")
    run.add_argument("--profile", choices=sorted(PROFILES),
                     help="premerge: seed 0, 100 examples/target, deterministic; nightly: 1 h budget, "
                          "seed rotating daily (explicit flags win)")
    run.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                     help="pytest-xdist workers (one GPU each, round-robin); 1 runs here")
    run.add_argument("--pieces", type=_positive_int, default=1, metavar="K",
                     help="split each target's examples into K seeded items (for workers and shards)")
    run.add_argument("--shard", metavar="I/N", help="run only shard I of N of the items (hosts split a run)")
    run.add_argument("--markdown", metavar="FILE", help="write a Markdown summary here")
    run.add_argument("--junit", metavar="FILE", help="write JUnit XML here (one test case per target and device)")
    run.add_argument("--known-issues", metavar="FILE",
                     help="accepted findings (JSON): matching failures are reported as known and do not fail the run")
    run.add_argument("--confirm", type=int, default=3, metavar="N",
                     help="replay each failure N times in fresh processes; not every time = flaky (default 3)")

    selftest = commands.add_parser("selftest", help="mutate the optimized copies and measure the kill rate")
    selftest.add_argument("--target", action="append", default=[], metavar="NAME")
    selftest.add_argument("--max-examples", type=_positive_int, default=100, metavar="N",
                          help="examples per mutant (default 100)")
    selftest.add_argument("--seed", type=_seed, default=0)
    selftest.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    selftest.add_argument("--limit", type=_positive_int, metavar="N", help="at most N mutants per target")
    selftest.add_argument("--contract", default="caller", choices=CONTRACTS)
    selftest.add_argument("--json", metavar="FILE", help="write the results as JSON")
    selftest.add_argument("--min-kill-rate", type=float, metavar="R",
                          help="exit 1 if a target's kill rate (equivalents excluded) is below R")

    merge = commands.add_parser("merge-reports", help="merge JSON reports of shards or hosts into one")
    merge.add_argument("output", metavar="OUT.json")
    merge.add_argument("inputs", metavar="IN.json", nargs="+")
    merge.add_argument("--markdown", metavar="FILE")
    merge.add_argument("--junit", metavar="FILE")

    replay = commands.add_parser("replay", help="re-run a saved failure in a fresh process")
    replay.add_argument("file", metavar="FILE")
    replay.add_argument("--device", choices=("cpu", "cuda"), help="replay on this device instead of the saved one")
    add_provenance_parser(commands)
    return parser


def cmd_list(args: argparse.Namespace) -> int:
    from fuzz.targets import lookup

    targets = lookup([])
    if args.json:
        print(json.dumps([t.as_json() for t in targets], indent=2))
        return EXIT_OK
    rows = [("name", "devices", "opt. syncs", "upstream")]
    for t in targets:
        rows.append((t.name, ",".join(t.devices), str(t.expected_optimized_syncs), t.upstream[0]))
        rows.extend(("", "", "", extra) for extra in t.upstream[1:])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
    return EXIT_OK


def _check_paths(corpus: Path | None, outputs: dict[str, Path]) -> None:
    if corpus is not None and corpus.exists() and not corpus.is_dir():
        raise UsageError(f"--corpus {str(corpus)!r} is a file; pass a directory (it is created if missing)")
    for name, path in outputs.items():
        if path.is_dir():
            raise UsageError(f"--{name} {str(path)!r} is a directory; pass a file path")
        if not path.parent.exists():
            raise UsageError(f"--{name} {str(path)!r}: folder {str(path.parent)!r} does not exist; create it first")


PROFILES = {
    # Deterministic and bounded: the same examples on every machine, minutes on a laptop.
    "premerge": {"seed": 0, "max_examples": 100},
    # Time-boxed; a new seed each day (recorded) so nights explore new ground, while
    # the corpus' example database retries yesterday's failures first.
    "nightly": {"budget": 3600.0, "seed": "daily"},
}


def _apply_profile(args: argparse.Namespace) -> None:
    profile = PROFILES.get(args.profile or "", {})
    if args.seed is None and "seed" in profile:
        seed = profile["seed"]
        args.seed = int(datetime.now(timezone.utc).strftime("%Y%m%d")) if seed == "daily" else seed
    if args.max_examples is None and args.budget is None:
        args.max_examples = profile.get("max_examples")
        args.budget = profile.get("budget")
    if args.max_examples is None and args.budget is None:
        args.max_examples = DEFAULT_MAX_EXAMPLES


def _validate_run(args: argparse.Namespace) -> None:
    if args.max_restarts < 0:
        raise UsageError(f"--max-restarts {args.max_restarts} must be 0 or more")
    if args.confirm < 0:
        raise UsageError(f"--confirm {args.confirm} must be 0 or more")
    if args.workers > 1 and args.in_process:
        raise UsageError("--workers runs items in pytest-xdist workers; drop --in-process or use --workers 1")


# Below this share an item cannot be expected to run an example: a worker's
# start-up (torch import, CUDA context) and Hypothesis' set-up come first.
MIN_SECONDS_PER_ITEM = 0.5


def _check_budget(budget: float | None, items: int, workers: int) -> None:
    if budget is None or not items:
        return
    share = budget * workers / items
    if share < MIN_SECONDS_PER_ITEM:
        needed = MIN_SECONDS_PER_ITEM * items / workers
        raise UsageError(f"--budget {budget:g} s gives each of the {items} items {share:.2f} s with {workers} "
                         f"worker(s), too little to run an example; use --budget {needed:g} or more, or fewer "
                         "--target/--pieces")


def cmd_run(args: argparse.Namespace) -> int:
    from fuzz.devices import resolve_devices
    from fuzz.isolation import Isolation
    from fuzz.plan import parse_shard, plan
    from fuzz.report import progress_printer
    from fuzz.runner import RunOptions, fuzz_all
    from fuzz.targets import lookup
    from fuzz.triage import load_known_issues

    _apply_profile(args)
    _validate_run(args)
    targets = lookup(args.target)
    devices = resolve_devices(args.device)
    shard = parse_shard(args.shard)
    corpus = Path(args.corpus)
    outputs = {name: Path(value) for name in ("report", "markdown", "junit") if (value := getattr(args, name))}
    _check_paths(corpus, outputs)
    known = load_known_issues(Path(args.known_issues)) if args.known_issues else []
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    builtin = _builtin_names()
    module_of = lambda t: None if t.name in builtin else _module_of(t)  # noqa: E731
    options = RunOptions(
        devices=devices, seed=seed, contract=args.contract, max_examples=args.max_examples, budget=args.budget,
        corpus=corpus, stress=args.stress, upstream=args.upstream, target_module=module_of,
        progress=None if args.quiet else progress_printer(),
    )
    isolation = None if args.in_process else Isolation(example_timeout=args.example_timeout,
                                                       max_restarts=args.max_restarts, workdir=corpus / "journal")
    items = plan(targets, seed=seed, pieces=args.pieces, max_examples=args.max_examples, shard=shard)
    _check_budget(args.budget, len(items), args.workers)
    if "cuda" not in devices:
        print("[fuzz] sync counting skipped: no CUDA device in this run (syncs are a GPU-only oracle)", file=sys.stderr)
    if args.workers > 1:
        from fuzz.workers import run_with_xdist

        modules = {module_of(t) for t in targets} - {None}
        entries = run_with_xdist(items, options, isolation, args.workers, next(iter(modules), None))
    else:
        entries = fuzz_all(targets, options, isolation, items)
    run_info = {"seed": seed, "contract": args.contract, "devices": list(devices), "profile": args.profile,
                "max_examples": args.max_examples, "budget": args.budget, "corpus": str(corpus),
                "workers": args.workers, "pieces": args.pieces, "shard": args.shard, "stress": args.stress,
                "upstream": args.upstream,
                "targets": [t.name for t in targets]}
    return _finish(entries, run_info, known, args.confirm, outputs)


def _finish(entries: list[dict], run_info: dict, known: list[dict], confirm_runs: int,
            outputs: dict[str, Path]) -> int:
    """Confirm and triage failures, print the summary, write every output."""
    from fuzz.report import failure_lines, report_json, summary_table
    from fuzz.triage import confirm, mark_known, unaccepted

    confirm(entries, confirm_runs)
    mark_known(entries, known, run_info["contract"])
    failed = bool(unaccepted(entries))
    broken = any(e["fuzzer_error"] for e in entries)
    exit_code = EXIT_USAGE if broken else EXIT_FAILURE if failed else EXIT_OK
    print(summary_table(entries))
    for line in failure_lines(entries):
        print(line)
    seed = run_info["seed"]
    print(f"seed {seed}, contract {run_info['contract']}, devices {','.join(run_info['devices'])}"
          + (f"; rerun with --seed {seed} to repeat" if failed else ""))
    report = report_json(entries, run=run_info, exit_code=exit_code)
    _write_outputs(report, outputs)
    return exit_code


def _write_outputs(report: dict, outputs: dict[str, Path]) -> None:
    from fuzz.formats import junit_xml, markdown
    from fuzz.report import write_json, write_text

    if "report" in outputs:
        write_json(outputs["report"], report)
        print(f"report: {outputs['report']}")
    if "markdown" in outputs:
        write_text(outputs["markdown"], markdown(report))
        print(f"markdown: {outputs['markdown']}")
    if "junit" in outputs:
        write_text(outputs["junit"], junit_xml(report))
        print(f"junit: {outputs['junit']}")


def _to_kill(examples: dict | None) -> str:
    return "-" if examples is None else f"{examples['median']:g}/{examples['max']}"


def cmd_selftest(args: argparse.Namespace) -> int:
    from fuzz.devices import resolve_devices
    from fuzz.report import write_json
    from fuzz.runner import RunOptions
    from fuzz.selftest import load_equivalents, selftest_target
    from fuzz.targets import lookup

    targets = lookup(args.target)
    options = RunOptions(devices=resolve_devices(args.device), seed=args.seed, max_examples=args.max_examples,
                         contract=args.contract)
    equivalents = load_equivalents()
    results = []
    print(f"{'target':34} {'mutants':>7} {'killed':>6} {'equiv.':>6} {'survived':>8} {'kill rate':>9} "
          f"{'examples to kill (median/max)':>29}")
    for target in targets:
        result = selftest_target(target, options, equivalents, args.limit)
        results.append(result)
        print(f"{target.name:34} {result['mutants']:7} {result['killed']:6} {len(result['equivalent']):6} "
              f"{len(result['survived']):8} {result['kill_rate']:9.1%} {_to_kill(result['examples_to_kill']):>29}",
              flush=True)
        for survivor in result["survived"]:
            print(f"    survived {survivor['mutant']}: {survivor['code']}")
    if args.json:
        write_json(Path(args.json), {"devices": list(options.devices), "max_examples": args.max_examples,
                                     "results": results})
    low = [r for r in results if args.min_kill_rate is not None and r["kill_rate"] < args.min_kill_rate]
    return EXIT_FAILURE if low else EXIT_OK


def cmd_merge_reports(args: argparse.Namespace) -> int:
    from fuzz.merge import merge_reports
    from fuzz.report import summary_table

    reports = []
    for name in args.inputs:
        try:
            reports.append(json.loads(Path(name).read_text()))
        except FileNotFoundError:
            raise UsageError(f"report {name!r} does not exist") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"report {name!r} is not valid JSON ({exc})") from None
        if not isinstance(reports[-1], dict):
            raise UsageError(f"report {name!r} is not a syncfuzz report (a JSON object)")
    outputs = {"report": Path(args.output)}
    outputs.update({name: Path(value) for name in ("markdown", "junit") if (value := getattr(args, name))})
    _check_paths(None, outputs)
    merged = merge_reports(reports)
    print(summary_table(merged["targets"]))
    _write_outputs(merged, outputs)
    return merged["exit_code"]


def _builtin_names() -> set[str]:
    from fuzz.catalog import TARGETS

    return {t.name for t in TARGETS}


def _module_of(target: object) -> str | None:
    """The plug-in module (SYNCFUZZ_TARGET_MODULES) that registered ``target``;
    saved in repro files so a replay finds the target without the variable."""
    import importlib

    from fuzz.targets import _extra_modules

    for name in _extra_modules():
        if any(getattr(t, "name", None) == getattr(target, "name", "") for t in importlib.import_module(name).TARGETS):
            return name
    return None


CUDA_ONLY_VERDICTS = {"sync-regression": "GPU<->CPU syncs exist only on CUDA",
                      "crash": "a device-side assert happens only on CUDA"}


def cmd_replay(args: argparse.Namespace) -> int:
    from fuzz.repro import load_repro
    from fuzz.replay import replay_file

    saved = load_repro(args.file)
    why = CUDA_ONLY_VERDICTS.get(saved["verdict"])
    if args.device == "cpu" and saved["device"].startswith("cuda") and why:
        print(f"note: this {saved['verdict']} was saved on {saved['device']} and needs a GPU to reproduce ({why}); "
              "replaying on the CPU checks the values only")
    elif args.device and args.device != saved["device"]:
        print(f"note: saved on {saved['device']}, replaying on {args.device} as asked")
    result = replay_file(args.file, args.device)
    if result.crashed:
        print(f"{result.verdict.upper()} reproduced on {result.device} for {args.file}: {result.crashed}")
        return EXIT_FAILURE
    if not result.still_fails:
        print(f"no longer fails: legacy and optimized agree on {result.device} for {args.file}")
        return EXIT_OK
    print(f"{result.verdict.upper()} reproduced on {result.device} for {args.file}")
    for mismatch in result.mismatches:
        print(f"  at {mismatch['path']} ({mismatch['what']}): {mismatch['detail']}")
    return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        commands = {"list": cmd_list, "run": cmd_run, "replay": cmd_replay, "merge-reports": cmd_merge_reports,
                    "selftest": cmd_selftest, "provenance": cmd_provenance}
        return commands[args.command](args)
    except HarnessError as exc:
        print(f"fuzz: internal error (a fuzzer bug, please report it): {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"fuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FuzzError as exc:
        print(f"fuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("fuzz: interrupted; saved failures and the example database are kept", file=sys.stderr)
        return 130
