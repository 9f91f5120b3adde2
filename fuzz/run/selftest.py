"""``python -m fuzz selftest``: measure the fuzzer's own power by mutation.

Each operator below makes one small edit to the optimized copy (the kind of
slip a reviewer could miss): to the target's entry function, and to every other
definition the record claims (``Target.upstream``) that the copy module holds --
a helper the entry delegates to (``UvaBufferPool._next_buf``) is the target's
code as much as the entry is. Every mutant becomes a target of its own, entered
through the record's entry as before, and is fuzzed with a small budget; a mutant is *killed* when the fuzzer
reports any failing verdict. The kill rate per target is the fuzzer's measured
power; each survivor is either a blind spot (fix the strategies) or shown
equivalent to the original and listed, with the reason, in
docs/selftest-equivalent.json.

Each kill names the oracles that flagged the first failing example
(``killed_by``: the differential check, the sync oracle, an invariant, the
reference; fuzz/oracles/). With ``shared=True`` (``selftest --shared``) the
mutant replaces *both* copies -- the same bug on both sides, which the
differential check cannot see by construction -- so the kill rate measures
what the target's invariants and reference alone catch.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import importlib
import inspect
import json
import linecache
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from fuzz.code.codediff import walk_definitions
from fuzz.config import RunConfig
from fuzz.engine.runner import fuzz_target
from fuzz.errors import HarnessError
from fuzz.targets import FORM_ATTRIBUTE, Target, resolve_impl
from fuzz.versions import REPO_ROOT

EQUIVALENT_FILE = REPO_ROOT / "docs" / "selftest-equivalent.json"
_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
          ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_NAME_SWAPS = {"h": "w", "w": "h", "height": "width", "width": "height", "t": "h"}
_DROPPABLE_KEYWORDS = {"output_size", "dtype", "device", "non_blocking", "dim"}


@dataclass(frozen=True)
class Mutant:
    operator: str
    line: int  # in the optimized module
    code: str  # the original line, stripped
    description: str
    # The qualname of the definition the edit is in (the innermost class or function holding the line:
    # ``UvaBufferPool._next_buf``). Not part of ``key``: the line already tells mutants apart, and keys
    # written before helpers were mutated stay what they were.
    definition: str = ""

    @property
    def key(self) -> str:
        return f"{self.operator}@{self.line}: {self.description}"


class _Mutator(ast.NodeTransformer):
    """Applies the ``index``-th possible mutation inside ``scope`` (a function node)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.seen = 0
        self.applied: tuple[str, int, str] | None = None

    def _hit(self, node: ast.AST, operator: str, description: str) -> bool:
        hit = self.seen == self.index
        self.seen += 1
        if hit:
            # The column tells apart two edits of one line (`eq(0)` vs `cumsum(0)`).
            self.applied = (operator, node.lineno, f"{description} (col {node.col_offset})")
        return hit

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Mod) and self._hit(node, "drop-mod", "x % n -> x"):
            return node.left
        swap = _SWAPS.get(type(node.op))
        if swap and self._hit(node, "arith-swap", f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swap = _SWAPS.get(type(op))
            if swap and self._hit(node, "compare-swap", f"{type(op).__name__} -> {swap.__name__}"):
                node.ops[i] = swap()
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            for delta in (1, -1):
                if self._hit(node, "constant", f"{node.value} -> {node.value + delta}"):
                    return ast.copy_location(ast.Constant(node.value + delta), node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        other = _NAME_SWAPS.get(node.id)
        if other and isinstance(node.ctx, ast.Load) and self._hit(node, "name-swap", f"{node.id} -> {other}"):
            return ast.copy_location(ast.Name(other, node.ctx), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        for i, keyword in enumerate(node.keywords):
            if keyword.arg in _DROPPABLE_KEYWORDS and self._hit(node, "drop-keyword", f"drop {keyword.arg}="):
                node.keywords = node.keywords[:i] + node.keywords[i + 1:]
                break
        return node


def _definition_nodes(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(qualname, node) of every class and function of the module (fuzz.code.codediff's walk: methods and
    definitions under a module-level ``if``/``try`` included, functions nested in functions not)."""
    return [(qualname, node) for node, qualname in walk_definitions(tree.body, "")]


def _first_line(node: ast.AST) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])


def _function_node(tree: ast.Module, first_line: int) -> ast.AST:
    """The def whose first line (decorators included) is ``first_line``:
    found by position, so an inherited method is mutated where it is defined."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _first_line(node) == first_line:
            return node
    raise HarnessError(f"selftest: no function starts at line {first_line}")


def _path_to(tree: ast.Module, target: ast.AST) -> list[ast.AST]:
    """The nodes from ``tree`` down to ``target`` (both included)."""
    def down(node: ast.AST) -> list[ast.AST] | None:
        if node is target:
            return [node]
        for child in ast.iter_child_nodes(node):
            below = down(child)
            if below is not None:
                return [node, *below]
        return None

    path = down(tree)
    if path is None:
        raise HarnessError("selftest: the function is not in its module's tree")
    return path


def _copy_along(path: list[ast.AST]) -> tuple[ast.Module, ast.AST]:
    """A module tree to mutate one function in: the function deep-copied, the nodes above it copied one
    level (their fields pointing at the copy), every other node shared with the original, which stays
    untouched. Deep-copying the whole module per mutant was most of selftest's mutant-making time."""
    copies = [copy.copy(node) for node in path[:-1]] + [copy.deepcopy(path[-1])]
    for original_parent, parent, child, child_copy in zip(path, copies, path[1:], copies[1:]):
        for field, value in ast.iter_fields(original_parent):
            if value is child:
                setattr(parent, field, child_copy)
            elif isinstance(value, list) and any(item is child for item in value):
                setattr(parent, field, [child_copy if item is child else item for item in value])
    return copies[0], copies[-1]


def _scope_lines(tree: ast.Module, entry_line: int, claimed: list[str]) -> list[int]:
    """The first lines of the functions to mutate: the entry's first, so that its mutants keep the numbers
    they had when only the entry was mutated; then each claimed function the module holds, in the record's
    order (a claimed class: each of its methods; every def of a qualname defined twice, a getter and a
    setter or both arms of an ``if``). The entry, claimed or not, is mutated once."""
    functions: dict[str, list[ast.AST]] = {}
    for qualname, node in _definition_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(qualname, []).append(node)
    firsts = [entry_line]
    for claim in dict.fromkeys(claimed):
        for qualname, nodes in functions.items():
            if qualname == claim or qualname.startswith(claim + "."):  # the function, or a claimed class' methods
                firsts += [_first_line(node) for node in nodes]
    return list(dict.fromkeys(firsts))


def _definition_at(definitions: list[tuple[str, ast.AST]], line: int) -> str:
    """The innermost definition holding ``line`` (the walk yields an outer one before those inside it)."""
    holding = [qualname for qualname, node in definitions if _first_line(node) <= line <= (node.end_lineno or line)]
    return holding[-1] if holding else ""


def _adapted_lines(source: str) -> set[int]:
    return {i for i, line in enumerate(source.splitlines(), 1) if "# ADAPTED" in line}


def claimed_qualnames(target: Target) -> list[str]:
    """The qualnames of the definitions the record claims (``"vllm/...py::Cls.fn"`` -> ``"Cls.fn"``)."""
    return [ref.partition("::")[2] for ref in target.upstream]


def entry_definition(target: Target) -> str:
    """The qualname of the definition the entry's mutants are in: where the entry function is defined
    (an inherited method: its base class's)."""
    return _entry_definition(target.optimized)


@functools.lru_cache(maxsize=None)
def _entry_definition(optimized: str) -> str:
    function = inspect.unwrap(resolve_impl(optimized).function)
    tree = ast.parse(inspect.getsource(importlib.import_module(optimized.partition(":")[0])))
    return _definition_at(_definition_nodes(tree), function.__code__.co_firstlineno)


def _plan(target: Target) -> tuple[str, ast.Module, list[tuple[str, int]]]:
    """The optimized module's source and tree, and the (qualname, first line) of each function to mutate."""
    module_name = target.optimized.partition(":")[0]
    function = inspect.unwrap(target.impl("optimized").function)
    if function.__module__ != module_name:
        raise HarnessError(f"selftest: {target.optimized} is defined in {function.__module__}, not {module_name}")
    source = inspect.getsource(importlib.import_module(module_name))
    tree = ast.parse(source)
    definitions = _definition_nodes(tree)
    scopes = _scope_lines(tree, function.__code__.co_firstlineno, claimed_qualnames(target))
    return source, tree, [(_definition_at(definitions, line), line) for line in scopes]


def mutated_definitions(target: Target) -> list[str]:
    """The qualnames of the functions selftest mutates, the entry's first (``mutants_of``)."""
    return list(dict.fromkeys(qualname for qualname, _ in _plan(target)[2]))


def mutants_of(target: Target) -> Iterator[tuple[Mutant, str]]:
    """Every mutant of the target's optimized code, with the mutated module source: the entry function's
    first (in the numbering they always had), then those of each other definition of the record's
    ``upstream`` that the optimized module holds, in the record's order. Each runs through the entry."""
    source, tree, scopes = _plan(target)
    lines = source.splitlines()
    adapted = _adapted_lines(source)
    named: dict[tuple[str, int, str], int] = {}
    for definition, scope_line in scopes:
        path = _path_to(tree, _function_node(tree, scope_line))
        index = 0
        while True:
            mutated, function = _copy_along(path)
            mutator = _Mutator(index)
            mutator.visit(function)
            if mutator.applied is None:
                break
            index += 1
            operator, line, description = mutator.applied
            if line in adapted:
                continue  # our own scaffolding, not upstream code
            # Nested operations can start at one column (`a * b * c`: both Mults at col of `a`): the second
            # and later get "#2", "#3", so that every name is distinct and the first keeps the name it had.
            seen = named[operator, line, description] = named.get((operator, line, description), 0) + 1
            if seen > 1:
                description = f"{description} #{seen}"
            yield Mutant(operator, line, lines[line - 1].strip(), description, definition), ast.unparse(mutated)


def _per_definition(target: Target, killed: list[Mutant], survived: list[Mutant],
                    equivalent: list[Mutant]) -> dict[str, dict[str, int]]:
    """Mutants, killed, listed equivalent and survived per mutated definition (0 where a definition has none
    of the operators' nodes: a 5-line delegation)."""
    table = {name: {"mutants": 0, "killed": 0, "equivalent": 0, "survived": 0} for name in mutated_definitions(target)}
    for kind, mutants in (("killed", killed), ("equivalent", equivalent), ("survived", survived)):
        for mutant in mutants:
            row = table.setdefault(mutant.definition, {"mutants": 0, "killed": 0, "equivalent": 0, "survived": 0})
            row[kind] += 1
            row["mutants"] += 1
    return table


def _register(name: str, source: str) -> ModuleType:
    module = ModuleType(name)
    module.__file__ = f"<selftest mutant {name}>"
    sys.modules[name] = module
    # As fuzz/releases/sides.py does: tracebacks, and inspect.getsource (which @triton.jit needs).
    linecache.cache[module.__file__] = (len(source), None, source.splitlines(keepends=True), module.__file__)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


class _Timeout(Exception):
    pass


def _with_alarm(seconds: int, run: Callable[[], bool]) -> bool:
    """A mutant that loops forever counts as killed (the watchdog would catch it)."""
    def ring(signum: int, frame: object) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        return run()
    except _Timeout:
        return True
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


KILLED_UNCOUNTED = 0  # killed by a timeout or a harness break: no example count to report


@dataclass(frozen=True)
class Kill:
    examples: int  # run until the first report (KILLED_UNCOUNTED: a timeout or a harness break)
    oracles: tuple[str, ...]  # what flagged that example, the verdict's first ("timeout", "harness")


def run_mutant(target: Target, mutant: Mutant, source: str, number: int, options: RunConfig,
               shared: bool = False) -> Kill | None:
    """How the fuzzer first reported the mutant, or None if it survived.
    ``shared``: the mutant is both sides (inputs in the optimized form)."""
    name = f"fuzz._selftest_mutant_{target.name.replace('-', '_')}_{number}"
    module = _register(name, source)
    _, _, qualname = target.optimized.partition(":")
    sides = {"optimized": f"{name}:{qualname}"}
    if shared:
        setattr(module, FORM_ATTRIBUTE, "optimized")
        sides["legacy"] = sides["optimized"]
    mutant_target = dataclasses.replace(target, name=f"{target.name}~{number}", **sides)
    found: list[Kill | None] = [None]

    def fuzz_it() -> bool:
        outcome = fuzz_target(mutant_target, options, None)
        if outcome.harness_error:
            found[0] = Kill(KILLED_UNCOUNTED, ("harness",))
        elif outcome.failures:
            first = outcome.failures[0]
            found[0] = Kill(outcome.first_failure_at or KILLED_UNCOUNTED, first.oracles or (first.verdict.value,))
        return found[0] is not None

    try:
        if _with_alarm(60, fuzz_it) and found[0] is None:
            found[0] = Kill(KILLED_UNCOUNTED, ("timeout",))  # the alarm rang: a hang counts as killed
    except Exception:  # noqa: BLE001 -- a mutant that breaks the harness is detected, not survived
        found[0] = Kill(KILLED_UNCOUNTED, ("harness",))
    finally:
        sys.modules.pop(name, None)
    return found[0]


def load_equivalents(path: Path = EQUIVALENT_FILE) -> list[dict]:
    return json.loads(path.read_text())["equivalent"] if path.exists() else []


def _is_equivalent(target: Target, mutant: Mutant, equivalents: list[dict], devices: tuple[str, ...],
                   contract: str = "caller") -> str | None:
    """The listed reason, if this mutant was shown equivalent on these devices
    under this contract (an entry may be limited to ``devices`` and/or
    ``contracts``: e.g. a line today's callers never reach). An entry names the
    ``definition`` it is in; one without it is the entry function's (what every
    entry was before helpers were mutated), so the same line in a helper is
    not excused by it."""
    for entry in equivalents:
        if entry["target"] == target.name and entry["operator"] == mutant.operator \
                and entry["code"] == mutant.code and entry["description"] == mutant.description \
                and entry.get("definition", entry_definition(target)) == mutant.definition \
                and set(devices) <= set(entry.get("devices", devices)) \
                and contract in entry.get("contracts", [contract]):
            return entry["reason"]
    return None


def baseline_failure(target: Target, options: RunConfig) -> str | None:
    """Why the unmutated target already fails under ``options`` (None: it does not). A mutant is counted as
    killed by any failure, so where the copies themselves differ (a known finding, F20) every mutant would be
    "killed" by it and the kill rate would measure nothing: such a rate is not measured."""
    outcome = fuzz_target(target, options, None)
    if outcome.harness_error:
        return f"the harness failed: {outcome.harness_error}"
    if outcome.failures:
        first = outcome.failures[0]
        oracles = ", ".join(first.oracles) if first.oracles else first.verdict.value
        return f"{first.verdict.value} on {first.spec.get('device', '?')} ({oracles})"
    return None


def selftest_target(target: Target, options: RunConfig, equivalents: list[dict],
                    limit: int | None = None, shared: bool = False) -> dict:
    baseline = baseline_failure(target, options)
    if baseline is not None:
        counted = [mutant for number, (mutant, _) in enumerate(mutants_of(target)) if limit is None or number < limit]
        definitions = _per_definition(target, [], [], [])
        for mutant in counted:  # not run: counted only
            definitions[mutant.definition]["mutants"] += 1
        return {"target": target.name, "shared": shared, "mutants": len(counted), "killed": 0, "equivalent": [],
                "survived": [], "definitions": definitions, "kill_rate": None, "baseline": baseline,
                "examples_to_kill": None, "killed_by": {}, "kills": []}
    killed, survived, equivalent, to_kill = [], [], [], []
    killed_by: dict[str, int] = {}
    kills = []
    for number, (mutant, source) in enumerate(mutants_of(target)):
        if limit is not None and number >= limit:
            break
        reason = _is_equivalent(target, mutant, equivalents, options.devices, options.contract)
        kill = run_mutant(target, mutant, source, number, options, shared)
        if kill is not None:
            killed.append(mutant)
            killed_by[kill.oracles[0]] = killed_by.get(kill.oracles[0], 0) + 1
            kills.append({"mutant": mutant.key, "definition": mutant.definition, "oracles": list(kill.oracles)})
            if kill.examples != KILLED_UNCOUNTED:
                to_kill.append(kill.examples)
        elif reason:
            equivalent.append((mutant, reason))
        else:
            survived.append(mutant)
    scored = len(killed) + len(survived)
    return {
        "target": target.name,
        "shared": shared,
        "mutants": scored + len(equivalent),
        "killed": len(killed),
        "equivalent": [{"mutant": m.key, "definition": m.definition, "code": m.code, "reason": r}
                       for m, r in equivalent],
        "survived": [{"mutant": m.key, "definition": m.definition, "code": m.code} for m in survived],
        "definitions": _per_definition(target, killed, survived, [m for m, _ in equivalent]),
        "kill_rate": round(len(killed) / scored, 4) if scored else 1.0,
        # Examples run until each killed mutant was first reported (the #8 target:
        # every one within 200, median at most 20).
        "examples_to_kill": {"median": statistics.median(to_kill), "max": max(to_kill)} if to_kill else None,
        # Which oracle's verdict killed each mutant (the first that flagged it), and every one that did.
        "killed_by": dict(sorted(killed_by.items(), key=lambda kv: -kv[1])),
        "kills": kills,
        "baseline": None,  # the unmutated target passed: the kills are the mutants' own
    }
