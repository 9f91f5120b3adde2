"""The Python API (fuzz/commands/__init__.py): every command the CLI parses for is a function there."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fuzz import commands
from fuzz.cli import build_parser
from fuzz.config import DEFAULT_MAX_EXAMPLES, apply_profile
from fuzz.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
# Commands whose logic still takes the parsed arguments (issue #42, item 3: not yet functions of the API).
NOT_YET = {"provenance", "sources", "new-target"}
API_NAME = {"list": "list_targets", "merge-reports": "merge_reports", "corpus-merge": "corpus_merge"}


def test_every_command_of_the_cli_is_a_function_of_the_api():
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    missing = [name for name in subcommands
               if name not in NOT_YET and not callable(getattr(commands, API_NAME.get(name, name), None))]
    assert not missing, missing
    assert NOT_YET <= set(subcommands)


def test_importing_the_api_imports_no_torch():
    code = "import sys, fuzz.commands; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_profiles_fill_in_what_the_run_left_open():
    premerge = commands.profile_config("premerge", devices=("cpu",))
    assert (premerge.seed, premerge.max_examples, premerge.budget, premerge.coverage) == (0, 100, None, False)
    assert premerge.profile == "premerge" and premerge.devices == ("cpu",)
    # premerge measures coverage when a side comes from a source: its question includes what went unfuzzed
    assert commands.profile_config("premerge", legacy="vllm==0.28.0").coverage is True
    nightly = apply_profile("nightly", today="20261206")
    assert (nightly.seed, nightly.max_examples, nightly.budget, nightly.coverage) == (20261206, None, 3600.0, True)
    today = int(datetime.now(timezone.utc).strftime("%Y%m%d"))
    assert apply_profile("nightly").seed == today
    assert apply_profile(None) == apply_profile(None, max_examples=DEFAULT_MAX_EXAMPLES)
    assert apply_profile("premerge", seed=7, max_examples=3).seed == 7  # what the run gives wins


def test_a_bad_profile_or_argument_is_one_usage_error():
    with pytest.raises(UsageError, match="profile 'weekly' is not one of premerge, nightly"):
        apply_profile("weekly")
    with pytest.raises(UsageError, match="replay FILE is empty"):
        commands.replay(" ")


def test_list_targets_is_the_catalog_in_order():
    names = [target.name for target in commands.list_targets()]
    assert names and names[0] == "glm4v-embeddings" and len(names) == len(set(names))
    assert [t.name for t in commands.list_targets(["async-tensor-h2d"])] == ["async-tensor-h2d"]


def test_corpus_merge_through_the_api(tmp_path, capsys):
    shard = tmp_path / "shard" / "failures"
    shard.mkdir(parents=True)
    (shard / "t-divergence-0.json").write_text("{}")
    assert commands.corpus_merge(str(tmp_path / "merged"), [str(tmp_path / "shard")]) == 0
    assert (tmp_path / "merged" / "failures" / "t-divergence-0.json").read_text() == "{}"
    assert "failures +1" in capsys.readouterr().out
