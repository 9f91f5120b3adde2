"""A fuzz run from Python, without the command line (fuzz.run.session.run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fuzz.config import RunConfig
from fuzz.records.model import EXIT_FAILURE, EXIT_OK
from fuzz.run.session import run

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_returns_its_report_and_prints_nothing(tmp_path, capsys):
    config = RunConfig(targets=("fla-chunk-offsets",), devices=("cpu",), seed=3, max_examples=20,
                       corpus=str(tmp_path / "corpus"), isolated=False, confirm=0)
    result = run(config, outputs={"report": tmp_path / "r.json"})
    (entry,) = result.report.targets
    assert (entry.name, entry.verdict, entry.examples) == ("fla-chunk-offsets", "agree", 20)
    assert result.exit_code == EXIT_OK and capsys.readouterr().out == ""
    assert json.loads((tmp_path / "r.json").read_text())["targets"][0]["examples"] == 20


def test_a_planted_divergence_is_a_failure_with_its_input_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.crashers")
    config = RunConfig(targets=("flaky-alternating",), target_modules=("tests.crashers",), devices=("cpu",),
                       seed=0, max_examples=50, corpus=str(tmp_path / "corpus"), isolated=False, confirm=0)
    monkeypatch.setenv("SYNCFUZZ_TEST_TOGGLE", str(tmp_path / "toggle"))
    result = run(config)
    (entry,) = result.report.targets
    assert result.exit_code == EXIT_FAILURE and entry.failures
    assert Path(entry.failures[0].repro).exists()


def test_without_a_corpus_nothing_is_kept_and_the_run_still_runs(tmp_path):
    config = RunConfig(targets=("fla-chunk-indices",), devices=("cpu",), seed=1, max_examples=5, corpus=None,
                       isolated=True, confirm=0)
    result = run(config)
    assert result.report.targets[0].verdict == "agree" and result.exit_code == EXIT_OK


def test_the_session_does_not_need_the_command_line():
    code = ("import sys; import fuzz.run.session; "
            "assert 'fuzz.cli' not in sys.modules, sorted(m for m in sys.modules if m.startswith('fuzz'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]


def test_the_cli_and_the_session_give_the_same_report(tmp_path):
    """``fuzz run`` is the session plus its argument handling: the same seed, the same examples and verdicts."""
    from fuzz.cli import main

    assert main(["run", "--device", "cpu", "--target", "glm4v-embeddings", "--seed", "9", "--max-examples", "30",
                 "--in-process", "--confirm", "0", "--quiet", "--corpus", str(tmp_path / "a"),
                 "--report", str(tmp_path / "cli.json")]) == 0
    cli = json.loads((tmp_path / "cli.json").read_text())
    config = RunConfig(targets=("glm4v-embeddings",), devices=("cpu",), seed=9, max_examples=30,
                       corpus=str(tmp_path / "b"), isolated=False, confirm=0)
    api = run(config).report.to_json()
    assert len(cli["targets"]) == len(api["targets"]) == 1
    for a, b in zip(cli["targets"], api["targets"]):
        assert (a["name"], a["verdict"], a["by_device"], a["failures"]) == (
            b["name"], b["verdict"], b["by_device"], b["failures"])
        assert a["examples"] == 30


def _outputs_of_a_planted_failure(tmp_path: Path, corpus: str, monkeypatch) -> tuple[list[str], str]:
    """A run (from ``tmp_path``) that finds a planted bug, writing every format: the console lines and the
    text of every output. Isolated: its worker runs in the journal folder, and must save under the corpus."""
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.planted")
    monkeypatch.chdir(tmp_path)
    config = RunConfig(targets=("planted-indices-dropped-dtype",), target_modules=("tests.planted",),
                       devices=("cpu",), seed=0, max_examples=50, corpus=corpus, isolated=True, confirm=0)
    names = {"report": "r.json", "markdown": "r.md", "junit": "r.xml", "html": "r.html"}
    said: list[str] = []
    result = run(config, outputs={key: Path(name) for key, name in names.items()}, say=said.append)
    assert result.exit_code == EXIT_FAILURE
    (failure,) = result.report.targets[0].failures
    texts = [(tmp_path / name).read_text() for name in names.values()]
    return said + texts, failure.repro


def test_repro_paths_are_relative_where_the_corpus_was_given_relative(tmp_path, monkeypatch):
    outputs, repro = _outputs_of_a_planted_failure(tmp_path, "corpus", monkeypatch)
    assert repro.startswith("corpus/failures/") and (tmp_path / repro).is_file()
    assert all(str(tmp_path) not in text for text in outputs)  # no output points into this machine's folders
    assert all(repro in text for text in outputs[-4:])  # ... and each format names the repro
    assert json.loads((tmp_path / "r.json").read_text())["run"]["corpus"] == "corpus"


def test_repro_paths_are_absolute_where_the_corpus_was_given_absolute(tmp_path, monkeypatch):
    _, repro = _outputs_of_a_planted_failure(tmp_path, str(tmp_path / "corpus"), monkeypatch)
    assert Path(repro).is_absolute() and Path(repro).is_file()


def test_each_finished_item_is_printed_once(tmp_path, capsys):
    """The terminal: one line per finished item as it finishes, then the table; no second line per target."""
    targets = ("fla-chunk-offsets", "glm4v-embeddings")
    config = RunConfig(targets=targets, devices=("cpu",), seed=1, max_examples=5, corpus=str(tmp_path / "corpus"),
                       isolated=False, confirm=0)
    said: list[str] = []
    assert run(config, quiet=False, say=said.append).exit_code == EXIT_OK
    printed = capsys.readouterr().err.splitlines() + "\n".join(said).splitlines()
    for name in targets:
        lines = [line for line in printed if line.startswith(f"[fuzz] {name}")]
        assert len(lines) == 1 and "5 examples (cpu 5)" in lines[0], lines


def test_examples_and_shrink_steps_are_counted_apart(tmp_path, monkeypatch):
    """--max-examples 100 is 100 examples: the runs that shrink the failure come on top, counted apart (in
    the table, the JSON and the charts), never in the examples nor their verdicts."""
    from fuzz.records.model import Report

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.planted")
    config = RunConfig(targets=("planted-glm4-swapped-hw",), target_modules=("tests.planted",), devices=("cpu",),
                       seed=0, max_examples=100, corpus=str(tmp_path / "corpus"), isolated=False, confirm=0)
    result = run(config, outputs={"report": tmp_path / "r.json"})
    (entry,) = result.report.targets
    tally = entry.by_device["cpu"]
    assert result.exit_code == EXIT_FAILURE and entry.failures
    assert entry.shrink_steps > 0 and tally.shrink_steps == entry.shrink_steps
    assert entry.examples >= 100 and sum(tally.verdicts.values()) == entry.examples
    data = json.loads((tmp_path / "r.json").read_text())["targets"][0]
    assert (data["examples"], data["shrink_steps"]) == (entry.examples, entry.shrink_steps)
    assert data["by_device"]["cpu"]["shrink_steps"] == entry.shrink_steps
    assert Report.from_json(json.loads((tmp_path / "r.json").read_text()), "r.json").targets[0].shrink_steps \
        == entry.shrink_steps
