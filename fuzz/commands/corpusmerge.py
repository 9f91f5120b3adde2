"""``corpus-merge``: the corpora of a run's shards (or hosts) as the one corpus the next run starts from.

A corpus (``fuzz run --corpus DIR``) keeps two things a later run reads: ``hypothesis/``, the example
database (Hypothesis' ``DirectoryBasedExampleDatabase``: one folder per key, named by a hash of the key,
holding one file per saved example, named by a hash of its content), and ``failures/``, the repro files
(fuzz/engine/repro.py: ``TARGET-VERDICT-DIGEST.json``). The merge copies into OUT:

* every example-database file of every input that OUT lacks. Names are content hashes, so the same name
  is the same example: the union of the inputs' entries, each kept once. A file whose name is not the hash
  of its content is not an example database's (another tool's folder, a damaged copy): refused.
* every repro file by name. The same name with the same bytes is kept once. The same name with other
  bytes (one failure saved by two shards, each recording its own run, time and seed) keeps both: the
  first one met (OUT's own, then the inputs in the order given) keeps the name, the other is written as
  ``NAME.<sha256 of its content, 12 hex>.json`` beside it. Nothing saved is lost, and merging the same
  inputs again adds nothing.

Not merged: ``journal/`` (each host's record of its own workers) and ``reports/`` (fallback copies of
that host's outputs): they describe a host's run, not what the next run replays. A deletion does not
travel: an example one shard's run dropped (it no longer fails) is kept from a shard that did not run
that target, and the next run of that target replays it once more and drops it again.

Every input is checked before anything is written (one ``UsageError`` line each); each file is written
atomically, so a merge cut short leaves whole files only, and running it again completes it.
No torch here: the merge job needs no GPU stack.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fuzz.errors import UsageError
from fuzz.records.model import EXIT_OK
from fuzz.reports.outputs import write_bytes
from fuzz.reports.preflight import check_corpus, check_folder

DATABASE = "hypothesis"
FAILURES = "failures"
# What a fuzz run creates in its corpus (fuzz.reports.preflight.CORPUS_FOLDERS, plus the fallback reports/):
# a non-empty folder holding none of these is not a corpus.
CORPUS_MARKERS = (DATABASE, FAILURES, "journal", "reports")
_HASH_NAME = re.compile(r"[0-9a-f]{16}")


def example_name(content: bytes) -> str:
    """The file name Hypothesis' DirectoryBasedExampleDatabase gives a key or a value (its ``_hash``)."""
    return hashlib.sha384(content).hexdigest()[:16]


@dataclass
class CorpusMerge:
    """What a merge did: example-database files and repro files added, the ones already there, and the
    repro files written under a second name (``(kept name, second name)``) because their bytes differ."""

    examples_added: int = 0
    examples_present: int = 0
    repros_added: int = 0
    repros_present: int = 0
    kept_both: list[tuple[str, str]] = field(default_factory=list)


# --------------------------------------------------------------------------- checking the arguments


def check_corpus_folder(role: str, value: str) -> Path:
    """An existing corpus folder: empty (a run that saved nothing), or holding what a fuzz run keeps."""
    if not value.strip():  # Path("") is the current folder
        raise UsageError(f"corpus-merge {role} is empty; pass the --corpus folder of a fuzz run")
    path = Path(value)
    if not path.exists():
        raise UsageError(f"corpus-merge {role} {value!r} does not exist; pass the --corpus folder of a fuzz run")
    if not path.is_dir():
        raise UsageError(f"corpus-merge {role} {value!r} is a file; pass the --corpus folder of a fuzz run")
    if any(path.iterdir()) and not any((path / name).exists() for name in CORPUS_MARKERS):
        fix = "choose a new or empty folder, or a corpus" if role == "OUT" else "pass the --corpus folder of a fuzz run"
        raise UsageError(f"corpus-merge {role} {value!r} is not a corpus (it holds none of "
                         f"{', '.join(n + '/' for n in CORPUS_MARKERS)}); {fix}")
    for name in (DATABASE, FAILURES):
        if (path / name).exists() and not (path / name).is_dir():
            raise UsageError(f"corpus-merge {role} {value!r}: {str(path / name)!r} is a file where a corpus keeps "
                             "a folder; move it away or pass another corpus")
    return path


def check_arguments(out: str, inputs: Sequence[str]) -> tuple[Path, list[Path]]:
    """OUT and the input corpora, each problem one UsageError line; nothing is created."""
    folders = [check_corpus_folder("SHARD_CORPUS", value) for value in inputs]
    if not out.strip():  # Path("") is the current folder
        raise UsageError("corpus-merge OUT is empty; give the folder the merged corpus goes to (e.g. fuzz-corpus)")
    target = check_folder("corpus-merge OUT", out)
    if target.exists():
        check_corpus_folder("OUT", out)
    seen: dict[Path, str] = {}
    for value, folder in zip(inputs, folders):
        real = folder.resolve()
        if real in seen:
            raise UsageError(f"corpus-merge: {seen[real]!r} and {value!r} are the same corpus; pass each once")
        seen[real] = value
        _check_apart(out, target.resolve(), value, real)
    return target, folders


def _check_apart(out: str, real_out: Path, value: str, real: Path) -> None:
    """OUT is neither an input nor inside one, nor the other way round: the merge would read what it writes."""
    if real_out == real:
        raise UsageError(f"corpus-merge OUT {out!r} is also the input {value!r}; merge into another folder, "
                         "or leave it out of the inputs (OUT's own content is kept)")
    if real_out.is_relative_to(real) or real.is_relative_to(real_out):
        raise UsageError(f"corpus-merge OUT {out!r} and the input {value!r} lie inside one another; "
                         "give OUT a folder of its own")


# --------------------------------------------------------------------------- reading an input corpus


def database_files(corpus: Path) -> list[tuple[str, Path]]:
    """``(key folder/value file, path)`` of a corpus' example database, each checked to be one."""
    root = corpus / DATABASE
    if not root.is_dir():
        return []
    found = []
    for key in sorted(p for p in root.iterdir() if not p.name.startswith(".")):
        if not key.is_dir() or not _HASH_NAME.fullmatch(key.name):
            raise UsageError(f"{str(key)!r} is not a key folder of a Hypothesis example database (16 hex digits "
                             "naming a folder); that corpus was not written by fuzz run: move it away")
        for value in sorted(key.iterdir()):
            if value.name.startswith("."):  # a copy in progress (outputs.write_bytes' .tmp-*), never a value
                continue
            if not value.is_file() or value.name != example_name(value.read_bytes()):
                raise UsageError(f"{str(value)!r} is not an example of a Hypothesis example database (its name is "
                                 "not the hash of its content: damaged or from another tool); move it "
                                 "away and merge again")
            found.append((f"{key.name}/{value.name}", value))
    return found


def repro_files(corpus: Path) -> list[Path]:
    """A corpus' repro files: the regular files of failures/, not a save in progress (.tmp-*)."""
    root = corpus / FAILURES
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))


# --------------------------------------------------------------------------- the merge


@dataclass(frozen=True)
class MergeSources:
    """What the inputs hold, in input order: example-database files (``key/value`` name, path) and repro files."""

    examples: list[tuple[str, Path]]
    repros: list[Path]


def read_corpora(inputs: Sequence[Path]) -> MergeSources:
    """Every input's files, each checked (one UsageError line for the first bad one); nothing is written."""
    return MergeSources(examples=[found for corpus in inputs for found in database_files(corpus)],
                        repros=[found for corpus in inputs for found in repro_files(corpus)])


def write_merge(out: Path, sources: MergeSources) -> CorpusMerge:
    """Copy into ``out`` (created if missing) what it lacks of ``sources``; see the module's docstring."""
    check_corpus(str(out))  # writable, and hypothesis/ and failures/ folders where they must be
    done = CorpusMerge()
    for name, source in sources.examples:
        _add_example(out / DATABASE / name, source, done)
    for source in sources.repros:
        _add_repro(out / FAILURES, source, done)
    return done


def merge_corpora(out: Path, inputs: Sequence[Path]) -> CorpusMerge:
    """Merge the corpora ``inputs`` into ``out``: every input read and checked before the first file is written
    (the Python form of ``corpus-merge``; ``check_arguments`` checks the paths themselves)."""
    return write_merge(out, read_corpora(inputs))


def _add_example(path: Path, source: Path, done: CorpusMerge) -> None:
    if path.exists():  # the name is the content's hash: the same example
        done.examples_present += 1
        return
    write_bytes(path, source.read_bytes())
    done.examples_added += 1


def _add_repro(folder: Path, source: Path, done: CorpusMerge) -> None:
    content = source.read_bytes()
    path = folder / source.name
    if path.exists() and path.read_bytes() != content:
        second = folder / f"{source.stem}.{hashlib.sha256(content).hexdigest()[:12]}{source.suffix}"
        if not second.exists():
            done.kept_both.append((source.name, second.name))
        path = second
    if path.exists():  # the same bytes under this name: kept once
        done.repros_present += 1
        return
    write_bytes(path, content)
    done.repros_added += 1


# --------------------------------------------------------------------------- the command


def corpus_merge(out_corpus: str, input_corpora: Sequence[str]) -> int:
    """``corpus-merge OUT SHARD...``: the shards' example databases and repro files merged into OUT."""
    out, inputs = check_arguments(out_corpus, input_corpora)
    done = merge_corpora(out, inputs)
    for kept, second in done.kept_both:
        print(f"kept both: {FAILURES}/{kept} keeps the content met first, the other content is {FAILURES}/{second}",
              file=sys.stderr)
    print(f"corpus-merge: {len(inputs)} corpus folder(s) into {out_corpus}: example database +{done.examples_added} "
          f"({done.examples_present} already there), failures +{done.repros_added} ({done.repros_present} already "
          f"there, {len(done.kept_both)} kept under a second name)")
    return EXIT_OK
