"""The corpus between runs: the example database keyed by what ran, read as the run started, old journal
folders pruned."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from hypothesis.database import DirectoryBasedExampleDatabase

from fuzz.config import RunConfig
from fuzz.engine.journals import keep_start_database, prune_journals, start_database
from fuzz.engine.runner import _database, _database_key, fuzz_target
from fuzz.targets import lookup
from tests.e2e.test_sides import FLA, tree

# Offsets one too high for a sequence longer than 50 only: found after some examples, not at the first.
LATE_BUG = {FLA: ("triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]",
                  "triton.cdiv(prepare_lens(cu_seqlens), chunk_size) + (prepare_lens(cu_seqlens) > 50)]")}


def saved(corpus, target, config) -> set[bytes]:
    return set(DirectoryBasedExampleDatabase(str(corpus / "hypothesis")).fetch(_database_key(target, config)))


def test_copy_keys_are_unchanged_and_other_sides_have_their_own():
    (target,) = lookup(["fla-chunk-offsets"])
    copies = RunConfig()
    # The key every corpus saved before sides existed: existing corpora stay warm.
    import hashlib

    assert _database_key(target, copies) == hashlib.sha256(b"syncfuzz:fla-chunk-offsets:caller:cases").digest()
    keys = {_database_key(target, copies.replace(**sides)) for sides in (
        {}, {"optimized": "/src/vllm"}, {"optimized": "vllm==0.30.0"}, {"legacy": "vllm==0.30.0"},
        {"legacy": "/src/vllm"}, {"contract": "wide"})}
    assert len(keys) == 6


def test_a_branch_failure_survives_a_run_of_the_copies_and_is_replayed_first(tmp_path):
    branch = tree(tmp_path, LATE_BUG)
    corpus = tmp_path / "corpus"
    (target,) = lookup(["fla-chunk-offsets"])
    on_branch = RunConfig(max_examples=200, seed=0, corpus=str(corpus), optimized=str(branch.resolve()))
    first = fuzz_target(target, on_branch)
    assert first.failures and first.first_failure_at > 1, first.first_failure_at
    kept = saved(corpus, target, on_branch)
    assert kept
    # The copies agree on those inputs: replayed under the same key they would pass and be deleted.
    copies = fuzz_target(target, on_branch.replace(optimized="copy", max_examples=50))
    assert not copies.failures and copies.examples == 50
    assert saved(corpus, target, on_branch) == kept
    again = fuzz_target(target, on_branch.replace(seed=1))
    assert again.failures and again.first_failure_at == 1  # straight from the example database


# --------------------------------------------------------------------------- journal folders


def dead_pid() -> int:
    """A pid that no process has now (a child that has exited and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_old_journal_folders_are_pruned_but_never_a_live_run_nor_other_files(tmp_path):
    journal = tmp_path / "journal"
    dead = dead_pid()
    names = [f"20261201-1000{n:02d}-{dead}" for n in range(6)]
    for name in names:
        (journal / name / "gw0").mkdir(parents=True)
    live = f"20261130-090000-{os.getpid()}"  # the oldest, but its run is alive
    (journal / live).mkdir()
    others = [journal / "notes", journal / "20261201-100000-x"]
    for other in others:
        other.mkdir()
    (journal / "20261201-100001-7.txt").write_text("not a folder")
    # Keep 3 runs' folders: this run's own (made after pruning) and the 2 newest before it.
    removed = prune_journals(journal, keep=3)
    assert sorted(p.name for p in removed) == names[:4]
    assert sorted(p.name for p in journal.iterdir()) == sorted(
        [*names[4:], live, "notes", "20261201-100000-x", "20261201-100001-7.txt"])
    assert prune_journals(journal, keep=3) == []
    assert prune_journals(tmp_path / "no-journal-yet", keep=1) == []


def test_keep_journals_is_a_run_flag_and_prunes_at_run_start(tmp_path):
    from tests.support import cli

    journal = tmp_path / "corpus" / "journal"
    dead = dead_pid()
    for n in range(4):
        (journal / f"20261201-1000{n:02d}-{dead}").mkdir(parents=True)
    done = cli("run", "--target", "fla-chunk-offsets", "--device", "cpu", "--max-examples", "5", "--seed", "0",
               "--corpus", str(tmp_path / "corpus"), "--keep-journals", "2", "--confirm", "0")
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in journal.iterdir())
    # The newest old folder and this run's own.
    assert len(left) == 2 and f"20261201-100003-{dead}" in left, left
    (own,) = [name for name in left if not name.endswith(f"-{dead}")]
    assert re.fullmatch(r"\d{8}-\d{6}-\d+", own), left
    bad = cli("run", "--keep-journals", "0", "--corpus", str(tmp_path / "c2"))
    assert bad.returncode == 2 and "--keep-journals" in bad.stderr and not (tmp_path / "c2").exists()


def test_a_first_chunk_reads_the_database_as_the_run_started_and_writes_the_live_one(tmp_path):
    """What another item saves or deletes meanwhile is not replayed (one host = N shards, docs/reliability.md);
    the item's own saves, deletions and moves reach the corpus the next run starts from."""
    corpus, key, other = tmp_path / "corpus", b"key", b"key.secondary"
    live = DirectoryBasedExampleDatabase(str(corpus / "hypothesis"))
    live.save(key, b"at-start")
    live.save(key, b"deleted-by-another-item")
    folder = corpus / "journal" / f"20261206-020000-{dead_pid()}"
    start = keep_start_database(corpus, folder, "run-1")
    assert start.parent == folder and start_database(corpus, "run-1") == start
    live.delete(key, b"deleted-by-another-item")
    live.save(key, b"saved-by-another-item")

    first_chunk = _database(corpus, reuse=True, run_id="run-1")
    assert set(first_chunk.fetch(key)) == {b"at-start", b"deleted-by-another-item"}
    first_chunk.save(key, b"found")
    first_chunk.move(key, other, b"at-start")
    first_chunk.delete(key, b"saved-by-another-item")
    assert set(live.fetch(key)) == {b"found"} and set(live.fetch(other)) == {b"at-start"}
    assert set(first_chunk.fetch(key)) == {b"at-start", b"deleted-by-another-item"}  # the copy is never written
    assert set(_database(corpus, reuse=False, run_id="run-1").fetch(key)) == set()  # continuations: save only
    # No copy for this run (fuzz_target called outside a session): the live database, as before.
    assert set(_database(corpus, reuse=True, run_id="run-2").fetch(key)) == {b"found"}
    assert _database(None, reuse=True, run_id="run-1") is None

    # A second run from the same RunConfig (so the same run id): its own copy, the earlier one gone.
    again = keep_start_database(corpus, corpus / "journal" / f"20261206-030000-{dead_pid()}", "run-1")
    assert start_database(corpus, "run-1") == again and not start.exists()
    assert set(DirectoryBasedExampleDatabase(str(again)).fetch(key)) == {b"found"}

    # The copy goes with its run's journal folder.
    assert prune_journals(corpus / "journal", keep=1) == [again.parent, folder]
    assert start_database(corpus, "run-1") is None


def test_a_run_keeps_the_database_it_started_from_in_its_journal_folder(tmp_path):
    from tests.support import cli

    corpus, report = tmp_path / "corpus", tmp_path / "report.json"
    DirectoryBasedExampleDatabase(str(corpus / "hypothesis")).save(b"another target's key", b"saved last night")
    done = cli("run", "--target", "fla-chunk-offsets", "--device", "cpu", "--max-examples", "5", "--seed", "0",
               "--corpus", str(corpus), "--confirm", "0", "--in-process", "--report", str(report))
    assert done.returncode == 0, done.stderr
    run_id = json.loads(report.read_text())["run"]["scope"]["run_id"]
    (own,) = (corpus / "journal").iterdir()
    assert start_database(corpus, run_id) == own / f"hypothesis-at-start-{run_id}"
    copy = DirectoryBasedExampleDatabase(str(start_database(corpus, run_id)))
    assert set(copy.fetch(b"another target's key")) == {b"saved last night"}
