"""The target registry: a name registered twice is an error naming both sources."""

from __future__ import annotations

import sys

import pytest

from fuzz.errors import UsageError
from fuzz.targets import all_targets, plugin_modules

SHADOW = '''
import dataclasses
from fuzz.targets import catalog_targets
CATALOG = catalog_targets()
TARGETS = [dataclasses.replace(next(t for t in CATALOG if t.name == "fla-chunk-offsets"),
                               optimized="optimized.fla_index:prepare_chunk_indices")]
'''


@pytest.fixture
def shadowing_module(tmp_path, monkeypatch):
    (tmp_path / "shadows_a_target.py").write_text(SHADOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "shadows_a_target"
    sys.modules.pop("shadows_a_target", None)


def test_a_plugin_that_shadows_a_catalog_target_is_refused_naming_both(shadowing_module, monkeypatch):
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", shadowing_module)
    with pytest.raises(UsageError) as refused:
        all_targets()
    message = str(refused.value)
    assert "'fla-chunk-offsets' is registered twice" in message
    assert "the catalog (strategies/*/record.py)" in message and f"module {shadowing_module!r}" in message
    assert "\n" not in message


def test_a_module_named_twice_registers_once(monkeypatch):
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.slow_targets, tests.slow_targets")
    assert plugin_modules() == ["tests.slow_targets", "tests.slow_targets"]
    # Named by the environment twice and by a repro's config once more: not "registered twice".
    assert "stuck" in all_targets(["tests.slow_targets"])
