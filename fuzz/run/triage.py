"""After a run: confirm each failure in fresh processes, and set aside the
findings a team has accepted.

* Confirmation: every saved failure is replayed N times (default 3), each in
  its own process, under the run config saved with it (fuzz/engine/repro.py), so a
  replay is the same run for that one input. A failure that does not
  reproduce every time is labelled **flaky** -- reported, but marked as such
  (GPU nondeterminism, races).
* Known issues: a checked-in JSON file lists accepted findings by signature
  (target, verdict, optionally the exception types and mismatch kind, the
  contract) with a written reason. Matching failures are still reported,
  labelled ``known``, and do not make the run fail.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from fuzz.errors import FuzzError, UsageError, unknown_name
from fuzz.records.model import Failure, Interrupted, TargetEntry
from fuzz.records.verdicts import EXAMPLE_VERDICTS
from fuzz.releases import version_key
from fuzz.targets import CONTRACTS

KNOWN_FORMAT = "syncfuzz-known-issues/1"
_MATCH_KEYS = {"target", "verdict", "contract", "exceptions", "mismatch", "oracle", "optimized", "reason"}
# ``"optimized": "vllm>=0.31.0"``: the issue holds only where the run's optimized side is a source (a release or
# a checkout) of that version or later -- an upstream behaviour change accepted for today's releases, which
# the copies, and a side older than the change, must still be held to.
_OPTIMIZED_RE = re.compile(r"vllm\s*>=\s*(\d+(?:\.\d+)*)")


def load_known_issues(path: Path, targets: Iterable[str] | None = None) -> list[dict]:
    """Read and validate a known-issues file; problems are one UsageError line.
    An entry whose target (of ``targets``) or verdict is misspelt would never
    match, and nobody would be told: it is refused with the closest names."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--known-issues {str(path)!r} does not exist; create it or drop the flag") from None
    except IsADirectoryError:
        raise UsageError(f"--known-issues {str(path)!r} is a directory; pass the JSON file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--known-issues {str(path)!r} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != KNOWN_FORMAT or not isinstance(data.get("issues"), list):
        raise UsageError(f"--known-issues {str(path)!r} must be an object with format {KNOWN_FORMAT!r} "
                         "and an 'issues' list")
    for index, issue in enumerate(data["issues"]):
        if not isinstance(issue, dict) or not {"target", "verdict", "reason"} <= issue.keys():
            raise UsageError(f"--known-issues {str(path)!r}: issue {index} needs 'target', 'verdict' and 'reason'")
        unknown = set(issue) - _MATCH_KEYS
        if unknown:
            raise UsageError(f"--known-issues {str(path)!r}: issue {index} has unknown keys {sorted(unknown)}")
        if not str(issue["reason"]).strip():
            raise UsageError(f"--known-issues {str(path)!r}: issue {index} has an empty reason; say why it is accepted")
        where = f"--known-issues {str(path)!r}: issue {index}: "
        if issue["verdict"] not in EXAMPLE_VERDICTS:
            close = difflib.get_close_matches(str(issue["verdict"]), sorted(EXAMPLE_VERDICTS), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(sorted(EXAMPLE_VERDICTS))}"
            raise UsageError(where + f"verdict {issue['verdict']!r} is not a verdict; {hint}")
        if targets is not None and issue["target"] not in set(targets):
            raise UsageError(where + str(unknown_name("target", str(issue["target"]), targets)))
        if "optimized" in issue and not _OPTIMIZED_RE.fullmatch(str(issue["optimized"]).strip()):
            raise UsageError(where + f"optimized {issue['optimized']!r} is not a release range; write it as "
                                     "'vllm>=X.Y.Z' (the optimized side's release or later)")
        if "contract" in issue and issue["contract"] not in CONTRACTS:
            raise UsageError(where + f"contract {issue['contract']!r} is not one of {', '.join(CONTRACTS)}")
    return data["issues"]


def _matches(issue: dict, target: str, contract: str, failure: Failure, optimized: str | None = None) -> bool:
    if issue["target"] != target or issue["verdict"] != failure.verdict:
        return False
    if "optimized" in issue:
        floor = _OPTIMIZED_RE.fullmatch(str(issue["optimized"]).strip())
        if optimized is None or floor is None or version_key(optimized) < version_key(floor.group(1)):
            return False
    if "contract" in issue and issue["contract"] != contract:
        return False
    if "exceptions" in issue and issue["exceptions"] != dict(failure.exceptions):
        return False
    if "mismatch" in issue and issue["mismatch"] not in {m["what"] for m in failure.mismatches}:
        return False
    # One oracle's finding ("invariant NAME", "reference"), not every failure of the verdict.
    if "oracle" in issue and issue["oracle"] not in failure.oracles:
        return False
    return True


def known_reason(issues: list[dict], target: str, contract: str, failure: Failure,
                 optimized: str | None = None) -> str | None:
    """The reason of the first issue that accepts ``failure`` of ``target`` (None: a new failure)."""
    issue = next((i for i in issues if _matches(i, target, contract, failure, optimized)), None)
    return issue["reason"] if issue else None


def mark_known(entries: list[TargetEntry], issues: list[dict], contract: str,
               optimized: str | None = None) -> list[TargetEntry]:
    """The entries with each failure that an issue accepts labelled with its reason. ``optimized``: the
    version of the run's optimized side where it is a source (None: the copy, or a checkout without one)."""
    def labelled(entry: TargetEntry, failure: Failure) -> Failure:
        reason = known_reason(issues, entry.name, contract, failure, optimized)
        return replace(failure, known=reason) if reason else failure

    return [entry.with_failures(labelled(entry, f) for f in entry.failures) for entry in entries]


# A replay needs a fresh process (torch import, maybe a CUDA context): below
# this many seconds left of the budget, the rest are left unconfirmed.
MIN_REPLAY_SECONDS = 10.0


def confirm(entries: list[TargetEntry], runs: int, until: float | None = None) -> list[TargetEntry]:
    """The entries with each saved failure replayed ``runs`` times in fresh
    processes; with ``until`` (time.monotonic), only while the budget lasts --
    a failure left unconfirmed keeps ``confirmed`` empty, says why in
    ``unconfirmed`` and is reported as found.

    A signal (KeyboardInterrupt, fuzz/run/interrupts.py) stops the replays: the
    replay in flight is killed with its process (fuzz/run/replay.py) and
    ``Interrupted`` carries every entry, with the failures confirmed so far, so
    the report still says all that was found (it labels the rest unconfirmed)."""
    import time

    from fuzz.run.interrupts import interrupted_by

    if runs <= 0 or not any(failure.repro for entry in entries for failure in entry.failures):
        # Nothing to replay: no import of the replay machinery (torch, in this parent: 2 s of every clean run).
        return [replace(entry, failures=tuple(entry.failures)) for entry in entries]
    from fuzz.run.replay import replay_file

    def confirmed(failure: Failure) -> Failure:
        if not failure.repro or runs <= 0:
            return failure
        if until is not None and until - time.monotonic() < MIN_REPLAY_SECONDS * runs:
            return replace(failure, unconfirmed="the --budget ran out before its replays")
        try:
            reproduced = sum(replay_file(failure.repro).still_fails for _ in range(runs))
        except FuzzError as exc:
            # The failure was found; only its confirmation broke (a side's source changed under
            # the run, say): report it unconfirmed rather than lose the whole run's report.
            sys.stderr.write(f"[fuzz] could not confirm {failure.repro}: {exc}\n")
            return replace(failure, unconfirmed=f"its replay could not run: {exc}")
        return replace(failure, confirmed=f"{reproduced}/{runs}", flaky=reproduced < runs)

    # Filled in place, failure by failure, so an interrupt keeps every replay that finished.
    failures = [list(entry.failures) for entry in entries]
    try:
        for mine in failures:
            for index, failure in enumerate(mine):
                mine[index] = confirmed(failure)
    except KeyboardInterrupt:
        # The failures not replayed are labelled by the interrupted run's report (cli._finish_interrupted).
        signal_name = interrupted_by()
        raise Interrupted([entry.with_failures(mine) for entry, mine in zip(entries, failures)], signal_name) from None
    return [replace(entry, failures=tuple(mine), flaky=entry.flaky or any(f.flaky for f in mine))
            for entry, mine in zip(entries, failures)]


def label_unconfirmed(entries: list[TargetEntry], why: str) -> list[TargetEntry]:
    """Each saved failure that confirmation would have replayed, labelled with ``why`` it was not."""
    return [entry.with_failures([replace(f, unconfirmed=why) if f.repro and not (f.confirmed or f.unconfirmed)
                                 else f for f in entry.failures]) for entry in entries]
