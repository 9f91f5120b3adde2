"""``python -m fuzz replay FILE|DIR``: re-run saved failures in fresh processes, the fix-and-recheck loop.

A side from a source (``--optimized PATH``, a branch) whose files changed since the failure was saved is
replayed as it is now, and one line names the files that changed with their hashes then and now -- as a
changed code tree of the copies is; ``--strict`` refuses it instead (one line, exit 2), for audits.

``replay DIR`` replays every ``*.json`` of a folder it can, each in its own fresh process; a file that cannot
be replayed (unreadable, another format, an unknown target, a side missing here...) is an ``invalid`` row
with the reason, and the others still run. ``--known-issues FILE`` accepts findings as ``run --known-issues``
does (fuzz/run/triage.py): one that still fails is ``accepted``, not a failure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from fuzz.errors import HarnessError, UsageError
from fuzz.records.model import EXIT_FAILURE, EXIT_FUZZER_BUG, EXIT_INCOMPLETE, EXIT_OK

if TYPE_CHECKING:
    from fuzz.releases import SideChange
    from fuzz.run.replay import Replayable, ReplayResult

CUDA_ONLY_VERDICTS = {"sync-regression": "GPU<->CPU syncs exist only on CUDA",
                      "crash": "a device-side assert happens only on CUDA",
                      "race": "only a CUDA copy is asynchronous (docs/verdicts.md#races)",
                      "copy-policy": "only a copy to or from a GPU is judged by the copy policy"}


def replay(file: str, *, device: str | None = None, strict: bool = False, known_issues: str | None = None) -> int:
    """``replay FILE|DIR``: re-run a saved failure (or every one in a folder) in a fresh process; the exit code.

    ``device`` replays on that device instead of the saved one; ``strict`` refuses a failure whose side from a
    source changed since it was saved; ``known_issues`` names the accepted findings (``run --known-issues``)."""
    if not file.strip():  # Path("") is the current folder: it would replay whatever JSON lies there
        raise UsageError("replay FILE is empty; pass a repro file or a corpus failures/ folder")
    issues = _known_issues(known_issues)  # a bad file is refused before any replay
    if Path(file).is_dir():
        return _replay_folder(Path(file), device, strict, known_issues, issues)
    return _replay_one(file, device, strict, issues)


def _known_issues(value: str | None) -> list[dict]:
    """``--known-issues``, validated as ``run`` validates it, against the targets this environment knows."""
    if value is None:
        return []
    from fuzz.reports.preflight import refuse_empty
    from fuzz.run.triage import load_known_issues
    from fuzz.targets import lookup, plugin_modules

    refuse_empty({"--known-issues": value})  # "" was the current folder
    return load_known_issues(Path(value), [t.name for t in lookup([], plugin_modules())])


def _accepted(issues: list[dict], saved: Replayable, result: ReplayResult) -> str | None:
    """The reason a known issue accepts this replay's failure (None: it does not fail, or nothing accepts it).
    Matched on the failure as the replay saw it now, as ``run`` matches the failures it finds."""
    if not issues or not result.still_fails:
        return None
    from fuzz.records.model import Failure
    from fuzz.run.session import optimized_version
    from fuzz.run.triage import known_reason

    failure = Failure(device=result.device, verdict=result.verdict, input=saved.payload["input"],
                      mismatches=tuple(result.mismatches), exceptions=dict(result.exceptions),
                      oracles=result.oracles)
    return known_reason(issues, saved.payload["target"], saved.config.contract, failure,
                        optimized_version(saved.config))


def changed_note(changed: tuple[SideChange, ...], saved_by: str = "this failure") -> str:
    """One line: the sides whose files changed since the failure was saved, with the files' short hashes."""
    sides = "; ".join(f"its {change.role} side {change.spec} changed ({change.hashes()})" for change in changed)
    return (f"warning: not the code that saved {saved_by}: {sides}; replaying on the code there now "
            "(--strict refuses)")


def _say_which_code(saved: dict) -> None:
    """Name the code tree and versions this replay runs, and what differs from the run that saved it."""
    from fuzz.versions import versions

    now, then = versions(), saved.get("versions") or {}
    print(f"replaying with syncfuzz {now['syncfuzz']} from {now['root']} (code {now['code_sha256']}), "
          f"torch {now['torch']}")
    differ = [f"{key} {then[key]} -> {now.get(key)}" for key in ("root", "code_sha256", "syncfuzz", "torch")
              if then.get(key) and then.get(key) != now.get(key)]
    if differ:
        print(f"warning: not the code that saved this failure ({'; '.join(differ)}); a different outcome may "
              "come from that")


def _replay_one(file: str, device: str | None, strict: bool, issues: list[dict]) -> int:
    """``replay FILE``: 0 no longer fails (or accepted), 1 still fails, 2 the file cannot be replayed."""
    from fuzz.run.replay import replay_file, replayable

    checked = replayable(file, strict)
    saved = checked.payload
    why = CUDA_ONLY_VERDICTS.get(saved["verdict"])
    if device == "cpu" and saved["device"].startswith("cuda") and why:
        print(f"note: this {saved['verdict']} was saved on {saved['device']} and needs a GPU to reproduce ({why}); "
              "replaying on the CPU checks the values only")
    elif device and device != saved["device"]:
        print(f"note: saved on {saved['device']}, replaying on {device} as asked")
    _say_which_code(saved)
    if checked.changed:
        print(changed_note(checked.changed))
    result = replay_file(file, device, strict=strict)
    if not result.still_fails:
        print(f"no longer fails: legacy and optimized agree on {result.device} for {file}")
        return EXIT_OK
    if result.crashed:
        print(f"{result.verdict.upper()} reproduced on {result.device} for {file}: {result.crashed}")
    else:
        print(f"{result.verdict.upper()} reproduced on {result.device} for {file}")
        for mismatch in result.mismatches:
            print(f"  at {mismatch['path']} ({mismatch['what']}): {mismatch['detail']}")
    reason = _accepted(issues, checked, result)
    if reason:
        print(f"still fails, accepted by --known-issues: {reason}")
        return EXIT_OK
    return EXIT_FAILURE


# --------------------------------------------------------------------------- replay DIR


@dataclass
class _Row:
    """One file of ``replay DIR``: its table row and what came of it."""

    path: Path
    target: str
    device: str
    verdict: str
    result: str
    outcome: str  # one of OUTCOMES


OUTCOMES = ("still fails", "no longer fails", "accepted", "invalid", "skipped", "fuzzer error")


def _repro_files(folder: Path, known_issues: str | None) -> list[Path]:
    """The repro files of a folder: its *.json, not the temporary files of a save in progress (.tmp-*), nor
    the --known-issues file kept beside them."""
    skip = Path(known_issues).resolve() if known_issues else None
    files = sorted(p for p in folder.glob("*.json")
                   if p.is_file() and not p.name.startswith(".") and p.resolve() != skip)
    if not files:
        raise UsageError(f"replay {str(folder)!r}: the folder holds no repro file (*.json); pass a corpus "
                         "failures/ folder or a repro file")
    return files


def _saved_fields(path: Path) -> tuple[str, str, str]:
    """Target, device and verdict of a file that cannot be replayed, where it can still be read ("-": not)."""
    from fuzz.engine.repro import load_repro
    from fuzz.errors import ReproFileError

    try:
        saved = load_repro(path)
    except ReproFileError:
        return "-", "-", "-"
    return saved["target"], saved["device"], saved["verdict"]


class _Checked(NamedTuple):
    """A file of ``replay DIR`` validated before any is replayed."""

    replayable: Replayable | None  # None: invalid, see ``invalid``
    device: str | None  # where it replays; None: it needs a GPU this host lacks (or is invalid)
    invalid: _Row | None = None


def _checked(path: Path, device: str | None, strict: bool) -> _Checked:
    """``path`` validated, or its invalid row. Under ``strict`` a bad file is a UsageError naming it: nothing
    in the folder is replayed."""
    from fuzz.run.replay import choose_device, replayable

    try:
        checked = replayable(str(path), strict)
    except UsageError as exc:
        named = str(exc) if path.name in str(exc) else f"repro file {str(path)!r}: {exc}"
        if strict:
            raise UsageError(f"{named} (nothing in {str(path.parent)!r} was replayed; fix or move that file)") \
                from exc
        return _Checked(None, None, _Row(path, *_saved_fields(path), result=f"invalid: {named}", outcome="invalid"))
    try:
        return _Checked(checked, choose_device(checked.payload, device))
    except UsageError:
        if device:  # --device cuda on a host without one: the flag's problem, for every file
            raise
        return _Checked(checked, None)


def _replayed(path: Path, checked: _Checked, device: str | None, strict: bool, issues: list[dict]) -> _Row:
    """One file replayed in its fresh process, as a row."""
    from fuzz.run.replay import replay_file

    assert checked.replayable is not None and checked.device is not None
    saved = checked.replayable.payload
    row = _Row(path, saved["target"], checked.device, saved["verdict"], "", "")
    try:
        result = replay_file(str(path), device, strict=strict)
    except UsageError as exc:  # its input cannot be built: only the child process can tell
        row.result, row.outcome = f"invalid: {exc}", "invalid"
        return row
    except HarnessError as exc:
        row.result, row.outcome = f"fuzzer error: {exc}", "fuzzer error"
        return row
    if not result.still_fails:
        row.result, row.outcome = "no longer fails", "no longer fails"
        return row
    row.result = f"still fails ({result.verdict}: {result.crashed})" if result.crashed else \
        f"still fails ({result.verdict})"
    reason = _accepted(issues, checked.replayable, result)
    row.result, row.outcome = (f"{row.result}, accepted: {reason}", "accepted") if reason else \
        (row.result, "still fails")
    return row


def folder_exit_code(outcomes: list[str]) -> int:
    """``replay DIR``'s exit code (as ``replay --help`` lists them): the worst outcome, an invalid file counting
    as incomplete."""
    if "still fails" in outcomes:
        return EXIT_FAILURE
    if "fuzzer error" in outcomes:
        return EXIT_FUZZER_BUG
    if "invalid" in outcomes or "skipped" in outcomes:
        return EXIT_INCOMPLETE
    return EXIT_OK


def summary_line(outcomes: list[str]) -> str:
    """``replayed N of M repro file(s): X still fail, Y no longer fail, Z accepted, W invalid`` (then the
    skipped and fuzzer errors, where there are any)."""
    counts = Counter(outcomes)
    replayed = counts["still fails"] + counts["no longer fails"] + counts["accepted"]
    line = (f"replayed {replayed} of {len(outcomes)} repro file(s): {counts['still fails']} still fail, "
            f"{counts['no longer fails']} no longer fail, {counts['accepted']} accepted, {counts['invalid']} invalid")
    if counts["skipped"]:
        line += f", {counts['skipped']} skipped (needs a GPU)"
    if counts["fuzzer error"]:
        line += f", {counts['fuzzer error']} fuzzer error(s)"
    return line


def _replay_folder(folder: Path, device: str | None, strict: bool, known_issues: str | None,
                   issues: list[dict]) -> int:
    """``replay DIR``: each repro file of the folder in its own fresh process, then one table and a summary
    line. An empty folder, or one none of whose files can be replayed, is one line and exit 2 first."""
    from fuzz.versions import versions

    files = _repro_files(folder, known_issues)
    checked = [_checked(path, device, strict) for path in files]
    if all(check.replayable is None for check in checked):
        first = next(check.invalid for check in checked if check.invalid is not None)
        raise UsageError(f"replay {str(folder)!r}: none of its {len(files)} repro file(s) can be replayed (the "
                         f"first: {first.result.removeprefix('invalid: ')}); fix or move them")
    now = versions()
    print(f"replaying {len(files)} repro file(s) of {folder} with syncfuzz {now['syncfuzz']} from {now['root']} "
          f"(code {now['code_sha256']}), torch {now['torch']}")
    changes = Counter(change for check in checked if check.replayable for change in check.replayable.changed)
    for change, count in changes.items():
        print(changed_note((change,), f"{count} of these failures"))
    rows = []
    for path, check in zip(files, checked):
        if check.invalid is not None:
            rows.append(check.invalid)
        elif check.device is None:
            saved = check.replayable.payload
            rows.append(_Row(path, saved["target"], saved["device"], saved["verdict"],
                             f"needs a GPU: skipped (saved on {saved['device']}; --device cpu tries it here)",
                             "skipped"))
        else:
            rows.append(_replayed(path, check, device, strict, issues))
    _print_table(rows)
    outcomes = [row.outcome for row in rows]
    print(summary_line(outcomes))
    return folder_exit_code(outcomes)


def _print_table(rows: list[_Row]) -> None:
    cells = [("file", "target", "device", "saved verdict")] + [
        (row.path.name, row.target, row.device, row.verdict) for row in rows]
    widths = [max(len(cell[i]) for cell in cells) for i in range(4)]
    for cell, result in zip(cells, ["result"] + [row.result for row in rows]):
        print("  ".join(text.ljust(width) for text, width in zip(cell, widths)) + "  " + result)
