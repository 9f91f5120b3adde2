"""The Python API: every command of the CLI as a function; ``fuzz/cli.py`` only parses arguments for them.

```python
from fuzz import commands

config = commands.profile_config("premerge", devices=("cpu",))      # the profile, as `run --profile` applies it
result = commands.run(config, outputs={"report": Path("r.json")})   # a RunResult; result.exit_code
commands.replay("fuzz-corpus/failures", known_issues="known-issues.json")
commands.merge_reports(["a.json", "b.json"], output="night.json")
commands.provenance(targets=["fla-chunk-offsets"])                  # 0: every copy line is upstream text
```

Each returns the exit code the CLI would (docs/usage.md#exit-codes) and prints what the command prints,
except ``run`` (a ``RunResult``, printing only when given ``say=print``) and ``list_targets`` (the records).
A bad argument raises ``fuzz.errors.UsageError`` with the one line the CLI prints. The implementations are
imported when called, so importing this package costs no torch import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from fuzz.config import PROFILES, RunConfig, apply_profile
from fuzz.errors import UsageError

if TYPE_CHECKING:
    from fuzz.run.session import RunResult
    from fuzz.targets import Target

__all__ = ["PROFILES", "corpus_merge", "coverage", "list_targets", "merge_reports", "new_target", "profile_config",
           "provenance", "replay", "run", "selftest", "sources", "trend"]


def list_targets(names: Sequence[str] = ()) -> list[Target]:
    """The registered targets (``list``), all when ``names`` is empty, in catalog order."""
    from fuzz.targets import lookup, plugin_modules

    return lookup(list(names), plugin_modules())


def profile_config(profile: str | None, **fields: Any) -> RunConfig:
    """A RunConfig with ``profile`` (``premerge``, ``nightly``) filling in the seed, examples, budget and
    coverage that ``fields`` leave open, as ``run --profile`` does."""
    settings = apply_profile(profile, seed=fields.pop("seed", None), max_examples=fields.pop("max_examples", None),
                             budget=fields.pop("budget", None), coverage=fields.pop("coverage", None),
                             legacy=fields.get("legacy", "copy"), optimized=fields.get("optimized", "copy"),
                             require_changes_covered=fields.get("require_changes_covered", False))
    return RunConfig(seed=settings.seed if settings.seed is not None else 0, max_examples=settings.max_examples,
                     budget=settings.budget, coverage=settings.coverage, profile=profile, **fields)


def run(config: RunConfig, *, outputs: dict[str, Path] | None = None, known_issues: str | None = None,
        **options: Any) -> RunResult:
    """``run``: fuzz the config's targets; the result (verdicts, report, exit code). ``outputs`` maps
    report/markdown/junit/html to paths; the other options are fuzz.run.session.run's."""
    from fuzz.run.session import run as run_session

    return run_session(config, outputs=outputs or {}, known_issues=known_issues, **options)


def replay(file: str, *, device: str | None = None, strict: bool = False, known_issues: str | None = None) -> int:
    """``replay FILE|DIR`` (fuzz.commands.replay_cmd)."""
    from fuzz.commands.replay_cmd import replay as replay_command

    return replay_command(file, device=device, strict=strict, known_issues=known_issues)


def merge_reports(inputs: Sequence[str], *, output: str | None = None, markdown: str | None = None,
                  junit: str | None = None, html: str | None = None) -> int:
    """``merge-reports`` (fuzz.commands.mergereports)."""
    from fuzz.commands.mergereports import merge_reports as merge_command

    return merge_command(inputs, output=output, markdown=markdown, junit=junit, html=html)


def trend(reports: Sequence[str], *, markdown: str | None = None, html: str | None = None,
          threshold: float | None = None) -> int:
    """``trend`` (fuzz.reports.trend)."""
    from fuzz.reports.trend import DEFAULT_THRESHOLD
    from fuzz.reports.trend import trend as trend_command

    return trend_command(reports, markdown=markdown, html=html,
                         threshold=DEFAULT_THRESHOLD if threshold is None else threshold)


def coverage(report: str, *, targets: Sequence[str] = (), device: str | None = None, side: str | None = None,
             show_all: bool = False, changes: bool = False) -> int:
    """``coverage REPORT`` (fuzz.commands.coverage_cmd); with ``changes``, each untaken line's text is read from
    the side's source."""
    from fuzz.commands.coverage_cmd import coverage as coverage_command
    from fuzz.reach.changes import open_side_source

    return coverage_command(report, targets=targets, device=device, side=side, show_all=show_all,
                            changes=changes, open_source=open_side_source)


def corpus_merge(out: str, inputs: Sequence[str]) -> int:
    """``corpus-merge OUT SHARD...`` (fuzz.commands.corpusmerge)."""
    from fuzz.commands.corpusmerge import corpus_merge as corpus_command

    return corpus_command(out, inputs)


def selftest(targets: Sequence[str] = (), **options: Any) -> int:
    """``selftest`` (fuzz.commands.selftest_cmd): device, seed, max_examples, contract, limit, shared, json,
    min_kill_rate."""
    from fuzz.commands.selftest_cmd import selftest as selftest_command

    return selftest_command(targets, **options)


def provenance(*, targets: Sequence[str] = (), legacy_source: str | None = None, optimized_source: str | None = None,
               version_sources: Sequence[str] = (), cache: str | None = None, against: str | None = None,
               sources: Sequence[str] = (), legacy_diffs: bool = False) -> int:
    """``provenance`` (fuzz.releases.provenance): every copy line checked against the release it was copied from,
    or, with ``against`` (``vllm==X`` or a path), the upstream drift since. ``version_sources`` are
    ``VERSION=PATH`` (``--source``), ``sources`` source-pack folders (``--sources``); 0 verified (no drift), 1 not."""
    from fuzz.releases import provenance_command

    return provenance_command(targets=targets, legacy_source=legacy_source, optimized_source=optimized_source,
                              version_sources=version_sources, cache=cache, against=against, sources=sources,
                              legacy_diffs=legacy_diffs)


def sources(action: str, *, specs: Sequence[str] = (), into: str | None = None, cache: str | None = None,
            sources: Sequence[str] = (), newest: bool = False) -> int:
    """``sources fetch|list`` (fuzz.releases.packs): ``"fetch"`` writes a pack of each of ``specs`` (``vllm==X``,
    a .whl or a vllm tree) under ``into``; ``"list"`` prints the packs found (also in the ``sources`` folders),
    or with ``newest`` only ``vllm==X`` of the newest."""
    from fuzz.releases import fetch_packs, list_packs

    if action == "list":
        if specs or into is not None or cache is not None:
            raise UsageError("sources list takes no specs, into or cache (sources fetch does)")
        return list_packs(sources, newest=newest)
    if action != "fetch":
        raise UsageError(f"sources {action!r} is not one of fetch, list")
    if sources or newest:
        raise UsageError("sources fetch takes no sources or newest (sources list does)")
    if not specs or into is None:
        raise UsageError("sources fetch needs specs (vllm==X, a .whl or a vllm tree) and into (where the packs go)")
    return fetch_packs(specs, into=into, cache=cache)


def new_target(name: str, *, upstream: Sequence[str], legacy_version: str, optimized_version: str,
               also: Sequence[str] = (), module: str | None = None, root: str | None = None,
               legacy_source: str | None = None, optimized_source: str | None = None, cache: str | None = None) -> int:
    """``new-target NAME`` (fuzz.releases.scaffold): the target's copies, record, stubs and oracle test written
    under ``root`` (default this checkout), never over a file; ``upstream`` and ``also`` are
    ``vllm/PATH.py::QUAL`` refs, the first ``upstream`` the entry point."""
    from fuzz.releases import new_target_command

    return new_target_command(name, upstream=upstream, legacy_version=legacy_version,
                              optimized_version=optimized_version, also=also, module=module, root=root,
                              legacy_source=legacy_source, optimized_source=optimized_source, cache=cache)
