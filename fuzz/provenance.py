"""``python -m fuzz provenance``: prove the copies are upstream code, and spot upstream drift.

Verification: every line of every copy in ``legacy/`` (vllm 0.27.1) and
``optimized/`` (vllm 0.28.0) must appear, in order and modulo whitespace, in the
upstream definition of the same qualname -- unless it ends with
``# ADAPTED: <why>``. Upstream sources are read straight out of the vllm wheels
(``zipfile`` + ``ast``; vllm is never imported), downloaded once with pip into a
cache, or taken from a local wheel / source checkout / site-packages.

Drift (``--against vllm==X`` or a path): for every upstream function the targets
cover (and every helper the copies were verified against), compare the version
each side was copied from with X and print unchanged / changed / missing with a
unified diff, so a maintainer knows which pairs to refresh.

Exit codes: 0 all verified (no drift), 1 mismatches (drift) found, 2 usage error.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import os
import re
import subprocess
import sys
import tempfile
import tokenize
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Protocol, Sequence

from fuzz.errors import UsageError
from fuzz.versions import LEGACY_UPSTREAM, OPTIMIZED_UPSTREAM

EXIT_OK, EXIT_FAILURE = 0, 1
SIDES = ("legacy", "optimized")
# The version each side was copied from ("vllm 0.27.1" -> "0.27.1").
SIDE_VERSIONS = {"legacy": LEGACY_UPSTREAM.split()[-1], "optimized": OPTIMIZED_UPSTREAM.split()[-1]}
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "SYNCFUZZ_WHEEL_CACHE"
INSTALLED = "installed"  # a --*-source value: the vllm this Python has installed

ADAPTED_RE = re.compile(r"#\s*ADAPTED\b")
# Paths a copy names in its docstring or ADAPTED comments: where its helpers came from.
UPSTREAM_PATH_RE = re.compile(r"\bvllm/[\w/]+\.py\b")
MAX_HUNKS = 3  # per definition: the first mismatches are what a reader needs
MAX_GAP_LINES = 6  # upstream lines shown between two anchors of a hunk


def default_cache() -> Path:
    """``$SYNCFUZZ_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/syncfuzz/wheels`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "syncfuzz" / "wheels"


# --------------------------------------------------------------------------- sources


class Source(Protocol):
    """A vllm source tree: a wheel, a checkout or site-packages."""

    label: str
    version: str | None

    def read(self, path: str) -> str | None:
        """The text of ``vllm/...py``, or None when the file is not there."""


class WheelSource:
    """Files read straight out of a wheel: no unpacking, no import."""

    def __init__(self, wheel: Path) -> None:
        try:
            self._zip = zipfile.ZipFile(wheel)
        except (OSError, zipfile.BadZipFile) as exc:
            raise UsageError(f"{wheel} is not a readable wheel ({exc}); pass a vllm .whl file") from exc
        self.label = str(wheel)
        self.version = _version_from_wheel_name(wheel.name) or _version_from_text(self.read("vllm/_version.py"))
        self._texts: dict[str, str | None] = {}

    def read(self, path: str) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = self._zip.read(path).decode("utf-8")
            except KeyError:
                self._texts[path] = None
        return self._texts[path]


class TreeSource:
    """Files under a directory that holds the ``vllm/`` package."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.label = str(root)
        self.version = _version_from_text(self.read("vllm/_version.py"))

    def read(self, path: str) -> str | None:
        file = self.root / path
        return file.read_text(encoding="utf-8") if file.is_file() else None


class TextSource:
    """In-memory files (tests, planted edits)."""

    def __init__(self, files: Mapping[str, str], version: str | None = None, label: str = "<memory>") -> None:
        self.files = dict(files)
        self.version = version
        self.label = label

    def read(self, path: str) -> str | None:
        return self.files.get(path)


def _version_from_wheel_name(name: str) -> str | None:
    match = re.match(r"vllm-([^-]+)-", name)
    return match.group(1) if match else None


def _version_from_text(text: str | None) -> str | None:
    match = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text or "")
    return match.group(1) if match else None


def open_source(spec: str, flag: str) -> Source:
    """A ``.whl``, a directory holding ``vllm/``, or ``installed`` (``flag`` names the option in errors)."""
    if spec == INSTALLED:
        return _installed_source(flag)
    path = Path(spec).expanduser()
    if not path.exists():
        raise UsageError(f"{flag} {spec!r} does not exist; pass a vllm .whl file or a directory holding vllm/")
    if path.is_file():
        if path.suffix != ".whl":
            raise UsageError(f"{flag} {spec!r} is not a .whl file; pass a vllm wheel or a directory holding vllm/")
        return WheelSource(path)
    if (path / "vllm").is_dir():
        return TreeSource(path)
    if path.name == "vllm" and (path / "__init__.py").is_file():
        return TreeSource(path.parent)  # the package itself was given: its parent holds vllm/
    raise UsageError(f"{flag} {spec!r} has no vllm/ package inside; pass a source checkout, site-packages or a .whl")


def _installed_source(flag: str) -> Source:
    """The vllm this interpreter would import, located without importing it."""
    import importlib.util

    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        raise UsageError(f"{flag} installed: no vllm package is installed for {sys.executable}; "
                         f"pass a .whl or a directory holding vllm/ instead")
    return TreeSource(Path(list(found.submodule_search_locations)[0]).parent)


def cached_wheel(version: str, cache: Path) -> Path | None:
    found = sorted(cache.glob(f"vllm-{version}-*.whl")) if cache.is_dir() else []
    return found[0] if found else None


def fetch_wheel(version: str, cache: Path, quiet: bool = False, pip_args: Sequence[str] = ()) -> Path:
    """The vllm ``version`` wheel from the cache, downloaded with pip if missing.

    pip writes into a private temporary folder first and the wheel is moved
    into the cache only when complete, so an interrupted download or a second
    process downloading at the same time never leaves a truncated wheel behind.
    """
    if cache.exists() and not cache.is_dir():
        raise UsageError(f"--cache {str(cache)!r} is a file; pass a directory (it is created if missing)")
    wheel = cached_wheel(version, cache)
    if wheel:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"[provenance] downloading vllm=={version} (~320 MB) into {cache}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--progress-bar", "off", *pip_args, f"vllm=={version}", "-d", tmp]
        done = subprocess.run(command, capture_output=True, text=True)
        got = sorted(Path(tmp).glob("vllm-*.whl"))
        if done.returncode != 0 or not got:
            raise UsageError(f"could not download vllm=={version} with pip ({_last_error_line(done)}); "
                             f"check network access to the package registry, or pass a local wheel or checkout "
                             f"(--legacy-source/--optimized-source/--against PATH)")
        target = cache / got[0].name
        os.replace(got[0], target)
    return target


def _last_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [f"exit {done.returncode}"])[-1]


def _against_version(spec: str) -> str | None:
    """The X of ``--against vllm==X``; None for a path; a UsageError for anything else."""
    match = re.fullmatch(r"\s*vllm\s*==\s*([\w.+!-]+)\s*", spec)
    if match:
        return match.group(1)
    if spec == INSTALLED or Path(spec).expanduser().exists():
        return None
    raise UsageError(f"--against {spec!r} is neither vllm==VERSION nor an existing path; "
                     f"pass e.g. --against vllm==0.33.0, a .whl file or a directory holding vllm/")


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


def _def_start(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _is_def(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


def walk_spans(body: Iterable[ast.stmt], prefix: str = "") -> Iterator[Span]:
    """Top-level functions and classes, classes recursed into (methods, nested classes).

    Functions nested inside functions are part of their enclosing function.
    """
    for node in body:
        if not _is_def(node):
            continue
        qualname = prefix + node.name
        if isinstance(node, ast.ClassDef):
            kids = [child for child in node.body if _is_def(child)]
            children = tuple((_def_start(k), k.end_lineno) for k in kids)
            yield Span(qualname, "class", _def_start(node), node.end_lineno, children)
            yield from walk_spans(kids, qualname + ".")
        else:
            yield Span(qualname, "function", _def_start(node), node.end_lineno)


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
        """The ``def``/``class`` row (after decorators)."""
        for row in range(span.start, span.end + 1):
            if re.match(r"\s*(async\s+def|def|class)\b", self.facts.lines[row - 1]):
                return row
        return span.start

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
        """Where a definition starts, with the ADAPTED comment rows right above it.

        ``# @torch.compile(...)  # ADAPTED: run eagerly`` stands where an
        upstream decorator was: it belongs to the definition below it.
        """
        row = start
        while row > 1 and row - 1 in self.facts.comment_only and row - 1 in self.facts.adapted:
            row -= 1
        return row

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
                  for row in range(self._first_row(_def_start(node)) if _is_def(node) else node.lineno,
                                   node.end_lineno + 1)}
        report.module_comments = len([r for r in self.facts.comment_only if r not in inside])
        everything = [(f, [f.norm[r - 1] for r in f.all_rows()]) for f in self.upstream]
        for node in body:
            if _is_def(node):
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


# --------------------------------------------------------------------------- targets and copy modules


def _module_of(impl_path: str) -> str:
    """``"optimized.keye:Cls.fn"`` -> ``"keye"``."""
    return impl_path.partition(":")[0].split(".", 1)[1]


def split_upstream(ref: str) -> tuple[str, str]:
    path, _, qualname = ref.partition("::")
    return path, qualname


def upstream_files_by_module(targets: Sequence) -> dict[str, list[str]]:
    """Copy module name -> the upstream files its targets name, in catalog order."""
    files: dict[str, list[str]] = {}
    for target in targets:
        for impl in (target.legacy, target.optimized):
            known = files.setdefault(_module_of(impl), [])
            for ref in target.upstream:
                path = split_upstream(ref)[0]
                if path not in known:
                    known.append(path)
    return files


def copy_modules(root: Path, side: str) -> list[str]:
    """Every copy module of a side: all ``.py`` files but ``__init__``."""
    return sorted(p.stem for p in (root / side).glob("*.py") if p.stem != "__init__")


def check_side(side: str, source: Source, targets: Sequence, modules: Sequence[str] | None = None,
               root: Path = PROJECT_ROOT) -> list[ModuleReport]:
    files = upstream_files_by_module(targets)
    reports = []
    for module in modules if modules is not None else copy_modules(root, side):
        copy_path = root / side / f"{module}.py"
        text = copy_path.read_text(encoding="utf-8")
        reports.append(check_copy(f"{side}/{module}.py", text, source, files.get(module, []), side))
    return reports


@dataclass
class TargetRow:
    name: str
    side: str
    covered: list[tuple[str, UnitReport | None]]  # (upstream ref, the copy unit covering it)

    @property
    def units(self) -> list[UnitReport]:
        return list({id(u): u for _, u in self.covered if u}.values())


def target_rows(targets: Sequence, reports: Sequence[ModuleReport]) -> list[TargetRow]:
    """For each target and side: which copy definition covers each upstream qualname."""
    by_copy = {r.copy: r for r in reports}
    rows = []
    for target in targets:
        for side in SIDES:
            report = by_copy.get(f"{side}/{_module_of(getattr(target, side))}.py")
            if report is None:
                continue
            covered = [(ref, _covering_unit(report, ref)) for ref in target.upstream]
            rows.append(TargetRow(target.name, side, covered))
    return rows


def _covering_unit(report: ModuleReport, ref: str) -> UnitReport | None:
    """The unit verified against ``ref``, else the copy definition of the same qualname."""
    qualname = split_upstream(ref)[1]
    for unit in report.definitions:
        if unit.upstream == ref:
            return unit
    for unit in report.definitions:
        if unit.qualname == qualname:
            return unit
    return None


# --------------------------------------------------------------------------- output


def _describe(source: Source, expected: str) -> str:
    """The source's path, and its version when that is not the expected one."""
    if source.version == expected:
        return source.label
    return f"{source.label}; {f'it is vllm {source.version}' if source.version else 'its version is not recorded'}"


def format_verification(reports: Sequence[ModuleReport], rows: Sequence[TargetRow],
                        sources: Mapping[str, Source]) -> list[str]:
    out = [f"provenance: {side} copies vs vllm {SIDE_VERSIONS[side]} ({_describe(sources[side], SIDE_VERSIONS[side])})"
           for side in SIDES if side in sources]
    out += ["", "every copy line must appear in its upstream definition, in order, modulo whitespace, unless "
                "marked ADAPTED;", "upstream code a verbatim definition leaves out needs an ADAPTED mark where it was.",
            "skipped (not compared): blank lines / comment lines outside definitions / the copy's own docstring", "",
            f"{'copy module':30s} {'definitions':>11s} {'adapted':>8s} {'skipped':>13s} {'mismatched':>10s} "
            f"{'dropped':>7s}"]
    for r in reports:
        defs = r.definitions
        skipped = f"{r.blank}/{r.module_comments}/{r.header_docstring}"
        out.append(f"{r.copy:30s} {f'{sum(u.ok for u in defs)}/{len(defs)} ok':>11s} {r.adapted:8d} {skipped:>13s} "
                   f"{r.mismatched:10d} {r.dropped:7d}  {'verified' if r.ok else 'FAIL'}")
    out += ["", f"{'target':33s} {'side':9s} {'qualnames ok/copied':>19s} {'adapted':>8s} {'mismatched':>10s} "
                f"{'dropped':>7s}"]
    for row in rows:
        units = row.units
        copied = sum(u is not None for _, u in row.covered)
        verified = sum(u is not None and u.ok for _, u in row.covered)
        out.append(f"{row.name:33s} {row.side:9s} {f'{verified}/{copied}':>19s} {sum(u.adapted for u in units):8d} "
                   f"{sum(len(u.mismatched) for u in units):10d} {sum(len(u.dropped) for u in units):7d}  "
                   f"{'verified' if verified == copied > 0 else 'FAIL'}")
        if not copied:
            out.append(f"    FAIL: the {row.side} copy holds none of this target's upstream qualnames")
        for ref, unit in row.covered:
            if unit is None:
                out.append(f"    not copied: {ref}")
            elif not unit.ok:
                out.append(f"    FAIL: {ref} (copy {unit.qualname})")
            elif unit.upstream != ref:
                out.append(f"    {ref}: verified as copy {unit.qualname} vs {unit.upstream}")
    for r in reports:
        for path in r.missing_files:
            out.append(f"\n{r.copy}: upstream file {path} is not in vllm {r.version}; fix the target record")
    failing = [(r, u) for r in reports for u in r.failed]
    if failing:
        out.append("\nmismatches: `+` copy lines not found upstream, `-` upstream lines (dropped ones need an "
                   "ADAPTED mark where they were). Fix the copy or mark the line `# ADAPTED: <why>`.")
    for r, u in failing:
        against = f" vs {u.upstream} (vllm {r.version})" if u.upstream else ""
        counts = [f"{len(u.mismatched)} line(s) not upstream"] if u.mismatched else []
        counts += [f"{len(u.dropped)} upstream line(s) dropped unmarked"] if u.dropped else []
        out.append(f"\n{r.copy}:{u.first_line} {u.qualname}{against}: {', '.join(counts) or 'not verified'}")
        if u.problem:
            out.append(f"  {u.problem}")
        out.extend(u.diff)
    n_defs = sum(len(r.definitions) for r in reports)
    ok_defs = sum(u.ok for r in reports for u in r.definitions)
    ok = all(r.ok for r in reports)
    out.append(f"\n{len(reports)} copy modules: {ok_defs}/{n_defs} definitions verified, "
               f"{sum(r.adapted for r in reports)} adapted lines, {sum(r.mismatched for r in reports)} mismatched "
               f"lines, {sum(r.dropped for r in reports)} unmarked dropped lines: " + ("OK" if ok else "FAIL"))
    return out


# --------------------------------------------------------------------------- drift


@dataclass
class Drift:
    ref: str  # "vllm/...py::Qual"
    side: str
    base_version: str | None
    status: str  # "unchanged", "whitespace", "changed", "missing", "not in base"
    diff: list[str] = field(default_factory=list)
    same_as_optimized: bool = False  # legacy side: the function did not change 0.27.1 -> 0.28.0
    owners: list[str] = field(default_factory=list)  # targets naming it, or the copy modules holding it
    helper: bool = False  # not named by a target: a definition a copy holds verbatim


def definition_text(source: Source, ref: str) -> tuple[str, int] | None:
    """(text, first line) of a function; of a class, its own lines (methods are compared one by one)."""
    path, qualname = split_upstream(ref)
    parsed = upstream_file(source, path)
    if parsed is None or qualname not in parsed.spans:
        return None
    spans = parsed.spans[qualname]
    rows = [row for span in spans for row in span.own_rows()]
    return "\n".join(parsed.lines[row - 1] for row in rows) + "\n", spans[0].start


def extract(source: Source, ref: str) -> str | None:
    """The source text of ``path::qualname`` (decorators included; a class without its methods)."""
    found = definition_text(source, ref)
    return found[0] if found else None


def _same(a: str, b: str) -> bool:
    """Equal modulo whitespace (blank lines and indentation runs ignored)."""
    return [normalize(x) for x in a.splitlines() if x.strip()] == [normalize(x) for x in b.splitlines() if x.strip()]


def compare(ref: str, side: str, base: Source, new: Source) -> Drift:
    old, now = definition_text(base, ref), definition_text(new, ref)
    drift = Drift(ref, side, base.version, "unchanged")
    if old is None:
        drift.status = "not in base"
    elif now is None:
        drift.status = "missing"
    elif old[0] != now[0]:
        drift.status = "whitespace" if _same(old[0], now[0]) else "changed"
        path = split_upstream(ref)[0]
        drift.diff = list(difflib.unified_diff(
            old[0].splitlines(), now[0].splitlines(), f"vllm {base.version or base.label} {path}:{old[1]}",
            f"vllm {new.version or new.label} {path}:{now[1]}", lineterm="", n=2))
    return drift


def drift_report(targets: Sequence, sources: Mapping[str, Source], against: Source,
                 reports: Sequence[ModuleReport] = ()) -> list[Drift]:
    """Per side: the targets' qualnames, then the upstream definitions the copies hold verbatim.

    Stand-ins (ADAPTED headers) are left out of the helpers: they follow
    upstream only as far as the copy needs, so upstream edits to them are noise.
    """
    owners: dict[str, list[str]] = {}
    for t in targets:
        for ref in t.upstream:
            owners.setdefault(ref, []).append(t.name)
    found = []
    for side in (s for s in ("optimized", "legacy") if s in sources):
        helpers: dict[str, list[str]] = {}
        for r in (r for r in reports if r.side == side):
            for u in r.definitions:
                if u.upstream and not u.stand_in and u.verified and u.upstream not in owners:
                    helpers.setdefault(u.upstream, []).append(r.copy)
        for ref, who in [*owners.items(), *helpers.items()]:
            drift = compare(ref, side, sources[side], against)
            drift.owners, drift.helper = list(dict.fromkeys(who)), ref in helpers
            if side == "legacy" and "optimized" in sources:
                old, opt = definition_text(sources["legacy"], ref), definition_text(sources["optimized"], ref)
                drift.same_as_optimized = bool(old and opt and old[0] == opt[0])
            found.append(drift)
    return found


def format_drift(drifts: Sequence[Drift], against: Source, legacy_diffs: bool = False) -> list[str]:
    """Statuses per side, then diffs: always for the optimized side, for the legacy side on request.

    The legacy copies are pre-PR code on purpose, so their drift mostly is the
    PR itself; a legacy function that 0.28.0 left alone drifts exactly like
    its optimized twin (marked ``= optimized``). Unchanged helpers are only counted.
    """
    version = against.version or against.label
    out = [f"drift: vllm {against.version or '?'} ({against.label}) against the versions the copies were taken from"]
    word = {"unchanged": "unchanged", "whitespace": "whitespace only", "changed": "CHANGED",
            "missing": f"MISSING in {version}", "not in base": "not in base version"}
    for side in ("optimized", "legacy"):
        mine = [d for d in drifts if d.side == side]
        if not mine:
            continue
        out.append(f"\n{side} side (copied from vllm {mine[0].base_version}):")
        quiet = [d for d in mine if d.helper and d.status == "unchanged"]
        for d in mine:
            if d not in quiet:
                same = " (= optimized)" if d.same_as_optimized and d.status != "unchanged" else ""
                helper = "helper in " if d.helper else ""
                out.append(f"  {word[d.status]:24s} {d.ref}  [{helper}{', '.join(d.owners)}]{same}")
        if quiet:
            out.append(f"  unchanged                {len(quiet)} more definitions the {side} copies hold verbatim")
        for d in mine:
            if d.status != "changed" or (side == "legacy" and not legacy_diffs):
                continue
            out.append(f"\n  {side}: {d.ref} changed since vllm {d.base_version}")
            out.extend("    " + line for line in d.diff)
    changed = [d for d in drifts if d.status in ("changed", "missing")]
    refresh = sorted({name for d in changed if d.side == "optimized" for name in d.owners})
    out.append(f"\n{len(changed)} of {len(drifts)} definition/side pairs changed or missing in {version}"
               + (f"; optimized copies to refresh: {', '.join(refresh)}" if refresh else "")
               + ("" if legacy_diffs else "; legacy diffs: --legacy-diffs"))
    return out


# --------------------------------------------------------------------------- CLI


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``provenance`` to the CLI's subcommands (plain argparse only)."""
    p = commands.add_parser(
        "provenance", help="check every copy line against the vllm wheels it was copied from; --against: drift",
        description="Verify that every line of legacy/ (vllm 0.27.1) and optimized/ (vllm 0.28.0) appears in its "
                    "upstream definition, in order, modulo whitespace, unless marked `# ADAPTED: <why>`. "
                    "With --against, report which upstream functions changed since those versions instead.")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="only this target's copy modules (repeatable; default: every copy module)")
    for side in SIDES:
        env = f"SYNCFUZZ_{side.upper()}_SOURCE"
        p.add_argument(f"--{side}-source", metavar="PATH",
                       help=f"vllm {SIDE_VERSIONS[side]}: a .whl, a directory holding vllm/ (checkout, site-packages) "
                            f"or 'installed' (default: ${env}, else pip download into the cache)")
    p.add_argument("--cache", metavar="DIR",
                   help=f"wheel cache (default ${CACHE_ENV}, else ~/.cache/syncfuzz/wheels)")
    p.add_argument("--against", metavar="vllm==X|PATH",
                   help="drift: compare the upstream functions with this version (vllm==X, a .whl, a directory or "
                        "'installed') instead of verifying the copies")
    p.add_argument("--legacy-diffs", action="store_true",
                   help="with --against: also print the legacy side's diffs (they mostly show the PR itself)")


def cmd_provenance(args: argparse.Namespace) -> int:
    from fuzz.targets import lookup

    cache = Path(args.cache).expanduser() if getattr(args, "cache", None) else default_cache()
    if cache.exists() and not cache.is_dir():
        raise UsageError(f"--cache {str(cache)!r} is a file; pass a directory (it is created if missing)")
    against_spec = getattr(args, "against", None)
    if getattr(args, "legacy_diffs", False) and not against_spec:
        raise UsageError("--legacy-diffs only applies to drift; add --against vllm==VERSION (or a path)")
    chosen = lookup(getattr(args, "target", []) or [])
    # Every usage error is raised before the first (slow) download.
    given: dict[str, tuple[Source, str]] = {}
    for side in SIDES:
        flag, env = f"--{side}-source", f"SYNCFUZZ_{side.upper()}_SOURCE"
        if getattr(args, f"{side}_source", None):
            given[side] = open_source(getattr(args, f"{side}_source"), flag), flag
        elif os.environ.get(env):  # CI or a maintainer's checkout, without repeating the flag
            given[side] = open_source(os.environ[env], env), env
    against_version = _against_version(against_spec) if against_spec else None
    against = open_source(against_spec, "--against") if against_spec and not against_version else None
    for side, (source, flag) in given.items():
        if source.version and source.version != SIDE_VERSIONS[side]:
            print(f"[provenance] warning: {flag} is vllm {source.version}, but the {side} copies were "
                  f"taken from vllm {SIDE_VERSIONS[side]}", file=sys.stderr)
    sources = {side: given[side][0] if side in given else WheelSource(fetch_wheel(SIDE_VERSIONS[side], cache))
               for side in SIDES}
    modules: dict[str, list[str] | None] = {side: None for side in SIDES}  # None: every copy module
    if getattr(args, "target", None):
        modules = {side: sorted({_module_of(getattr(t, side)) for t in chosen}) for side in SIDES}
    # Every target record contributes upstream files, even under --target: a copy module is
    # shared by several targets (keye.py) and its helpers may come from any of their files.
    reports = [r for side in SIDES for r in check_side(side, sources[side], lookup([]), modules[side])]
    if against_spec:
        against = against or WheelSource(fetch_wheel(against_version, cache))
        drifts = drift_report(chosen, sources, against, reports)
        for line in format_drift(drifts, against, getattr(args, "legacy_diffs", False)):
            print(line)
        return EXIT_FAILURE if any(d.status in ("changed", "missing") for d in drifts) else EXIT_OK
    for line in format_verification(reports, target_rows(chosen, reports), sources):
        print(line)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILURE
