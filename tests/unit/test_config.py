"""RunConfig crosses every process boundary whole.

The config below sets *every* field to a value other than its default, built
from ``dataclasses.fields`` -- so a field added later is in it automatically,
and a boundary that drops or mangles it fails here. Boundaries: the command
line, the isolated worker's job file, the xdist run file, a repro file (what
``replay`` and ``--confirm``'s fresh processes read) and the JSON report.
"""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from fuzz.config import ConfigError, RunConfig
from fuzz.errors import HarnessError
from fuzz.releases.packs import SHIPPED_PACKS
from fuzz.targets import lookup

VALID = {"contract": "wide", "devices": ("cpu", "cuda"), "shard": "2/3", "profile": "nightly",
         "targets": ("fla-chunk-offsets",), "target_modules": ("tests.planted",),
         # Sides from the source packs shipped in sources/ (fuzz/releases/sides.py).
         "legacy": "vllm==0.27.1", "optimized": "vllm==0.28.0", "sources": (str(SHIPPED_PACKS),),
         "sync_budget": "ignore", "gpu_share": "off"}


def _other_than(field: dataclasses.Field, hint: object) -> object:
    if field.name in VALID:
        return VALID[field.name]
    default = field.default
    options = typing.get_args(hint) or (hint,)
    if bool in options:
        return not default
    if int in options:
        return (default or 0) + 7
    if float in options:
        return (default or 0.0) + 12.5
    if str in options:
        return f"value-of-{field.name}"
    raise AssertionError(f"tests/unit/test_config.py cannot make a value for RunConfig.{field.name} ({hint}): add one")


def everything_set() -> RunConfig:
    hints = typing.get_type_hints(RunConfig)
    config = RunConfig(**{f.name: _other_than(f, hints[f.name]) for f in dataclasses.fields(RunConfig)})
    default = RunConfig()
    assert all(getattr(config, f.name) != getattr(default, f.name) for f in dataclasses.fields(RunConfig))
    return config


def test_json_round_trip_keeps_every_field():
    config = everything_set()
    assert RunConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


def test_the_isolated_worker_reads_the_config_it_was_sent(tmp_path):
    from fuzz.run.isolation import job_args, job_config

    config = everything_set()
    args = job_args("fla-chunk-offsets", config, first_chunk=0, ends_at=None, journal=tmp_path / "j",
                    result=tmp_path / "r")
    target, received = job_config(json.loads(json.dumps(args)))
    assert received == config and target.name == "fla-chunk-offsets"


def test_the_parent_refuses_a_result_run_with_other_settings(tmp_path):
    from fuzz.records.model import TargetEntry
    from fuzz.run.isolation import _read_result

    config = everything_set()
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"config": config.replace(stress=False).to_json(),
                                  "entry": TargetEntry(name="fla-chunk-offsets").to_json()}))
    with pytest.raises(HarnessError, match="stress"):
        _read_result(result, config)


def test_each_xdist_worker_reads_the_config_of_the_run(tmp_path):
    from fuzz.run.plan import plan
    from fuzz.run.workers import run_file_content
    from fuzz.run.xdist_items import item_config

    config = everything_set()
    items = plan(lookup(["fla-chunk-offsets"]), seed=config.seed, pieces=2, max_examples=config.max_examples)
    run = json.loads(json.dumps(run_file_content(items, config, tmp_path)))
    assert item_config(run) == config


def test_a_repro_file_and_so_replay_and_confirm_rebuild_the_run(tmp_path):
    from fuzz.engine.execute import run_example
    from fuzz.engine.repro import load_repro, repro_config, repro_payload, save_repro

    config = everything_set()
    (target,) = lookup(["fla-chunk-offsets"])
    result = run_example(target, {"device": "cpu", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2})
    path = save_repro(tmp_path, repro_payload(target, result, config))
    assert repro_config(load_repro(path), str(path)) == config


def test_the_report_records_the_whole_config():
    from fuzz.records.model import Report

    config = everything_set()
    data = json.loads(json.dumps(Report((), run=config.to_json()).to_json()))
    assert RunConfig.from_json(data["run"]) == config


def test_the_command_line_reaches_every_field_it_sets(monkeypatch):
    from fuzz.cli import _apply_profile, build_parser, run_config

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.planted")
    args = build_parser().parse_args([
        "run", "--target", "fla-chunk-offsets", "--budget", "99", "--seed", "5", "--contract", "wide",
        "--corpus", "/c", "--stress", "--upstream", "--confirm", "2", "--in-process", "--example-timeout", "7",
        "--max-restarts", "1", "--workers", "4", "--pieces", "3", "--shard", "2/3", "--profile", "nightly",
        "--legacy", "vllm==0.27.1", "--optimized", "vllm==0.28.0", "--sources", str(SHIPPED_PACKS),
        "--sync-budget", "ignore", "--require-changes-covered", "--gpu-share", "off"])
    _apply_profile(args)
    config = run_config(args, ("cpu", "cuda"), 5)
    assert config == RunConfig(targets=("fla-chunk-offsets",), target_modules=("tests.planted",),
                               devices=("cpu", "cuda"), contract="wide", seed=5, max_examples=None, budget=99.0,
                               corpus="/c", stress=True, upstream=True, confirm=2, isolated=False,
                               example_timeout=7.0, max_restarts=1, workers=4, pieces=3, shard="2/3",
                               profile="nightly", legacy="vllm==0.27.1", optimized="vllm==0.28.0",
                               sources=(str(SHIPPED_PACKS),), sync_budget="ignore", coverage=True,
                               require_changes_covered=True, gpu_share="off")


BAD = {
    "unknown-key": ({"seed": 1, "frobnicate": True}, "unknown settings ['frobnicate']"),
    "wrong-type": ({"seed": "1"}, "seed"),
    "bool-as-int": ({"seed": True}, "seed"),
    "null-where-not-allowed": ({"stress": None}, "must not be null"),
    "bad-contract": ({"contract": "loose"}, "contract 'loose'"),
    "bad-device": ({"devices": ["tpu"]}, "cpu and/or cuda"),
    "bad-sync-budget": ({"sync_budget": "sometimes"}, "sync_budget 'sometimes' is not one of auto, apply, ignore"),
    "not-an-object": ([1, 2], "must be a JSON object"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_config_that_is_not_one_is_refused(name):
    data, expected = BAD[name]
    with pytest.raises(ConfigError) as raised:
        RunConfig.from_json(data)
    assert expected in str(raised.value)


def test_a_relative_corpus_reaches_the_workers_as_an_absolute_path(tmp_path, monkeypatch):
    """xdist workers run in their journal folder: a relative corpus put their repro files there. The run's
    config keeps it as given (the outputs show repro paths the way the user named the corpus)."""
    from fuzz.cli import _apply_profile, build_parser, run_config
    from fuzz.run.session import _for_workers

    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["run", "--corpus", "corpus"])
    _apply_profile(args)
    config = run_config(args, ("cpu",), 0)
    assert config.corpus == "corpus" and _for_workers(config).corpus == str(tmp_path / "corpus")
