"""The sync-relevant part of a change: which changed definitions touch host/device transfer or sync machinery.

The change's coverage (fuzz/reach/changes.py, docs/reach.md) lists every definition that differs between two vllm
sources. Most of a release-to-release diff is model code no target claims; the question a pre-merge run asks
is whether the *sync* work changed, and whether the fuzz ran it. The rule (``sync_reasons``), applied to the
lines of the diff inside one definition (its own lines: a class's methods are definitions of their own):

* a name from ``SYNC_NAMES`` on an added or removed line (an identifier that is the word, or holds it
  between underscores: ``is_pin_memory_available`` holds ``pin_memory``); also ``output_size=`` as a keyword
  argument, and a name of the UVA buffers (``uva`` between underscores, ``Uva...``, ``UVA``);
* a call ``.item()``, ``.tolist()``, ``.cpu()`` or ``.numpy()`` added or removed: counted on the removed lines
  and on the added lines; more on the added side gives ``+.item()``, fewer ``-.item()``. A line that keeps its
  ``.item()`` while something else on it changes counts on both sides: not a reason.

Comments and strings never count (the lines are tokenized; a docstring that mentions ``non_blocking`` is not
sync work), and lines that differ only in layout are not changed lines. The changed lines themselves
(``definition_diff``) are those of a line diff of the definition's own lines on the two sides, whitespace
runs collapsed: old-side numbers for the legacy source, new-side for the optimized one.
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Iterable, Sequence

from fuzz.code.codediff import walk_definitions

# Names whose presence on a changed line makes it sync work (docs/reach.md, "The sync-relevant part").
SYNC_NAMES = ("non_blocking", "async_tensor_h2d", "pin_memory", "keep_on_cpu", "gpu_sync_allowed",
              "CpuGpuBuffer", "copy_to_gpu", "record_stream", "synchronize")
SYNC_KEYWORDS = ("output_size",)  # as a keyword argument (``output_size=``)
SYNC_CALLS = ("item", "tolist", "cpu", "numpy")  # ``.item()`` ... added or removed
_UVA = re.compile(r"(?:^|_)[Uu][Vv][Aa](?:_|$)|^Uva[A-Z]|UVA")

Tokens = list[tuple[int, str]]  # (token type, text) of one line, comments and strings left out


def _holds(name: str, word: str) -> bool:
    if name == word:
        return True
    if "_" in word or word.islower():
        return re.search(rf"(?:^|_){re.escape(word)}(?:_|$)", name) is not None
    return name.startswith(word)


def _line_tokens(text: str) -> dict[int, Tokens]:
    """line number -> its NAME and OP tokens (comments, strings and layout dropped)."""
    out: dict[int, Tokens] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NAME, tokenize.OP):
                out.setdefault(token.start[0], []).append((token.type, token.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):  # a fragment: each line on its own
        out = {}
        for number, row in enumerate(text.splitlines(), 1):
            code = row.split("#", 1)[0]
            code = re.sub(r"(['\"]).*?\1", "''", code)
            out[number] = [(tokenize.NAME if word[0].isalpha() or word[0] == "_" else tokenize.OP, word)
                           for word in re.findall(r"[A-Za-z_]\w*|\S", code)]
    return out


def _names(lines: Iterable[Tokens]) -> set[str]:
    found: set[str] = set()
    for tokens in lines:
        for i, (kind, text) in enumerate(tokens):
            if kind != tokenize.NAME:
                continue
            found.update(word for word in SYNC_NAMES if _holds(text, word))
            if text in SYNC_KEYWORDS and i + 1 < len(tokens) and tokens[i + 1][1] == "=" and \
                    i > 0 and tokens[i - 1][1] in ("(", ","):
                found.add(text + "=")
            if _UVA.search(text):
                found.add("uva")
    return found


def _calls(lines: Iterable[Tokens]) -> dict[str, int]:
    counts = dict.fromkeys(SYNC_CALLS, 0)
    for tokens in lines:
        for i in range(1, len(tokens) - 1):
            if tokens[i - 1][1] == "." and tokens[i][1] in counts and tokens[i + 1][1] == "(":
                counts[tokens[i][1]] += 1
    return counts


def reasons_of(removed: Sequence[Tokens], added: Sequence[Tokens]) -> list[str]:
    """The rule over the tokens of the removed and the added lines: the names found, then the calls whose
    count differs (``+.item()``: more on the added lines)."""
    names = _names(removed) | _names(added)
    out = [word for word in SYNC_NAMES if word in names]
    out += [f"{word}=" for word in SYNC_KEYWORDS if f"{word}=" in names]
    out += ["uva"] if "uva" in names else []
    before, after = _calls(removed), _calls(added)
    for call in SYNC_CALLS:
        if after[call] != before[call]:
            out.append(f"{'+' if after[call] > before[call] else '-'}.{call}()")
    return out


def changed_rows(old: Sequence[str], new: Sequence[str]) -> tuple[list[int], list[int]]:
    """Indexes of the rows a line diff of ``old`` and ``new`` removes and adds (whitespace runs collapsed,
    blank rows ignored)."""
    a = [" ".join(r.split()) for r in old]
    b = [" ".join(r.split()) for r in new]
    removed: list[int] = []
    added: list[int] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += [i for i in range(i1, i2) if a[i]]
        if tag in ("replace", "insert"):
            added += [j for j in range(j1, j2) if b[j]]
    return removed, added


def sync_reasons(old: str, new: str) -> list[str]:
    """The rule on two texts of one definition (either may be empty: added, removed): why the change is
    sync work, ``[]`` when it is not. ``sync_reasons("x = a", "x = a.item()") == ["+.item()"]``."""
    old_tokens, new_tokens = _line_tokens(old), _line_tokens(new)
    removed, added = changed_rows(old.splitlines(), new.splitlines())
    return reasons_of([old_tokens.get(i + 1, []) for i in removed], [new_tokens.get(j + 1, []) for j in added])


@dataclass(frozen=True)
class DefinitionDiff:
    """One definition's diff between two module texts: the changed lines on each side (line numbers of
    that side's file; only the definition's own lines) and the rule's reasons."""

    removed: tuple[int, ...]  # old-side lines
    added: tuple[int, ...]  # new-side lines
    reasons: tuple[str, ...]

    @property
    def sync_relevant(self) -> bool:
        return bool(self.reasons)


@functools.lru_cache(maxsize=64)
def _module(text: str) -> dict[str, list[tuple[int, int, bool]]]:
    """qualname -> its spans (first line with decorators, last line, is a class)."""
    spans: dict[str, list[tuple[int, int, bool]]] = {}
    for node, qualname in walk_definitions(ast.parse(text).body, ""):
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        spans.setdefault(qualname, []).append((start, node.end_lineno or node.lineno,
                                               isinstance(node, ast.ClassDef)))
    return spans


def _tokens_of(text: str | None, lines: Sequence[int]) -> dict[int, Tokens]:
    """The tokens of ``lines`` of a module's text, by line number: the rows from the first to the last
    tokenized together (a definition's span: a whole module costs a second or more a release diff)."""
    if not text or not lines:
        return {}
    rows = text.splitlines()
    first, last = min(lines), max(lines)
    found = _line_tokens("\n".join(rows[first - 1:last]) + "\n")
    return {first + n - 1: tokens for n, tokens in found.items()}


def own_lines(text: str | None, qualname: str) -> list[int]:
    """The lines of ``qualname``'s own code in a module's text: its spans, less (for a class) the spans of
    its methods and nested classes, which are definitions of their own."""
    if not text:
        return []
    spans = _module(text)
    lines: set[int] = set()
    for start, end, is_class in spans.get(qualname, []):
        lines |= set(range(start, end + 1))
    inner = [s for q, found in spans.items() if q.startswith(qualname + ".") for s in found]
    if any(is_class for *_, is_class in spans.get(qualname, [])):
        for start, end, _ in inner:
            lines -= set(range(start, end + 1))
    return sorted(lines)


def definition_diff(old_text: str | None, new_text: str | None, qualname: str) -> DefinitionDiff:
    """The diff of ``qualname`` between two texts of its module (None or a module without it: the
    definition is added or removed, and its every line counts)."""
    old_lines, new_lines = own_lines(old_text, qualname), own_lines(new_text, qualname)
    old_rows = (old_text or "").splitlines()
    new_rows = (new_text or "").splitlines()
    removed, added = changed_rows([old_rows[n - 1] for n in old_lines], [new_rows[n - 1] for n in new_lines])
    removed_lines = tuple(old_lines[i] for i in removed)
    added_lines = tuple(new_lines[j] for j in added)
    # From the definition's first line: a changed line inside a docstring is then tokenized as a string.
    old_tokens = _tokens_of(old_text, old_lines if removed_lines else [])
    new_tokens = _tokens_of(new_text, new_lines if added_lines else [])
    reasons = reasons_of([old_tokens.get(n, []) for n in removed_lines], [new_tokens.get(n, []) for n in added_lines])
    return DefinitionDiff(removed_lines, added_lines, tuple(reasons))
