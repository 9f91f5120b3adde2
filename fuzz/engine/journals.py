"""The corpus' journal folder: one folder per run, and the pruning of old ones.

Each run journals its workers' examples, job files and results in a folder of
its own (``journal/<time>-<pid>/``), so runs sharing a corpus never read each
other's (docs/reliability.md). ``run --keep-journals N`` keeps the last N.

The run's folder also holds the example database as it was when the run started
(``keep_start_database``): every item's first chunk replays that, not what other
items saved meanwhile, so one host and N shards draw the same examples.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import time
from pathlib import Path


def journal_folder(corpus: Path) -> Path:
    """This run's own journal folder in the corpus: runs sharing a corpus never
    read each other's journals or results (the example database and failures/
    are shared on purpose: saves there are atomic)."""
    return corpus / "journal" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


# What journal_folder() names: nothing else in journal/ is ever pruned.
_JOURNAL_NAME = re.compile(r"(\d{8}-\d{6})-(\d+)")
DEFAULT_KEEP_JOURNALS = 20


# The start copy's folder in a run's journal folder, named by the run's id (RunConfig.run_id): every process of
# the run finds it by that id alone, and it is pruned with its run's folder.
_START_DATABASE = "hypothesis-at-start-{run_id}"


def keep_start_database(corpus: Path, folder: Path, run_id: str) -> Path:
    """Copy the corpus' example database (``corpus/hypothesis``) as it is now into the run's journal
    ``folder``; return the copy. Made once, before any item runs, and never written afterwards.

    Another run sharing the corpus may save or delete meanwhile (each file appears and goes by an atomic
    rename or unlink): a file gone before it is read is simply not in the copy."""
    live = corpus / "hypothesis"
    # A copy under this id already: an earlier run made from the same RunConfig (a library caller's), over.
    for earlier in _start_copies(corpus, run_id):
        shutil.rmtree(earlier)
    start = folder / _START_DATABASE.format(run_id=run_id)
    start.mkdir(parents=True)
    for key in _listing(live):
        if not key.is_dir():
            continue
        (start / key.name).mkdir()
        for example in _listing(key):
            try:
                (start / key.name / example.name).write_bytes(example.read_bytes())
            except (FileNotFoundError, IsADirectoryError):  # deleted (or moved) by another run meanwhile
                continue
    return start


def _listing(folder: Path) -> list[Path]:
    """The folder's entries; none if it is not there (yet, or any more: a move prunes an emptied key's folder)."""
    try:
        return sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def start_database(corpus: Path, run_id: str) -> Path | None:
    """The example database as run ``run_id`` found it (keep_start_database), or None when this run kept
    none (the runner called outside a ``fuzz run`` session)."""
    found = _start_copies(corpus, run_id)
    return found[0] if found else None


def _start_copies(corpus: Path, run_id: str) -> list[Path]:
    return sorted((corpus / "journal").glob("*/" + glob.escape(_START_DATABASE.format(run_id=run_id))))


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists (a reused pid keeps a dead run's folder: harmless)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def prune_journals(journal: Path, keep: int) -> list[Path]:
    """Delete old run folders of ``journal`` so that, with the folder this run is about
    to make, the last ``keep`` runs' folders are kept; return those deleted.

    Only folders named as journal_folder() names them (``<time>-<pid>``) are candidates,
    and never one whose run is alive: a run still writing its journal, or sharing the
    corpus now. A folder another run prunes at the same moment is already gone: fine."""
    if not journal.is_dir():
        return []
    runs = []
    for path in journal.iterdir():
        match = _JOURNAL_NAME.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink():
            runs.append(((match.group(1), int(match.group(2))), path))
    runs.sort(reverse=True)  # newest first: the time in the name, then the pid
    removed = []
    for (_, pid), path in runs[max(keep - 1, 0):]:
        if not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
