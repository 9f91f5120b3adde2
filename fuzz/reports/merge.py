"""``merge-reports``: the shards of one run (``--shard I/N`` on several hosts) as one report.

Each report is read back into the model (``Report.from_json``: a report of
another format version, a missing or mistyped field or an impossible count --
negative, or more verdicts than examples -- is one clear error), and its
``run.scope`` (fuzz/reports/scope.py) says which run plan and which shard it holds.
The merge refuses, with one line naming both files and writing nothing:

* the same report twice (same run id and shard);
* overlapping parts: the whole run plus any of its shards, or the same shard
  of one plan from two invocations;
* parts of different runs: a different seed, contract, target list, pieces,
  example count or budget, devices, stress/upstream mode or side code (the
  line names the settings that differ). So a merge no longer adds up nights
  or contracts: each is a run of its own;
* a report without a scope (written before scopes were recorded): it cannot
  be told apart from a copy of another, so it is re-run, not trusted.

What is merged then adds up: entries of the same target sum their examples,
verdict counts and sync histograms per device and keep each failure once
(``Failure.signature``). A merge of every shard of a run therefore equals
that run's own report in its counts and failures (not its seconds or
placement; tests/unit/test_merge.py runs it). A merge missing some shards is still
written, with ``complete: false`` and the ``missing`` shards in its scope, and
can be merged again with them. The exit code follows the run's rule, judged on the merged content: a merge
is never "interrupted" itself, so one holding an interrupted part (``interrupted`` names its signal,
``merged_from`` which part) or missing shards exits 3 (incomplete) unless a failure (1) or fuzzer error (4)
says more; every output says it is partial and which planned targets never ran (``Report.partial``,
``Report.never_ran``). Each input's machine use
(``run.machine``: rates, GPU readings, sharing) is kept as ``run.machines``, one per input with its file
name, never summed into one machine's figures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import reduce
from pathlib import Path
from typing import Any

from fuzz.errors import UsageError
from fuzz.records.model import Report
from fuzz.reports.scope import check_mergeable, merged_scope, read_scope


def read_report(name: str) -> Report:
    try:
        data = json.loads(Path(name).read_text())
    except FileNotFoundError:
        raise UsageError(f"report {name!r} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"report {name!r} is a directory; pass a JSON report file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"report {name!r} is not valid JSON ({exc})") from None
    return Report.from_json(data, name)


def merge_reports(named: Sequence[tuple[str, Report]]) -> Report:
    """One report from several disjoint shards of one run (``(file name, report)`` each; the
    names are for the refusals); its scope says which shards it covers."""
    if not named:
        raise UsageError("merge-reports needs at least one report file")
    scopes = [(name, read_scope(report.run, name)) for name, report in named]
    check_mergeable(scopes)
    merged = reduce(lambda a, b: a + b, (report for _, report in named))
    run = {**merged.run, "scope": merged_scope([scope for _, scope in scopes])}
    machines = _machines(named)
    if machines:
        run["machines"] = machines
    return replace(merged, run=run)


def _machines(named: Sequence[tuple[str, Report]]) -> list[dict[str, Any]]:
    """Each input's machine use (fuzz/reports/machine.py), named by its file, in input order: shards ran on
    different hosts, so no one machine's rates or GPU readings speak for the merge. An input that is itself
    a merge brings its own list."""
    machines: list[dict[str, Any]] = []
    for name, report in named:
        if isinstance(report.run.get("machines"), list):
            machines += [dict(m) for m in report.run["machines"] if isinstance(m, Mapping)]
        elif isinstance(report.run.get("machine"), Mapping) and report.run["machine"]:
            machines.append({"name": name, **report.run["machine"]})
    return machines


def incomplete_note(merged: Report) -> str | None:
    """One line for stderr when the merge is partial: it lacks some of the run's shards, or holds an
    interrupted part."""
    why = merged.partial()
    if why is None:
        return None
    never = merged.never_ran()
    named = f"never ran: {', '.join(never)}" if never else \
        "which targets never ran is not recorded" if never is None else "no planned target of its parts is missing"
    return (f"note: a partial merge ({why}; {named}): its totals hold only what finished and was merged; merge "
            "it again with the missing shards, or re-run an interrupted one and merge that")
