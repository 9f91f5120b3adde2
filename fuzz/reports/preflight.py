"""Every path a command will write, checked before the first example.

A run that finds a divergence after an hour and then cannot write its report
has wasted the hour: so the corpus and every output file are tried for
writing up front (a real file created and removed in the target folder: a
read-only mount, a folder under a regular file, ``/proc`` all fail here), and
each problem is one ``UsageError`` line naming the path and the fix. If
writing still fails at the end (the disk filled up meanwhile), ``write_or_fall
back`` saves the output elsewhere and says where, so no result is lost.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fuzz.config import reach_core
from fuzz.errors import UsageError
from fuzz.records.model import REPORT_FORMAT


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


def _probe(folder: Path) -> None:
    """Create and remove a file in ``folder``; OSError if that cannot be done."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".syncfuzz-probe-")
    os.close(fd)
    os.unlink(name)


def _blocked_by_file(path: Path) -> Path | None:
    """The regular file standing where a folder of ``path`` must be, if any."""
    for parent in [path, *path.parents]:
        if parent.exists():
            return parent if not parent.is_dir() else None
    return None


def check_output(flag: str, value: str) -> Path:
    """``--report`` / ``--markdown`` / ``--junit`` / ``--json``: a file we can write."""
    if not value.strip():
        drop = ", or drop the flag" if flag.startswith("--") else ""  # merge-reports' OUT cannot be dropped
        raise UsageError(f"{flag} is empty; give a file path{drop}")
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value!r} is a directory; pass a file path")
    blocker = _blocked_by_file(path.parent)
    if blocker is not None:
        raise UsageError(f"{flag} {value!r}: {str(blocker)!r} is a file, not a folder; choose another path")
    if not path.parent.exists():
        raise UsageError(f"{flag} {value!r}: folder {str(path.parent)!r} does not exist; create it first")
    try:
        _probe(path.parent)
        if path.exists() and not os.access(path, os.W_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise UsageError(f"{flag} {value!r} cannot be written ({_reason(exc)}); choose a writable path") from None
    return path


def check_corpus(value: str) -> Path:
    """``--corpus``: a folder we can create and write (created now if missing),
    and so are the sub-folders the run writes into (CORPUS_FOLDERS)."""
    if not value.strip():  # Path("") is the current folder: the run would litter it
        raise UsageError("--corpus is empty; give a folder path (default ./fuzz-corpus), or drop the flag")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--corpus {value!r} is a file; pass a directory (it is created if missing)")
    blocker = _blocked_by_file(path)
    if blocker is not None:
        raise UsageError(f"--corpus {value!r}: {str(blocker)!r} is a file, not a folder; choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        _probe(path)
    except OSError as exc:
        raise UsageError(f"--corpus {value!r} cannot be written ({_reason(exc)}); choose a writable folder") from None
    for name in CORPUS_FOLDERS:
        _check_corpus_folder(value, path / name)
    return path


# What a run writes in the corpus: the example database (a file there would
# silently turn it off), the saved repro files and the workers' journals (a
# file there would fail the run only when a failure must be saved).
CORPUS_FOLDERS = ("hypothesis", "failures", "journal")


def _check_corpus_folder(value: str, folder: Path) -> None:
    """A corpus sub-folder is a writable folder, or absent (created when needed)."""
    if not folder.exists() and not folder.is_symlink():
        return
    if not folder.is_dir():
        raise UsageError(f"--corpus {value!r}: {str(folder)!r} is a file, but the run keeps a folder there; "
                         "move that file away or choose another corpus")
    # access(), not a probe file: runs sharing the corpus list these folders, and must never see a stray file.
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--corpus {value!r}: {str(folder)!r} cannot be written; fix its permissions or choose "
                         "another corpus")


def refuse_empty(values: Mapping[str, str | None]) -> None:
    """Flags (``{flag: value}``) given an empty value: "" was silently taken as not given, or as the current
    folder."""
    for flag, value in values.items():
        if value is not None and not value.strip():
            raise UsageError(f"{flag} is empty; give a value (see --help), or drop the flag")


def check_cache(value: str | None, default: Callable[[], Path]) -> Path:
    """``--cache``: ``default()`` when not given; an empty value is refused (it
    was silently the default, or the current folder). Not probed: a read-only
    cache holding the wheels needed is fine."""
    if value is None:
        return default()
    if not value.strip():
        raise UsageError("--cache is empty; give a folder path, or drop the flag for the default cache")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"--cache {value!r} is a file; pass a directory (it is created if missing)")
    return path


def check_folder(flag: str, value: str) -> Path:
    """A folder a command writes into (``sources fetch --into``, ``--cache``, ``--root``): not empty, not a file,
    not under a file, and writable where it is or will be created. Nothing is created here."""
    if not value.strip():  # Path("") is the current folder
        raise UsageError(f"{flag} is empty; give a folder path, or drop the flag")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value!r} is a file; pass a directory (it is created if missing)")
    blocker = _blocked_by_file(path)
    if blocker is not None:
        raise UsageError(f"{flag} {value!r}: {str(blocker)!r} is a file, not a folder; choose another path")
    existing = next(p for p in [path, *path.parents] if p.exists())
    try:
        _probe(existing)
    except OSError as exc:
        raise UsageError(f"{flag} {value!r} cannot be written ({_reason(exc)}); choose a writable folder") from None
    return path


def check_outputs(flags: Mapping[str, str | None], labels: Mapping[str, str] | None = None) -> dict[str, Path]:
    """The output flags that were given, each checked: {"report": path, ...}. ``labels`` names an output
    for the messages when it is not ``--NAME`` (merge-reports' OUT)."""
    outputs = {}
    for name, value in flags.items():
        if value is not None:
            flag = (labels or {}).get(name, f"--{name}")
            outputs[name] = check_output(flag, value)
            check_overwrite(flag, outputs[name], OUTPUT_KINDS.get(name, "text"))
    return outputs


# What an existing file at an output path must be for the output to replace it.
OUTPUT_KINDS = {"report": "report", "markdown": "text", "junit": "text", "json": "selftest", "html": "html"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _describe(path: Path) -> str:
    """What an existing file holds, for the overwrite rule: "format:F" (a JSON
    object naming its format), "selftest", "json", "binary" or "text"."""
    try:
        raw = path.read_bytes()
    except OSError:
        return "unreadable"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"  # a wheel, a pickle, an archive
    try:
        data = json.loads(text)
    except ValueError:
        return "text"
    if isinstance(data, dict) and isinstance(data.get("format"), str):
        return f"format:{data['format']}"
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        return "selftest"
    return "json"


def _wording(description: str) -> str:
    if description.startswith("format:"):
        return f"a {description.removeprefix('format:')!r} file"
    return {"selftest": "selftest results", "json": "a JSON file", "binary": "a binary file",
            "text": "a text file", "unreadable": "an unreadable file"}[description]


def check_overwrite(flag: str, path: Path, kind: str) -> None:
    """An existing file is replaced only by an output of its own kind, so a
    mistyped path never destroys a repro, a known-issues list or a source:

    * ``report`` (``--report``, merge-reports OUT): only a report of this
      format (REPORT_FORMAT) is replaced;
    * ``selftest`` (``selftest --json``): only earlier selftest results;
    * ``text`` (``--markdown``, ``--junit``): any text file but JSON (a report,
      a repro, a known-issues file: never a Markdown or XML output) and binary
      files;
    * ``html`` (``--html``): only an earlier HTML report of ours (its first
      lines hold fuzz.reports.html.HTML_MARK), never another page or text file;
    * ``png`` (the charts beside ``--markdown``): only a PNG image."""
    if not path.is_file():
        return
    description = _describe(path)
    if kind == "html":
        allowed = description == "text" and _starts_like_html_report(path)
    elif kind == "png":
        allowed = _head(path, len(PNG_MAGIC)) == PNG_MAGIC
    else:
        allowed = {"report": description == f"format:{REPORT_FORMAT}", "selftest": description == "selftest",
                   "text": description == "text"}[kind]
    if not allowed:
        wanted = {"report": f"a {REPORT_FORMAT} report", "selftest": "selftest results",
                  "text": "a Markdown/XML output", "html": "an HTML report of syncfuzz", "png": "a PNG image"}[kind]
        raise UsageError(f"{flag} {str(path)!r} already exists and is {_wording(description)}, not {wanted}; "
                         "it is not replaced: choose another path, or move that file away first")


def _head(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def _starts_like_html_report(path: Path) -> bool:
    from fuzz.reports.html import HTML_MARK

    return HTML_MARK.encode() in _head(path, 512)


def _same_file(a: Path, b: Path) -> bool:
    """The same file: the same resolved path (links followed, existing or not), or hard links of one file."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def check_no_collisions(outputs: Mapping[str, Path], inputs: Mapping[str, Path | Sequence[Path]] | None = None,
                        corpus: Path | None = None) -> None:
    """No output (by flag) is another output, an input (by flag: one path or
    several), the corpus or a path inside the folders the run keeps there
    (CORPUS_FOLDERS: repro files, the example database, journals). Otherwise
    one file would silently replace another, at the end of the run."""
    named_inputs = [(flag, p) for flag, value in (inputs or {}).items()
                    for p in ([value] if isinstance(value, Path) else value)]
    checked: list[tuple[str, Path]] = []
    for flag, path in outputs.items():
        for other_flag, other in checked:
            if _same_file(path, other):
                raise UsageError(f"{other_flag} and {flag} both name {str(path)!r}, so one output would replace "
                                 "the other; give each its own file")
        checked.append((flag, path))
        for input_flag, source in named_inputs:
            if _same_file(path, source):
                raise UsageError(f"{flag} {str(path)!r} is also the input {input_flag} {str(source)!r}; writing it "
                                 "would destroy that input: choose another output path")
        if corpus is not None:
            _check_outside_corpus(flag, path, corpus)


def _check_outside_corpus(flag: str, path: Path, corpus: Path) -> None:
    if _same_file(path, corpus):
        raise UsageError(f"{flag} {str(path)!r} is also --corpus; choose another path for one of them")
    for name in CORPUS_FOLDERS:
        if _inside(path, corpus / name):
            raise UsageError(f"{flag} {str(path)!r} is inside the corpus' {name}/ folder, which the run keeps for "
                             "itself (repro files, example database, journals); write it outside that folder")


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """The environment variables syncfuzz reads, checked before any command
    runs: a path that names nothing or a number that is not one would
    otherwise be ignored, or fail only deep inside a run."""
    env = os.environ if environ is None else environ
    for folder in filter(None, env.get("SYNCFUZZ_SOURCES", "").split(os.pathsep)):
        if not Path(folder).expanduser().is_dir():
            raise UsageError(f"SYNCFUZZ_SOURCES names {folder!r}, which is not a directory; set it to the --into "
                             "folder(s) of python -m fuzz sources fetch (separated by os.pathsep), or unset it")
    for name, least in (("SYNCFUZZ_THREADS", 1), ("SYNCFUZZ_PAGEABLE_STAGED_BYTES", 0)):
        text = env.get(name)
        if text is not None and not (text.strip().isdigit() and int(text) >= least):
            raise UsageError(f"{name}={text!r} must be a whole number of at least {least}; fix it or unset it")
    cache = env.get("SYNCFUZZ_WHEEL_CACHE")
    if cache and Path(cache).expanduser().exists() and not Path(cache).expanduser().is_dir():
        raise UsageError(f"SYNCFUZZ_WHEEL_CACHE={cache!r} is a file; set it to a folder (created if missing)")
    reach_core(env)  # SYNCFUZZ_REACH_CORE: ctrace or sysmon, and sysmon only where sys.monitoring exists
    for name in ("SYNCFUZZ_LEGACY_SOURCE", "SYNCFUZZ_OPTIMIZED_SOURCE"):
        source = env.get(name)
        if source and source != "installed" and not Path(source).expanduser().exists():
            raise UsageError(f"{name}={source!r} does not exist; set it to a vllm .whl, a directory holding "
                             "vllm/ or 'installed', or unset it")


def write_or_fall_back(path: Path, write: Callable[[Path], None], fallback_folder: Path | None) -> Path:
    """Write with ``write(path)``; if that fails, write to a file named like it
    in ``fallback_folder`` (or the temporary folder) and return where it went."""
    try:
        write(path)
        return path
    except OSError:
        pass
    for folder in filter(None, [fallback_folder, Path(tempfile.gettempdir())]):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=folder, prefix=f"{path.stem}-", suffix=path.suffix)
            os.close(fd)
            write(Path(name))
            return Path(name)
        except OSError:
            continue
    raise UsageError(f"cannot write {str(path)!r} nor any fallback copy; the results are in the lines above")
