"""One preparation of a target per process (fuzz/engine/prepare.py), one check of a run's settings
(fuzz.run.session.check_run) and one registry of targets per process (fuzz.targets.all_targets)."""

from __future__ import annotations

import pytest

import fuzz.engine.prepare as prepare_module
import fuzz.targets
from fuzz.config import RunConfig
from fuzz.engine.prepare import prepare
from fuzz.errors import UsageError
from fuzz.targets import lookup


def test_a_target_is_prepared_once_per_process_for_the_settings_that_decide_it(monkeypatch):
    monkeypatch.setattr(prepare_module, "_PREPARED", {})
    (target,) = lookup(["fla-chunk-offsets"])
    first = prepare(target, RunConfig(seed=1))
    assert prepare(target, RunConfig(seed=2, max_examples=7)) is first  # seed and examples decide nothing of it
    assert prepare(target, RunConfig(upstream=True)) is not first
    assert first.bound == target and first.target.upstream_impl is None and first.upstream is None
    assert first.sync_rule == "budget" and first.sync_descent == {}


def test_asking_whether_a_target_builds_decides_no_third_side(monkeypatch):
    """The session and a replay's parent ask only for ``bound``: no vllm import, no CUDA client."""
    (target,) = lookup(["fla-chunk-indices"])
    asked = []
    monkeypatch.setattr(prepare_module, "_PREPARED", {})
    monkeypatch.setattr(prepare_module, "with_upstream", lambda t, c: asked.append(t.name) or (t, "compared"))
    prepared = prepare(target, RunConfig(upstream=True, sync_budget="ignore"))
    assert prepared.bound == target and asked == []
    assert prepared.upstream == "compared" and prepared.target is target and asked == ["fla-chunk-indices"]
    prepared.target  # noqa: B018 -- decided once
    assert asked == ["fla-chunk-indices"]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"max_restarts": -1}, "--max-restarts -1 must be 0 or more"),
    ({"confirm": -2}, "--confirm -2 must be 0 or more"),
    ({"corpus": " "}, "--corpus is empty"),
    ({"example_timeout": 0.001}, "--example-timeout 0.001 s is shorter than one example can take"),
    ({"require_changes_covered": True, "coverage": False}, "drop --no-coverage"),
    ({"require_changes_covered": True, "coverage": True}, "compares two sources' definitions"),
    ({"targets": ("fla-chunk-ofsets",)}, "fla-chunk-offsets"),
    ({"shard": "3/2"}, "--shard '3/2' must look like i/n"),
])
def test_a_run_is_checked_in_one_place_the_cli_and_the_api_alike(changes, expected):
    from fuzz.run.session import check_run

    with pytest.raises(UsageError) as refused:
        check_run(RunConfig(**changes))
    assert expected in str(refused.value) and "\n" not in str(refused.value)


def test_check_run_looks_the_targets_up_once(monkeypatch):
    from fuzz.run.session import check_run

    built = []
    inner = fuzz.targets._registry
    monkeypatch.setattr(fuzz.targets, "_REGISTRIES", {})
    monkeypatch.setattr(fuzz.targets, "_registry", lambda modules: built.append(modules) or inner(modules))
    checked = check_run(RunConfig(targets=("fla-chunk-offsets",), shard="1/1"))
    assert [t.name for t in checked.targets] == ["fla-chunk-offsets"] and checked.shard == (1, 1)
    assert "fla-chunk-indices" in checked.registry
    lookup(["fla-chunk-indices"])  # a later lookup in this process reads the same registry
    assert len(built) == 1
