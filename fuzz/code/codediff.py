"""Code compared as code: definitions modulo comments, docstrings and layout.

Two questions of the reach report (docs/reach.md) need the same answer to
"is this the same code?":

* *same code is not agreement*: when the definitions a target runs are the
  same text on both sides, an "agree" compares a function with itself;
* *the change's coverage*: which definitions differ between two vllm sources
  in the files the catalog covers, so a pre-merge run can say which of them
  the fuzz reached and which no target covers.

A definition is a function or method (nested functions belong to the function
that holds them) or a class's own code: its bases, decorators and the
statements of its body that are not definitions. Its *digest* hashes
``ast.dump`` of that code with docstrings dropped: comments, blank lines,
indentation and line numbers never count; anything else does.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol, Sequence

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class _Source(Protocol):
    label: str

    def read(self, path: str) -> str | None: ...


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


class _DropDocstrings(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        if isinstance(node, (*_DEFS, ast.Module)):
            node.body = _without_docstring(node.body) or [ast.Pass()]
        return node


def _own_code(node: ast.AST) -> ast.AST:
    """A class without its methods and nested classes; a function whole. The class is copied shallowly (its
    methods are digested on their own, from the same tree); dropping docstrings edits the parsed tree in
    place, which only this module's own parses reach."""
    if isinstance(node, ast.ClassDef):
        node = copy.copy(node)
        node.body = [s for s in node.body if not isinstance(s, _DEFS)] or [ast.Pass()]
    return _DropDocstrings().visit(node)


def digest(node: ast.AST) -> str:
    """The definition's code, hashed (16 hex digits): equal iff equal modulo comments, docstrings, layout."""
    return hashlib.sha256(ast.dump(_own_code(node)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Definition:
    qualname: str
    kind: str  # "function" or "class"
    first_line: int  # the def/class line (decorators come before it)
    last_line: int
    digest: str


@functools.lru_cache(maxsize=256)
def definitions(text: str) -> dict[str, Definition]:
    """Every definition of a module by qualname. Several definitions of one qualname (a property's getter
    and setter; a function defined in both arms of a module-level ``if`` or ``try``) are one definition:
    its digest covers all of them, its lines run from the first to the last."""
    nodes: dict[str, list[ast.AST]] = {}
    for node, qualname in walk_definitions(ast.parse(text).body, ""):
        nodes.setdefault(qualname, []).append(node)
    out: dict[str, Definition] = {}
    for qualname, found in nodes.items():
        combined = "".join(digest(node) for node in found)
        out[qualname] = Definition(
            qualname, "class" if isinstance(found[0], ast.ClassDef) else "function", found[0].lineno,
            max(node.end_lineno or node.lineno for node in found),
            combined if len(found) == 1 else hashlib.sha256(combined.encode()).hexdigest()[:16])
    return out


_BLOCKS = (ast.If, ast.Try, ast.With) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def walk_definitions(body: Iterable[ast.stmt], prefix: str) -> Iterator[tuple[ast.AST, str]]:
    """Functions and classes, classes recursed into; also those under a module- or class-level ``if``,
    ``try`` or ``with`` (a version switch, an ``except ImportError`` fallback). Functions nested in
    functions belong to their function."""
    for node in body:
        if isinstance(node, _DEFS):
            yield node, prefix + node.name
            if isinstance(node, ast.ClassDef):
                yield from walk_definitions(node.body, prefix + node.name + ".")
        elif isinstance(node, _BLOCKS):
            for field in ("body", "orelse", "finalbody"):
                yield from walk_definitions(getattr(node, field, []), prefix)
            for handler in getattr(node, "handlers", []):
                yield from walk_definitions(handler.body, prefix)


def digests(text: str, qualnames: Iterable[str] | None = None) -> dict[str, str]:
    """qualname -> digest, for ``qualnames`` (those the module has) or every definition."""
    found = definitions(text)
    names = found if qualnames is None else [q for q in qualnames if q in found]
    return {q: found[q].digest for q in sorted(names)}


@dataclass(frozen=True)
class Change:
    """One definition that differs between two sources: ``changed``, ``added`` (only in the new
    source) or ``removed`` (only in the old)."""

    path: str  # vllm/...py
    qualname: str
    kind: str
    line: int | None  # its def line in the new source (the old one for a removal)

    @property
    def ref(self) -> str:
        return f"{self.path}::{self.qualname}"

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "qualname": self.qualname, "change": self.kind, "line": self.line}


def changed_definitions(old: _Source, new: _Source, paths: Sequence[str]) -> list[Change]:
    """Every definition that differs between ``old`` and ``new`` in ``paths``, in file then line order.

    A file only one source has counts whole (each of its definitions added or removed); a file neither
    has, or one that does not parse, is skipped (the side build says why it cannot use it)."""
    changes: list[Change] = []
    for path in paths:
        before, after = _parsed(old, path), _parsed(new, path)
        if (before is None and after is None) or before is _UNPARSABLE or after is _UNPARSABLE:
            continue
        before, after = before or {}, after or {}
        for qualname, now in after.items():
            then = before.get(qualname)
            if then is None:
                changes.append(Change(path, qualname, "added", now.first_line))
            elif then.digest != now.digest:
                changes.append(Change(path, qualname, "changed", now.first_line))
        for qualname, then in before.items():
            if qualname not in after:
                changes.append(Change(path, qualname, "removed", then.first_line))
    return sorted(changes, key=lambda c: (c.path, c.kind == "removed", c.line or 0, c.qualname))


_UNPARSABLE: dict[str, Definition] = {}  # a file that is there but is not Python: skipped, not "all removed"


def _parsed(source: _Source, path: str) -> dict[str, Definition] | None:
    text = source.read(path)
    if text is None:
        return None
    try:
        return definitions(text)
    except SyntaxError:
        return _UNPARSABLE
