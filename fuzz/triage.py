"""After a run: confirm each failure in fresh processes, and set aside the
findings a team has accepted.

* Confirmation: every saved failure is replayed N times (default 3), each in
  its own process. A failure that does not reproduce every time is labelled
  **flaky** -- reported, but marked as such (GPU nondeterminism, races).
* Known issues: a checked-in JSON file lists accepted findings by signature
  (target, verdict, optionally the exception types and mismatch kind, the
  contract) with a written reason. Matching failures are still reported,
  labelled ``known``, and do not make the run fail.
"""

from __future__ import annotations

import json
from pathlib import Path

from fuzz.errors import UsageError

KNOWN_FORMAT = "syncfuzz-known-issues/1"
_MATCH_KEYS = {"target", "verdict", "contract", "exceptions", "mismatch", "reason"}


def load_known_issues(path: Path) -> list[dict]:
    """Read and validate a known-issues file; problems are one UsageError line."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--known-issues {str(path)!r} does not exist; create it or drop the flag") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--known-issues {str(path)!r} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != KNOWN_FORMAT or not isinstance(data.get("issues"), list):
        raise UsageError(f"--known-issues {str(path)!r} must be an object with format {KNOWN_FORMAT!r} and an 'issues' list")
    for index, issue in enumerate(data["issues"]):
        if not isinstance(issue, dict) or not {"target", "verdict", "reason"} <= issue.keys():
            raise UsageError(f"--known-issues {str(path)!r}: issue {index} needs 'target', 'verdict' and 'reason'")
        unknown = set(issue) - _MATCH_KEYS
        if unknown:
            raise UsageError(f"--known-issues {str(path)!r}: issue {index} has unknown keys {sorted(unknown)}")
        if not str(issue["reason"]).strip():
            raise UsageError(f"--known-issues {str(path)!r}: issue {index} has an empty reason; say why it is accepted")
    return data["issues"]


def _matches(issue: dict, target: str, contract: str, failure: dict) -> bool:
    if issue["target"] != target or issue["verdict"] != failure["verdict"]:
        return False
    if "contract" in issue and issue["contract"] != contract:
        return False
    if "exceptions" in issue and issue["exceptions"] != failure.get("exceptions"):
        return False
    if "mismatch" in issue and issue["mismatch"] not in {m["what"] for m in failure["mismatches"]}:
        return False
    return True


def mark_known(entries: list[dict], issues: list[dict], contract: str) -> None:
    for entry in entries:
        for failure in entry["failures"]:
            for issue in issues:
                if _matches(issue, entry["name"], contract, failure):
                    failure["known"] = issue["reason"]
                    break


def confirm(entries: list[dict], runs: int) -> None:
    """Replay each saved failure ``runs`` times in fresh processes."""
    from fuzz.replay import replay_file

    for entry in entries:
        for failure in entry["failures"]:
            if not failure.get("repro") or runs <= 0:
                continue
            reproduced = sum(replay_file(failure["repro"]).still_fails for _ in range(runs))
            failure["confirmed"] = f"{reproduced}/{runs}"
            failure["flaky"] = reproduced < runs
            if failure["flaky"]:
                entry["flaky"] = True


def unaccepted(entries: list[dict]) -> list[dict]:
    """The failures that should fail the run: not known, not fuzzer bugs."""
    return [f for e in entries for f in e["failures"] if not f.get("known")]
