"""``merge-reports``: several JSON reports (shards, hosts, nights) as one.

Each report is read back into the model (``Report.from_json``: a report of
another format version, or one with a missing or mistyped field, is one clear
error), then added up: entries of the same target sum their examples, verdict
counts and sync histograms per device and keep each failure once
(``Failure.signature``). So two shards merge into the totals one run would
have produced, and the exit code follows the same rule as the run's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import reduce
from pathlib import Path

from fuzz.errors import UsageError
from fuzz.model import Report


def read_report(name: str) -> Report:
    try:
        data = json.loads(Path(name).read_text())
    except FileNotFoundError:
        raise UsageError(f"report {name!r} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"report {name!r} is a directory; pass a JSON report file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"report {name!r} is not valid JSON ({exc})") from None
    return Report.from_json(data, name)


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report from several."""
    if not reports:
        raise UsageError("merge-reports needs at least one report file")
    return reduce(lambda a, b: a + b, reports)
