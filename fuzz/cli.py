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
from pathlib import Path
from typing import Sequence

from fuzz.errors import FuzzError, HarnessError, UsageError
from fuzz.targets import CONTRACTS, TARGET_MODULES_ENV

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
                        help=f"examples per target (default {DEFAULT_MAX_EXAMPLES})")
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
    run.add_argument("--in-process", action="store_true",
                     help="no worker processes: faster start, but a crash or hang ends the run")

    replay = commands.add_parser("replay", help="re-run a saved failure in a fresh process")
    replay.add_argument("file", metavar="FILE")
    replay.add_argument("--device", choices=("cpu", "cuda"), help="replay on this device instead of the saved one")
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


def _check_paths(corpus: Path, report: Path | None) -> None:
    if corpus.exists() and not corpus.is_dir():
        raise UsageError(f"--corpus {str(corpus)!r} is a file; pass a directory (it is created if missing)")
    if report is not None:
        if report.is_dir():
            raise UsageError(f"--report {str(report)!r} is a directory; pass a file path such as report.json")
        if not report.parent.exists():
            raise UsageError(f"--report {str(report)!r}: folder {str(report.parent)!r} does not exist; create it first")


def cmd_run(args: argparse.Namespace) -> int:
    from fuzz.devices import resolve_devices
    from fuzz.report import failure_lines, progress_printer, report_json, summary_table, write_json
    from fuzz.isolation import Isolation
    from fuzz.runner import RunOptions, fuzz_all
    from fuzz.targets import all_targets, lookup

    targets = lookup(args.target)
    devices = resolve_devices(args.device)
    corpus, report = Path(args.corpus), Path(args.report) if args.report else None
    _check_paths(corpus, report)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    max_examples = args.max_examples or (None if args.budget else DEFAULT_MAX_EXAMPLES)
    builtin = _builtin_names()
    options = RunOptions(
        devices=devices, seed=seed, contract=args.contract, max_examples=max_examples, budget=args.budget,
        corpus=corpus, stress=args.stress, target_module=lambda t: None if t.name in builtin else _module_of(t),
        progress=None if args.quiet else progress_printer(),
    )
    if "cuda" not in devices:
        print("[fuzz] sync counting skipped: no CUDA device in this run (syncs are a GPU-only oracle)", file=sys.stderr)
    if args.max_restarts < 0:
        raise UsageError(f"--max-restarts {args.max_restarts} must be 0 or more")
    isolation = None if args.in_process else Isolation(example_timeout=args.example_timeout,
                                                       max_restarts=args.max_restarts, workdir=corpus / "journal")
    entries = fuzz_all(targets, options, isolation)
    failed = any(e["failures"] for e in entries)
    broken = any(e["fuzzer_error"] for e in entries)
    exit_code = EXIT_USAGE if broken else EXIT_FAILURE if failed else EXIT_OK
    print(summary_table(entries))
    for line in failure_lines(entries):
        print(line)
    print(f"seed {seed}, contract {args.contract}, devices {','.join(devices)}"
          + (f"; rerun with --seed {seed} to repeat" if failed else ""))
    if report:
        run_info = {"seed": seed, "contract": args.contract, "devices": list(devices), "max_examples": max_examples,
                    "budget": args.budget, "corpus": str(corpus), "targets": [t.name for t in targets]}
        write_json(report, report_json(entries, run=run_info, exit_code=exit_code))
        print(f"report: {report}")
    return exit_code


def _builtin_names() -> set[str]:
    from fuzz.catalog import TARGETS

    return {t.name for t in TARGETS}


def _module_of(target: object) -> str | None:
    """The plug-in module that registered ``target`` (saved in repro files)."""
    import os

    from fuzz.targets import _extra_modules
    import importlib

    for name in _extra_modules():
        module = importlib.import_module(name)
        if any(t is target or getattr(t, "name", None) == getattr(target, "name", "") for t in module.TARGETS):
            return name
    return os.environ.get(TARGET_MODULES_ENV) or None


def cmd_replay(args: argparse.Namespace) -> int:
    from fuzz.replay import replay_file

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
        return {"list": cmd_list, "run": cmd_run, "replay": cmd_replay}[args.command](args)
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
