"""Measuring what each side actually ran: per target × device × side, the lines and branches of the
definitions the target claims, and every function entered (docs/reach.md).

A report's "agree" is evidence only for code that ran. While a target is fuzzed, each side's work --
building its inputs and its call, on the schedule ``Measure.wants`` keeps -- is traced in the files of the
two sides' modules, one context per device. Two collectors record the same arcs (``reach_core``): on
Python 3.12 fuzz/reach/monitor.py's, on sys.monitoring events of those files' code objects only; elsewhere
coverage.py's C tracer (named: coverage.py's own sys.monitoring core keeps no per-device contexts and, before
3.14, no branches), started and stopped around each traced call. At the end of the target the data is cut
into definitions (fuzz/code/codediff.py's, the same that "same code" and the change's coverage compare): the
claimed ones (``side_code``: by qualname, or by provenance's mapping for a claim held under another name)
and every function executed. The JSON model, and how parts add up, is fuzz/records/reachdata.py (no torch, no
coverage.py: reports are read anywhere); coverage.py is imported only when a run measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzz.reach.monitor import MonitorCollector, arc_lines, reach_core
from fuzz.records.reachdata import SIDES

# --------------------------------------------------------------------------- measuring

class Measure:
    """What the two sides' module files ran while one target is fuzzed; one context per device.

    ``claims`` per side: {copy qualname: upstream ref} of the definitions the target claims (from
    provenance's mapping, fuzz/releases/matching.py, so a copy unit that stands for an upstream
    definition of another name counts for it); ``upstream`` per side: (the source's lines of each claimed
    definition, for the line map) -- see ``side_code``. The arcs come from the collector ``reach_core``
    picks: fuzz/reach/monitor.py's on sys.monitoring, or coverage.py's C tracer (``CoverageCollector``);
    both have ``start``, ``switch``, ``stop`` and ``arcs``."""

    def __init__(self, sides: Mapping[str, SideCode], every_call: bool = False) -> None:
        self.every_call = every_call
        self.sides = dict(sides)
        files = sorted({code.path for code in self.sides.values()})
        self.core = reach_core()
        self.collector = MonitorCollector(files) if self.core == "sysmon" else CoverageCollector(files)
        self.refused: str | None = None
        self.running = False
        self.calls: dict[tuple[str, str], int] = {}  # (device, side) -> calls seen
        self.measured: dict[tuple[str, str], int] = {}  # of which traced

    def wants(self, device: str, side: str) -> bool:
        """Trace this call? The first ``MEASURE_ALL`` calls per device and side, then one in
        ``MEASURE_EVERY``: the lines a target reaches are nearly all reached early, and tracing every call
        of a long nightly costs examples (bench part v). Each side's n-th call is the same example's (one
        call per side per example), so both sides are measured on the same examples. The report says how
        many calls were traced (``measured`` of ``calls``). With a side from a source every call is traced
        (``every_call``): the change's coverage, and --require-changes-covered's exit 3, must not call a
        definition "not covered" that an untraced example ran."""
        if side not in SIDES:
            return False
        key = (device, side)
        n = self.calls[key] = self.calls.get(key, 0) + 1
        take = self.every_call or n <= MEASURE_ALL or n % MEASURE_EVERY == 0
        if take:
            self.measured[key] = self.measured.get(key, 0) + 1
        return take

    def start(self) -> bool:
        """Make this the process's active measure (``measuring`` then traces each side's call), unless
        the process is measured already (pytest-cov, say: a second tracer would steal its data) or the
        collector cannot start (``refused`` says why)."""
        import coverage

        if coverage.Coverage.current() is not None:
            self.refused = "another coverage measurement is running in this process"
            return False
        self.refused = self.collector.start()
        if self.refused is not None:
            return False
        _ACTIVE[:] = [self]
        return True

    def on(self, device: str) -> None:
        """Trace from here: one side's upstream call on ``device``. Only the calls are traced -- not
        Hypothesis, building inputs, comparing or the oracles: tracing the whole target cost +57..103% per
        example on the 2-core host, tracing each example +16..57% (bench part v, lab/benchmarks/history.md)."""
        if self.refused is None and not self.running:
            self.collector.switch(device)
            self.running = True

    def off(self) -> None:
        if self.running:
            self.collector.switch(None)
            self.running = False

    def stop(self) -> None:
        """The target is done: nothing more is traced in this process for it (the data stays)."""
        self.off()
        self.collector.stop()
        if _ACTIVE and _ACTIVE[0] is self:
            _ACTIVE.clear()

    def result(self, devices: Any) -> dict[str, dict[str, Any]]:
        """device -> side -> record (the JSON the report keeps)."""
        if self.refused is not None:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for device in devices:
            out[device] = {}
            for side, code in self.sides.items():
                arcs = self.collector.arcs(device, code.path)
                out[device][side] = {**code.record(arc_lines(arcs), arcs),
                                     "calls": self.calls.get((device, side), 0),
                                     "measured": self.measured.get((device, side), 0)}
        return out


class CoverageCollector:
    """coverage.py's C tracer over ``files``, started and stopped around each traced call, the device as
    its dynamic context (where sys.monitoring is not used: fuzz/reach/monitor.py ``reach_core``)."""

    def __init__(self, files: list[str]) -> None:
        import coverage

        # No data file, no config file: what we measure must not depend on the user's .coveragerc, and
        # must not write .coverage files into their folder.
        self.coverage = coverage.Coverage(data_file=None, branch=True, include=files, config_file=False)
        # The C tracer, also where coverage.py would pick sys.monitoring (3.14+): that core keeps no dynamic
        # contexts ("context data may be incomplete"), and the contexts are the devices.
        try:
            self.coverage.set_option("run:core", "ctrace")
        except coverage.CoverageException:  # before 7.9 there is no such setting, and ctrace is the default
            pass
        # A device that ran no example of this item has no data: not a warning, the report says untested.
        self.coverage.set_option("run:disable_warnings", ["no-data-collected", "module-not-measured",
                                                             "already-imported"])
        self.context: str | None = None  # coverage.py keeps it across a stop and a start
        self.running = False

    def start(self) -> str | None:
        return None  # the tracer starts at the first traced call

    def switch(self, context: str | None) -> None:
        if context is None:
            if self.running:
                self.coverage.stop()
                self.running = False
            return
        if not self.running:
            self.coverage.start()
            self.running = True
        if context != self.context:
            self.coverage.switch_context(context)
            self.context = context

    def stop(self) -> None:
        self.switch(None)

    def arcs(self, context: str, path: str) -> set[tuple[int, int]]:
        import re

        data = self.coverage.get_data()
        data.set_query_contexts([f"^{re.escape(context)}$"])
        try:
            return set(data.arcs(path) or [])
        finally:
            data.set_query_contexts(None)


def _reporting_settings() -> Any:
    """A Coverage object that is never started, only read for its settings (no exclusions but the
    defaults, no user config file) by the file reporter that cuts a file into statements and arcs."""
    import coverage

    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = coverage.Coverage(data_file=None, config_file=False, branch=True)
    return _SETTINGS


_SETTINGS: Any = None
_REPORTERS: dict[str, Any] = {}  # file -> its coverage.py reporter (parsing a file compiles it: once)


class SideCode:
    """One side's module file, cut into definitions once: what can be reached, and where it came from."""

    def __init__(self, path: str, label: str, claims: Mapping[str, str],
                 upstream_lines: Mapping[str, tuple[int, list[str]]] | None = None,
                 stand_ins: set[str] | frozenset[str] = frozenset()) -> None:
        """``claims``: copy qualname -> upstream ref; ``upstream_lines``: upstream ref -> (first line of the
        upstream definition in its source, its lines), for the line map (absent: no map)."""
        import ast

        from coverage.python import PythonFileReporter

        from fuzz.code.codediff import definitions, walk_definitions
        from fuzz.releases import HEADER_RE, CopyLines, align, normalize

        self.path, self.label = path, label
        with open(path, encoding="utf-8") as handle:
            self.text = text = handle.read()
        self.reporter = reporter = _REPORTERS.get(path) or _REPORTERS.setdefault(
            path, PythonFileReporter(path, coverage=_reporting_settings()))
        self.statements = set(reporter.lines())
        exits = reporter.exit_counts()
        self.branch_lines = {line for line, n in exits.items() if n > 1}
        self.all_arcs = {arc for arc in reporter.arcs() if arc[0] in self.branch_lines}
        self.defs = definitions(text)
        adapted_rows = CopyLines.from_text(text).adapted
        multiline = reporter.multiline_map()
        adapted_statements = {multiline.get(row, row) for row in adapted_rows}
        rows = text.splitlines()
        self.bodies: dict[str, set[int]] = {}
        for node, qualname in walk_definitions(ast.parse(text).body, ""):
            if not isinstance(node, ast.ClassDef):  # a getter and its setter: one definition, both bodies
                self.bodies[qualname] = self.bodies.get(qualname, set()) | self._body(node)
        self.units: dict[str, dict[str, Any]] = {}
        for qualname, ref in claims.items():
            unit = self.defs.get(qualname)
            if unit is None:
                continue
            if unit.kind == "class":
                self.units[qualname] = {"upstream": ref, "first_line": unit.first_line, "digest": unit.digest,
                                        "kind": "class", "lines": [], "adapted": [], "arcs": [],
                                        "methods": sorted(q for q in self.bodies if q.startswith(qualname + "."))}
                continue
            body = self.bodies[qualname]
            lines = sorted(line for line in body if line not in adapted_statements)
            record: dict[str, Any] = {
                "upstream": ref, "first_line": unit.first_line, "digest": unit.digest, "kind": "function",
                "lines": lines, "adapted": sorted(body & adapted_statements),
                "arcs": sorted([list(a) for a in self.all_arcs if a[0] in body])}
            if upstream_lines and ref in upstream_lines:
                start, theirs = upstream_lines[ref]
                mine = rows[unit.first_line - 1:unit.last_line]
                pairs = dict(align([normalize(r) for r in mine], [normalize(r) for r in theirs]))
                # The def line, as the copy's first_line is (the upstream span starts at its decorators).
                record["upstream_first_line"] = start + next(
                    (i for i, row in enumerate(theirs) if HEADER_RE.match(row)), 0)
                record["upstream_lines"] = [start + pairs[line - unit.first_line]
                                            if line - unit.first_line in pairs else None for line in lines]
            if qualname in stand_ins:
                record["stand_in"] = True
            self.units[qualname] = record

    def _body(self, node: Any) -> set[int]:
        """A function's executable lines after its signature (the ``def`` line runs at import, before any
        measuring); functions nested in it belong to it."""
        first = node.body[0].lineno if node.body else node.lineno
        return {line for line in self.statements if first <= line <= (node.end_lineno or first)}

    def record(self, lines: Any, arcs: Any) -> dict[str, Any]:
        reached_lines = set(self.reporter.translate_lines(lines))
        reached_arcs = set(self.reporter.translate_arcs(arcs))
        definitions: dict[str, Any] = {}
        for qualname, unit in self.units.items():
            unit = dict(unit)
            if unit["kind"] == "class":
                unit["entered"] = any(self.bodies[m] & reached_lines for m in unit.pop("methods"))
                unit["reached"], unit["reached_arcs"] = [], []
            else:
                own = set(unit["lines"]) | set(unit["adapted"])
                unit["reached"] = sorted(own & reached_lines)
                unit["reached_arcs"] = sorted([list(a) for a in reached_arcs if list(a) in unit["arcs"]])
            definitions[qualname] = unit
        # The branches each executed function took (its own arcs out of lines with more than one exit): the
        # change's coverage lists the changed ones no example took (fuzz/reach/changes.py).
        executed = {q: {"digest": self.defs[q].digest, "lines": len(body), "reached": sorted(body & reached_lines),
                        "reached_arcs": sorted([list(a) for a in reached_arcs
                                                if a[0] in body and a in self.all_arcs])}
                    for q, body in self.bodies.items() if body & reached_lines}
        return {"file": self.label, "path": self.path, "definitions": definitions,
                "executed": dict(sorted(executed.items()))}


class FileView:
    """A measured file cut for the change's coverage (fuzz/reach/changes.py): its rows, statements (coverage.py's),
    the statement each row belongs to, its branch arcs, and each function's body statements."""

    def __init__(self, path: str) -> None:
        import ast

        from coverage.python import PythonFileReporter

        from fuzz.code.codediff import definitions, walk_definitions

        with open(path, encoding="utf-8") as handle:
            self.text = handle.read()
        self.rows = self.text.splitlines()
        reporter = _REPORTERS.get(path) or _REPORTERS.setdefault(
            path, PythonFileReporter(path, coverage=_reporting_settings()))
        self.statements = set(reporter.lines())
        self.multiline = dict(reporter.multiline_map())
        branch_lines = {line for line, n in reporter.exit_counts().items() if n > 1}
        self.branch_arcs = {arc for arc in reporter.arcs() if arc[0] in branch_lines}
        self.defs = definitions(self.text)
        self.bodies: dict[str, set[int]] = {}
        for node, qualname in walk_definitions(ast.parse(self.text).body, ""):
            if not isinstance(node, ast.ClassDef):
                first = node.body[0].lineno if node.body else node.lineno
                self.bodies[qualname] = self.bodies.get(qualname, set()) | {
                    line for line in self.statements if first <= line <= (node.end_lineno or first)}

    def statement(self, line: int) -> int:
        return self.multiline.get(line, line)


_VIEWS: dict[str, FileView | None] = {}


def file_view(path: str) -> FileView | None:
    """The file a side record measured, cut once per process; None when it is not here or not Python."""
    if path not in _VIEWS:
        try:
            _VIEWS[path] = FileView(path)
        except (OSError, SyntaxError, ValueError):
            _VIEWS[path] = None
    return _VIEWS[path]


_CODES: dict[tuple[str, str, tuple[str, ...]], SideCode] = {}
_MAPS: dict[tuple[str, str], dict[str, str]] = {}  # (file, source) -> provenance's copy qualname -> upstream ref


def side_code(target: Any, side: str, config: Any) -> SideCode:
    """The measured view of ``side``'s module for ``target`` (already bound to the run's sides):
    which of its definitions stand for the target's claims, and each one's upstream lines.

    A definition claims the upstream one of its qualname; a claim no definition of that name stands for
    goes to the definition provenance verified against it (legacy's ``prepare_encoder_metadata``,
    extracted from 0.27.1's ``forward``, stands for ``forward``). The upstream text is the release the copy
    was taken from, or the side's own source for a rebuilt side. Cut once per process per file and target."""
    from pathlib import Path

    from fuzz.releases import (
        COPY,
        base_source,
        catalog_paths,
        check_copy,
        side_source,
        upstream_file,
        upstream_files_by_module,
    )
    from fuzz.targets import PROJECT_ROOT, all_targets

    impl = target.impl(side)
    path = str(Path(impl.module.__file__).resolve())
    spec = getattr(config, side)
    key = (path, target.name, tuple(target.upstream))
    if key in _CODES:
        return _CODES[key]
    file = Path(path)
    short = impl.module.__name__.rpartition(".")[2]
    if spec == COPY:
        label = file.relative_to(PROJECT_ROOT).as_posix() if file.is_relative_to(PROJECT_ROOT) else path
        source = base_source(target.versions[SIDES.index(side)], config.sources)  # opened once per process
    else:
        template = getattr(impl.module, "SYNCFUZZ_FORM", side)
        label = f"{template}/{short}.py rebuilt from {spec}"
        source = side_source(spec, config.sources).source
    text = file.read_text(encoding="utf-8")
    from fuzz.code.codediff import definitions
    from fuzz.releases import CopyLines

    names = definitions(text)
    by_qualname = {ref.partition("::")[2]: ref for ref in target.upstream}
    claims = {q: by_qualname[q] for q in names if q in by_qualname}
    # A claim no definition of that name stands for may be held under another name (legacy's
    # prepare_encoder_metadata is 0.27.1's forward, extracted): provenance knows which. It costs ~0.4 s a
    # file, so it runs only then (once per file and source).
    if source is not None and set(target.upstream) - set(claims.values()):
        map_key = (path, getattr(source, "label", ""))
        if map_key not in _MAPS:
            paths = list(dict.fromkeys([*upstream_files_by_module(list(all_targets().values())).get(short, []),
                                        *catalog_paths()]))
            try:
                _MAPS[map_key] = {u.qualname: u.upstream for u in check_copy(label, text, source, paths, side).units
                                  if u.upstream}
            except Exception:  # noqa: BLE001 -- a map we cannot make leaves the qualname matches
                _MAPS[map_key] = {}
        for copy_name, origin in _MAPS[map_key].items():
            if origin in by_qualname.values() and origin not in claims.values():
                claims[copy_name] = origin  # what provenance verified it against wins over its name
    # In a side rebuilt from a source, a definition whose header is ADAPTED keeps the copy's text
    # (fuzz/releases/sidebuild.py): it is the harness' code, whatever the source says.
    # A source that holds the claimed files exactly as the release the copy was taken from (``--legacy
    # vllm==0.27.1`` on legacy/) is what the copy stands for: its stand-ins count as the copy's do.
    template = getattr(impl.module, "SYNCFUZZ_FORM", side)
    adapted_rows = CopyLines.from_text(text).adapted if spec != COPY and not _as_copied(
        target, template, source, config.sources) else set()
    stand_ins = {q for q in claims if names[q].first_line in adapted_rows}
    upstream_lines: dict[str, tuple[int, list[str]]] = {}
    if source is not None:
        for ref in set(claims.values()):
            up_path, _, up_qualname = ref.partition("::")
            parsed = upstream_file(source, up_path)
            spans = parsed.spans.get(up_qualname) if parsed else None
            if spans:
                span = spans[-1]
                upstream_lines[ref] = (span.start, parsed.lines[span.start - 1:span.end])
    _CODES[key] = SideCode(path, label, claims, upstream_lines, stand_ins)
    return _CODES[key]


def _as_copied(target: Any, template: str, source: Any, search: Any) -> bool:
    """Whether ``source`` holds every file of the target's claims as the release its ``template`` copy was
    taken from does (the same text): a side rebuilt from it is the copy's code, stand-ins included."""
    from fuzz.releases import base_source

    if source is None or template not in SIDES:
        return False
    base = base_source(target.versions[SIDES.index(template)], search)
    files = {ref.partition("::")[0] for ref in target.upstream}
    return base is not None and all(source.read(path) == base.read(path) for path in files)


MEASURE_ALL = 32  # calls per device and side traced from the start of a target's run (in each process)
MEASURE_EVERY = 8  # then one call in this many
_ACTIVE: list[Measure] = []  # the measure of the target this process is fuzzing (at most one)


class measuring:
    """Around one side's work (fuzz/engine/execute.py): trace it if a target is being measured and the call is one
    of those the schedule measures (``Measure.wants``). ``stop()`` ends tracing early (before the harness'
    own work that follows the call); leaving the block always ends it."""

    def __init__(self, device: str, side: str) -> None:
        self.device, self.side = device, side

    def __enter__(self) -> measuring:
        if _ACTIVE and _ACTIVE[0].wants(self.device, self.side):
            _ACTIVE[0].on(self.device)
        return self

    def stop(self) -> None:
        if _ACTIVE:
            _ACTIVE[0].off()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def measure_for(target: Any, config: Any) -> Measure:
    from fuzz.releases import COPY

    every_call = config.legacy != COPY or config.optimized != COPY
    return Measure({side: side_code(target, side, config) for side in SIDES}, every_call)


def static_same_code(target: Any, config: Any) -> str | None:
    """Before any example: are the definitions a call of the target's entry point may run (followed
    statically, fuzz/releases/sidebuild.py ``reach``) the same code on both sides? Then the run compares a function
    with itself, and says so (``same_code``: which definitions, from where). None when they differ, or
    when a side cannot be read."""
    from fuzz.releases import entry_digests

    found = [entry_digests(target.impl(side)) for side in SIDES]
    if found[0] and found[0] == found[1]:
        return (f"both sides run the same code: {len(found[0])} definitions reachable from "
                f"{target.legacy.partition(':')[2]} are the same text on both sides (comments and "
                f"docstrings aside); legacy {config.legacy}, optimized {config.optimized}")
    return None
