"""Rebuild a copy module from another upstream source, adaptations carried over.

A copy module (``optimized/keye.py``) is upstream definitions plus the
harness's namespace: stand-in classes, local helpers in place of vllm
imports, and ``# ADAPTED:`` edits. Provenance maps every verbatim definition
to its upstream definition in the release the copy came from (the *base*).
Given another source (a release, a checkout), each such definition is
replaced by a three-way merge (fuzz/releases/merge3.py) of base, copy and new text:
upstream's changes come in, the copy's adaptations stay. Everything the copy
holds that is not an upstream definition (stand-ins, module-level imports and
constants) is kept as it is, and imports of the copy's own package are
pointed at the rebuilt package.

A definition the new source's file does not have (a release older than the
copy: 0.28.0 has no ``NonUvaBuffer``) is left out of the rebuilt module
(``removed``): the copy's later text is not that source's code. Only what
still needs it fails (``_still_needed``): a definition naming a left-out
function or class, or reading ``.m`` where ``m`` was only a left-out method
and nothing assigns it; one the module's import needs stays, failed.

What cannot be rebuilt mechanically is recorded per definition, never
guessed: the file is gone, upstream changed lines the copy adapts, a
class's own lines (fields, bases) changed, or the new text needs a vllm name
the namespace lacks. A new helper that the new text calls and that its own
upstream file defines (a function, a class, a constant, a non-vllm import)
is pulled in beside it. A failed definition keeps the copy's text, so the
module still imports; ``reach`` tells which targets depend on it.
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
import textwrap
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from fuzz.releases.common import PROJECT_ROOT, UPSTREAM_PATH_RE
from fuzz.releases.matching import (
    HEADER_RE,
    CopyLines,
    Span,
    UpstreamFile,
    first_row,
    header_row,
    normalize,
    upstream_file,
    walk_spans,
)
from fuzz.releases.merge3 import Conflict, merge3
from fuzz.releases.shims import module_of
from fuzz.releases.sources import Source, resolved

# vllm modules that only re-export another package's names: new text importing one gets that package's
# import (the copies import it directly, marked ADAPTED: optimized/fla_index.py's ``import triton``).
# vllm/triton_utils/__init__.py re-exports ``triton`` and ``triton.language as tl`` where triton is installed.
REEXPORTS: dict[str, dict[str, str]] = {
    "vllm.triton_utils": {"triton": "import triton", "tl": "import triton.language"},
}
MODULE_NAMES = {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"}


@dataclass
class ModuleBuild:
    """One rebuilt copy module, and what could not be rebuilt."""

    name: str  # the copy module ("keye")
    text: str = ""
    changed: list[str] = field(default_factory=list)  # qualnames whose upstream text differs from base
    pulled: list[str] = field(default_factory=list)  # new upstream helpers brought in
    failed: dict[str, str] = field(default_factory=dict)  # qualname -> why it keeps the copy's text
    removed: dict[str, str] = field(default_factory=dict)  # qualname -> why it is left out: the release lacks it
    error: str | None = None  # the module as a whole could not be built


def _header_index(lines: Sequence[str]) -> int:
    """Where the ``def``/``class`` line is in a definition's lines (after its decorators)."""
    return next((i for i, line in enumerate(lines) if HEADER_RE.match(line)), 0)


def _find(files: Sequence[UpstreamFile], qualname: str, kind: str,
          prefer: str | None = None) -> tuple[UpstreamFile, Span] | None:
    """The definition of ``qualname``: its implementation, never a ``typing.overload`` stub before it
    (``json_map_leaves`` in vllm/utils/jsontree.py has three): the stubs are signatures only, and merging the
    copy's implementation onto one conflicts with every line the copy adapts."""
    ordered = sorted(files, key=lambda f: f.path != prefer)
    for f in ordered:
        spans = [span for span in f.spans.get(qualname, []) if span.kind == kind]
        real = [span for span in spans if not _is_overload_stub(f, span)]
        if real or spans:
            return f, (real or spans)[0]
    return None


def _is_overload_stub(f: UpstreamFile, span: Span) -> bool:
    """Whether the definition at ``span`` (its decorators first) is decorated ``@overload``."""
    for line in f.lines[span.start - 1:span.end]:
        stripped = line.strip()
        if not stripped.startswith("@"):
            return False
        if stripped in ("@overload", "@typing.overload", "@t.overload"):
            return True
    return False


def _class_shape(f: UpstreamFile, span: Span) -> str:
    """A class's own code (bases, decorators, fields), docstring and methods left out."""
    node = ast.parse(textwrap.dedent("\n".join(f.lines[span.start - 1:span.end]))).body[0]
    assert isinstance(node, ast.ClassDef)
    body = [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=[*node.bases, *node.keywords, *node.decorator_list, *body], type_ignores=[]))


def _bound_at_module_level(tree: ast.Module) -> set[str]:
    names = set(MODULE_NAMES)
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo.extend(node.body)
            todo.extend(getattr(node, "orelse", []))
            todo.extend(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return names


def global_names(text: str) -> set[str]:
    """Names a definition looks up in its module's globals, when defined and when
    called: decorators, defaults, annotations and bases (the snippet's own
    scope) and every name its functions read as global (symtable's view)."""
    table = symtable.symtable(_without_annotations(textwrap.dedent(text)), "<definition>", "exec")
    found: set[str] = set()
    todo = [table]
    while todo:
        scope = todo.pop()
        todo.extend(scope.get_children())
        if scope.get_type() == "function":
            found.update(scope.get_globals())  # type: ignore[attr-defined]
        else:
            found.update(s.get_name() for s in scope.get_symbols()
                         if s.is_referenced() and not s.is_assigned() and not s.is_imported())
    return found - {"__class__"}  # super()'s implicit cell, not a global


class _DropAnnotations(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def _without_annotations(text: str) -> str:
    """The rebuilt modules never evaluate annotations (``from __future__ import
    annotations`` is added to them), so names used only there are not needed."""
    tree = _DropAnnotations().visit(ast.parse(text))
    return ast.unparse(ast.fix_missing_locations(tree))


def _with_lazy_annotations(lines: list[str]) -> list[str]:
    """``from __future__ import annotations`` after the module docstring: upstream
    annotations name vllm and transformers types the harness does not have."""
    tree = ast.parse("\n".join(lines))
    first = tree.body[0] if tree.body else None
    at = first.end_lineno if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else 0
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body):
        return lines
    mark = "from __future__ import annotations  # ADAPTED: rebuilt side; annotations are not evaluated"
    return [*lines[:at], mark, *lines[at:]]


def _vllm_imports_inside(text: str) -> list[str]:
    tree = ast.parse(textwrap.dedent(text))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names if a.name.split(".")[0] == "vllm")
    return out


def _code(lines: Sequence[str]) -> list[str]:
    return [normalize(x) for x in lines if normalize(x) and not normalize(x).startswith("#")]


def _closest(files: Sequence[UpstreamFile], span: Span, lines: Sequence[str]) -> tuple[UpstreamFile, Span] | None:
    """The upstream definition the copy's ``span`` was taken from: same qualname
    and kind, and of those (``forward`` is in every model file) the one sharing
    the most lines with the copy, as provenance decides."""
    mine = {normalize(lines[row - 1]) for row in span.own_rows()}
    scored = [(sum(f.norm[row - 1] in mine for row in up.own_rows()), n, f, up)
              for n, f in enumerate(files) for up in f.spans.get(span.qualname, []) if up.kind == span.kind]
    if not scored:
        return None
    best = max(scored, key=lambda s: (s[0], -s[1]))
    return best[2], best[3]


class _Puller:
    """New helpers a rebuilt definition needs, found in the new upstream files.

    A name the new text imports from vllm is taken from the template's own
    helper module for that vllm module when it defines the name (the copies'
    ``from optimized.torch_utils import async_tensor_h2d``), else pulled from
    that vllm file when it is one of the catalog's; a name defined at the top
    of the definition's own file is pulled from there.
    """

    def __init__(self, files: Sequence[UpstreamFile], bound: set[str], helpers: dict[str, tuple[str, set[str]]],
                 stand_ins: dict[str, tuple[str, str]], package: str, module: str,
                 moved: dict[str, str] | None = None) -> None:
        self.files = {f.path: f for f in files}
        self.moved = moved or {}  # a module a shim points to -> the catalog module it stands for
        self.trees: dict[str, ast.Module] = {}
        self.bound = set(bound) | set(dir(builtins))
        self.helpers = helpers  # vllm dotted module -> (template module, names it defines)
        self.stand_ins = stand_ins  # vllm function name -> (template module, the stand-in for it)
        self.package = package
        self.module = module
        self.texts: list[str] = []
        self.names: list[str] = []

    def need(self, text: str, prefer: str | None) -> str | None:
        """Pull what ``text`` lacks; the reason it cannot be, or None."""
        for name in sorted(global_names(text) - self.bound):
            problem = self._pull(name, prefer)
            if problem:
                return problem
        return None

    def _tree(self, path: str) -> ast.Module:
        if path not in self.trees:
            self.trees[path] = ast.parse("\n".join(self.files[path].lines))
        return self.trees[path]

    def _pull(self, name: str, prefer: str | None, only: str | None = None) -> str | None:
        paths = [only] if only else sorted(self.files, key=lambda p: p != prefer)
        for path in paths:
            lines = self.files[path].lines
            for node in self._tree(path).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    return self._add(name, "\n".join(lines[start - 1:node.end_lineno]), path)
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                        return self._add(name, "\n".join(lines[node.lineno - 1:node.end_lineno]), path)
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        if (alias.asname or alias.name.split(".")[0]) == name:
                            return self._import(name, node, alias)
        where = only or prefer or "its upstream file"
        return f"uses {name}, which neither the harness's namespace nor {where} defines"

    def _import(self, name: str, node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str | None:
        module = node.module if isinstance(node, ast.ImportFrom) else alias.name
        suffix = f" as {alias.asname}" if alias.asname else ""
        if isinstance(node, ast.ImportFrom) and node.level:
            return f"needs {name} from a relative import, which the harness cannot map"
        if (module or "").split(".")[0] != "vllm":
            line = f"from {module} import {alias.name}" if isinstance(node, ast.ImportFrom) else f"import {module}"
            return self._add(name, line + suffix, None)
        module = self.moved.get(module or "", module)
        if isinstance(node, ast.ImportFrom) and module in self.helpers:
            helper, defined = self.helpers[module]
            if alias.name in defined:
                return self._add(name, f"from {self.package}.{helper} import {alias.name}{suffix}", None)
        if isinstance(node, ast.ImportFrom) and alias.name in self.stand_ins:
            helper, stand_in = self.stand_ins[alias.name]
            if helper == self.module:  # the stand-in is in this very module (torch_utils)
                return self._add(name, f"{name} = {stand_in}", None)
            return self._add(name, f"from {self.package}.{helper} import {stand_in} as {name}", None)
        reexport = REEXPORTS.get(module or "", {}).get(alias.name) if isinstance(node, ast.ImportFrom) else None
        if reexport:
            return self._add(name, f"{reexport} as {name}", None)
        file = (module or "").replace(".", "/") + ".py"
        if isinstance(node, ast.ImportFrom) and file in self.files and not alias.asname:
            return self._pull(alias.name, None, only=file)
        return (f"needs {name} from {module}, a vllm name the harness's namespace lacks "
                "(add a local helper for it to the copy, marked ADAPTED)")

    def _add(self, name: str, text: str, path: str | None) -> str | None:
        self.bound.add(name)
        inside = _vllm_imports_inside(text) if path else []
        if inside:  # it would raise ImportError when called: refused now, not at run time
            return f"its new helper {name} imports {inside[0]} inside its body"
        problem = self.need(text, path) if path else None
        if problem:
            return f"its new helper {name}: {problem}"
        self.texts.append(text)
        self.names.append(name)
        return None


STAND_IN_RE = re.compile(r"#\s*ADAPTED:\s*stands in for vllm's (\w+)\(\)")


def stand_ins(template: str, module: str | None = None) -> dict[str, tuple[str, str]]:
    """vllm function -> (template module, its stand-in): the functions whose ADAPTED
    header says ``stands in for vllm's NAME()`` (``pin_memory_available`` for
    ``is_pin_memory_available``), so new upstream text calling NAME gets the stand-in.

    When several modules stand in for one name, ``module``'s own (the copy being rebuilt) wins, then those of
    copies of ``module``'s version pair (or of no target's: shared helpers), then the others': a target of
    another pair keeps its stand-ins to itself (docs/adding-a-target.md, step 1)."""
    from fuzz.targets import catalog_targets

    pairs: dict[str, set[tuple[str, str]]] = {}
    for target in catalog_targets():
        for side in ("legacy", "optimized"):
            pairs.setdefault(getattr(target, side).partition(":")[0].rpartition(".")[2], set()).add(target.versions)
    own = pairs.get(module or "", set())

    def other_pair(stem: str) -> bool:
        return bool(own) and stem in pairs and not pairs[stem] & own

    paths = sorted((PROJECT_ROOT / template).glob("*.py"),
                   key=lambda path: (path.stem != module, other_pair(path.stem), path.stem))
    found: dict[str, tuple[str, str]] = {}
    for path in paths:
        if path.stem == "__init__":
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                match = STAND_IN_RE.search(lines[node.lineno - 1])
                if match:
                    found.setdefault(match.group(1), (path.stem, node.name))
    return found


def helper_modules(template: str, skip: str) -> dict[str, tuple[str, set[str]]]:
    """vllm module -> (the template's copy module of it, the names that copy defines):
    a copy's own upstream file is the first ``vllm/...py`` path its docstring names."""
    found: dict[str, tuple[str, set[str]]] = {}
    for path in sorted((PROJECT_ROOT / template).glob("*.py")):
        if path.stem in ("__init__", skip):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named = UPSTREAM_PATH_RE.findall(ast.get_docstring(tree) or "")
        if named:
            module = named[0][:-3].replace("/", ".")
            found.setdefault(module, (path.stem, _bound_at_module_level(tree) - MODULE_NAMES))
    return found


def build_module(name: str, template: str, base: Source, new: Source, paths: Sequence[str],
                 package: str) -> ModuleBuild:
    """``template/name.py`` with its upstream definitions taken from ``new``."""
    failed: dict[str, str] = {}
    while True:
        build, late = _attempt(name, template, base, new, paths, package, failed)
        if not late:
            return build
        # A definition that fails after its merge (a helper it cannot get) keeps the copy's text.
        failed.update(late)


def _attempt(name: str, template: str, base: Source, new: Source, paths: Sequence[str], package: str,
             failed: dict[str, str]) -> tuple[ModuleBuild, dict[str, str]]:
    build = ModuleBuild(name, failed=dict(failed))
    copy_text = (PROJECT_ROOT / template / f"{name}.py").read_text(encoding="utf-8")
    lines = copy_text.splitlines()
    facts = CopyLines.from_text(copy_text)
    tree = ast.parse(copy_text)
    base_files = [f for f in (upstream_file(base, p) for p in paths) if f is not None]
    new_files = [f for f in (upstream_file(new, p) for p in paths) if f is not None]
    replacements: list[tuple[int, int, list[str], str, str]] = []
    added: set[str] = set()  # methods upstream added to a class the copy holds
    checks: dict[str, str] = {}  # qualname -> the text to find its new names in, where not its merged lines
    removals: list[tuple[int, int, list[str]]] = []  # rows of the definitions the new release does not have
    for span in walk_spans(tree.body):
        if span.qualname in build.failed or header_row(lines, span) in facts.adapted:
            continue  # failed before, or a stand-in: the harness's own, kept
        owner = next((gone for gone in build.removed if span.qualname.startswith(gone + ".")), None)
        if owner is not None:  # a member of a class the release does not have: it goes with its class
            build.removed[span.qualname] = f"{span.qualname} is not in {new.label} (nor is its class {owner})"
            continue
        found = _closest(base_files, span, lines)
        if found is None:
            continue  # not an upstream definition (provenance says so when it matters)
        base_file, base_span = found
        hit = _find(new_files, span.qualname, span.kind, prefer=base_file.path)
        if hit is None:
            there = resolved(new, base_file.path)
            why = f"{span.qualname} is not in {new.label} ({base_file.path})" + (
                f": {there.problem}" if there.problem else "")
            if there.text is None or there.problem:
                build.failed[span.qualname] = why  # the file is not there to say the definition is absent
                continue
            # Absent from a file the release has: not the release's code, so not in its side (module docstring).
            build.removed[span.qualname] = why
            removals.append((first_row(facts, span.start), span.end, []))
            continue
        new_file, new_span = hit
        if span.kind == "class":
            if _class_shape(base_file, base_span) != _class_shape(new_file, new_span):
                head = _merged_class_head(lines, facts, span, base_file, base_span, new_file, new_span)
                if isinstance(head, str):
                    build.failed[span.qualname] = (f"class {span.qualname}'s own lines {head.format(new=new.label)}"
                                                   .replace("{where}", f"{template}/{name}.py"))
                    continue
                first, end, merged = head
                replacements.append((first, end, merged, new_file.path, span.qualname))
                checks[span.qualname] = _parsable_head(merged)
            for method, text in _new_methods(base_file, base_span, new_file, new_span):
                if method not in build.failed:  # one whose helpers could not be pulled stays out
                    replacements.append((span.end + 1, span.end, text, new_file.path, method))
                    added.add(method)
            continue
        old = base_file.lines[base_span.start - 1:base_span.end]
        theirs = new_file.lines[new_span.start - 1:new_span.end]
        first = first_row(facts, span.start)
        ours = lines[first - 1:span.end]
        kept: list[str] = []
        ours_head = header_row(lines, span) - first
        old_head, theirs_head = _header_index(old), _header_index(theirs)
        if _code(ours[:ours_head]) != _code(old[:old_head]):
            # The copy adapts the decorators (`# @torch.compile(...)  # ADAPTED: run eagerly`):
            # they stay the copy's, and only what follows the `def` line is merged.
            kept, ours = ours[:ours_head], ours[ours_head:]
            old, theirs = old[old_head:], theirs[theirs_head:]
        if _code(old) == _code(theirs):
            continue  # unchanged, or only comments, blank lines or decorators the copy drops changed
        merged = merge3(old, ours, theirs)
        if not isinstance(merged, Conflict):
            merged = [*kept, *merged]
        else:
            lo = merged.ours_rows[0] + len(kept)
            merged = Conflict(merged.base_rows, (lo, merged.ours_rows[1] + len(kept)), merged.theirs_rows)
        if isinstance(merged, Conflict):
            lo, hi = merged.ours_rows
            build.failed[span.qualname] = (f"{span.qualname}: {new.label} changed lines the copy adapts "
                                           f"({template}/{name}.py:{first + lo}-{first + max(lo, hi - 1)})")
            continue
        inside = _vllm_imports_inside("\n".join(merged))
        if inside:
            build.failed[span.qualname] = f"{span.qualname} now imports {inside[0]} inside its body"
            continue
        replacements.append((first, span.end, merged, new_file.path, span.qualname))
    edits = [*((first, end, merged) for first, end, merged, _, _ in replacements), *removals]
    for first, end, merged in sorted(edits, key=lambda edit: (edit[0], edit[1]), reverse=True):
        lines[first - 1:end] = merged  # a removal before an insertion at its first row (a class's new methods)
    if build.removed:
        still = {qualname: why for qualname, why in _still_needed(lines, build.removed).items()
                 if qualname not in build.failed}  # one failed before keeps the copy's text, and fails as it is
        if still:
            return build, still
    puller = _Puller(new_files, _bound_at_module_level(ast.parse("\n".join(lines))),
                     helper_modules(template, skip=name), stand_ins(template, name), package, name,
                     moved_modules(new, paths))
    late: dict[str, str] = {}
    for _, _, merged, path, qualname in replacements:
        problem = puller.need(checks.get(qualname, "\n".join(merged)), path)
        if problem:
            late[qualname] = f"{qualname} {problem}"
            if qualname in added:  # a class missing a method upstream calls: its users cannot build
                owner = qualname.rsplit(".", 1)[0]
                late[owner] = f"{owner} lacks {qualname}, which {new.label} added: {problem}"
    if late:
        return build, late
    build.changed = [qualname for *_, qualname in replacements if qualname not in added]
    build.pulled = sorted(added)
    if puller.texts:
        lines += ["", "", f"# ADAPTED: helpers {new.label} added, pulled in beside the definitions that call them"]
        for text in puller.texts:
            lines += ["", "", *text.splitlines()]
        build.pulled += list(puller.names)
    build.text = _point_imports("\n".join(_with_lazy_annotations(lines)) + "\n", template, package)
    return build, {}


def _still_needed(lines: Sequence[str], removed: dict[str, str]) -> dict[str, str]:
    """What the rebuilt module, with the definitions its release lacks (``removed``: qualname -> why) left
    out, still needs of them: qualname -> why, for the next attempt to record as failed ({} when nothing).

    A removed definition that import itself needs (a module-level statement, a decorator, a default, a
    base or a class body names it) is kept, failed, as before the rule: without it the module would not
    import. A definition whose body needs one fails: it names a removed module-level function or class
    that nothing else binds (a NameError when it runs), or reads ``.m`` where ``m`` was only a removed
    member -- no remaining definition is so named and nothing assigns ``x.m`` or a class attribute ``m``
    (an AttributeError; generous, as ``reach`` is: any ``x.m`` counts). Without the removed text every
    definition must parse: a class left empty keeps its removed members, failed."""
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:  # a class whose every statement was removed: keep them, as before the rule
        return {qualname: why for qualname, why in removed.items() if "." in qualname}
    tree = ast.fix_missing_locations(_DropAnnotations().visit(tree))  # never evaluated (lazy annotations)
    units = {qualname: node for node, qualname in _defs(tree.body, "")}
    gone = {q for q in removed if "." not in q} - _bound_at_module_level(tree)
    supplied = {q.rpartition(".")[2] for q in units if "." in q} | _assigned_attributes(tree)
    members: dict[str, list[str]] = {}
    for qualname in removed:
        if "." in qualname and qualname.rpartition(".")[2] not in supplied:
            members.setdefault(qualname.rpartition(".")[2], []).append(qualname)

    def family(qualname: str) -> dict[str, str]:  # a kept class keeps its members
        return {q: why for q, why in removed.items() if q == qualname or q.startswith(qualname + ".")}

    kept: dict[str, str] = {}
    for part in _import_time_parts(tree.body):
        for sub in ast.walk(part):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id in gone:
                kept.update(family(sub.id))
            elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load) and sub.attr in members:
                for qualname in members[sub.attr]:
                    kept.update(family(qualname))
    if kept:
        return kept
    failing: dict[str, str] = {}
    for qualname, node in units.items():
        if isinstance(node, ast.ClassDef):
            continue  # its own lines run at import: above
        names = sorted(global_names(ast.unparse(node)) & gone)
        attrs = sorted({sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)
                        and isinstance(sub.ctx, ast.Load) and sub.attr in members})
        if names:
            failing[qualname] = f"{qualname} uses {names[0]}, but {removed[names[0]]}"
        elif attrs:
            failing[qualname] = (f"{qualname} uses .{attrs[0]}, but {removed[members[attrs[0]][0]]} and nothing "
                                 f"else defines or assigns .{attrs[0]}")
    return failing


def _assigned_attributes(tree: ast.Module) -> set[str]:
    """Attribute names the module assigns (``self.uva = ...``) or its classes bind in their bodies."""
    found = {sub.attr for sub in ast.walk(tree) if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found |= _bound_at_module_level(ast.Module(body=node.body, type_ignores=[])) - MODULE_NAMES
    return found


def _import_time_parts(body: Iterable[ast.stmt]) -> Iterable[ast.AST]:
    """What runs when the module is imported: its statements, and of each definition its decorators,
    defaults and bases and a class body's own statements; not the bodies of functions."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from node.decorator_list
            yield from (d for d in [*node.args.defaults, *node.args.kw_defaults] if d is not None)
        elif isinstance(node, ast.ClassDef):
            yield from [*node.decorator_list, *node.bases, *node.keywords]
            yield from _import_time_parts(node.body)
        else:
            yield node


def _head_end(span: Span, before_child: int) -> int:
    """The last row of a class's head: its decorators, header, docstring and the fields above its first
    method (``before_child``: the first row that belongs to that method)."""
    return before_child - 1 if span.children else span.end


def _tail_statements(f: UpstreamFile | Sequence[str], span: Span) -> list[str]:
    """A class's own statements after its first method or nested class (ast dumps)."""
    lines = f.lines if isinstance(f, UpstreamFile) else f
    node = ast.parse(textwrap.dedent("\n".join(lines[span.start - 1:span.end]))).body[0]
    assert isinstance(node, ast.ClassDef)
    defs = [i for i, s in enumerate(node.body) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if not defs:
        return []
    return [ast.dump(s) for s in node.body[defs[0]:]
            if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _merged_class_head(lines: list[str], facts: CopyLines, span: Span, base_file: UpstreamFile, base_span: Span,
                       new_file: UpstreamFile, new_span: Span) -> tuple[int, int, list[str]] | str:
    """A class whose own lines upstream changed (0.31.0's new ``GDNAttentionMetadata`` fields): its head (decorators,
    header, docstring, the fields above the first method) merged three ways as a function's body is, its methods
    left to their own merges. (first copy row, last copy row, merged lines), or why not (a template with
    ``{new}`` and ``{where}``): own lines changed below the first method, or a conflict with the copy's adaptations."""
    if _tail_statements(base_file, base_span) != _tail_statements(new_file, new_span):
        return "between its methods changed in {new}; they are not merged mechanically"
    first = first_row(facts, span.start)
    end = _head_end(span, first_row(facts, span.children[0][0]) if span.children else 0)
    base_end = _head_end(base_span, base_span.children[0][0] if base_span.children else 0)
    new_end = _head_end(new_span, new_span.children[0][0] if new_span.children else 0)
    merged = merge3(base_file.lines[base_span.start - 1:base_end], lines[first - 1:end],
                    new_file.lines[new_span.start - 1:new_end])
    if isinstance(merged, Conflict):
        lo, hi = merged.ours_rows
        return ("(bases, fields, decorators): {new} changed lines the copy adapts "
                f"({{where}}:{first + lo}-{first + max(lo, hi - 1)})")
    return first, end, merged


def _parsable_head(head: Sequence[str]) -> str:
    """A class head's text with a ``pass`` closing it, so that it parses when the head has no statement."""
    text = textwrap.dedent("\n".join(head))
    header = next((line for line in text.splitlines() if line.strip()), "")
    return text + "\n" + " " * (len(header) - len(header.lstrip()) + 4) + "pass"


def moved_modules(source: Source, paths: Sequence[str]) -> dict[str, str]:
    """Module a catalog path's compatibility shim points to -> the catalog path's module
    (``vllm.foundation.utilities.torch_utils`` -> ``vllm.utils.torch_utils``): new text that imports
    from the moved module is mapped as if it imported from the old path, which the copies stand for."""
    found: dict[str, str] = {}
    for path in paths:
        hit = resolved(source, path)
        if hit.is_shim and hit.text is not None:
            for hop in [*hit.via[1:], hit.path]:
                found.setdefault(module_of(hop), module_of(path))
    return found


def _new_methods(base_file: UpstreamFile, base_span: Span, new_file: UpstreamFile,
                 new_span: Span) -> list[tuple[str, list[str]]]:
    """The methods ``new_span``'s class has and the base release's class lacks, as (qualname, lines):
    a method upstream added (0.31.0's ``DiffusionGemmaRequestStates.apply_seed_canvases``) that merged
    methods may call. Appended to the copy's class as upstream wrote them."""
    def methods(f: UpstreamFile, span: Span) -> dict[str, Span]:
        prefix = span.qualname + "."
        return {s.qualname: s for spans in f.spans.values() for s in spans
                if s.kind == "function" and s.qualname.startswith(prefix) and "." not in s.qualname[len(prefix):]
                and span.start <= s.start <= span.end}

    old = methods(base_file, base_span)
    return [(qualname, ["", *new_file.lines[s.start - 1:s.end]])
            for qualname, s in sorted(methods(new_file, new_span).items(), key=lambda kv: kv[1].start)
            if qualname not in old]


def _point_imports(text: str, template: str, package: str) -> str:
    """``from optimized.torch_utils import x`` -> the rebuilt package's module."""
    return re.sub(rf"(?m)^(\s*from\s+){template}(\.|\s)", rf"\g<1>{package}\g<2>", text)


def reach(text: str, entry: str) -> set[str]:
    """The qualnames a call of ``entry`` may run: followed statically through
    the module's functions, classes and methods. ``self.name``/``cls.name``
    reaches that method in the class's family (its bases and subclasses in the
    module); any other ``x.name`` reaches every method so named (generous: a
    definition that may run counts)."""
    tree = ast.parse(text)
    units = {qualname: node for node, qualname in _defs(tree.body, "")}
    classes = {q: n for q, n in units.items() if isinstance(n, ast.ClassDef)}
    by_name: dict[str, list[str]] = {}
    for qualname in units:
        by_name.setdefault(qualname.rsplit(".", 1)[-1], []).append(qualname)

    def bases(cls: str) -> set[str]:
        out, todo = set(), [cls]
        while todo:
            current = todo.pop()
            if current in out or current not in classes:
                continue
            out.add(current)
            todo.extend(b.id for b in classes[current].bases if isinstance(b, ast.Name))
        return out

    def family(cls: str) -> set[str]:
        return bases(cls) | {c for c in classes if cls in bases(c)}

    seen: set[str] = set()
    todo = [entry]
    while todo:
        qualname = todo.pop()
        if qualname in seen or qualname not in units:
            continue
        seen.add(qualname)
        owner = qualname.rsplit(".", 1)[0] if qualname.rsplit(".", 1)[0] in classes else None
        node = units[qualname]
        if isinstance(node, ast.ClassDef):
            todo.append(qualname + ".__init__")
            parts: list[ast.AST] = [*node.bases, *node.decorator_list,
                                    *(s for s in node.body if not isinstance(s, (ast.FunctionDef,
                                                                                 ast.AsyncFunctionDef)))]
            todo.extend(b.id for b in node.bases if isinstance(b, ast.Name))
        else:
            parts = [node]
            if owner:
                todo.append(owner)
        for part in parts:
            for sub in ast.walk(part):
                if isinstance(sub, ast.Name):
                    todo.extend(by_name.get(sub.id, []))
                elif isinstance(sub, ast.Attribute):
                    if owner and isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                        todo.extend(f"{c}.{sub.attr}" for c in family(owner))
                    else:
                        todo.extend(q for q in by_name.get(sub.attr, []) if "." in q)
    return seen


def _defs(body: Iterable[ast.stmt], prefix: str) -> Iterable[tuple[ast.AST, str]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node, prefix + node.name
            if isinstance(node, ast.ClassDef):
                yield from _defs(node.body, prefix + node.name + ".")


def entry_digests(impl: object) -> dict[str, str]:
    """qualname -> digest (fuzz/code/codediff.py) of every definition a call of ``impl`` (a fuzz.targets.Impl) may
    run: ``reach`` from the qualname its path names and from the one of the function that actually runs
    (an inherited method's path names the subclass, its code is the base's). {} when the module's text
    cannot be read (a mutant built in memory). What "the same code" means wherever two sides are compared
    for it: same-code targets (fuzz/reach/collect.py) and a sync budget's descent (fuzz/oracles/syncrule.py)."""
    import inspect

    from fuzz.code.codediff import digests

    text = _module_text(impl)
    if text is None:
        return {}
    entry = impl.path.partition(":")[2]  # type: ignore[attr-defined]
    runs = getattr(inspect.unwrap(impl.function), "__qualname__", entry)  # type: ignore[attr-defined]
    return digests(text, reach(text, entry) | reach(text, runs))


def _module_text(impl: object) -> str | None:
    """The text of ``impl``'s module: its file (a rebuilt side's is written out), else its source; None when
    neither can be read (a mutant built in memory)."""
    import inspect
    from pathlib import Path

    module = impl.module  # type: ignore[attr-defined]
    try:
        file = getattr(module, "__file__", None)
        return Path(file).read_text(encoding="utf-8") if file and Path(file).is_file() else inspect.getsource(module)
    except (OSError, TypeError):
        return None


def claimed_digests(impl: object, qualnames: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per claimed qualname, qualname -> digest of every definition a call of it may run in ``impl``'s module
    (``reach``; {} where the module lacks it). An input model calls some claimed definitions itself (the
    keep-on-cpu field configs decide where each input lives): they decide a side's syncs as much as the
    entry point's code does (fuzz/oracles/syncrule.py)."""
    from fuzz.code.codediff import digests

    text = _module_text(impl)
    if text is None:
        return {}
    return {qualname: digests(text, reach(text, qualname)) for qualname in qualnames}
