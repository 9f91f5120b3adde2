"""Compatibility shims: a vllm module that only re-exports another, followed to the module it names.

vLLM main (after 0.34.0) moves modules (``vllm/utils/gpu_sync_debug.py`` ->
``vllm/foundation/utilities/gpu_sync_debug.py``) and leaves at the old path a few
lines that alias the new module. A side built from such a tree must read the
definitions where they now are. ``shim_target`` says whether a module's text is
such a shim and which module it points to; ``resolve`` follows a path through
shims (a chain, bounded) to the file whose text the side uses. Every source
(fuzz/releases/sources.py) reads through ``resolve``, so the side builder, the
change list, provenance, reach, replay's file hashes and ``sources fetch`` all see
the same text.

A shim is a module whose every statement is one of (the docstring aside):

* an import of a non-vllm module (``importlib``, ``sys``, ``warnings``) or ``from __future__``;
* ``from vllm.x.y import *`` or ``from vllm.x.y import a, b as c`` (one module for the whole shim);
* ``import vllm.x.y as m`` or ``m = importlib.import_module("vllm.x.y")``;
* ``sys.modules[__name__] = m`` (or ``= importlib.import_module("vllm.x.y")``);
* ``__all__ = [...]``, ``__all__ = m.__all__`` or ``getattr(m, "__all__", [])``;
* a ``warnings.warn(...)`` call (a deprecation warning), ``del`` of names;
* ``def __getattr__(name)`` / ``def __dir__()`` that only warn and return ``getattr(m, name)`` / ``dir(m)``
  (main's "lazy ``__getattr__`` delegation" form);
* any of these inside ``with warnings.catch_warnings():`` or ``if TYPE_CHECKING:``.

A module with any other statement (a definition of its own, a constant) is not a shim and is read as it is.
Text is only parsed, never run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable

MAX_HOPS = 8  # a chain of shims longer than this is refused (a cycle, or a mistake)
_DELEGATES = {"__getattr__", "__dir__"}
# A top-level definition other than the delegates: a real module, known without parsing it (every read of
# every catalog file asks; most are large).
_OWN_DEFINITION = re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+(?!__getattr__\b|__dir__\b)\w", re.MULTILINE)


@dataclass(frozen=True)
class Resolved:
    """What a catalog path stands for in a tree.

    ``path``: the file whose text is used (the path asked for, unless it is a shim);
    ``text``: that text (None: the path is absent, or a shim whose target is);
    ``via``: the shims followed, the path asked for first (empty: not a shim);
    ``problem``: why a shim could not be followed (names both paths), else None.
    """

    asked: str
    path: str
    text: str | None
    via: tuple[str, ...] = ()
    problem: str | None = None
    raw: str | None = None  # the asked path's own text (the shim's, when it is one)

    @property
    def is_shim(self) -> bool:
        return bool(self.via)


def module_of(path: str) -> str:
    """``vllm/a/b.py`` -> ``vllm.a.b``; ``vllm/a/__init__.py`` -> ``vllm.a``."""
    stem = path[:-3] if path.endswith(".py") else path
    parts = stem.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def candidate_paths(module: str) -> list[str]:
    """Where a dotted module's text may be: ``vllm/x/y.py``, else ``vllm/x/y/__init__.py``."""
    stem = module.replace(".", "/")
    return [f"{stem}.py", f"{stem}/__init__.py"]


def shim_target(text: str, path: str = "") -> str | None:
    """The dotted module ``text`` only re-exports, or None when it is not a compatibility shim
    (``path``, the file's own, resolves relative imports)."""
    if _OWN_DEFINITION.search(text):
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    package = module_of(path) if path.endswith("/__init__.py") else module_of(path).rpartition(".")[0]
    scan = _Scan(package)
    body = list(tree.body)
    if body and _is_docstring(body[0]):
        body = body[1:]
    if not scan.statements(body) or len(scan.targets) != 1 or not scan.exports:
        return None
    return next(iter(scan.targets))


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


class _Scan:
    """Walks a module's statements; every one must be shim machinery."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.targets: set[str] = set()  # the vllm module(s) re-exported
        self.aliases: dict[str, str] = {}  # local name -> vllm module it is bound to
        self.plain: set[str] = set()  # non-vllm modules imported (importlib, sys, warnings)
        self.exports = False  # something actually re-exports (not only a docstring and imports)
        self.named: set[str] = set()  # modules names were re-imported from (`from vllm.a import b`)

    def statements(self, body: list[ast.stmt]) -> bool:
        return all(self.statement(node) for node in body)

    def statement(self, node: ast.stmt) -> bool:
        if _is_docstring(node) or isinstance(node, ast.Pass):
            return True
        if isinstance(node, ast.Import):
            return all(self._import(alias) for alias in node.names)
        if isinstance(node, ast.ImportFrom):
            return self._import_from(node)
        if isinstance(node, ast.Assign):
            return self._assign(node)
        if isinstance(node, ast.Expr):
            return self._warning(node.value)
        if isinstance(node, ast.Delete):
            return all(isinstance(t, ast.Name) for t in node.targets)
        if isinstance(node, ast.With):
            return (all(self._warning(item.context_expr, catch=True) for item in node.items)
                    and self.statements(node.body))
        if isinstance(node, ast.If):
            return _is_type_checking(node.test) and self.statements(node.body) and self.statements(node.orelse)
        if isinstance(node, ast.FunctionDef):
            return self._delegate(node)
        return False

    # ---- imports

    def _absolute(self, module: str | None, level: int) -> str | None:
        if not level:
            return module
        parts = self.package.split(".") if self.package else []
        if level - 1 > len(parts):
            return None
        base = parts[:len(parts) - (level - 1)]
        return ".".join([*base, *([module] if module else [])]) or None

    def _import(self, alias: ast.alias) -> bool:
        if alias.name.split(".")[0] != "vllm":
            self.plain.add(alias.asname or alias.name.split(".")[0])
            return True
        if not alias.asname:
            return False  # `import vllm.x.y` binds `vllm`: not an alias the shim can hand on
        self.aliases[alias.asname] = alias.name
        return True

    def _import_from(self, node: ast.ImportFrom) -> bool:
        module = self._absolute(node.module, node.level)
        if node.module == "__future__":
            return True
        if module is None:
            return False
        if module.split(".")[0] != "vllm":
            self.plain.update(a.asname or a.name for a in node.names)
            return True
        if any(a.name == "*" for a in node.names):
            self.targets.add(module)
            self.exports = True
            return True
        # Named re-imports. `from vllm.a import b as _m` used as sys.modules[__name__] = _m binds module a.b,
        # decided when the assignment is seen; until then the names re-export from `module`.
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        self.named.add(module)
        self.targets.add(module)
        self.exports = True
        return True

    # ---- assignments

    def _assign(self, node: ast.Assign) -> bool:
        if len(node.targets) != 1:
            return False
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and target.id == "__all__":
            return self._all_value(value)
        if isinstance(target, ast.Name):
            module = self._import_module_call(value)
            if module is None:
                return False
            self.aliases[target.id] = module
            return True
        if (isinstance(target, ast.Subscript) and _is_attr(target.value, "sys", "modules")
                and isinstance(target.slice, ast.Name) and target.slice.id == "__name__"):
            module = self._module_value(value)
            if module is None:
                return False
            # `from vllm.a import b as m; sys.modules[__name__] = m`: the shim is module a.b, not a.
            if isinstance(value, ast.Name) and module.rpartition(".")[0] in self.named:
                self.targets.discard(module.rpartition(".")[0])
            self.targets.add(module)
            self.exports = True
            return True
        return False

    def _all_value(self, value: ast.expr) -> bool:
        if isinstance(value, (ast.List, ast.Tuple)):
            return all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)
        if isinstance(value, ast.Attribute) and value.attr == "__all__":
            return self._module_value(value.value) is not None
        if isinstance(value, ast.Call) and _is_name(value.func, "getattr") and value.args:
            return self._module_value(value.args[0]) is not None
        return False

    def _module_value(self, value: ast.expr) -> str | None:
        """The vllm module an expression stands for: a bound alias or an import_module call."""
        if isinstance(value, ast.Name):
            return self.aliases.get(value.id)
        return self._import_module_call(value)

    def _import_module_call(self, value: ast.expr) -> str | None:
        if not (isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Constant)
                and isinstance(value.args[0].value, str)):
            return None
        func = value.func
        called = (isinstance(func, ast.Attribute) and func.attr == "import_module"
                  and isinstance(func.value, ast.Name) and func.value.id in self.plain) or (
            _is_name(func, "import_module") and "import_module" in self.plain)
        if not called:
            return None
        module = value.args[0].value
        if module.startswith("."):
            level = len(module) - len(module.lstrip("."))
            module = self._absolute(module.lstrip(".") or None, level) or ""
        return module if module.split(".")[0] == "vllm" else None

    # ---- warnings and delegation

    def _warning(self, value: ast.expr, catch: bool = False) -> bool:
        """``warnings.warn(...)`` (or, as a ``with`` item, ``warnings.catch_warnings()``)."""
        if not isinstance(value, ast.Call):
            return False
        names = {"catch_warnings", "simplefilter"} if catch else {"warn", "simplefilter", "filterwarnings"}
        func = value.func
        if isinstance(func, ast.Attribute):
            return func.attr in names and isinstance(func.value, ast.Name) and func.value.id in self.plain
        return isinstance(func, ast.Name) and func.id in names and func.id in self.plain

    def _delegate(self, node: ast.FunctionDef) -> bool:
        """``def __getattr__(name): return getattr(m, name)`` / ``def __dir__(): return dir(m)``."""
        if node.name not in _DELEGATES or node.decorator_list:
            return False
        body = list(node.body)
        if body and _is_docstring(body[0]):
            body = body[1:]
        if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
            return False
        if not all(isinstance(s, ast.Expr) and self._warning(s.value) for s in body[:-1]):
            return False
        value = body[-1].value
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id in ("getattr", "dir") and value.args):
            return False
        module = self._module_value(value.args[0])
        if module is None:
            return False
        self.targets.add(module)
        self.exports = True
        return True


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_attr(node: ast.expr, owner: str, attr: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and _is_name(node.value, owner)


def _is_type_checking(test: ast.expr) -> bool:
    return _is_name(test, "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def resolve(read_raw: Callable[[str], str | None], path: str, hops: int = MAX_HOPS) -> Resolved:
    """``path`` read through ``read_raw``, followed through compatibility shims to the module holding its
    definitions. A shim whose target is absent, a cycle or a chain longer than ``hops`` is ``problem``."""
    raw = read_raw(path)
    current, text, via = path, raw, []
    while text is not None:
        module = shim_target(text, current)
        if module is None:
            break
        via.append(current)
        if len(via) > hops:
            return Resolved(path, current, None, tuple(via), f"{path} is a compatibility shim chain longer than "
                                                              f"{hops} ({' -> '.join(via)}); not followed", raw)
        found = next(((p, t) for p in candidate_paths(module) if (t := read_raw(p)) is not None), None)
        if found is None:
            wanted = candidate_paths(module)[0]
            return Resolved(path, wanted, None, tuple(via),
                            f"{path} is a compatibility shim for {module}, but the tree has no {wanted} "
                            f"(nor {candidate_paths(module)[1]})", raw)
        if found[0] in via or found[0] == path:
            return Resolved(path, found[0], None, tuple(via),
                            f"{path} is a compatibility shim that points back to itself ({' -> '.join(via)} -> "
                            f"{found[0]})", raw)
        current, text = found
    return Resolved(path, current, text, tuple(via), None, raw)
