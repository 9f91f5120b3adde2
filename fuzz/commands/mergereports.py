"""``merge-reports``: the reports of a run's shards or hosts merged into one, as a command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from fuzz.records.model import EXIT_OK, EXIT_USAGE
from fuzz.reports.preflight import check_no_collisions, check_outputs
from fuzz.reports.report import closing_line
from fuzz.run.session import markdown_images, write_outputs


def merge_reports(inputs: Sequence[str], *, output: str | None = None, markdown: str | None = None,
                  junit: str | None = None, html: str | None = None) -> int:
    """``merge-reports IN... [-o OUT]``: the JSON reports of shards or hosts merged into one run's report, printed
    and written where asked. Its exit code is the merged run's (3 partial); 2 when nothing was asked to be
    written and the merged run passed (a merge that writes nothing is a mistake)."""
    from fuzz.reports.merge import incomplete_note, read_report
    from fuzz.reports.merge import merge_reports as merged_report
    from fuzz.reports.report import report_notes, summary_table

    outputs = check_outputs({"report": output, "markdown": markdown, "junit": junit, "html": html},
                            labels={"report": "OUT"})
    check_no_collisions({**{"OUT" if name == "report" else f"--{name}": path for name, path in outputs.items()},
                         **markdown_images(outputs)}, {"IN": [Path(name) for name in inputs]})
    # Every refusal (unreadable, overlapping, another run's) is raised here, before anything is written.
    merged = merged_report([(name, read_report(name)) for name in inputs])
    print(summary_table(merged.targets))
    for line in report_notes(merged):
        print(line)
    note = incomplete_note(merged)
    if note:
        print(note, file=sys.stderr)
    where_asked = write_outputs(merged, outputs)
    print(closing_line(merged))
    if not where_asked:
        return merged.exit_code() if merged.exit_code() != EXIT_OK else EXIT_USAGE
    return merged.exit_code()
