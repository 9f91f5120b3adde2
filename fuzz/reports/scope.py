"""What a report covers, so ``merge-reports`` can refuse a merge that would lie.

Every report's ``run`` object carries a ``scope``:

* ``run_id``: made once per ``fuzz run`` invocation (``RunConfig.run_id``), so
  the same file passed twice is told apart from two runs of the same shard;
* ``plan`` and ``plan_digest`` (its sha256): the settings that decide which
  items exist and what each does (targets, devices, contract, seed, examples
  or budget, pieces, stress, upstream, what code each side runs). Not the
  corpus, workers, shard or ``--confirm``: hosts may differ in those and still
  split one run;
* ``shard`` ``[i, n]`` (a whole run is ``[1, 1]``), ``pieces``, ``seed`` and
  ``sides`` (``--legacy``/``--optimized`` as given), for people reading it.

A merged report's scope keeps the plan and lists the parts it ``covers``
(shard and run id each), whether it is ``complete`` and which shards are
``missing``: it can be merged again with further shards of the same run.

No torch here: merging reports must not need a GPU stack.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from fuzz.errors import UsageError
from fuzz.records.model import ReportError

# RunConfig fields that decide which items a run plans and what each computes.
PLAN_FIELDS = ("targets", "target_modules", "devices", "contract", "seed", "max_examples", "budget", "pieces",
               "stress", "race", "upstream", "sync_budget", "coverage", "require_changes_covered")
# What a side's identity says about its code; not where it was read ("from") nor a checkout's path,
# which differ between hosts running the same code.
SIDE_CODE_KEYS = ("kind", "version", "code_sha256", "files_sha256")


def plan_settings(config: Any, identities: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The settings two reports must share to be parts of one run."""
    from fuzz.versions import code_tree  # no torch: only versions() imports it

    settings = {name: _plain(getattr(config, name)) for name in PLAN_FIELDS}
    # The copies and input models: with a release or checkout as a side, the strategies still decide the examples.
    settings["code_sha256"] = code_tree()["code_sha256"]
    for role, found in identities.items():
        settings[f"{role}_side"] = {key: found[key] for key in SIDE_CODE_KEYS if key in found}
    return settings


def digest(settings: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def run_scope(config: Any, identities: Mapping[str, Mapping[str, Any]], shard: tuple[int, int] | None) -> dict:
    """The scope of one invocation's report (``shard`` None: the whole run)."""
    settings = plan_settings(config, identities)
    return {"run_id": config.run_id, "plan_digest": digest(settings), "plan": settings,
            "shard": list(shard or (1, 1)), "pieces": config.pieces, "seed": config.seed,
            "sides": {"legacy": config.legacy, "optimized": config.optimized}}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# --------------------------------------------------------------------------- reading a report's scope


def read_scope(run: Mapping[str, Any], name: str) -> dict:
    """A report's scope, checked; one ReportError line for a missing or damaged one."""
    scope = run.get("scope")
    if scope is None and run.get("interrupted_in") == "set-up":
        raise ReportError(f"report {name!r} was stopped in set-up, before its run was planned (it has no scope "
                          "and no result): there is nothing of it to merge; re-run that shard, or merge the others")
    if scope is None:
        # Written before scopes were recorded (or stopped before its run was planned). Without a run id
        # and shard, a copy of another report cannot be told from a part of its own: refused, not trusted.
        raise ReportError(f"report {name!r} predates scope recording (its run has no 'scope'): merge-reports cannot "
                          "tell which shard of which run it holds, so it cannot rule out counting it twice; re-run "
                          "it with this syncfuzz")
    where = f"report {name!r}: run scope"
    if not isinstance(scope, Mapping) or not isinstance(scope.get("plan"), Mapping):
        raise ReportError(f"{where} must be an object with a 'plan' object; re-run that shard")
    if scope.get("plan_digest") != digest(scope["plan"]):
        raise ReportError(f"{where}: its plan_digest does not match its plan (edited by hand?); re-run that shard")
    for part in parts(scope, where):
        if not (isinstance(part.get("run_id"), str) and _is_shard(part.get("shard"))):
            raise ReportError(f"{where}: {json.dumps(part)[:80]} must have a run_id and a shard [i, n] with "
                              "1 <= i <= n; re-run that shard")
    return dict(scope)


def parts(scope: Mapping[str, Any], where: str = "scope") -> list[dict]:
    """The (shard, run id) parts a scope covers: one for a run's own report, several once merged."""
    if "covers" in scope:
        covers = scope["covers"]
        if not isinstance(covers, list) or not all(isinstance(p, Mapping) for p in covers):
            raise ReportError(f"{where}: 'covers' must be a list of objects; re-run that shard")
        return [dict(p) for p in covers]
    return [{"shard": scope.get("shard"), "run_id": scope.get("run_id")}]


def _is_shard(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)
            and 1 <= value[0] <= value[1])


# --------------------------------------------------------------------------- the merge's rules


def check_mergeable(scopes: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """Refuse, with one line naming both files, reports that are not disjoint shards of one run."""
    first_name, first = scopes[0]
    for name, scope in scopes[1:]:
        if scope["plan_digest"] != first["plan_digest"]:
            raise UsageError(f"reports {first_name!r} and {name!r} are parts of different runs ("
                             f"{differences(first['plan'], scope['plan'])}); merge only the shards of one run "
                             "(the same settings, --shard I/N)")
    held: dict[int, tuple[str, dict]] = {}  # shard index -> (file, part)
    for name, scope in scopes:
        for part in parts(scope):
            _check_part(name, part, held)


def _check_part(name: str, part: dict, held: dict[int, tuple[str, dict]]) -> None:
    index, count = part["shard"]
    for other_name, other in held.values():
        other_count = other["shard"][1]
        if other_count != count:
            whole = (other_name, name) if other_count == 1 else (name, other_name) if count == 1 else None
            if whole:
                raise UsageError(f"reports {whole[0]!r} and {whole[1]!r} overlap: {whole[0]!r} is the whole run "
                                 "and the other one of its shards; merge the shards alone, or keep the whole run")
            raise UsageError(f"reports {other_name!r} and {name!r} split one run differently (--shard "
                             f"{_shard(other)} and --shard {_shard(part)}); merge shards of one --shard I/N split")
    if index in held:
        other_name, other = held[index]
        if other["run_id"] == part["run_id"]:
            raise UsageError(f"reports {other_name!r} and {name!r} both hold shard {_shard(part)} of run "
                             f"{part['run_id'][:12]}: the same report given twice; pass each shard once")
        raise UsageError(f"reports {other_name!r} and {name!r} overlap: both hold shard {_shard(part)} of the same "
                         f"run plan, from two invocations (runs {other['run_id'][:12]} and {part['run_id'][:12]}); "
                         "merge one of them")
    held[index] = (name, part)


def _shard(part: Mapping[str, Any]) -> str:
    return "/".join(str(v) for v in part["shard"])


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Which plan settings differ, e.g. ``seed 3 vs 4, legacy_side``."""
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            shown = f"{key} {json.dumps(a.get(key))} vs {json.dumps(b.get(key))}"
            out.append(shown if len(shown) <= 60 else f"{key} differs")
    return ", ".join(out) or "their plan digests differ"


def merged_scope(scopes: Sequence[Mapping[str, Any]]) -> dict:
    """The scope of a merge of ``scopes`` (already checked by ``check_mergeable``)."""
    first = scopes[0]
    covers = sorted((p for s in scopes for p in parts(s)), key=lambda p: p["shard"][0])
    count = covers[0]["shard"][1]
    missing = sorted(set(range(1, count + 1)) - {p["shard"][0] for p in covers})
    return {"plan_digest": first["plan_digest"], "plan": dict(first["plan"]), "pieces": first.get("pieces"),
            "seed": first.get("seed"), "sides": first.get("sides"), "shard_count": count,
            "covered": [p["shard"][0] for p in covers], "missing": missing, "complete": not missing,
            "covers": [{"shard": list(p["shard"]), "run_id": p["run_id"]} for p in covers],
            "run_ids": sorted({p["run_id"] for p in covers})}
