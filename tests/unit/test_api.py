"""The Python API (fuzz/commands/__init__.py): every command the CLI parses for is a function there."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fuzz import commands
from fuzz.cli import build_parser
from fuzz.config import DEFAULT_MAX_EXAMPLES, apply_profile
from fuzz.errors import UsageError
from tests.unit.test_scaffold import NEW, OLD, PATH, checkout

ROOT = Path(__file__).resolve().parents[2]
API_NAME = {"list": "list_targets", "merge-reports": "merge_reports", "corpus-merge": "corpus_merge",
            "new-target": "new_target"}


def test_every_command_of_the_cli_is_a_function_of_the_api():
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    missing = [name for name in subcommands if not callable(getattr(commands, API_NAME.get(name, name), None))]
    assert not missing, missing


def test_only_the_cli_imports_argparse():
    """The commands take plain values; flags are parsed in fuzz/cli.py alone (also a lint-imports contract)."""
    importers = []
    for path in sorted((ROOT / "fuzz").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "argparse" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name.split(".")[0] == "argparse" for name in names):
                importers.append(str(path.relative_to(ROOT)))
    assert sorted(set(importers)) == ["fuzz/cli.py"]


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


def test_provenance_through_the_api_verifies_the_shipped_copies(tmp_path, capsys):
    """The copies against the releases' source packs in sources/ (offline: nothing downloaded)."""
    assert commands.provenance(targets=["fla-chunk-offsets"], cache=str(tmp_path / "cache")) == 0
    out = capsys.readouterr().out
    assert "fla-chunk-offsets" in out and "copies vs vllm 0.28.0 (source pack" in out
    assert not (tmp_path / "cache").exists()
    with pytest.raises(UsageError, match="--legacy-diffs only applies to drift"):
        commands.provenance(legacy_diffs=True)


def test_sources_through_the_api_fetch_then_list_a_pack(tmp_path, capsys):
    tree = tmp_path / "vllm-tree"  # a vllm tree holding one file the catalog needs (the pack's the shipped one's)
    shipped = ROOT / "sources/vllm-0.30.0"
    kept = next(path for path in json.loads((shipped / "MANIFEST.json").read_text())["files"])
    (tree / kept).parent.mkdir(parents=True)
    shutil.copy(shipped / kept, tree / kept)
    (tree / "vllm/_version.py").write_text('__version__ = "99.0.0"\n')
    assert commands.sources("fetch", specs=[str(tree)], into=str(tmp_path / "packs")) == 0
    assert kept in json.loads((tmp_path / "packs/vllm-99.0.0/MANIFEST.json").read_text())["files"]
    assert "[sources] " in capsys.readouterr().out
    assert commands.sources("list", sources=[str(tmp_path / "packs")]) == 0
    listed = capsys.readouterr().out
    assert "vllm 0.28.0" in listed and "vllm 99.0.0" in listed and "files match the manifest" in listed
    assert commands.sources("list", sources=[str(tmp_path / "packs")], newest=True) == 0
    assert capsys.readouterr().out == "vllm==99.0.0\n"
    for action, options, message in [("remove", {}, "not one of fetch, list"),
                                     ("fetch", {"specs": [str(tree)]}, "needs specs .* and into"),
                                     ("list", {"into": str(tmp_path)}, "sources list takes no")]:
        with pytest.raises(UsageError, match=message):
            commands.sources(action, **options)


def test_new_target_through_the_api_writes_the_files(tmp_path, capsys):
    repo = checkout(tmp_path / "repo")
    for name, text in (("old", OLD), ("new", NEW)):
        (tmp_path / name / Path(PATH).parent).mkdir(parents=True)
        (tmp_path / name / PATH).write_text(text)
    assert commands.new_target("toy-buffer-copy", upstream=[f"{PATH}::Buffer.copy"], also=[f"{PATH}::Buffer.__init__"],
                               legacy_version="0.29.0", optimized_version="0.30.0", module="toy", root=str(repo),
                               legacy_source=str(tmp_path / "old"), optimized_source=str(tmp_path / "new")) == 0
    assert "def copy(" in (repo / "optimized/toy.py").read_text()
    assert (repo / "strategies/toy/record.py").is_file() and (repo / "tests/unit/test_oracles_toy.py").is_file()
    assert "wrote legacy/toy.py" in capsys.readouterr().out
    with pytest.raises(UsageError, match="already exists; pick another name"):  # never over a file
        commands.new_target("toy-buffer-copy", upstream=[f"{PATH}::Buffer.copy"], legacy_version="0.29.0",
                            optimized_version="0.30.0", root=str(repo))
