"""One run's settings as one frozen record, and the callbacks apart from it.

A run crosses process boundaries: the isolated fuzz worker, each xdist worker,
``--confirm``'s fresh replay processes and, much later, ``replay`` of a saved
repro file. Each of them receives the whole ``RunConfig`` as JSON and rebuilds
it with ``from_json``; nothing copies fields by hand, so a setting added here
reaches every process (tests/unit/test_config.py sends every field through every
boundary). Unknown keys are refused: a file written by another version, or
edited by hand, is an error, not a silently different run.

``Hooks`` are what a process wires up for itself (progress printing, the
worker's journal); they never travel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
import typing
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from fuzz.errors import UsageError
from fuzz.targets import CONTRACTS

SYNC_BUDGET_MODES = ("auto", "apply", "ignore")  # RunConfig.sync_budget, --sync-budget (fuzz/oracles/syncrule.py)
GPU_SHARE_MODES = ("auto", "mps", "off")  # RunConfig.gpu_share, --gpu-share (fuzz/run/gpushare.py)
COPY = "copy"  # a side that is the frozen copy under legacy/ or optimized/ (fuzz/releases/sides.py)
REQUIRE_CHANGES_MODES = ("all", "sync")  # RunConfig.require_changes_covered as a string (True: the flag alone)


class ConfigError(UsageError):
    """A serialized RunConfig that cannot be read back (unknown key, wrong type)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides what a run does. Plain data only."""

    targets: tuple[str, ...] = ()  # names asked for; () = every registered target
    target_modules: tuple[str, ...] = ()  # plug-in modules (SYNCFUZZ_TARGET_MODULES) the targets come from
    devices: tuple[str, ...] = ("cpu",)
    contract: str = "caller"
    seed: int = 0
    max_examples: int | None = None  # per target (per item once planned); exclusive with budget
    budget: float | None = None  # wall-clock seconds shared by the run's items
    corpus: str | None = None  # Hypothesis database, failures/, journal/ (None: nothing saved)
    stress: bool = False  # async-hazard stress mode (fuzz/oracles/stress.py)
    race: bool = False  # the race oracle on CUDA (fuzz/oracles/races.py, docs/verdicts.md#races)
    coverage: bool = False  # measure what each side ran (fuzz/reach/collect.py, docs/reach.md)
    # --require-changes-covered[=MODE] (docs/reach.md): False (not asked), True (the flag alone: the changed
    # definitions no target reached make the run incomplete, exit 3), "all" (also a changed branch no example
    # took in a definition that ran), "sync" (as "all", for the sync-relevant definitions only).
    require_changes_covered: bool | str = False
    upstream: bool = False  # the real vllm as a third side (fuzz/engine/upstream.py)
    confirm: int = 3  # fresh-process replays of each failure before it is reported
    isolated: bool = True  # examples run in watched worker processes (fuzz/run/isolation.py)
    example_timeout: float = 120.0  # watchdog per example, isolated runs
    max_restarts: int = 3  # fresh workers per target after a crash or hang
    workers: int = 1  # pytest-xdist workers
    pieces: int = 1  # seeded items per target
    shard: str | None = None  # "i/n": this host's share of the items
    profile: str | None = None  # premerge / nightly, as asked (already applied to the fields)
    # Each role's code (fuzz/releases/sides.py): "copy", "vllm==X.Y.Z" or an absolute path to a vllm source.
    legacy: str = COPY
    optimized: str = COPY
    sources: tuple[str, ...] = ()  # folders of source packs (--sources) where vllm==X sides resolve
    # With a side from a source, whether the targets' declared sync budgets apply on top of the relative rule
    # (fuzz/oracles/syncrule.py): "auto" (only to code that descends from the budget's release), "apply", "ignore".
    # Copy-vs-copy runs are judged by the budget whatever it says.
    sync_budget: str = "auto"
    # How workers that share a GPU share it (fuzz/run/gpushare.py, docs/gpu-sharing.md): "auto" (CUDA MPS when two
    # or more workers land on one GPU), "mps", "off" (time-sliced contexts). The mode the run got is in the
    # report's run.machine.gpu_share.
    gpu_share: str = "auto"
    # Which invocation this is, not a setting: made once when the command line's config is built, carried
    # whole like the rest, and recorded in the report's scope so merge-reports can tell the same report
    # given twice from two runs of one shard (fuzz/reports/scope.py). Not compared: it changes no example.
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: Any, where: str = "run config") -> RunConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{where} must be a JSON object, found {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"{where} has unknown settings {unknown}; it was written by another syncfuzz "
                              "version or edited by hand (known: " + ", ".join(known) + ")")
        hints = typing.get_type_hints(cls)
        values = {name: _typed(data[name], hints[name], f"{where}: {name}") for name in known if name in data}
        config = cls(**values)
        config.validate(where)
        return config

    def validate(self, where: str = "run config") -> None:
        if self.contract not in CONTRACTS:
            raise ConfigError(f"{where}: contract {self.contract!r} is not one of {', '.join(CONTRACTS)}")
        unknown = [d for d in self.devices if d not in ("cpu", "cuda")]
        if unknown or not self.devices:
            raise ConfigError(f"{where}: devices {list(self.devices)} must be cpu and/or cuda")
        if self.sync_budget not in SYNC_BUDGET_MODES:
            raise ConfigError(f"{where}: sync_budget {self.sync_budget!r} is not one of "
                              f"{', '.join(SYNC_BUDGET_MODES)}")
        if isinstance(self.require_changes_covered, str) and self.require_changes_covered not in REQUIRE_CHANGES_MODES:
            raise ConfigError(f"{where}: require_changes_covered {self.require_changes_covered!r} is not true, false "
                              f"or one of {', '.join(REQUIRE_CHANGES_MODES)}")
        if self.gpu_share not in GPU_SHARE_MODES:
            raise ConfigError(f"{where}: gpu_share {self.gpu_share!r} is not one of {', '.join(GPU_SHARE_MODES)}")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _typed(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against (and converted to) a field's type."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{where} must not be null")
    for option in options:
        if typing.get_origin(option) is tuple:
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return tuple(value)
        elif option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        elif option is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        elif option in (str, bool) and type(value) is option:
            return value
    name = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
    raise ConfigError(f"{where}: {json.dumps(value)[:60]} is not {name}")


@dataclass(frozen=True)
class Hooks:
    """Callbacks one process wires up for itself; never serialized.

    ``progress(outcome)`` every few seconds of a long target; the isolated
    worker journals each example before it runs (``before_example``),
    snapshots the outcome after each chunk (``after_chunk``) and ends its
    process when its CUDA context is lost (``on_context_lost``).
    """

    progress: Callable[..., None] | None = None
    item_done: Callable[..., None] | None = None  # (item, entry) after each item of a run
    before_example: Callable[..., None] | None = None
    after_chunk: Callable[..., None] | None = None
    on_context_lost: Callable[..., None] | None = None


NO_HOOKS = Hooks()


REACH_CORE_ENV = "SYNCFUZZ_REACH_CORE"
"""``ctrace`` or ``sysmon``: which collector measures reach. Default: ``sysmon`` on Python 3.12, where
settrace's toggles are costly and the collector was checked arc for arc against coverage.py's; ``ctrace``,
coverage.py's C tracer, elsewhere (``sysmon`` may be asked for on 3.13+)."""


def reach_core(environ: Mapping[str, str] | None = None) -> str:
    """The collector this process measures reach with (``REACH_CORE_ENV``); ``sysmon`` asked for on a
    Python without sys.monitoring is a usage error, not a silent fallback (fuzz.reports.preflight checks it
    before any command runs)."""
    asked = (os.environ if environ is None else environ).get(REACH_CORE_ENV, "").strip()
    if asked not in ("", "ctrace", "sysmon"):
        raise UsageError(f"{REACH_CORE_ENV}={asked!r}: use ctrace or sysmon (or leave it unset)")
    if asked == "sysmon" and sys.version_info < (3, 12):
        raise UsageError(f"{REACH_CORE_ENV}=sysmon needs Python 3.12+ (sys.monitoring); this is "
                         f"{sys.version_info.major}.{sys.version_info.minor}: unset it")
    # sysmon by default only where it was checked against coverage.py's tracer, arc for arc (3.12: the
    # H200 host's Python and tests/unit/test_reach_monitor.py); other versions ask for it by name.
    return asked or ("sysmon" if sys.version_info[:2] == (3, 12) else "ctrace")


DEFAULT_MAX_EXAMPLES = 200
"""Examples per target when neither the run nor its profile says (``fuzz run`` without --budget)."""

PROFILES: dict[str, dict[str, Any]] = {
    # Deterministic and bounded: the same examples on every machine, minutes on a laptop.
    "premerge": {"seed": 0, "max_examples": 100, "coverage": "with-sources"},
    # Time-boxed; a new seed each day (recorded) so nights explore new ground, while
    # the corpus' example database retries yesterday's failures first.
    "nightly": {"budget": 3600.0, "seed": "daily", "coverage": True},
}


@dataclass(frozen=True)
class ProfileSettings:
    """What a profile decides of a run that the run left open (``fuzz run --profile``)."""

    seed: int | None
    max_examples: int | None
    budget: float | None
    coverage: bool


def apply_profile(profile: str | None, *, seed: int | None = None, max_examples: int | None = None,
                  budget: float | None = None, coverage: bool | None = None, legacy: str = "copy",
                  optimized: str = "copy", require_changes_covered: bool | str = False,
                  today: str | None = None) -> ProfileSettings:
    """A run's seed, examples, budget and coverage with ``profile`` (``premerge``, ``nightly`` or None) filling
    in what it did not give: what ``fuzz run --profile`` does, for the Python API too. ``today``
    (``YYYYMMDD``, default the UTC date) is the nightly's seed."""
    if profile is not None and profile not in PROFILES:
        raise UsageError(f"profile {profile!r} is not one of {', '.join(PROFILES)}")
    settings = PROFILES.get(profile or "", {})
    if seed is None and "seed" in settings:
        daily = int(today or datetime.now(timezone.utc).strftime("%Y%m%d"))
        seed = daily if settings["seed"] == "daily" else settings["seed"]
    if max_examples is None and budget is None:
        max_examples, budget = settings.get("max_examples"), settings.get("budget")
    if max_examples is None and budget is None:
        max_examples = DEFAULT_MAX_EXAMPLES
    if coverage is None:
        # The profiles' coverage (docs/reach.md): nightly always (+14% median on the H200); premerge when a
        # side comes from a source, whose question includes what the change left unfuzzed (copy-vs-copy
        # premerge costs +23%, over the 15% bar: --coverage asks). lab/benchmarks/history.md, "reach".
        wanted = settings.get("coverage", False)
        if wanted == "with-sources":
            wanted = legacy != "copy" or optimized != "copy"
        coverage = bool(wanted) or bool(require_changes_covered)
    return ProfileSettings(seed, max_examples, budget, coverage)
