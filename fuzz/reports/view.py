"""What a failure shows, decided once: the view the terminal, Markdown and HTML render.

Before this each renderer read ``Failure`` and ``TargetEntry`` (fuzz/records/model.py) on its own and decided
again what a failure shows -- which label its example gets, whether it is flaky, which sides raised, its replay
command -- and they drifted (the Markdown list did not call a failure of a flaky target flaky; the table above
it did). Now ``failure_views`` builds one ``FailureView`` per failure from the records, and the renderers
(``fuzz.reports.report.failure_text``, ``fuzz.reports.formats.failure_markdown``, ``fuzz.reports.html.failure_html``)
only format it: what to show is decided here, how to show it (truncation, escaping, layout) there.

No torch here: the view is plain data, like the records it is built from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fuzz.records.model import SIDES, Failure, TargetEntry
from fuzz.records.verdicts import CRASH_VERDICTS


@dataclass(frozen=True)
class MismatchView:
    """One place where the two sides' outputs part: the leaf's path, what differs there, in words."""

    path: str
    what: str
    detail: str


@dataclass(frozen=True)
class FailureView:
    """Everything a failure's lines show, in every format."""

    target: str
    device: str
    verdict: str  # the example verdict, lower case ("divergence"); the terminal shouts it
    example: Mapping[str, Any]  # the input that failed, as its repro file holds it
    # A crashing input is journaled, not shrunk: "input"; every other failure's is the minimal one Hypothesis
    # shrank to.
    shrunk: bool = True
    mismatches: tuple[MismatchView, ...] = ()
    flaky: bool = False  # the failure, or its target in this run, did not reproduce every time
    confirmed: str | None = None  # "k/n": reproduced k of n fresh replays (--confirm)
    unconfirmed: str | None = None  # why --confirm's replays did not run
    known: str | None = None  # the known-issues entry that accepts it; None: a new failure
    oracles: tuple[str, ...] = ()  # every oracle that flagged the input, the verdict's first
    raised: tuple[tuple[str, str], ...] = ()  # (side, exception) for each side that raised
    repro: str | None = None  # the saved repro file, as the run shows paths (fuzz.run.session.shown_paths)

    @property
    def is_new(self) -> bool:
        return not self.known

    @property
    def example_label(self) -> str:
        return "minimal input" if self.shrunk else "input"

    @property
    def replay_command(self) -> str | None:
        return f"python -m fuzz replay {self.repro}" if self.repro else None


def failure_view(entry: TargetEntry, failure: Failure) -> FailureView:
    """The view of one failure of ``entry``."""
    return FailureView(
        target=entry.name, device=failure.device, verdict=str(failure.verdict), example=dict(failure.input),
        shrunk=failure.verdict not in CRASH_VERDICTS,
        mismatches=tuple(MismatchView(m["path"], m["what"], m["detail"]) for m in failure.mismatches),
        # A target Hypothesis saw flake makes each of its failures suspect, as its table row says (label_on).
        flaky=failure.flaky or entry.flaky, confirmed=failure.confirmed, unconfirmed=failure.unconfirmed,
        known=failure.known, oracles=tuple(failure.oracles),
        raised=tuple((side, str(failure.exceptions[side])) for side in SIDES if failure.exceptions.get(side)),
        repro=failure.repro)


def failure_views(entries: Iterable[TargetEntry]) -> list[FailureView]:
    """Every failure of ``entries``, target by target in report order."""
    return [failure_view(entry, failure) for entry in entries for failure in entry.failures]
