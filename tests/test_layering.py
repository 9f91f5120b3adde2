"""The engine's modules form no import circle (the report model and config at
the bottom, renderers and orchestration above them, the CLI on top)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Every fuzz.* module this file imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(n for n in names if n.startswith("fuzz."))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in sorted((ROOT / "fuzz").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    # The one allowed back edge: the registry (fuzz.targets.all_targets) reads its
    # data, the catalog records, lazily; the records import their type.
    graph["fuzz.targets"].discard("fuzz.catalog")
    return graph


def test_no_module_of_the_engine_imports_itself_in_a_circle():
    graph = _graph()
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        for nxt in graph[node]:
            if nxt in stack:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, stack + [nxt])
        done.add(node)

    done: set[str] = set()
    for module in graph:
        if module not in done:
            visit(module, [module])
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_report_model_needs_no_torch():
    """merge-reports and the renderers run where no GPU stack is installed."""
    below = ("fuzz.errors", "fuzz.verdicts", "fuzz.reachdata")
    modules = {m.rsplit(".", 1)[0] if m.rsplit(".", 1)[0] in below else m for m in _imports(ROOT / "fuzz" / "model.py")}
    assert modules == set(below)
    reach = {m.rsplit(".", 1)[0] if m.rsplit(".", 1)[0] == "fuzz.errors" else m
             for m in _imports(ROOT / "fuzz" / "reachdata.py")}
    assert reach == {"fuzz.errors"}  # what each side ran is read and added up with the model alone
    for name in ("model", "verdicts", "errors", "reachdata"):
        tree = ast.parse((ROOT / "fuzz" / f"{name}.py").read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.split(".")[0] in ("torch", "numpy") for m in imported), name
