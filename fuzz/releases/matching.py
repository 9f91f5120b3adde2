"""Parsing copies and upstream files into definitions, and the in-order line matcher."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import (
    ADAPTED_RE,
    MAX_GAP_LINES,
    MAX_HUNKS,
    UPSTREAM_PATH_RE,
)
from fuzz.releases.sources import (
    Source,
)

# --------------------------------------------------------------------------- parsing


def normalize(line: str) -> str:
    """A line modulo whitespace: stripped, inner runs collapsed to one space."""
    return " ".join(line.split())


@dataclass(frozen=True)
class Span:
    """One definition in a file: its full range and, for a class, its methods' ranges."""

    qualname: str
    kind: str  # "function" or "class"
    start: int  # first line, decorators included (1-based)
    end: int
    children: tuple[tuple[int, int], ...] = ()

    def own_rows(self) -> list[int]:
        """A function's rows; a class's rows outside its methods and nested classes."""
        inner = {row for lo, hi in self.children for row in range(lo, hi + 1)}
        return [row for row in range(self.start, self.end + 1) if row not in inner]


def def_start(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def is_def(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


def walk_spans(body: Iterable[ast.stmt], prefix: str = "") -> Iterator[Span]:
    """Top-level functions and classes, classes recursed into (methods, nested classes).

    Functions nested inside functions are part of their enclosing function.
    """
    for node in body:
        if not is_def(node):
            continue
        qualname = prefix + node.name
        if isinstance(node, ast.ClassDef):
            kids = [child for child in node.body if is_def(child)]
            children = tuple((def_start(k), k.end_lineno) for k in kids)
            yield Span(qualname, "class", def_start(node), node.end_lineno, children)
            yield from walk_spans(kids, qualname + ".")
        else:
            yield Span(qualname, "function", def_start(node), node.end_lineno)


def parse(text: str, name: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise UsageError(f"{name} is not valid Python ({exc.msg}, line {exc.lineno}); fix the file first") from exc


@dataclass
class UpstreamFile:
    """One upstream file, indexed by qualname, lines normalized once."""

    path: str
    lines: list[str]  # raw
    norm: list[str]
    spans: dict[str, list[Span]]  # a list: a property's getter and setter share one qualname

    @classmethod
    def from_text(cls, path: str, text: str) -> UpstreamFile:
        lines = text.splitlines()
        spans: dict[str, list[Span]] = {}
        for span in walk_spans(parse(text, path).body):
            spans.setdefault(span.qualname, []).append(span)
        return cls(path, lines, [normalize(line) for line in lines], spans)

    def rows(self, span: Span) -> list[int]:
        """Non-blank rows of a definition (blank lines are never compared)."""
        return [row for row in span.own_rows() if self.norm[row - 1]]

    def all_rows(self) -> list[int]:
        return [row for row in range(1, len(self.lines) + 1) if self.norm[row - 1]]


def upstream_file(source: Source, path: str) -> UpstreamFile | None:
    """``path`` in ``source``, parsed once per source: checks and drift revisit the same few files."""
    parsed: dict[str, UpstreamFile | None] = source.__dict__.setdefault("_parsed", {})
    if path not in parsed:
        text = source.read(path)
        parsed[path] = UpstreamFile.from_text(path, text) if text is not None else None
    return parsed[path]


@dataclass
class CopyLines:
    """Per-row facts about a copy file, from its tokens."""

    lines: list[str]
    adapted: set[int]  # rows marked ADAPTED (a multi-line string marked on its last row counts whole)
    comment_only: set[int]  # rows holding nothing but a comment

    @classmethod
    def from_text(cls, text: str) -> CopyLines:
        lines = text.splitlines()
        code_rows: set[int] = set()
        comments: dict[int, str] = {}
        multiline: list[tuple[int, int]] = []
        skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENCODING, tokenize.ENDMARKER}
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string
            elif tok.type not in skip:
                code_rows.update(range(tok.start[0], tok.end[0] + 1))
                if tok.end[0] > tok.start[0]:
                    multiline.append((tok.start[0], tok.end[0]))
        adapted = {row for row, comment in comments.items() if ADAPTED_RE.search(comment)}
        # A comment cannot sit inside a string, so a multi-line string (a docstring)
        # is marked on the row where it ends: the mark covers all of its rows.
        for lo, hi in multiline:
            if hi in adapted:
                adapted.update(range(lo, hi))
        comment_only = set(comments) - code_rows
        return cls(lines, adapted, comment_only)


HEADER_RE = re.compile(r"\s*(async\s+def|def|class)\b")


def header_row(lines: Sequence[str], span: Span) -> int:
    """The ``def``/``class`` row of a definition (after its decorators)."""
    for row in range(span.start, span.end + 1):
        if HEADER_RE.match(lines[row - 1]):
            return row
    return span.start


def first_row(facts: CopyLines, start: int) -> int:
    """Where a copy's definition starts, with the ADAPTED comment rows right above it.

    ``# @torch.compile(...)  # ADAPTED: run eagerly`` stands where an
    upstream decorator was: it belongs to the definition below it.
    """
    row = start
    while row > 1 and row - 1 in facts.comment_only and row - 1 in facts.adapted:
        row -= 1
    return row


# --------------------------------------------------------------------------- matching


def align(copy: Sequence[str], upstream: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence (copy index, upstream index).

    Greedy first: when the copy is a subsequence (the normal case) greedy finds
    it in linear time. Only on failure the quadratic LCS runs, so the reported
    mismatches are the fewest possible lines.
    """
    pairs, j = [], 0
    for i, line in enumerate(copy):
        while j < len(upstream) and upstream[j] != line:
            j += 1
        if j == len(upstream):
            break
        pairs.append((i, j))
        j += 1
    else:
        return pairs
    return _lcs(copy, upstream)


def is_subsequence(copy: Sequence[str], upstream: Sequence[str]) -> bool:
    it = iter(upstream)
    return all(line in it for line in copy)  # `in` on an iterator consumes it: in-order search


def _lcs(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if a[i] == b[j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


@dataclass
class UnitReport:
    """One checked unit of a copy: a function, a class's own lines, or module-level lines."""

    qualname: str  # in the copy; "<module>" for lines outside definitions
    first_line: int
    upstream: str | None = None  # "vllm/...py::Qual" it was verified against
    verified: int = 0
    adapted: int = 0
    blank: int = 0
    mismatched: list[int] = field(default_factory=list)  # copy rows not found upstream
    dropped: list[int] = field(default_factory=list)  # upstream code rows left out with no ADAPTED mark there
    stand_in: bool = False  # its def/class line is ADAPTED: upstream only as far as it needs
    problem: str = ""  # why the unit fails beyond its mismatched lines (missing qualname)
    diff: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatched and not self.dropped and not self.problem


@dataclass
class ModuleReport:
    """One copy module checked against one upstream version."""

    copy: str  # e.g. "optimized/keye.py"
    side: str
    version: str | None
    files: list[str]  # upstream files searched, target files first
    units: list[UnitReport] = field(default_factory=list)
    module_comments: int = 0  # comment-only rows outside definitions (license header, banners)
    header_docstring: int = 0  # rows of the copy's own provenance docstring
    missing_files: list[str] = field(default_factory=list)
    pair: tuple[str, str] | None = None  # the (legacy, optimized) versions of the targets using it

    @property
    def base(self) -> str | None:
        """The version this side was copied from (its targets' pair), else the source's."""
        return self.pair[("legacy", "optimized").index(self.side)] if self.pair and self.side else self.version

    @property
    def definitions(self) -> list[UnitReport]:
        return [u for u in self.units if u.qualname != "<module>"]

    @property
    def mismatched(self) -> int:
        return sum(len(u.mismatched) for u in self.units)

    @property
    def dropped(self) -> int:
        return sum(len(u.dropped) for u in self.units)

    @property
    def failed(self) -> list[UnitReport]:
        return [u for u in self.units if not u.ok]

    @property
    def adapted(self) -> int:
        return sum(u.adapted for u in self.units)

    @property
    def blank(self) -> int:
        return sum(u.blank for u in self.units)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.missing_files


class _Checker:
    """Checks one copy file against the upstream files it may come from."""

    def __init__(self, copy_name: str, text: str, upstream: list[UpstreamFile]) -> None:
        self.copy_name = copy_name
        self.tree = parse(text, copy_name)
        self.facts = CopyLines.from_text(text)
        self.upstream = upstream

    # -- classification

    def _split(self, rows: Iterable[int], unit: UnitReport) -> list[int]:
        """The rows to verify; counts adapted and blank rows on ``unit``."""
        checked = []
        for row in rows:
            if row in self.facts.adapted:
                unit.adapted += 1
            elif not self.facts.lines[row - 1].strip():
                unit.blank += 1
            else:
                checked.append(row)
        return checked

    def _norm(self, rows: Sequence[int]) -> list[str]:
        return [normalize(self.facts.lines[row - 1]) for row in rows]

    # -- definitions

    def check_span(self, span: Span) -> UnitReport:
        unit = UnitReport(span.qualname, span.start)
        rows = self._split(range(self._first_row(span.start), span.start), unit)  # leading ADAPTED comments
        rows += self._split(span.own_rows(), unit)
        header_row = self._header_row(span)
        stand_in = unit.stand_in = header_row in self.facts.adapted
        candidates = [(f, up) for f in self.upstream for up in f.spans.get(span.qualname, []) if up.kind == span.kind]
        if not candidates:
            if not stand_in:
                unit.problem = (f"{span.kind} {span.qualname} is not in upstream "
                                f"({', '.join(f.path for f in self.upstream)}) and its header is not ADAPTED")
            if not rows:
                return unit
            # A stand-in (header ADAPTED) may still hold upstream lines: find where they come from.
            candidates = self._closest(span.kind, rows)
            self._match(unit, rows, candidates, span, complete=False)
        else:
            self._match(unit, rows, candidates, span, complete=not stand_in)
        if unit.problem and unit.upstream:
            unit.problem += f"; closest upstream definition: {unit.upstream}"
        return unit

    def _header_row(self, span: Span) -> int:
        return header_row(self.facts.lines, span)

    def _closest(self, kind: str, rows: Sequence[int]) -> list[tuple[UpstreamFile, Span]]:
        """Upstream definitions sharing the most lines with ``rows`` (a cheap pre-filter)."""
        wanted = self._norm(rows)
        scored = []
        for f in self.upstream:
            for span in (s for same_name in f.spans.values() for s in same_name):
                if span.kind != kind:
                    continue
                have = {f.norm[r - 1] for r in f.rows(span)}
                scored.append((sum(line in have for line in wanted), f, span))
        scored.sort(key=lambda s: -s[0])
        return [(f, span) for score, f, span in scored[:3] if score > 0]

    def _match(self, unit: UnitReport, rows: list[int], candidates: list[tuple[UpstreamFile, Span]],
               span: Span, complete: bool) -> None:
        """Verify ``rows`` against the candidate with the fewest mismatches.

        ``complete``: the copy claims this definition verbatim (its header is
        not ADAPTED), so upstream code lines it leaves out must be marked too:
        an ADAPTED row where they would have been.
        """
        if not candidates:
            unit.mismatched = list(rows)
            unit.problem = unit.problem or "no upstream definition shares a line with it"
            return
        best = None
        for f, up_span in candidates:
            up_rows = f.rows(up_span)
            pairs = align(self._norm(rows), [f.norm[r - 1] for r in up_rows])
            missing = len(rows) - len(pairs)
            if best is None or missing < best[0]:
                best = (missing, f, up_span, up_rows, pairs)
            if missing == 0:
                break
        _, f, up_span, up_rows, pairs = best
        unit.upstream = f"{f.path}::{up_span.qualname}"
        unit.verified = len(pairs)
        matched = {i for i, _ in pairs}
        unit.mismatched = [row for i, row in enumerate(rows) if i not in matched]
        # Anchors: (copy row, index into up_rows) of matched lines, plus both ends.
        first = self._first_row(span.start)
        anchors = [(first - 1, -1), *((rows[i], j) for i, j in pairs), (span.end + 1, len(up_rows))]
        unmatched = set(unit.mismatched)
        # ADAPTED rows of this unit only: a mark inside a method says nothing about its class's lines.
        marks = {r for r in [*range(first, span.start), *span.own_rows()] if r in self.facts.adapted}
        gaps = []
        for (ca, ua), (cb, ub) in zip(anchors, anchors[1:]):
            copy_gap = [r for r in range(ca + 1, cb) if r in unmatched]
            up_gap = up_rows[ua + 1:ub]
            dropped = []
            if complete and not any(ca < r < cb for r in marks):
                # Dropping a comment changes nothing; dropping code must be marked.
                dropped = [r for r in up_gap if not f.norm[r - 1].startswith("#")]
            unit.dropped.extend(dropped)
            if copy_gap or dropped:
                gaps.append((ca if ua >= 0 else None, cb if ub < len(up_rows) else None, up_gap, copy_gap))
        unit.diff = self._hunks(f, gaps)

    def _first_row(self, start: int) -> int:
        return first_row(self.facts, start)

    def _hunks(self, f: UpstreamFile, gaps: list[tuple[int | None, int | None, list[int], list[int]]]) -> list[str]:
        """Unified-diff-like hunks: ``-`` upstream lines, ``+`` copy lines without a match.

        Each hunk sits between two matched lines (shown as context), so the
        upstream lines between them are what the copy lines replaced or dropped.
        """
        out: list[str] = []
        for n, (before, after, up_gap, copy_gap) in enumerate(gaps):
            if n == MAX_HUNKS:
                out.append(f"  ... {len(gaps) - MAX_HUNKS} more hunks not shown")
                break
            where = f"{f.path}:{up_gap[0]}" if up_gap else f.path
            out.append(f"  @@ {self.copy_name}:{copy_gap[0] if copy_gap else before} vs {where}")
            if before is not None:
                out.append(f"   {before:5d}| {self.facts.lines[before - 1].rstrip()}")
            for r in up_gap[:MAX_GAP_LINES]:
                out.append(f"  -{r:5d}| {f.lines[r - 1].rstrip()}")
            if len(up_gap) > MAX_GAP_LINES:
                out.append(f"  -     | ... {len(up_gap) - MAX_GAP_LINES} more upstream lines")
            for row in copy_gap:
                out.append(f"  +{row:5d}| {self.facts.lines[row - 1].rstrip()}")
            if after is not None:
                out.append(f"   {after:5d}| {self.facts.lines[after - 1].rstrip()}")
        return out

    # -- module level

    def check_module_level(self, report: ModuleReport) -> UnitReport:
        """Imports and constants outside definitions: each statement somewhere upstream, in order."""
        unit = UnitReport("<module>", 1)
        body = list(self.tree.body)
        if ast.get_docstring(self.tree, clean=False) is not None:
            # The copy's own docstring (version, path, qualnames copied): required by
            # docs/adding-a-target.md, so never upstream text. Counted, not checked.
            report.header_docstring = body[0].end_lineno - body[0].lineno + 1
            body = body[1:]
        inside = {row for node in self.tree.body
                  for row in range(self._first_row(def_start(node)) if is_def(node) else node.lineno,
                                   node.end_lineno + 1)}
        report.module_comments = len([r for r in self.facts.comment_only if r not in inside])
        everything = [(f, [f.norm[r - 1] for r in f.all_rows()]) for f in self.upstream]
        for node in body:
            if is_def(node):
                continue
            rows = [r for r in self._split(range(node.lineno, node.end_lineno + 1), unit)
                    if r not in self.facts.comment_only]
            wanted = self._norm(rows)
            if any(is_subsequence(wanted, lines) for _, lines in everything):
                unit.verified += len(rows)
                continue
            unit.mismatched.extend(rows)
            unit.diff.extend(f"  +{row:5d}| {self.facts.lines[row - 1].rstrip()}" for row in rows)
        if unit.mismatched:
            searched = ", ".join(f.path for f in self.upstream) or "any upstream file"
            unit.diff.insert(0, f"  @@ statements not found in {searched}")
        # Comment-only rows between top-level statements are not compared (counted above).
        unit.blank += len([r for r in range(1, len(self.facts.lines) + 1)
                           if r not in inside and not self.facts.lines[r - 1].strip()])
        return unit


def check_copy(copy_name: str, text: str, source: Source, paths: Sequence[str], side: str = "") -> ModuleReport:
    """Verify one copy file against ``paths`` in ``source`` (plus the vllm files the copy names)."""
    search = list(dict.fromkeys([*paths, *referenced_paths(text)]))
    report = ModuleReport(copy_name, side, source.version, [])
    upstream = []
    for path in search:
        parsed = upstream_file(source, path)
        if parsed is None:
            if path in paths:  # a target record naming a file this version lacks is a real finding
                report.missing_files.append(path)
            continue  # a path mentioned in a comment may belong to another version
        report.files.append(path)
        upstream.append(parsed)
    checker = _Checker(copy_name, text, upstream)
    report.units.append(checker.check_module_level(report))
    for span in walk_spans(checker.tree.body):
        report.units.append(checker.check_span(span))
    return report


def referenced_paths(text: str) -> list[str]:
    """``vllm/...py`` paths a copy names (docstring, ADAPTED comments): where its helpers come from."""
    return list(dict.fromkeys(UPSTREAM_PATH_RE.findall(text)))


