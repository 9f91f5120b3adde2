"""``python -m fuzz new-target``: scaffold a target from two vllm releases.

In the spirit of ``hypothesis write``: it writes every file of a target
(docs/adding-a-target.md) so that a contributor starts from upstream text, not
from a blank page --

* ``legacy/MODULE.py`` and ``optimized/MODULE.py``: the named definitions
  sliced verbatim out of the two releases (a method comes with its class's own
  lines; ``--also`` adds definitions the record does not name, e.g. the
  ``__init__`` an input model needs), under the SPDX header and the provenance
  docstring, with the module-level imports and helpers they use. An import of
  vllm (or of a package the copies may not use) is commented out and its names
  bound to placeholders, each line marked ``# ADAPTED: map to a local helper``,
  so ``python -m fuzz provenance`` accepts the copies as they are written;
* the target's own folder, ``strategies/MODULE/``: ``inputs.py``, an input model stub;
  ``record.py``, the record with its version pair; ``oracles.py``, an invariant stub; ``planted.py``,
  empty ``BUGS``/``BENIGN`` lists to fill;
* ``tests/unit/test_oracles_MODULE.py``: the test that breaks each invariant by hand.

The stubs raise NotImplementedError (and the test fails) until they are written: a scaffold never
passes for a target that checks nothing.

It refuses, with exit 2 and one line, to overwrite a file, a qualname one of
the releases lacks, or a release it cannot read. Upstream text comes from the
provenance sources (the repo's source packs, the wheel cache, pip).
"""

from __future__ import annotations

import ast
import builtins
import difflib
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from fuzz.errors import UsageError
from fuzz.releases.common import PROJECT_ROOT, SIDES, default_cache, side_version
from fuzz.releases.matching import Span, UpstreamFile, def_start, is_def, upstream_file
from fuzz.releases.packs import find_pack
from fuzz.releases.sources import Source, WheelSource, cached_wheel, fetch_wheel, open_source

# What the copies may import (docs/adding-a-target.md): the standard library, torch, numpy, triton.
ALLOWED_PACKAGES = {"torch", "numpy", "triton"}
MAP_MARK = "# ADAPTED: map to a local helper"
SPDX = ("# SPDX-License-Identifier: Apache-2.0\n"
        "# SPDX-FileCopyrightText: Copyright contributors to the vLLM project\n")
REF_RE = re.compile(r"(vllm/[\w/]+\.py)::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
GENERIC_STEMS = {"utils", "__init__", "common", "base", "layer", "layers", "interface", "interfaces", "ops"}


@dataclass
class Plan:
    """What ``new-target`` writes: repo-relative path -> text, and what is left to do."""

    files: dict[str, str]
    todo: list[str] = field(default_factory=list)


def parse_ref(ref: str, flag: str = "--upstream") -> tuple[str, str]:
    match = REF_RE.fullmatch(ref.strip())
    if not match:
        raise UsageError(f"{flag} {ref!r} must look like vllm/path/to/file.py::Qual.name "
                         f"(e.g. vllm/v1/utils.py::CpuGpuBuffer.copy_to_gpu)")
    return match.group(1), match.group(2)


def default_module(path: str) -> str:
    """``vllm/model_executor/models/keye.py`` -> ``keye``; a generic name takes its folder:
    ``vllm/v1/utils.py`` -> ``v1_utils``."""
    parts = Path(path).with_suffix("").parts
    stem = parts[-1]
    if stem in GENERIC_STEMS and len(parts) > 2:
        stem = f"{parts[-2]}_{stem}"
    return re.sub(r"\W", "_", stem)


def class_name(module: str) -> str:
    return "".join(part.capitalize() for part in module.split("_") if part) + "Inputs"


# --------------------------------------------------------------------------- slicing


def _spans_of(parsed: UpstreamFile, qualname: str, path: str, version: str) -> list[Span]:
    if qualname in parsed.spans:
        return parsed.spans[qualname]
    close = difflib.get_close_matches(qualname, list(parsed.spans), n=3)
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise UsageError(f"{path}::{qualname} is not in vllm {version}{hint}; check the qualname "
                     f"(both releases must hold it)")


def _kept_rows(body: Sequence[ast.stmt], wanted: set[str], prefix: str = "") -> list[int]:
    """Rows of the definitions in ``body`` that ``wanted`` selects: a selected definition whole;
    a class holding a selected one: its own rows and its selected children."""
    rows: list[int] = []
    for node in body:
        if not is_def(node):
            continue
        qualname = prefix + node.name
        start = def_start(node)
        if qualname in wanted:
            rows.extend(range(start, node.end_lineno + 1))
        elif isinstance(node, ast.ClassDef) and any(w.startswith(qualname + ".") for w in wanted):
            kids = [k for k in node.body if is_def(k)]
            inner = {row for k in kids for row in range(def_start(k), k.end_lineno + 1)}
            rows.extend(row for row in range(start, node.end_lineno + 1) if row not in inner)
            rows.extend(_kept_rows(kids, wanted, qualname + "."))
    return sorted(set(rows))


def _tidy(lines: list[str], rows: list[int]) -> list[str]:
    """The rows' text; a run of blank rows (or rows left out) becomes one blank line inside a
    definition and two between top-level definitions."""
    out: list[str] = []
    previous = None
    for row in rows:
        text = lines[row - 1]
        gap = previous is not None and (row != previous + 1 or not lines[previous - 1].strip())
        previous = row
        if not text.strip():
            continue
        if gap or (out and not text[:1].isspace() and out[-1][:1].isspace()):
            top = not text[:1].isspace()
            while out and not out[-1].strip():
                out.pop()
            out.extend([""] * (2 if top else 1))
        out.append(text)
    return out


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the code binds somewhere (parameters, assignments, loop targets, defs)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _free_names(text: str) -> list[str]:
    """Names the code reads but never binds (builtins left out), in order of first use."""
    tree = ast.parse(text)
    bound = _bound_names(tree)
    seen: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in bound and not hasattr(builtins, node.id):
                seen.setdefault(node.id, None)
    return list(seen)


def _module_statements(tree: ast.Module) -> list[ast.stmt]:
    """Module-level statements, those inside module-level ``if``/``try`` blocks included
    (``if TYPE_CHECKING: import numpy as np``)."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            todo[:0] = [*node.body, *getattr(node, "orelse", []), *[s for h in getattr(node, "handlers", [])
                                                                    for s in h.body]]
            continue
        out.append(node)
    return out


def _binds(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def _allowed(module: str) -> bool:
    top = module.split(".")[0]
    return top in ALLOWED_PACKAGES or top in sys.stdlib_module_names and top != "__future__"


@dataclass
class _Copy:
    """One side's copy of one upstream file's slices, being assembled."""

    future: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    placeholders: list[str] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)  # module-level code the slices use
    slices: list[str] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)


def _slice_file(text: str, path: str, version: str, qualnames: Sequence[str], copy: _Copy) -> None:
    parsed = UpstreamFile.from_text(path, text)
    for qualname in qualnames:
        _spans_of(parsed, qualname, path, version)
    tree = ast.parse(text)
    lines = text.splitlines()
    rows = _kept_rows(tree.body, set(qualnames))
    body = "\n".join(_tidy(lines, rows)) + "\n"
    statements = _module_statements(tree)
    binding: dict[str, ast.stmt] = {}
    for node in statements:
        for name in _binds(node):
            binding.setdefault(name, node)
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body):
        copy.future.extend(ast.get_source_segment(text, n) for n in tree.body
                           if isinstance(n, ast.ImportFrom) and n.module == "__future__")
    emitted: set[int] = set()
    placeholder_names: set[str] = set()
    helper_nodes: list[ast.stmt] = []
    import_nodes: list[ast.stmt] = []
    mapped: list[tuple[int, str]] = []  # (upstream line, placeholder lines)
    todo_names = list(_free_names(body))
    done: set[str] = set()
    while todo_names:
        name = todo_names.pop(0)
        if name in done:
            continue
        done.add(name)
        node = binding.get(name)
        if node is None:
            copy.todo.append(f"{path}: `{name}` is not defined at module level upstream; define it or mark its use")
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            if not relative and module and _allowed(module):
                if id(node) not in emitted:
                    emitted.add(id(node))
                    import_nodes.append(node)
                continue
            origin = ("." * node.level if isinstance(node, ast.ImportFrom) else "") + (module or "")
            alias = next(a for a in node.names if (a.asname or a.name).split(".")[0] == name)
            spelled = (f"from {origin} import {alias.name}" if isinstance(node, ast.ImportFrom) else
                       f"import {alias.name}") + (f" as {alias.asname}" if alias.asname else "")
            mapped.append((node.lineno, f"# {spelled}  {MAP_MARK}\n"
                                        f"{name} = None  # ADAPTED: TODO map {origin}.{alias.name} to a local helper"))
            placeholder_names.add(name)
            copy.todo.append(f"{path}: `{name}` ({spelled}) is a placeholder (None); copy the helper beside the "
                             f"copy or stand it in, marked ADAPTED")
        elif isinstance(node, ast.ClassDef):
            mapped.append((node.lineno, f"class {name}:  # ADAPTED: TODO stand-in for upstream {path}::{name}\n"
                                        "    pass  # ADAPTED: TODO give it what the copies use"))
            placeholder_names.add(name)
            copy.todo.append(f"{path}: class `{name}` is a stand-in; copy it (--also) or give it what the copies use")
        else:
            if id(node) not in emitted:
                emitted.add(id(node))
                helper_nodes.append(node)
                start = def_start(node) if is_def(node) else node.lineno
                todo_names.extend(_free_names(textwrap.dedent("\n".join(lines[start - 1:node.end_lineno]))))
    copy.placeholders.extend(text for _, text in sorted(mapped))  # upstream order
    for node in sorted(import_nodes, key=lambda n: n.lineno):
        copy.imports.append(textwrap.dedent(ast.get_source_segment(text, node) or ""))
    for node in sorted(helper_nodes, key=lambda n: n.lineno):
        start = def_start(node) if is_def(node) else node.lineno
        copy.helpers.append(textwrap.dedent("\n".join(lines[start - 1:node.end_lineno])))
    copy.slices.append(_comment_out_decorators(body, placeholder_names, copy.todo, path))


def _comment_out_decorators(body: str, placeholders: set[str], todo: list[str], path: str) -> str:
    """A decorator whose name is a placeholder cannot run: it becomes an ADAPTED comment."""
    tree = ast.parse(body)
    lines = body.splitlines()
    for node in ast.walk(tree):
        for deco in getattr(node, "decorator_list", []):
            root = deco.func if isinstance(deco, ast.Call) else deco
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in placeholders:
                for row in range(deco.lineno, deco.end_lineno + 1):
                    line = lines[row - 1]
                    indent = len(line) - len(line.lstrip())
                    lines[row - 1] = f"{line[:indent]}# {line[indent:]}  # ADAPTED: vllm decorator, not run here"
                todo.append(f"{path}: decorator @{root.id} commented out (ADAPTED); check the copy runs without it")
    return "\n".join(lines) + "\n"


def build_copy(side: str, version: str, refs: Sequence[tuple[str, str]], also: Sequence[tuple[str, str]],
               source: Source) -> tuple[str, list[str]]:
    """The text of one side's copy module, and its TODO lines."""
    by_file: dict[str, list[str]] = {}
    for path, qualname in [*refs, *also]:
        by_file.setdefault(path, [])
        if qualname not in by_file[path]:
            by_file[path].append(qualname)
    copy = _Copy()
    header = ""
    for path, qualnames in by_file.items():
        parsed = upstream_file(source, path)
        if parsed is None:
            raise UsageError(f"vllm {version} ({source.label}) has no {path}; check the --upstream path")
        text = "\n".join(parsed.lines) + "\n"
        header = header or _license_header(parsed.lines)
        _slice_file(text, path, version, qualnames, copy)
    named = "\n".join(f"{path} :: {', '.join(q)}" for path, q in by_file.items())
    docstring = (f'"""Copied from vllm {version}:\n{named}\n(definitions verbatim; a method with its class\'s own '
                 f'lines). Scaffolded by `python -m fuzz new-target`:\nevery line that departs from upstream ends '
                 f'with `# ADAPTED: <why>` (docs/adding-a-target.md).\n"""')
    parts = [header + docstring]
    for block in (copy.future, _dedupe(copy.imports), copy.placeholders):
        if block:
            parts.append("\n".join(block))
    body = "\n\n\n".join(_dedupe([*copy.helpers, *(s.strip("\n") for s in copy.slices)]))
    text = "\n\n".join(parts) + "\n\n\n" + body + "\n"
    ast.parse(text)  # a scaffold that is not Python is a bug here, not the contributor's
    return text, [f"{side}: {line}" for line in copy.todo]


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _license_header(lines: Sequence[str]) -> str:
    """The upstream file's leading comment block (SPDX lines), else vLLM's two SPDX lines."""
    block = []
    for line in lines:
        if not line.startswith("#"):
            break
        block.append(line)
    return "\n".join(block) + "\n" if any("SPDX" in line for line in block) else SPDX


# --------------------------------------------------------------------------- the other files


def _package_stub(name: str, module: str) -> str:
    return f'''"""The {name} target: everything of it but its copies (legacy/{module}.py, optimized/{module}.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
'''


def _strategy_stub(name: str, module: str) -> str:
    cls = class_name(module)
    return f'''"""Input model of the {name} target (legacy/{module}.py vs optimized/{module}.py).

Scaffolded by `python -m fuzz new-target`: write ``specs`` and ``materialize``
(docs/adding-a-target.md, step 2); strategies/torch_utils/inputs.py is a small example.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from hypothesis import strategies as st

from fuzz.api import Impl  # the one engine module a target's code imports (lint-imports checks)


class {cls}:
    """TODO: what the callers pass, under ``contract == "caller"``; every form the legacy side took under
    ``"wide"``."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        # JSON data only, and a "device" key: strategies.common.devices(available). Each spec runs on every
        # device of the run; if a draw depends on the device, also define runs_on(spec, device) -> bool.
        raise NotImplementedError("write the input model: docs/adding-a-target.md, step 2")

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        # Fresh inputs for one side; the thunk makes only the upstream call (impl.function,
        # impl.owner for a method's class; other classes of the side from impl.module).
        raise NotImplementedError("write the input model: docs/adding-a-target.md, step 2")
'''


def _catalog_record(name: str, module: str, refs: Sequence[tuple[str, str]], pair: tuple[str, str]) -> str:
    entry = refs[0][1]
    upstream = "".join(f'\n            "{path}::{qualname}",' for path, qualname in refs)
    impl = f"{refs[0][0].removesuffix('.py').replace('/', '.')}:{entry}"
    return f'''"""{name}: {entry}, vllm {pair[0]} -> {pair[1]}.

Scaffolded by `python -m fuzz new-target`; TODO: say what changed (docs/adding-a-target.md, step 3).
"""

from fuzz.api import Comparison, Target

# The releases the copies were taken from: provenance checks them against these, drift measures
# from them, and reports and repro files label the target with them.
VERSIONS = ("{pair[0]}", "{pair[1]}")
DESIGN_ROWS = (99,)

TARGETS = [
    Target(
        name="{name}",
        upstream=({upstream}
        ),
        legacy="legacy.{module}:{entry}",
        optimized="optimized.{module}:{entry}",
        upstream_impl="{impl}",
        inputs="strategies.{module}.inputs:{class_name(module)}",
        comparison=Comparison(floats="exact"),
        expected_optimized_syncs=0,  # TODO: syncs per call on CUDA, by design
        versions=VERSIONS,
        description="TODO: what changed",
        # Written from the upstream meaning of the result, not from either copy (strategies/{module}/oracles.py).
        invariants=("strategies.{module}.oracles:{_invariant_name(module)}",),
    ),
]
'''


def _invariant_name(module: str) -> str:
    return f"{module}_output_means_what_upstream_says"


def _oracles_stub(name: str, module: str) -> str:
    return f'''"""Oracles of the {name} target: what any correct implementation's output satisfies.

Scaffolded by `python -m fuzz new-target` (docs/adding-a-target.md, step 3). Each invariant is
``(spec, output) -> None | "what is violated"``, stated in its docstring from the upstream meaning of the
result (its docstring, how its callers read it), never from either copy. Where none applies, delete this
file and give the record ``no_invariants="why"``; add a ``Reference`` (fuzz.api) where an independent
implementation is cheap and obviously right.
"""

from __future__ import annotations

from typing import Any


def {_invariant_name(module)}(spec: dict, output: Any) -> str | None:
    """TODO: the property, in one sentence (and rename the function after it, in the record too)."""
    raise NotImplementedError("write the invariant: docs/adding-a-target.md, step 3")
'''


def _oracle_test_stub(name: str, module: str) -> str:
    return f'''"""The {name} target's invariants, each broken by a hand-made output (strategies/{module}/oracles.py).

Scaffolded by `python -m fuzz new-target`: a test per invariant, on an output that breaks it, and one on an
output that keeps it (docs/adding-a-target.md, step 3).
"""

from strategies.{module}.oracles import {_invariant_name(module)}


def test_{_invariant_name(module)}_reports_a_broken_output():
    spec: dict = {{}}  # TODO: a spec the input model could draw
    broken = None  # TODO: an output that breaks the invariant
    assert {_invariant_name(module)}(spec, broken) is not None
'''


def _planted_stub(name: str, module: str) -> str:
    return f'''"""Planted bugs and benign refactors for the {name} target (optimized/{module}.py).

Scaffolded by `python -m fuzz new-target`. Each is a one-edit mutant of the optimized copy:
Plant(name, base_target, module, old, new, why); ``old`` must occur once in the copy.
tests/unit/test_targets.py wants at least one of each; tests/planted collects them. A bug both copies share,
which only the oracles can see, is a ``SharedPlant`` in ``SHARED_BUGS`` (fuzz.api).
"""

from fuzz.api import Plant

_OPT = "optimized.{module}"

# e.g. Plant("planted-{name}-...", "{name}", _OPT,
#            "<upstream text>", "<the slip>", "<what goes wrong>")
BUGS: list[Plant] = []

# e.g. Plant("benign-{name}-...", "{name}", _OPT,
#            "<upstream text>", "<an equivalent>", "<why it is equivalent>")
BENIGN: list[Plant] = []
'''


@dataclass(frozen=True)
class Request:
    """A checked ``new-target`` request: the refs parsed, the module named, the files to write."""

    name: str
    refs: tuple[tuple[str, str], ...]
    also: tuple[tuple[str, str], ...]
    module: str
    paths: dict[str, str]


def check_request(name: str, refs: Sequence[str], module: str | None = None, also: Sequence[str] = (),
                  root: Path = PROJECT_ROOT, known_targets: Sequence[str] = ()) -> Request:
    """The refusals that need no upstream text: a bad or taken name, a malformed ref, an existing file."""
    if not NAME_RE.fullmatch(name):
        raise UsageError(f"target name {name!r} must be lower-case words joined by '-' (e.g. cpu-gpu-buffer-copy)")
    if name in known_targets:
        raise UsageError(f"a target named {name!r} already exists; pick another name")
    if not refs:
        raise UsageError("name at least one --upstream vllm/path.py::Qual.name")
    parsed = tuple(parse_ref(ref) for ref in refs)
    extra = tuple(parse_ref(ref, "--also") for ref in also)
    named = [*refs, *also]
    twice = sorted({ref for ref in named if named.count(ref) > 1})
    if twice:
        raise UsageError(f"{', '.join(twice)} is named twice (--upstream/--also); name each definition once")
    module = module or default_module(parsed[0][0])
    if not module.isidentifier() or module.startswith("_"):
        raise UsageError(f"--module {module!r} must be a Python module name (letters, digits, '_')")
    paths = {side: f"{side}/{module}.py" for side in SIDES}
    folder = f"strategies/{module}"
    paths.update(package=f"{folder}/__init__.py", inputs=f"{folder}/inputs.py", record=f"{folder}/record.py",
                 oracles=f"{folder}/oracles.py", planted=f"{folder}/planted.py",
                 oracle_tests=f"tests/unit/test_oracles_{module}.py")
    existing = [p for p in [*paths.values(), folder, f"strategies/{module}.py"] if (root / p).exists()]
    if existing:
        raise UsageError(f"{', '.join(existing)} already exist(s) under {root}; new-target never overwrites: "
                         f"pick another --module (or remove the files)")
    missing = sorted({str(Path(p).parent) for p in paths.values()
                      if not (root / p).parent.is_dir() and Path(p).parent != Path(folder)})
    if missing:
        raise UsageError(f"{root} has no {', '.join(missing)}/; --root must be a syncfuzz checkout")
    return Request(name, parsed, extra, module, paths)


def plan(name: str, refs: Sequence[str], pair: tuple[str, str], sources: Mapping[str, Source],
         module: str | None = None, also: Sequence[str] = (), root: Path = PROJECT_ROOT,
         known_targets: Sequence[str] = ()) -> Plan:
    """The files ``new-target`` writes under ``root`` (nothing is written here).

    ``sources``: by version, the two releases of ``pair``. Raises UsageError for an existing
    file, a bad name, a qualname a release lacks, a release without the file.
    """
    request = check_request(name, refs, module, also, root, known_targets)
    files, todo = {}, []
    for side in SIDES:
        version = side_version(pair, side)
        text, notes = build_copy(side, version, request.refs, request.also, sources[version])
        files[request.paths[side]] = text
        todo += notes
    if _body(files[request.paths["legacy"]]) == _body(files[request.paths["optimized"]]):
        todo.insert(0, f"the definitions named are the same text in vllm {pair[0]} and {pair[1]}: the change is "
                       "elsewhere (a helper they call?); diff the two releases' files and name the definition "
                       "that changed with --upstream (then remove these files and scaffold again)")
    files[request.paths["package"]] = _package_stub(name, request.module)
    files[request.paths["inputs"]] = _strategy_stub(name, request.module)
    files[request.paths["record"]] = _catalog_record(name, request.module, request.refs, pair)
    files[request.paths["oracles"]] = _oracles_stub(name, request.module)
    files[request.paths["planted"]] = _planted_stub(name, request.module)
    files[request.paths["oracle_tests"]] = _oracle_test_stub(name, request.module)
    todo += [f"write the input model in {request.paths['inputs']}",
             f"write the invariants in {request.paths['oracles']} and break each by hand in "
             f"{request.paths['oracle_tests']}",
             f"plant at least one bug and one benign refactor in {request.paths['planted']}",
             f"fill in the description and expected_optimized_syncs in {request.paths['record']}"]
    return Plan(files, todo)


def _body(copy: str) -> str:
    """A scaffolded copy without its header and provenance docstring (which name the release)."""
    return copy.split('"""', 2)[-1]


def write(result: Plan, root: Path) -> list[Path]:
    """Write the plan's files; each is created exclusively (never overwritten, even in a race)."""
    written = []
    for rel, text in result.files.items():
        path = root / rel
        path.parent.mkdir(exist_ok=True)  # the target's own folder, strategies/MODULE/
        try:
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(text)
        except FileExistsError as exc:
            raise UsageError(f"{path} appeared while writing; new-target never overwrites") from exc
        written.append(path)
    return written


# --------------------------------------------------------------------------- the command


VERSION_RE = re.compile(r"\d+(\.\d+)+([.+!-]?[A-Za-z0-9]+)*")  # 0.29.0, 0.34.0rc1, 0.11.0+cu128


def check_pair(legacy: str, optimized: str) -> tuple[str, str]:
    """The (legacy, optimized) releases, refused when one is blank or both are the same release: such a
    target's sides are the same code, and every run of it could only say same-code (no evidence)."""
    pair = (legacy.strip(), optimized.strip())
    if not all(pair):
        raise UsageError("--legacy-version and --optimized-version must name vllm releases, e.g. 0.29.0")
    for flag, version in zip(("--legacy-version", "--optimized-version"), pair):
        # Checked before any download: pip would only say "no matching distribution" a minute later.
        if not VERSION_RE.fullmatch(version):
            raise UsageError(f"{flag} {version!r} is not a vllm release number; give one such as 0.29.0")
    if pair[0] == pair[1]:
        raise UsageError(f"--legacy-version and --optimized-version are both {pair[0]}: the two sides would be the "
                         "same code, and the target could never find anything; give the release before the change "
                         "and the release with it")
    return pair


def target_names(root: Path) -> list[str]:
    """The names ``list`` shows in the checkout at ``root``, the one new-target writes into: this checkout's
    registry (plug-ins included), or another checkout's catalog read as text (importing a second fuzz package
    into this process would mix the two trees). A name taken there would break its ``list`` and ``run``."""
    if root == PROJECT_ROOT:
        from fuzz.targets import lookup

        return [t.name for t in lookup([])]
    names = []
    for record in sorted((root / "strategies").glob("*/record.py")):
        try:
            tree = ast.parse(record.read_text(encoding="utf-8"), str(record))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # not a record new-target could collide with; that checkout's own list reports it
        names += [keyword.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                  for keyword in node.keywords
                  if keyword.arg == "name" and isinstance(keyword.value, ast.Constant)
                  and isinstance(keyword.value.value, str)]
    return names


def _source_holding(version: str, files: Sequence[str], cache: Path) -> Source:
    """vllm ``version`` as new-target reads it: its source pack when the pack holds every file named (a new
    target's file is usually not in the packs yet), else its wheel (the cache, else pip)."""
    pack = find_pack(version)
    if pack is not None and all(pack.read_raw(path) is not None for path in files):
        return pack
    wheel = cached_wheel(version, cache)
    return WheelSource(wheel or fetch_wheel(version, cache, command="new-target"))


def new_target_command(name: str, *, upstream: Sequence[str], legacy_version: str, optimized_version: str,
                       also: Sequence[str] = (), module: str | None = None, root: str | None = None,
                       legacy_source: str | None = None, optimized_source: str | None = None,
                       cache: str | None = None) -> int:
    """``new-target NAME``: write the target's files (``Plan``) under ``root`` (default this checkout) and print
    what is left to do; the exit code. The values are the flags' (``python -m fuzz new-target --help``)."""
    from fuzz.reports.preflight import check_cache, refuse_empty

    # "" was silently this checkout (--root) or the default release (--*-source)
    refuse_empty({"--root": root, "--legacy-source": legacy_source, "--optimized-source": optimized_source,
                  "--module": module})
    checkout = Path(root).expanduser().resolve() if root else PROJECT_ROOT
    if not checkout.is_dir():
        raise UsageError(f"--root {str(checkout)!r} is not a directory")
    pair = check_pair(legacy_version, optimized_version)
    known = target_names(checkout)
    cache_dir = check_cache(cache, default_cache)
    side_sources = {"legacy": legacy_source, "optimized": optimized_source}
    given = {side_version(pair, side): open_source(side_sources[side], f"--{side}-source")
             for side in SIDES if side_sources[side]}
    # Cheap refusals first: nothing is read or downloaded for a scaffold that cannot be written.
    request = check_request(name, upstream, module, also, checkout, known)
    files = sorted({path for path, _ in (*request.refs, *request.also)})
    sources = {version: given.get(version) or _source_holding(version, files, cache_dir)
               for version in dict.fromkeys(pair)}
    result = plan(name, upstream, pair, sources, module, also, checkout, known)
    for path in write(result, checkout):
        print(f"wrote {path.relative_to(checkout) if path.is_relative_to(checkout) else path}")
    print("\nleft to do:")
    for line in result.todo:
        print(f"  - {line}")
    print(f"\nthen: python -m fuzz provenance --target {name}; python -m fuzz run --target {name} "
          f"--max-examples 200; python -m pytest -q tests/unit/test_targets.py tests/e2e/test_planted.py "
          f"(docs/adding-a-target.md ends with every check)")
    return 0
