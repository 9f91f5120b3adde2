"""A nightly across hosts (issue #45 item 7): the multi-host workflow and the Kubernetes recipe run commands
the CLI accepts, and N shards plus the merges give what one host gives, example database included."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from fuzz.cli import build_parser, main
from fuzz.commands.corpusmerge import example_name
from fuzz.run.plan import parse_shard
from tests.unit.test_merge import _counts
from tests.unit.test_workflows import _fuzz_commands, expand

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
MULTIHOST = WORKFLOWS / "nightly-multihost.yml"
RECIPE = ROOT / "docs" / "recipes" / "k8s-indexed-job.yaml"
SEED = "20261206"


# --------------------------------------------------------------------------- the workflows' command lines

def workflow_args(command: str, values: dict[str, str]) -> list[str]:
    """The arguments after ``python3 -m fuzz`` as the shell passes them (``$(nproc)`` taken as 1)."""
    command = re.sub(r'"\$\(.*?\)"', "1", expand(command, values))
    command = re.split(r"\s(?:>>?|\||\|\||&&)\s", command)[0]
    return shlex.split(command)[3:]


def _matrix_shards(text: str) -> list[int]:
    (shards,) = re.findall(r"^\s+shard: \[([\d, ]+)\]$", text, re.M)
    return [int(s) for s in shards.split(",")]


def _runs(text: str) -> list[str]:
    return [c for c in _fuzz_commands(text) if c.startswith("python3 -m fuzz run ")]


def test_the_multihost_matrix_runs_shard_i_of_n_for_every_i_with_one_seed():
    """N is the matrix' length (strategy.job-total): each matrix entry I runs --shard I/N, all one plan."""
    text = MULTIHOST.read_text()
    shards = _matrix_shards(text)
    assert shards == list(range(1, len(shards) + 1)) and len(shards) >= 2
    (run,) = _runs(text)
    assert "--shard ${{ matrix.shard }}/${{ strategy.job-total }}" in run
    parsed = [build_parser().parse_args(workflow_args(run, {"matrix.shard": str(i),
                                                            "strategy.job-total": str(len(shards)),
                                                            "needs.plan.outputs.seed": SEED}))
              for i in shards]
    assert [parse_shard(a.shard) for a in parsed] == [(i, len(shards)) for i in shards]
    assert {a.seed for a in parsed} == {int(SEED)}  # one seed, picked once by the plan job
    assert {(a.corpus, a.report, a.pieces) for a in parsed} == {("fuzz-corpus", "shard.json", 8)}
    assert "fail-fast: false" in text


def test_the_multihost_merge_job_merges_the_reports_and_the_corpora_of_every_shard():
    text = MULTIHOST.read_text()
    merge_job = text[text.index("\n  merge:\n"):]
    assert "needs: [plan, shard]" in merge_job and "if: always()" in merge_job
    # Each shard uploads its report and its corpus, and the merge job downloads every shard's artifact.
    assert re.search(r"name: multihost-shard-\$\{\{ matrix.shard \}\}\n\s+path: \|\n(\s+\S+\n)*"
                     r"\s+fuzz-corpus/hypothesis/\n\s+fuzz-corpus/failures/\n", text)
    assert "pattern: multihost-shard-*\n          path: shards" in merge_job
    commands = {args[0]: build_parser().parse_args(args)
                for args in (workflow_args(c, {}) for c in _fuzz_commands(merge_job))}
    reports, corpora = commands["merge-reports"], commands["corpus-merge"]
    assert reports.inputs == ["shards/*/shard.json"] and reports.output == "nightly-multihost.json"
    assert (reports.markdown, reports.junit, reports.html) == ("nightly-multihost.md", "nightly-multihost.xml",
                                                              "nightly-multihost.html")
    assert 'cat nightly-multihost.md >> "$GITHUB_STEP_SUMMARY"' in merge_job
    assert corpora.out == "fuzz-corpus" and corpora.inputs == ["shards/*/fuzz-corpus"]
    # The merged corpus is what the next night's shards restore.
    assert "key: syncfuzz-multihost-corpus-${{ github.run_id }}" in merge_job
    assert "restore-keys: syncfuzz-multihost-corpus-" in text[:text.index("\n  merge:\n")]


# --------------------------------------------------------------------------- the Kubernetes recipe

def _scripts(text: str) -> list[str]:
    """The recipe's shell scripts that run the fuzzer: each YAML literal block (``- |``) holding one."""
    lines, scripts = text.splitlines(), []
    for number, line in enumerate(lines):
        if line.strip() != "- |":
            continue
        indent = len(line) - len(line.lstrip()) + 2
        body = []
        for following in lines[number + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) < indent:
                break
            body.append(following[indent:])
        script = "\n".join(body)
        if "python3 -m fuzz" in script:
            scripts.append(script)
    return scripts


def _recipe_number(text: str, key: str) -> int:
    (value,) = set(re.findall(rf"^\s+{key}: (\d+)$", text, re.M))
    return int(value)


FAKE_PYTHON = """#!/bin/sh
# Records its arguments (one record per call) and exits as the test asks for its subcommand.
for arg in "$@"; do printf '%s\\037' "$arg"; done >> "$RECORD"
printf '\\036' >> "$RECORD"
case "$3" in
  corpus-merge) exit "${FAKE_EXIT_CORPUS_MERGE:-0}" ;;
  merge-reports) exit "${FAKE_EXIT_MERGE_REPORTS:-0}" ;;
esac
exit 0
"""


def _run_script(script: str, tmp_path: Path, env: dict[str, str]) -> tuple[int, list[list[str]]]:
    """Run one of the recipe's scripts in bash, /data in ``tmp_path``, with a python3 that only records."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    record = tmp_path / "record"
    record.write_text("")
    data = tmp_path / "data"
    done = subprocess.run(["bash", "-c", script.replace("/data/", f"{data}/")], capture_output=True, text=True,
                          env={"PATH": f"{fake.parent}:{os.environ['PATH']}", "RECORD": str(record), **env},
                          timeout=60)
    calls = [call.split("\x1f")[:-1] for call in record.read_text().split("\x1e")[:-1]]
    assert all(call[:2] == ["-m", "fuzz"] for call in calls), calls
    return done.returncode, [call[2:] for call in calls]


def test_the_recipes_index_i_runs_shard_i_plus_1_of_n_and_the_merge_reads_every_shard(tmp_path):
    """Each pod's script run in bash as the Indexed Job runs it (JOB_COMPLETION_INDEX 0..N-1): every fuzz
    command parses, the shards are 1..N of one plan (one seed), each with its own corpus and report; the
    merge's globs then find all N of them."""
    text = RECIPE.read_text()
    fuzz_script, merge_script = _scripts(text)
    count = _recipe_number(text, "completions")
    assert count == _recipe_number(text, "parallelism") >= 2
    assert re.search(rf'- name: SHARDS\n\s+value: "{count}"', text)
    runs = []
    for index in range(count):
        code, calls = _run_script(fuzz_script, tmp_path, {"JOB_COMPLETION_INDEX": str(index), "NIGHT": SEED,
                                                          "SHARDS": str(count)})
        assert code == 0
        (args,) = [build_parser().parse_args(call) for call in calls]
        runs.append(args)
        assert Path(args.corpus).is_dir()  # made by the script before the run
        Path(args.report).write_text("{}")  # as the run would
    assert [parse_shard(a.shard) for a in runs] == [(i, count) for i in range(1, count + 1)]
    assert {a.seed for a in runs} == {int(SEED)}
    assert len({a.corpus for a in runs}) == len({a.report for a in runs}) == count

    code, calls = _run_script(merge_script, tmp_path, {"NIGHT": SEED})
    assert code == 0
    corpora, reports = (build_parser().parse_args(call) for call in calls)
    assert corpora.command == "corpus-merge" and sorted(corpora.inputs) == sorted(a.corpus for a in runs)
    assert corpora.out == str(tmp_path / "data" / "corpus")
    assert all(Path(a.corpus).parent.parent == Path(corpora.out).parent / "nights" / SEED for a in runs)
    assert reports.command == "merge-reports" and sorted(reports.inputs) == sorted(a.report for a in runs)
    assert (reports.markdown, reports.junit, reports.html) != (None, None, None)


@pytest.mark.parametrize("corpus_exit, reports_exit, job_exit", [(0, 1, 1), (2, 0, 2), (2, 1, 1), (0, 0, 0)])
def test_the_recipes_merge_job_exits_by_the_nights_verdict_and_still_saves_the_corpus(
        tmp_path, corpus_exit, reports_exit, job_exit):
    _, merge_script = _scripts(RECIPE.read_text())
    code, calls = _run_script(merge_script, tmp_path, {"NIGHT": SEED, "FAKE_EXIT_CORPUS_MERGE": str(corpus_exit),
                                                       "FAKE_EXIT_MERGE_REPORTS": str(reports_exit)})
    assert [call[0] for call in calls] == ["corpus-merge", "merge-reports"] and code == job_exit


def test_a_finding_fails_its_index_without_retry_and_infrastructure_failures_retry():
    text = RECIPE.read_text()
    fuzz_job = text[:text.index("\n---\n")]
    assert "completionMode: Indexed" in fuzz_job and "restartPolicy: Never" in fuzz_job
    assert _recipe_number(fuzz_job, "backoffLimitPerIndex") >= 1
    (fail_index,) = re.findall(r"- action: FailIndex\n\s+onExitCodes:\n\s+containerName: fuzz\n\s+operator: In\n"
                               r"\s+values: \[([\d, ]+)\]", fuzz_job)
    verdicts = {int(v) for v in fail_index.split(",")}
    assert {1, 2, 3, 4} <= verdicts  # a failure found, refused, incomplete, a fuzzer bug: a retry gives the same
    assert not verdicts & {75, 137, 143}  # set-up trouble, OOM kill, SIGTERM: retried
    assert re.search(r"- action: Ignore\n\s+onPodConditions:\n\s+- type: DisruptionTarget", fuzz_job)
    assert re.search(r"- name: fuzz\n", fuzz_job)  # the container the rule names


# --------------------------------------------------------------------------- N shards and the merges = one host

TARGETS = ["demo-invariant", "demo-reference", "fla-chunk-indices"]  # two planted oracle failures, one agreeing


def _run(tmp_path: Path, name: str, *extra: str, seed: str = "5", corpus: Path | None = None,
         exit_code: int | None = 1) -> Path:
    """One ``fuzz run`` of TARGETS; ``exit_code`` None: 0 or 1, as the failures it holds decide."""
    report = tmp_path / f"{name}.json"
    argv = ["run", *(a for t in TARGETS for a in ("--target", t)), "--device", "cpu", "--seed", seed,
            "--max-examples", "30", "--in-process", "--confirm", "0", "--quiet",
            "--corpus", str(corpus or tmp_path / f"corpus-{name}"), "--report", str(report), *extra]
    assert main(argv) in ((0, 1) if exit_code is None else (exit_code,))  # 1: a planted failure is found
    return report


def _database(corpus: Path) -> dict[str, bytes]:
    root = corpus / "hypothesis"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _totals(report: Path) -> dict:
    """What N shards merged must give as one host does: per target and device the examples, verdict counts,
    syncs and failures (test_merge._counts), and the shrink steps."""
    data = json.loads(report.read_text())
    shrinks = {(t["name"], device): tally["shrink_steps"] for t in data["targets"]
               for device, tally in t["by_device"].items()}
    return {key: (*counts, shrinks[key]) for key, counts in _counts(report).items()}


@pytest.fixture(scope="module")
def one_host(tmp_path_factory) -> Callable[[int], Path]:
    """The run on one host with ``--pieces P``: the folder of its report (``whole.json``) and its corpus
    (``corpus-whole``), run once per P."""
    import _pytest.monkeypatch

    runs: dict[int, Path] = {}

    def run(pieces: int) -> Path:
        if pieces not in runs:
            patch = _pytest.monkeypatch.MonkeyPatch()
            patch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.oracle_demo")
            try:
                folder = tmp_path_factory.mktemp(f"one-host-pieces-{pieces}")
                _run(folder, "whole", "--pieces", str(pieces))
                runs[pieces] = folder
            finally:
                patch.undo()
        return runs[pieces]

    return run


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("pieces", [1, 2, 3])
def test_n_shards_merged_give_one_hosts_totals_and_example_database(tmp_path, monkeypatch, capsys, one_host,
                                                                    count, pieces):
    """With --pieces 1 shard I runs targets I, I+N, ...; with more, each target's pieces are spread over the
    shards, and on one host a target's later pieces run after its earlier ones saved their failures: every
    item replays the database as the run started, so the two still draw the same examples."""
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.oracle_demo")
    whole = one_host(pieces)
    # A shard exits 1 where it holds a planted failure it found, 0 where it holds none.
    shards = [_run(tmp_path, f"s{i}", "--shard", f"{i}/{count}", "--pieces", str(pieces), exit_code=None)
              for i in range(1, count + 1)]
    corpora = [tmp_path / f"corpus-s{i}" for i in range(1, count + 1)]
    databases = [_database(c) for c in corpora]
    assert sum(bool(d) for d in databases) >= 2  # more than one shard saved examples: a real union

    merged = tmp_path / "merged.json"
    assert main(["merge-reports", str(merged), *map(str, reversed(shards))]) == 1
    assert _totals(merged) == _totals(whole / "whole.json")
    assert json.loads(merged.read_text())["run"]["scope"]["complete"] is True

    night2 = tmp_path / "night2-corpus"
    capsys.readouterr()
    assert main(["corpus-merge", str(night2), *map(str, corpora)]) == 0
    assert "corpus-merge: " in capsys.readouterr().out
    union = {name: content for database in databases for name, content in database.items()}
    assert _database(night2) == union == _database(whole / "corpus-whole")
    # The repro files one host saved; a failure two shards saved (two pieces of a target found it) is kept
    # under both (each file records its own run: corpus-merge's second name NAME.<hash>.json).
    repros = sorted(p.name for p in (night2 / "failures").iterdir())
    assert sorted({re.sub(r"\.[0-9a-f]{12}\.json$", ".json", name) for name in repros}) == \
        sorted(p.name for p in (whole / "corpus-whole" / "failures").iterdir())
    assert pieces > 1 or all(name.count(".") == 1 for name in repros)  # one piece each: one file per failure
    # Merged again: nothing added, nothing renamed.
    before = {p: p.read_bytes() for p in night2.rglob("*") if p.is_file()}
    assert main(["corpus-merge", str(night2), *map(str, corpora)]) == 0
    assert {p: p.read_bytes() for p in night2.rglob("*") if p.is_file()} == before


def test_the_next_night_from_the_merged_corpus_replays_what_every_shard_saved(tmp_path, monkeypatch):
    """Night 2 (another seed) from the merged corpus finds every failure at its first example, replayed from
    the database; from one shard's corpus alone, the other shard's failure must be found afresh."""
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.oracle_demo")
    for i in (1, 2):
        _run(tmp_path, f"s{i}", "--shard", f"{i}/2")
    assert main(["corpus-merge", str(tmp_path / "merged"), str(tmp_path / "corpus-s1"),
                 str(tmp_path / "corpus-s2")]) == 0

    def first_failures(corpus: Path, name: str) -> dict[str, int | None]:
        report = _run(tmp_path, name, seed="6", corpus=corpus)
        return {t["name"]: t["first_failure_at"] for t in json.loads(report.read_text())["targets"]}

    assert first_failures(tmp_path / "merged", "night2") == {"demo-invariant": 1, "demo-reference": 1,
                                                             "fla-chunk-indices": None}
    alone = first_failures(tmp_path / "corpus-s1", "night2-from-shard-1")
    assert sorted(name for name, first in alone.items() if first is not None and first > 1) == ["demo-reference"]


def test_from_one_saved_corpus_n_shards_of_pieces_draw_what_one_host_draws(tmp_path, monkeypatch):
    """Night 2 from a corpus holding demo-invariant's failure (saved by night 1's shard 1 of 2): one host,
    and 2 shards each on a copy of that corpus, with --pieces 2, count alike and save alike. Every piece of
    demo-invariant replays the saved failure first; demo-reference's is found afresh, and on one host its
    second piece does not replay what its first saved."""
    import shutil

    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.oracle_demo")
    _run(tmp_path, "night1", "--shard", "1/2")
    for name in ("whole", "s1", "s2"):
        shutil.copytree(tmp_path / "corpus-night1", tmp_path / f"corpus-{name}",
                        ignore=shutil.ignore_patterns("journal"))
    whole = _run(tmp_path, "whole", "--pieces", "2", seed="6")
    shards = [_run(tmp_path, f"s{i}", "--shard", f"{i}/2", "--pieces", "2", seed="6", exit_code=None)
              for i in (1, 2)]
    merged = tmp_path / "merged.json"
    assert main(["merge-reports", str(merged), *map(str, shards)]) == 1
    assert _totals(merged) == _totals(whole)
    firsts = {t["name"]: t["first_failure_at"] for t in json.loads(whole.read_text())["targets"]}
    assert firsts["demo-invariant"] == 1 and firsts["demo-reference"] > 1  # replayed / found afresh
    assert main(["corpus-merge", str(tmp_path / "night3"), str(tmp_path / "corpus-s1"),
                 str(tmp_path / "corpus-s2")]) == 0
    assert _database(tmp_path / "night3") == _database(tmp_path / "corpus-whole")


# --------------------------------------------------------------------------- what corpus-merge keeps

def test_a_repro_name_held_with_other_content_keeps_both(tmp_path, capsys):
    """One failure saved by two shards the same night: each file records its own run; both are kept."""
    name = "t-divergence-0123456789ab.json"
    for shard, created in (("a", "2026-12-06T02:50:00+00:00"), ("b", "2026-12-06T02:51:00+00:00")):
        (tmp_path / shard / "failures").mkdir(parents=True)
        (tmp_path / shard / "failures" / name).write_text(json.dumps({"created": created}))
    (tmp_path / "c" / "failures").mkdir(parents=True)
    (tmp_path / "c" / "failures" / name).write_bytes((tmp_path / "a" / "failures" / name).read_bytes())
    out = tmp_path / "out"
    assert main(["corpus-merge", str(out), *(str(tmp_path / s) for s in "abc")]) == 0
    captured = capsys.readouterr()
    kept = {p.name: p.read_bytes() for p in (out / "failures").iterdir()}
    second = [n for n in kept if n != name]
    assert len(kept) == 2 and kept[name] == (tmp_path / "a" / "failures" / name).read_bytes()  # first met: a
    assert kept[second[0]] == (tmp_path / "b" / "failures" / name).read_bytes()
    assert re.fullmatch(r"t-divergence-0123456789ab\.[0-9a-f]{12}\.json", second[0])
    assert f"kept both: failures/{name}" in captured.err and second[0] in captured.err
    assert "failures +2 (1 already there, 1 kept under a second name)" in captured.out


def test_a_copy_cut_short_is_left_out_and_the_merge_completes_it(tmp_path, capsys):
    """A merge killed mid-copy leaves a ``.tmp-*`` file beside whole ones (fuzz.reports.outputs.write_bytes): it is no
    example, so a corpus holding one still merges, without it."""
    value = b"\x01\x02"
    key = "0123456789abcdef"
    shard = tmp_path / "shard" / "hypothesis" / key
    shard.mkdir(parents=True)
    (shard / example_name(value)).write_bytes(value)
    (shard / ".tmp-k1ll3d").write_bytes(value[:1])
    out = tmp_path / "out"
    assert main(["corpus-merge", str(out), str(tmp_path / "shard")]) == 0
    assert sorted(p.name for p in (out / "hypothesis" / key).iterdir()) == [example_name(value)]
    assert "example database +1 (0 already there)" in capsys.readouterr().out
