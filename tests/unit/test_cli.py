"""The command line: the stable interfaces of docs/design.md and every error path."""

from __future__ import annotations

import json
import math

import pytest

from fuzz.cli import main
from fuzz.targets import lookup
from tests.support import cli

LIST_FIELDS = {"name": str, "upstream": list, "legacy": str, "optimized": str, "devices": list,
               "expected_optimized_syncs": int}


def test_list_json_is_the_design_interface(capsys):
    assert main(["list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in entries] == [t.name for t in lookup([])]
    for entry in entries:
        for field, kind in LIST_FIELDS.items():
            assert isinstance(entry[field], kind), (entry["name"], field)
        assert all(u.startswith("vllm/") and ".py::" in u for u in entry["upstream"])
        assert entry["legacy"].startswith("legacy.") and ":" in entry["legacy"]
        assert entry["optimized"].startswith("optimized.") and ":" in entry["optimized"]
        assert "cpu" in entry["devices"] and "cuda" in entry["devices"]


def test_list_json_covers_the_first_targets(capsys):
    main(["list", "--json"])
    names = {e["name"] for e in json.loads(capsys.readouterr().out)}
    assert {"fla-chunk-indices", "fla-chunk-offsets", "glm4v-embeddings"} <= names


def test_list_table_names_every_target(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for target in lookup([]):
        assert target.name in out


BAD_RUNS = {
    "unknown-target": (["--target", "glm4-embeddings"], "closest matches: glm4v-embeddings"),
    "negative-budget": (["--budget", "-3"], "--budget"),
    "zero-budget": (["--budget", "0"], "positive"),
    "nan-budget": (["--budget", "nan"], "finite"),
    "text-budget": (["--budget", "soon"], "number of seconds"),
    "budget-and-examples": (["--budget", "3", "--max-examples", "4"], "not allowed with"),
    "zero-examples": (["--max-examples", "0"], "at least 1"),
    # targets x 2 pieces x (worker start-up + 0.5 s), with 10% of the budget kept for --confirm's
    # replays (fuzz.run.limits.min_budget; the count comes from the catalog: a new target must not turn this red).
    "impossible-budget": (["--budget", "1", "--pieces", "2"],
                          f"use --budget {math.ceil(3.0 * len(lookup([])) * 2 / 0.9)} or more"),
    "bad-seed": (["--seed", "x"], "whole number"),
    "negative-seed": (["--seed", "-1"], "between 0"),
    "bad-device": (["--device", "tpu"], "invalid choice"),
    "bad-contract": (["--contract", "loose"], "invalid choice"),
    "unknown-flag": (["--frobnicate"], "unrecognized"),
}


@pytest.mark.parametrize("name", sorted(BAD_RUNS))
def test_bad_run_arguments_are_one_line_and_exit_2(name, capsys, tmp_path):
    args, expected = BAD_RUNS[name]
    assert main(["run", "--corpus", str(tmp_path / "c"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("fuzz: error: ") and expected in err


def test_corpus_that_is_a_file_is_refused_and_kept(capsys, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.write_text("precious")
    assert main(["run", "--max-examples", "1", "--corpus", str(corpus)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert corpus.read_text() == "precious"


def test_report_in_missing_folder_is_refused(capsys, tmp_path):
    assert main(["run", "--max-examples", "1", "--corpus", str(tmp_path), "--report",
                 str(tmp_path / "nope" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cuda_device_without_cuda_is_a_usage_error(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    assert main(["run", "--device", "cuda", "--corpus", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_no_subcommand_is_a_usage_error(capsys):
    assert main([]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_run_writes_report_and_exits_0_on_agreement(tmp_path, capsys):
    report = tmp_path / "report.json"
    code = main(["run", "--device", "cpu", "--seed", "3", "--max-examples", "20", "--target", "fla-chunk-offsets",
                 "--corpus", str(tmp_path / "c"), "--report", str(report), "--quiet"])
    assert code == 0
    data = json.loads(report.read_text())
    assert data["format"] == "syncfuzz-report/2" and data["exit_code"] == 0
    assert data["run"]["seed"] == 3
    (entry,) = data["targets"]
    assert entry["name"] == "fla-chunk-offsets" and entry["verdict"] == "agree"
    assert entry["examples"] == entry["by_device"]["cpu"]["examples"] == 20
    out = capsys.readouterr().out
    assert "fla-chunk-offsets" in out and "agree" in out


def test_console_entry_point_runs_in_a_fresh_process():
    result = cli("list", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)


def test_a_fuzzer_bug_is_exit_4_with_its_traceback_never_a_failing_verdict(capsys, monkeypatch):
    """An unforeseen exception is a fuzzer bug: exit 4 with the traceback and one line saying so, not Python's
    exit 1 (which reads as "a failure was found"), nor a usage error's 2."""
    import fuzz.cli
    from fuzz.errors import HarnessError

    def broken(args):
        raise ZeroDivisionError("a bug in the engine")

    monkeypatch.setattr(fuzz.cli, "cmd_list", broken)
    assert main(["list"]) == 4
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug in the engine" in err
    assert err.strip().splitlines()[-1] == "fuzz: internal error (a fuzzer bug, please report it with the " \
                                           "traceback above)"

    def harness(args):
        raise HarnessError("selftest: no function starts at line 3")

    monkeypatch.setattr(fuzz.cli, "cmd_list", harness)
    assert main(["list"]) == 4
    assert capsys.readouterr().err.strip() == "fuzz: internal error (a fuzzer bug, please report it): selftest: no " \
                                              "function starts at line 3"
