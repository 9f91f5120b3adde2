"""Which rule judges the optimized side's GPU<->CPU syncs (docs/verdicts.md#which-sync-rule).

A target's ``expected_optimized_syncs`` / ``sync_budget`` is the number of
syncs per call the optimized *copy* makes by design: the code of the release
the copy was taken from (``Target.versions[1]``). Applied to other code -- a
side rebuilt from another release or a checkout (fuzz/releases/sides.py) -- it judges a
design that code never had: two upstream trees that both sync 4 times per call
were reported as a regression against a budget of 0. So:

* ``budget``: both sides are the copies (the default). The declared budget
  judges, as it always did.
* ``relative``: a side comes from a source. A sync regression is the
  optimized side making more syncs than the legacy side on the same input.
* ``relative+budget``: as ``relative``, and the declared budget applies on
  top: everything that decides the optimized side's syncs for this target
  descends from the release the budget was declared for (``descent_parts``:
  the entry point's code and every claimed definition an input model calls,
  such as the keep-on-cpu field configs that place the inputs), or
  ``--sync-budget apply`` asked for it.

``--sync-budget`` (``RunConfig.sync_budget``): ``auto`` decides by descent,
``apply`` always adds the budget, ``ignore`` never does; for copy-vs-copy runs
it changes nothing (``budget``). Fewer syncs than legacy is never a failure.
"""

from __future__ import annotations

from typing import Any

from fuzz.config import SYNC_BUDGET_MODES
from fuzz.oracles.outcome import SideResult
from fuzz.records.verdicts import Mismatch
from fuzz.releases import COPY, PACKAGE, claimed_digests, entry_digests, version_key
from fuzz.targets import FORM_ATTRIBUTE, Target, resolve_impl

BUDGET, RELATIVE, RELATIVE_BUDGET = "budget", "relative", "relative+budget"
RULES = (BUDGET, RELATIVE, RELATIVE_BUDGET)


def sync_rule(target: Target, config: Any) -> str:
    """The rule for ``target`` bound to ``config``'s sides (fuzz.releases.bind_sides): one of ``RULES``."""
    if config.legacy == COPY and config.optimized == COPY:
        return BUDGET
    mode = getattr(config, "sync_budget", "auto")
    if mode not in SYNC_BUDGET_MODES:
        raise ValueError(f"sync_budget {mode!r} is not one of {', '.join(SYNC_BUDGET_MODES)}")
    if mode == "apply":
        return RELATIVE_BUDGET
    if mode == "ignore":
        return RELATIVE
    return RELATIVE_BUDGET if optimized_descends(target, config) else RELATIVE


def judges_budget(rule: str) -> bool:
    return rule in (BUDGET, RELATIVE_BUDGET)


def judges_relative(rule: str) -> bool:
    return rule in (RELATIVE, RELATIVE_BUDGET)


ENTRY = "entry point"  # the part of ``descent_parts`` that is the code a call of the entry point may run
_PARTS: dict[tuple[Any, ...], dict[str, bool]] = {}


def optimized_descends(target: Target, config: Any) -> bool:
    """Whether everything that decides the optimized side's syncs for ``target`` (bound to ``config``'s
    sides) descends from the release its sync budget was declared for (``target.versions[1]``, the
    optimized copy's release): every part of ``descent_parts`` does, and there is at least one."""
    parts = descent_parts(target, config)
    return bool(parts) and all(parts.values())


def descent_parts(target: Target, config: Any) -> dict[str, bool]:
    """What decides the optimized side's syncs, part by part, and whether each descends from the budget's
    release (the row's ``sync_descent``; docs/verdicts.md#which-sync-rule):

    * ``entry point``: the definitions reachable from the target's entry point;
    * each definition the target claims (``Target.upstream``) outside that reach, with what it reaches:
      an input model calls it itself, and it may decide where the inputs live (the keep-on-cpu field
      configs: a ``keep_on_cpu=True`` removed upstream moves a field to the device, and the syncs with it,
      while the consumer's code stays the copy's).

    A part descends when its definitions are the same code in the rebuilt module as in the optimized copy
    (``fuzz.releases.sidebuild``'s digests: the same qualnames, each the same digest, comments, docstrings
    and layout aside). The optimized side being the copy: ``{ENTRY: True}``. Rebuilt on ``legacy/`` (a
    release older than the copy's): ``{ENTRY: False}``, an old release's code. An entry point whose reach
    is empty is not shown to descend. Decided once per (target name, sides) per process.
    """
    key = (target.name, config.legacy, config.optimized, tuple(config.sources))
    if key not in _PARTS:
        _PARTS[key] = _descent_parts(target, config)
    return _PARTS[key]


def _descent_parts(target: Target, config: Any) -> dict[str, bool]:
    impl = target.impl("optimized")
    module = impl.module
    if config.optimized == COPY or not module.__name__.startswith(PACKAGE + "."):  # the copy itself, not rebuilt
        return {ENTRY: True}
    if getattr(module, FORM_ATTRIBUTE, None) != "optimized":  # rebuilt on legacy/: an older release's code
        return {ENTRY: False}
    copy = resolve_impl(f"optimized.{module.__name__.rpartition('.')[2]}:{impl.path.partition(':')[2]}")
    built = entry_digests(impl)
    parts = {ENTRY: bool(built) and built == entry_digests(copy)}
    claimed = [ref.partition("::")[2] for ref in target.upstream]
    claimed = [q for q in dict.fromkeys(claimed) if q not in built]
    rebuilt_claims, copy_claims = claimed_digests(impl, claimed), claimed_digests(copy, claimed)
    for qualname in claimed:
        ours, theirs = copy_claims.get(qualname, {}), rebuilt_claims.get(qualname, {})
        if ours or theirs:  # a name neither module defines (another release's) decides nothing here
            parts[qualname] = ours == theirs
    return parts


def budget_note(rule: str, target: Target) -> str:
    """How a budget message names its rule."""
    release = f"vllm {target.versions[1]}"
    if rule == BUDGET:
        return f"rule: the budget declared for {release}, the optimized copy's release"
    return f"rule: relative to legacy, plus the budget declared for {release}"


def relative_detail(rule: str, target: Target, legacy_syncs: int, optimized_syncs: int, budget: int | None,
                    mode: str = "auto", over_budget: bool = False) -> str:
    """The mismatch detail of a sync regression found relative to legacy (``over_budget``: the budget,
    where the rule includes it, was exceeded too)."""
    head = (f"optimized made {optimized_syncs} GPU<->CPU syncs per call, legacy made {legacy_syncs} on the "
            "same input")
    release = f"vllm {target.versions[1]}"
    declared = (f"the budget of {budget} declared for {release}" if budget is not None
                else f"the budget declared for {release}")
    if rule == RELATIVE_BUDGET:
        kept = "also exceeded" if over_budget else "within it"
        return f"{head} (rule: relative to legacy, plus {declared}: {kept})"
    why = ("is ignored (--sync-budget ignore)" if mode == "ignore"
           else "does not apply: the optimized side's code is not that release's")
    return f"{head} (rule: relative to legacy; {declared} {why})"


def function_syncs(target: Target, spec: dict, legacy: SideResult, optimized: SideResult,
                   config: Any, rule: str | None = None) -> list[Mismatch]:
    """The sync oracle on one example whose sides agree and both returned: what, if anything, the
    optimized side's syncs break under the target's rule (``sync_rule``) with ``config``'s sides and
    contract; [] when nothing. fuzz.records.verdicts.decide_example weighs it with the other oracles.

    Where the rule includes the budget (``budget``, ``relative+budget``), on CUDA the optimized side may
    make at most the target's declared number per call; under the wide contract inputs arrive in forms the
    optimized code was never meant to take sync-free (device metadata, CPU coordinates), so there it may
    make as many as legacy. Where the rule is relative, more optimized syncs than legacy ones on the same
    CUDA input is a regression (and its message says whether the budget was exceeded too). Fewer syncs
    than legacy is never one of the relative rule. ``rule``: as the run decided it once for the target
    (fuzz.engine.prepare); None: decided here."""
    rule = sync_rule(target, config) if rule is None else rule
    on_cuda = spec["device"].startswith("cuda")
    budget = target.syncs_allowed(spec) if on_cuda else None
    found: list[Mismatch] = []
    allowed = budget if judges_budget(rule) else None
    if config.contract == "wide" and allowed is not None and legacy.syncs is not None:
        allowed = max(allowed, legacy.syncs)
    if allowed is not None and optimized.syncs is not None and optimized.syncs > allowed:
        found = [Mismatch("", "syncs", f"optimized made {optimized.syncs} GPU<->CPU syncs per call, target allows "
                                       f"{allowed} (legacy made {legacy.syncs}; {budget_note(rule, target)})")]
    if (judges_relative(rule) and on_cuda and legacy.syncs is not None and optimized.syncs is not None
            and optimized.syncs > legacy.syncs):
        found = [Mismatch("", "syncs", relative_detail(rule, target, legacy.syncs, optimized.syncs, budget,
                                                       config.sync_budget, over_budget=bool(found)))]
    return found


POLICY_RELEASE = "0.30.0"  # vLLM's CI copy check (#53491) arrived in 0.30.0 (fuzz/oracles/copypolicy.py)


def copy_policy_budget(target: Target) -> int | None:
    """How many rejected copies per call the optimized copy may make by design: the target's declared
    ``copy_policy_budget``, else 0 where the copy's release already ran vLLM's check (0.30.0+), else None (code
    written before the check existed: judged relative to legacy only)."""
    if target.copy_policy_budget is not None:
        return target.copy_policy_budget
    return 0 if version_key(target.versions[1]) >= version_key(POLICY_RELEASE) else None


def function_copy_policy(target: Target, spec: dict, legacy: SideResult, optimized: SideResult,
                         config: Any, rule: str | None = None) -> list[Mismatch]:
    """The copy-policy oracle on one example whose sides agree and both returned (CUDA only: on CPU no copy
    reaches a GPU): the optimized side's copies that vLLM's CI check rejects (non_blocking, CPU side pageable
    or not densely laid out; fuzz/oracles/copypolicy.py), judged as syncs are (``sync_rule``): by the
    copy's budget (``copy_policy_budget``; where none is declared or implied, relative to legacy), and
    relative to legacy where a side comes from a source. Under the wide contract the optimized side may make
    as many as legacy. Fewer than legacy is never a failure."""
    if optimized.policy is None or legacy.policy is None:
        return []
    made, before = len(optimized.policy), len(legacy.policy)
    rule = sync_rule(target, config) if rule is None else rule
    budget = copy_policy_budget(target) if judges_budget(rule) else None
    if budget is not None and config.contract == "wide":
        budget = max(budget, before)
    over_budget = budget is not None and made > budget
    over_legacy = (budget is None or judges_relative(rule)) and made > before
    if not (over_budget or over_legacy):
        return []
    why = (f"its copy allows {budget} per call, legacy made {before}" if over_budget
           else f"legacy made {before} on the same input")
    lines = list(dict.fromkeys(optimized.policy))  # one line per site: a loop's copies say it once
    shown = "; ".join(lines[:4]) + (f"; and {len(lines) - 4} more" if len(lines) > 4 else "")
    return [Mismatch("copy policy", "copies", (
        f"optimized made {made} non_blocking copies per call that vLLM's CI copy check rejects ({why}): {shown}"))]
