"""A target made ready for a run: ``prepare(target, config) -> PreparedTarget``.

Every process of a run that fuzzes, replays or plans a target calls this, and nothing else binds one: the
session (which targets a side's source cannot be built into), the fuzz worker (fuzz.engine.runner), a
replay's parent (is the repro still buildable here?) and its child. It

- binds the target to the run's sides (``fuzz.releases.bind_sides``; ``Retired`` / ``CannotBuild`` raised),
- attaches the real vllm function as a third side under ``--upstream`` (fuzz.engine.upstream), and
- decides which rule judges the optimized side's syncs (fuzz.oracles.syncrule), with its descent parts,

once per process for a target and the settings that decide them (the sides, the source folders,
``upstream``, ``sync_budget``): an in-process run binds in its set-up and fuzzes what it bound. The
third side and the sync rule are decided when first asked for: a process that only asks whether a target
builds (the session, a replay's parent) imports no vllm and reads no digests -- under MPS a replay's parent
must not become a CUDA client.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from fuzz.engine.upstream import with_upstream
from fuzz.oracles.syncrule import BUDGET, descent_parts, sync_rule
from fuzz.releases import bind_sides
from fuzz.targets import Target


class PreparedTarget:
    """A target bound to a run's sides (``bound``), and what the run fuzzes of it: ``target`` (with the real
    vllm function kept only where ``--upstream`` compares it), ``upstream`` (what ``--upstream`` did for it:
    None without the flag, else compared or why not), ``sync_rule`` and ``sync_descent`` ({} under the
    budget rule)."""

    def __init__(self, bound: Target, config: Any) -> None:
        self.bound = bound
        self._config = config

    @cached_property
    def _third_side(self) -> tuple[Target, str | None]:
        return with_upstream(self.bound, self._config)

    @property
    def target(self) -> Target:
        return self._third_side[0]

    @property
    def upstream(self) -> str | None:
        return self._third_side[1]

    @cached_property
    def sync_rule(self) -> str:
        return sync_rule(self.target, self._config)

    @cached_property
    def sync_descent(self) -> dict[str, bool]:
        """Which parts of the optimized side descend from the budget's release; {} under the budget rule
        (both sides the copies), where nothing is rebuilt."""
        return {} if self.sync_rule == BUDGET else descent_parts(self.target, self._config)


def _key(target: Target, config: Any) -> tuple:
    """What decides a preparation: the target and the settings each step reads."""
    return (target, config.legacy, config.optimized, tuple(config.sources), bool(config.upstream),
            getattr(config, "sync_budget", "auto"))


_PREPARED: dict[tuple, PreparedTarget] = {}


def prepare(target: Target, config: Any) -> PreparedTarget:
    """``target`` made ready for ``config``'s run (see the module's docstring), once per process; raises
    ``fuzz.releases.Retired`` or ``CannotBuild`` where a side's source cannot be built into it (not kept:
    each caller reports it its own way)."""
    key = _key(target, config)
    prepared = _PREPARED.get(key)
    if prepared is None:
        prepared = _PREPARED[key] = PreparedTarget(bind_sides(target, config), config)
    return prepared
