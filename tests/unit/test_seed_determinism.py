"""Same seed, same examples, whatever else the process has imported (fuzz.engine.runner.no_local_constants).

Hypothesis draws some values from the literals of every non-library module in ``sys.modules``; a run
in a worker process imports other modules than one in-process, so without the pin the same seed drew
other examples in each (fla-chunk-indices, seed 0: 7 and 19 inputs where both sides raise)."""

from __future__ import annotations

import importlib
import sys

import pytest

from fuzz.config import Hooks, RunConfig
from fuzz.engine.runner import fuzz_target, no_local_constants
from fuzz.targets import lookup


def _drawn(target_name: str, seed: int, examples: int) -> list[dict]:
    (target,) = lookup([target_name])
    specs: list[dict] = []
    fuzz_target(target, RunConfig(devices=("cpu",), seed=seed, max_examples=examples),
                hooks=Hooks(before_example=lambda spec, outcome: specs.append(spec)))
    return specs


@pytest.fixture
def module_of_constants(tmp_path, monkeypatch):
    """Imports, mid-session, a local module whose literals are every integer a cu_seqlens draw can take:
    the kind of module a pytest plugin, a --target folder on the PYTHONPATH or the CLI's report code is."""
    (tmp_path / "syncfuzz_constants_galore.py").write_text(
        "VALUES = (" + ", ".join(str(n) for n in range(3, 600, 7)) + ")\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def load() -> None:
        importlib.import_module("syncfuzz_constants_galore")

    yield load
    sys.modules.pop("syncfuzz_constants_galore", None)


def test_a_module_imported_between_two_runs_does_not_change_the_examples(module_of_constants):
    before = _drawn("fla-chunk-indices", seed=3, examples=120)
    module_of_constants()
    after = _drawn("fla-chunk-indices", seed=3, examples=120)
    assert len(before) == len(after) == 120
    assert before == after


def test_the_pin_holds_only_inside_the_block_and_is_undone():
    from hypothesis.internal.conjecture import providers

    outside = providers._get_local_constants
    with no_local_constants():
        assert len(providers._get_local_constants()) == 0
    assert providers._get_local_constants is outside
