"""One fuzz run as a function: ``fuzz.run.session.run(config) -> RunResult``.

``python -m fuzz run`` is this function plus argument parsing, the checks of what the arguments name, and
printing (fuzz/cli.py); a test, a notebook or another tool calls it with a ``RunConfig``. It does what a
run does, in its phases (fuzz/run/interrupts.py): set-up (known issues, side builds, the plan and its
limits, the corpus), fuzzing (here, in watched worker processes, or in pytest-xdist workers sharing the
GPUs: fuzz/run/orchestrate.py, fuzz/run/workers.py, fuzz/run/gpushare.py), confirmation of each failure in fresh
processes, and writing every output asked for. A SIGTERM or SIGINT in any phase still writes the report
of what finished. Nothing is printed unless ``say`` is given (the CLI passes ``print``); progress and
notes go to stderr unless ``quiet``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from fuzz.config import COPY, RunConfig, reach_core
from fuzz.engine import journals
from fuzz.errors import UsageError
from fuzz.records.model import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Failure, Interrupted, Report, TargetEntry
from fuzz.reports.preflight import check_corpus, check_output, check_overwrite
from fuzz.reports.report import closing_line
from fuzz.run.limits import check_budget, check_workers, fuzz_seconds

if TYPE_CHECKING:
    from fuzz.targets import Target

Say = Callable[[str], None]


def _silent(line: str) -> None:
    """The API's default ``say``: the report is the result; nothing is printed."""


def _now() -> str:
    """UTC now, as a report's run.started (``fuzz trend`` orders nights by it)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunResult:
    """What a run returns: its report, as written, and the exit code ``fuzz run`` gives for it."""

    report: Report
    exit_code: int


@dataclass
class RunState:
    """What a run has so far: an interrupt in any phase reports from it (fuzz/run/interrupts.py)."""

    outputs: dict[str, Path]
    fallback: Path | None
    say: Say = _silent
    quiet: bool = True
    keep_journals: int = journals.DEFAULT_KEEP_JOURNALS
    started: str = field(default_factory=_now)  # this run's start, the report's run.started
    config: RunConfig | None = None
    known: list[dict] = field(default_factory=list)
    entries: list[TargetEntry] = field(default_factory=list)  # finished: fuzzed items, cannot-build targets
    # The machine's use while the items ran (fuzz/reports/machine.py): GPU sharing, NVML samples, examples/s.
    machine: dict = field(default_factory=dict)
    # The targets this run (or shard) is to report, the report's run.planned: what an interrupted run
    # never ran is told from it. None until the targets are looked up.
    planned: list[str] | None = None
    checked: CheckedRun | None = None  # the settings checked, and what the checks looked up


@dataclass(frozen=True)
class CheckedRun:
    """A run's settings checked (``check_run``), with what checking them looked up: every registered
    target by name (known issues and the change coverage name them), the run's targets, its shard."""

    registry: Mapping[str, Target]
    targets: list[Target]
    shard: tuple[int, int] | None


def check_run(config: RunConfig) -> CheckedRun:
    """Every check of a run's settings, the one place they are made: each problem a ``UsageError``, one line
    naming the fix, before any work (``fuzz run`` leaves its config's checks to this; its own are of what
    no config holds: flags that exclude each other, outputs, what the side flags name). The targets are
    looked up here, once per run."""
    from fuzz.engine.devices import cuda_available
    from fuzz.run.limits import MIN_EXAMPLE_TIMEOUT
    from fuzz.run.plan import parse_shard
    from fuzz.targets import all_targets, select

    config.validate()
    if config.require_changes_covered and not config.coverage:
        raise UsageError("--require-changes-covered needs the coverage it checks; drop --no-coverage")
    if config.require_changes_covered and config.legacy == COPY and config.optimized == COPY:
        raise UsageError("--require-changes-covered compares two sources' definitions; give --legacy and/or "
                         "--optimized a release (vllm==X.Y.Z) or a path, or drop the flag")
    if config.corpus is not None and not config.corpus.strip():  # Path(""), the current folder: it would litter it
        raise UsageError("--corpus is empty; give a folder path (default ./fuzz-corpus), or drop the flag")
    if config.max_restarts < 0:
        raise UsageError(f"--max-restarts {config.max_restarts} must be 0 or more")
    if config.confirm < 0:
        raise UsageError(f"--confirm {config.confirm} must be 0 or more")
    if config.legacy == config.optimized != COPY:
        # Every target would run one code on both sides: same-code everywhere, which is no evidence.
        raise UsageError(f"--legacy and --optimized are both {config.legacy!r}, so both sides would run the same "
                         "code; give two different releases or paths (or neither: the copies)")
    registry = all_targets(config.target_modules)
    targets = select(registry, list(config.targets))
    if "cuda" in config.devices and not cuda_available():
        raise UsageError("devices include cuda, but this torch sees no CUDA device; use devices ('cpu',)")
    if config.example_timeout < MIN_EXAMPLE_TIMEOUT:
        raise UsageError(f"--example-timeout {config.example_timeout:g} s is shorter than one example can take (the "
                         f"first CUDA call loads kernels); use {MIN_EXAMPLE_TIMEOUT:g} or more")
    check_workers(config.workers)
    return CheckedRun(registry, targets, parse_shard(config.shard))


def run(config: RunConfig, *, outputs: Mapping[str, Path] | None = None, known_issues: Path | str | None = None,
        fallback: Path | None = None, keep_journals: int = journals.DEFAULT_KEEP_JOURNALS, quiet: bool = True,
        say: Say | None = None, started: str | None = None) -> RunResult:
    """Fuzz what ``config`` says and return the report (written to ``outputs``: "report", "markdown",
    "junit", "html" -> path, each checked by the caller with fuzz.reports.preflight; an output that cannot be
    written goes to ``fallback``, and the exit code says so). ``known_issues``: a known-issues file
    (docs/findings/). Bad settings raise ``UsageError`` (one line naming the fix) before any work."""
    from fuzz.run.interrupts import guard_signals, interrupted_by

    state = RunState(dict(outputs or {}), fallback, say or _silent, quiet, keep_journals, started or _now())
    # From here on, SIGTERM/SIGINT in any phase still writes the report of what finished.
    with guard_signals():
        try:
            return _run(config, known_issues, state)
        except Interrupted as stop:
            return _finish_interrupted(stop, state, config)
        except KeyboardInterrupt:  # between the phases' own handlers: report what the state holds
            return _finish_interrupted(Interrupted(state.entries, interrupted_by()), state, config)


def _run(config: RunConfig, known_issues: Path | str | None, state: RunState) -> RunResult:
    """set-up, fuzzing, confirmation, writing (fuzz/run/interrupts.py names the phases)."""
    from fuzz.run.interrupts import enter
    from fuzz.run.plan import plan
    from fuzz.run.triage import load_known_issues

    enter("set-up")
    checked = state.checked = check_run(config)
    targets, shard = checked.targets, checked.shard
    state.planned = [t.name for t in targets]
    state.config = config  # as given: the report shows the corpus (and its repro paths) the way the user named it
    state.known = load_known_issues(Path(known_issues), list(checked.registry)) if known_issues else []
    unbuilt = _unbuildable(targets, config, quiet=state.quiet)
    buildable = [t for t in targets if t.name not in {e.name for e in unbuilt}]
    items = plan(buildable, seed=config.seed, pieces=config.pieces, max_examples=config.max_examples, shard=shard)
    # A shard reports its share: the targets it has an item of, and those no side could be built into
    # (every shard reports them).
    shared = {e.name for e in unbuilt} | {item.target.name for item in items}
    state.planned = [name for name in state.planned if name in shared]
    if not items and not unbuilt:
        # Counted as plan() splits them: a target of fewer examples than --pieces has fewer items.
        planned = len(plan(buildable, seed=config.seed, pieces=config.pieces, max_examples=config.max_examples))
        raise UsageError(f"--shard {config.shard} leaves no item: the run plans {planned} (targets x --pieces, "
                         f"at most one item per example); use a shard count of at most {planned}, or more "
                         "--pieces or examples")
    check_budget(config.budget, len(items), config.workers, config.confirm, isolated=config.isolated)
    # No corpus (None): nothing is kept, but the workers still need a folder for their journals.
    corpus = check_corpus(config.corpus).resolve() if config.corpus is not None else Path(
        tempfile.mkdtemp(prefix="syncfuzz-run-"))
    state.entries = list(unbuilt)
    if "cuda" not in config.devices:
        print("[fuzz] sync counting skipped: no CUDA device in this run (syncs are a GPU-only oracle)", file=sys.stderr)

    started = time.monotonic()
    # Confirmation replays fit inside the budget: the fuzzing gets the rest.
    seconds = None if config.budget is None else fuzz_seconds(config.budget, config.confirm)
    order = [t.name for t in targets]

    def in_order(found: list[TargetEntry]) -> list[TargetEntry]:
        return sorted([*found, *unbuilt], key=lambda e: order.index(e.name) if e.name in order else len(order))

    enter("fuzzing")
    try:
        entries = _fuzz(buildable, items, _for_workers(config), corpus, seconds, state) if items else []
    except Interrupted as stop:
        raise Interrupted(in_order(stop.entries), stop.signal_name) from None
    # Each finished item was printed as it finished (fuzz.reports.report.item_line), and the summary table shows each
    # target's totals: nothing is printed again here.
    state.entries = in_order(entries)
    until = None if config.budget is None else started + config.budget
    return _finish(state, until)


def _for_workers(config: RunConfig) -> RunConfig:
    """The config the workers get: the corpus absolute, since they run in their journal folder and a relative
    corpus would put their repro files there."""
    return config if config.corpus is None else replace(config, corpus=str(Path(config.corpus).resolve()))


def shown_paths(entries: Sequence[TargetEntry], corpus: str | None) -> list[TargetEntry]:
    """The entries with their repro paths as the corpus was given: relative to the current folder when it was
    relative (a CI artifact's paths must not point into the runner's file system), absolute when it was
    absolute. The workers save under the absolute corpus, and the confirmation replays read from there."""
    if corpus is None or Path(corpus).is_absolute():
        return list(entries)
    here = Path.cwd()

    def shown(failure: Failure) -> Failure:
        if not failure.repro or not Path(failure.repro).is_absolute():
            return failure
        return replace(failure, repro=os.path.relpath(failure.repro, here))

    return [entry.with_failures(shown(f) for f in entry.failures) for entry in entries]


def _unbuildable(targets: list, config: RunConfig, quiet: bool) -> list[TargetEntry]:
    """The targets a side's source cannot be built into: entries saying why; the rest run."""
    if config.legacy == "copy" and config.optimized == "copy":
        return []
    from fuzz.engine.devices import devices_for
    from fuzz.engine.prepare import prepare
    from fuzz.releases import CannotBuild, Retired, identity

    for role in ("legacy", "optimized"):
        found = identity(getattr(config, role), config.sources)
        detail = ", ".join(f"{k} {v}" for k, v in found.items()
                           if k not in ("side", "kind", "files", "shims", "shim_problems") and v)
        # A tree from vllm main: catalog paths that are compatibility shims, and the modules read for them.
        shims = found.get("shims") or {}
        if shims:
            detail += ", compatibility shims " + ", ".join(f"{old} -> {new}" for old, new in shims.items())
        print(f"[fuzz] {role}: {getattr(config, role)} ({detail})", file=sys.stderr)
    out = []
    for target in targets:
        try:
            prepare(target, config)  # the sides only here: a worker decides --upstream and the sync rule
        except Retired as exc:
            out.append(TargetEntry(name=target.name, upstream=tuple(target.upstream),
                                   devices=devices_for(target.devices, config.devices),
                                   expected_optimized_syncs=target.expected_optimized_syncs,
                                   retired=exc.retirement.to_json()))
            if not quiet:
                print(f"[fuzz] {target.name}: {exc.retirement.label} ({exc})", file=sys.stderr)
        except CannotBuild as exc:
            out.append(TargetEntry(name=target.name, upstream=tuple(target.upstream),
                                   devices=devices_for(target.devices, config.devices),
                                   expected_optimized_syncs=target.expected_optimized_syncs, cannot_build=str(exc)))
            if not quiet:
                print(f"[fuzz] {target.name}: cannot-build ({exc})", file=sys.stderr)
    return out


def _fuzz(targets: list, items: list, config: RunConfig, corpus: Path, seconds: float | None,
          state: RunState) -> list[TargetEntry]:
    """The fuzzing phase: items in pytest-xdist workers, or one after another here; the machine's use
    meanwhile recorded in ``state.machine`` (whatever ends the phase)."""
    from fuzz.reports.machine import GpuSampler, machine_use

    journals.prune_journals(corpus / "journal", state.keep_journals)  # every check passed: the run starts now
    folder = journals.journal_folder(corpus)  # this run's: its workers' journals, the database it starts from
    if config.corpus is not None:
        journals.keep_start_database(corpus, folder, config.run_id)
    started = time.monotonic()
    entries: list[TargetEntry] = []
    sharing = None
    sampler = GpuSampler() if "cuda" in config.devices else None
    try:
        if sampler is not None:
            sampler.start()
        if config.workers > 1:
            from fuzz.run.gpushare import gpu_sharing
            from fuzz.run.workers import run_with_xdist, visible_gpus

            gpus = visible_gpus() if "cuda" in config.devices else 0
            with gpu_sharing(config.gpu_share, config.workers, gpus, config.devices, folder) as sharing:
                entries = run_with_xdist(items, config, seconds, folder, show_items=not state.quiet,
                                         env_changes=sharing.env())
        else:
            entries = _fuzz_here(targets, items, config, folder, seconds, state.quiet)
        return entries
    except Interrupted as stop:
        entries = list(stop.entries)
        raise
    finally:
        gpu = None
        if sampler is not None:
            sampler.stop()
            gpu = sampler.summary()
        if sharing is None:  # one worker, in this process: nothing shared (fuzz.run.gpushare is for --workers)
            from fuzz.run.gpushare import Sharing

            sharing = Sharing(asked=config.gpu_share, mode="own-gpu" if "cuda" in config.devices else "none",
                              workers=config.workers,
                              note="one worker: no GPU to share" if config.gpu_share == "mps" else None)
        share = sharing.to_json()
        share["victims_replayed"] = sum(p.get("mps_victims_replayed", 0) for e in entries for p in e.placement)
        left = sorted({p["left_mps"] for e in entries for p in e.placement if p.get("left_mps")})
        if left:  # a worker went on time-sliced after a fault: the run was not all MPS
            share["note"] = "; ".join(filter(None, [share.get("note"), *left]))
        state.machine = machine_use(entries, time.monotonic() - started, gpu, share)


def _fuzz_here(targets: list, items: list, config: RunConfig, journal: Path, seconds: float | None,
               quiet: bool) -> list[TargetEntry]:
    """One item after another in this process (isolated: in a watched worker process, ``journal`` its folder)."""
    from fuzz.config import Hooks
    from fuzz.reports.report import item_line, progress_line, show_worker_line
    from fuzz.run.isolation import Isolation
    from fuzz.run.orchestrate import fuzz_all

    live = sys.stderr.isatty()
    hooks = Hooks()
    if not quiet:
        hooks = Hooks(progress=(lambda outcome: show_worker_line(progress_line(outcome), sys.stderr, live)),
                      item_done=lambda item, entry: show_worker_line(item_line(item.key, entry), sys.stderr, live))
    isolation = Isolation(workdir=journal, progress=not quiet) if config.isolated else None
    return fuzz_all(targets, config, hooks, isolation, items, seconds=seconds)


def _print_summary(report: Report, say: Say) -> None:
    """The table and each failure's lines, as every run ends."""
    from fuzz.reports.report import failure_lines, report_notes, summary_table

    say(summary_table(report.targets))
    for line in [*report_notes(report), *failure_lines(report.targets)]:
        say(line)


def _finish_interrupted(stop: Interrupted, state: RunState, asked: RunConfig) -> RunResult:
    """The report of what finished when a signal stopped the run: the items
    done, the failures confirmed so far (the rest labelled unconfirmed), known
    issues applied as in a whole run, and the targets planned (``asked``: the
    config as given, for a stop before set-up checked it)."""
    from fuzz.run.interrupts import current_phase, deferred
    from fuzz.run.triage import label_unconfirmed, mark_known

    with deferred():  # a second signal must not cut this report short
        config = state.config
        entries = list(stop.entries)
        if config is not None and config.confirm:
            entries = label_unconfirmed(entries, f"the run was interrupted ({stop.signal_name}) before its replays")
        if config is not None:
            entries = shown_paths(mark_known(entries, state.known, config.contract, optimized_version(config)),
                                  config.corpus)
        planned = state.planned if state.planned is not None else _planned_as_asked(asked)
        run = run_info(config, entries, state.machine, state.started, planned, state.checked) \
            if config is not None else \
            {"devices": list(asked.devices), "planned": planned}
        report = Report(tuple(entries), run={**run, "interrupted_in": current_phase()},
                        versions=versions_of(config) if config is not None else {}, interrupted=stop.signal_name)
        _print_summary(report, state.say)
        print(f"interrupted by {stop.signal_name} in {current_phase()}: the report holds the "
              f"{len(report.targets)} target(s) whose items finished; saved failures and the example database "
              "are kept", file=sys.stderr)
        never = report.never_ran()
        if never:
            state.say(f"never ran: {', '.join(never)} ({len(never)} of the {len(report.planned() or ())} "
                      "targets planned; every output lists them)")
        write_outputs(report, state.outputs, state.fallback, state.say)
        state.say(closing_line(report))
        return RunResult(report, report.exit_code())


def _planned_as_asked(config: RunConfig) -> list[str] | None:
    """The run's targets as its config names them, for a stop before set-up looked them up (a shard's
    share is not planned yet: its run's targets stand for it). None where the config names none that
    exist."""
    from fuzz.targets import lookup

    try:
        return [t.name for t in lookup(list(config.targets), config.target_modules)]
    except UsageError:
        return None


def optimized_version(config: RunConfig) -> str | None:
    """The release of the run's optimized side where it is a source (known issues scoped by it, fuzz/run/triage.py);
    None for the copy."""
    if config.optimized == "copy":
        return None
    from fuzz.releases import identity

    return identity(config.optimized, config.sources).get("version")


def _finish(state: RunState, confirm_until: float | None = None) -> RunResult:
    """Confirm and triage failures, print the summary, write every output."""
    from fuzz.run.interrupts import enter
    from fuzz.run.triage import confirm, mark_known

    config = state.config
    assert config is not None
    enter("confirmation")
    state.entries = confirm(state.entries, config.confirm, confirm_until)
    entries = shown_paths(mark_known(state.entries, state.known, config.contract, optimized_version(config)),
                          config.corpus)
    report = Report(tuple(entries), run=run_info(config, entries, state.machine, state.started, state.planned,
                                                 state.checked),
                    versions=versions_of(config))
    _print_summary(report, state.say)
    unconfirmed = [f for _, f in report.new_failures() if f.unconfirmed]
    if config.confirm and unconfirmed:
        state.say(f"note: {len(unconfirmed)} failure(s) not confirmed by fresh replays: {unconfirmed[0].unconfirmed} "
              "(replay them with python -m fuzz replay)")
    state.say(f"seed {config.seed}, contract {config.contract}, devices {','.join(config.devices)}"
          + (f"; rerun with --seed {config.seed} to repeat" if report.exit_code() == EXIT_FAILURE else ""))
    report, where_asked = _write_all(report, state)
    state.say(closing_line(report))
    exit_code = report.exit_code()
    if not where_asked:
        exit_code = exit_code if exit_code != EXIT_OK else EXIT_USAGE  # clean, but not where it was asked for
    return RunResult(report, exit_code)


def _write_all(report: Report, state: RunState) -> tuple[Report, bool]:
    """Every output written whole: a signal meanwhile waits until the files are
    written, then they are written again saying the run was interrupted (its
    exit code is the signal's, and the report's must be the same)."""
    from fuzz.run.interrupts import deferred, enter, received

    with deferred():
        enter("writing")
        where_asked = write_outputs(report, state.outputs, state.fallback, state.say)
        signal_name = received()
        if signal_name:
            report = replace(report, interrupted=signal_name, run={**report.run, "interrupted_in": "writing"})
            print(f"interrupted by {signal_name} while writing: every item and replay had finished; the outputs "
                  "say so", file=sys.stderr)
            where_asked = write_outputs(report, state.outputs, state.fallback, None) and where_asked
    return report, where_asked


def run_info(config: RunConfig, entries: Sequence[TargetEntry] = (), machine: dict | None = None,
             started: str | None = None, planned: Sequence[str] | None = None,
             checked: CheckedRun | None = None) -> dict:
    """The report's ``run``: the settings, each side's identity, the scope merge-reports checks, the
    targets ``planned`` for this run or shard and, with a side from a source, the change's coverage
    (fuzz/reach/changes.py). The run id comes from ``config`` (made once per invocation), so every report of it
    says the same. ``checked``: what the run's set-up looked up (None: a config not checked by this run)."""
    from fuzz.reach.changes import change_coverage
    from fuzz.releases import side_identities
    from fuzz.reports.scope import run_scope
    from fuzz.run.plan import parse_shard
    from fuzz.targets import all_targets

    if checked is None:
        registry, shard = all_targets(config.target_modules), parse_shard(config.shard)
    else:
        registry, shard = dict(checked.registry), checked.shard
    sides = side_identities(config)
    info = {**config.to_json(), "sides": sides, "scope": run_scope(config, sides, shard),
            "started": started or _now()}
    if planned is not None:
        info["planned"] = list(planned)
    changes = change_coverage(config, entries, registry)
    if changes is not None:
        info["changes"] = changes
    if config.coverage:
        # Which collector measured reach (the same arcs either way, docs/reach.md): the workers inherit
        # this process's environment, so its choice is theirs.
        info["reach_collector"] = reach_core()
    if machine:
        info["machine"] = machine
    return info


def versions_of(config: RunConfig) -> dict:
    """versions(), with each role labelled by the side it ran (not the copy's origin)."""
    from fuzz.releases import side_labels
    from fuzz.versions import versions

    return {**versions(), **side_labels(config)}


def write_outputs(report: Report, outputs: Mapping[str, Path], fallback: Path | None = None,
                  say: Say | None = print) -> bool:
    """Write each output asked for, each named on ``say`` (None: silent); False if one had to go to a fallback
    path (said on stderr)."""
    from fuzz.reports.formats import junit_xml
    from fuzz.reports.html import html_report
    from fuzz.reports.outputs import write_json, write_text
    from fuzz.reports.preflight import write_or_fall_back

    writers = {"report": lambda p: write_json(p, report.to_json()),
               "markdown": lambda p: write_markdown(report, p),
               "junit": lambda p: write_text(p, junit_xml(report)),
               "html": lambda p: write_text(p, html_report(report))}
    where_asked = True
    for name, path in outputs.items():
        written = write_or_fall_back(path, writers[name], fallback)
        if written != path:
            where_asked = False
            print(f"fuzz: error: could not write {name} {str(path)!r}; it was saved to {str(written)!r} instead",
                  file=sys.stderr)
        if say is not None:
            say(f"{name}: {written}")
    return where_asked


def markdown_images(outputs: dict[str, Path]) -> dict[str, Path]:
    """{label: path} of the PNG charts written beside --markdown FILE (FILE-syncs.png, ...), each checked
    like an output (writable, replacing only a PNG); none without --markdown or without matplotlib."""
    from fuzz.reports.charts import have_matplotlib
    from fuzz.reports.charts import markdown_images as beside

    if "markdown" not in outputs or not have_matplotlib():
        return {}
    images = {f"--markdown's {key} chart": path for key, path in beside(outputs["markdown"]).items()}
    for label, path in images.items():
        check_output(label, str(path))
        check_overwrite(label, path, "png")
    return images


def write_markdown(report: Report, path: Path) -> None:
    """The Markdown summary, and (matplotlib installed) its charts as PNGs beside it, linked by file name."""
    from fuzz.reports.charts import have_matplotlib, report_charts
    from fuzz.reports.charts import markdown_images as beside
    from fuzz.reports.formats import markdown
    from fuzz.reports.outputs import write_bytes, write_text

    images, notes = {}, []
    if have_matplotlib():
        paths = beside(path)
        for chart in report_charts(report, "png"):
            if chart.image is None:
                notes.append(f"{chart.title}: {chart.note}")
                continue
            write_bytes(paths[chart.key], chart.image)
            images[chart.title] = paths[chart.key].name
    write_text(path, markdown(report, images, notes))
