"""fuzz/reach/monitor.py: reach's sys.monitoring collector (Python 3.12+) records the arcs coverage.py's C
tracer records, so a report's lines and branches do not depend on which one measured them.

The collector tests need sys.monitoring and skip on 3.11 (CI's Python); the H200 host runs them (3.12), and
so does any 3.12 checkout. The choice of collector (``SYNCFUZZ_REACH_CORE``) is checked on every Python."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fuzz.errors import UsageError
from fuzz.reach.monitor import REACH_CORE_ENV, TOOL_IDS, MonitorCollector, reach_core
from fuzz.reports.preflight import check_environment

needs_monitoring = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")

# Loops (a one-line loop, while/else), generators (yield, resume, left suspended), comprehensions, lambdas,
# caught and uncaught exceptions, try/finally, a with block that swallows an exception, nested functions,
# properties, static methods, match, multi-line statements: the places where line events and arcs differ.
SAMPLE = '''\
import contextlib


def loops(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
        else:
            continue
    while n > 0: n -= 1
    k = 3
    while k:
        k -= 1
    else:
        total += 1
    return total


def gen(n):
    for i in range(n):
        if i == 2:
            yield -i
        yield i
    return


def uses_gen(n):
    out = [x for x in gen(n) if x >= 0]
    squares = {x * x for x in out}
    g = (x for x in out if x)
    return out, squares, sum(g), (lambda y: y + 1)(2)


def raises(x):
    try:
        if x > 2:
            raise ValueError(x)
        y = 1 / x
    except ZeroDivisionError:
        y = 0
    except ValueError:
        y = -1
        if x > 5:
            raise
    finally:
        x += 1
    return y


def outer(x):
    def inner(z):
        if z:
            return z * 2
        return 0
    with contextlib.suppress(KeyError):
        {}[x]
    return inner(x) + inner(0)


class Thing:
    def __init__(self, v):
        self.v = v

    @property
    def double(self):
        return self.v * 2

    @staticmethod
    def pick(a, b):
        return a if a > b else b


def bad(x):
    if x:
        return helper_raise(x)
    return 1


def helper_raise(x):
    raise KeyError(x)


def multi(a,
          b):
    c = (a +
         b)
    if (a and
            b):
        return c
    match a:
        case 1:
            return 10
        case _:
            pass
    return [i for i in range(3)
            if i]


def run_all():
    loops(5)
    loops(0)
    uses_gen(4)
    for v in (0, 1, 3, 7):
        try:
            raises(v)
        except ValueError:
            pass
    outer(0)
    outer(3)
    t = Thing(2)
    t.double
    Thing.pick(1, 2)
    Thing.pick(3, 2)
    for v in (0, 1):
        try:
            bad(v)
        except KeyError:
            pass
    multi(1, 0)
    multi(1, 1)
    multi(2, 0)
    g = gen(5)
    next(g)
    return g
'''


def _module(folder: Path, name: str, text: str = SAMPLE) -> ModuleType:
    path = folder / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exercise(module: ModuleType) -> None:
    suspended = module.run_all()
    next(suspended)  # resumed: a generator's resume and its later yields
    next(suspended)


def _ctrace_arcs(module: ModuleType) -> set[tuple[int, int]]:
    import coverage

    cov = coverage.Coverage(data_file=None, branch=True, include=[module.__file__], config_file=False)
    cov.set_option("run:core", "ctrace")
    cov.start()
    try:
        _exercise(module)
    finally:
        cov.stop()
    return set(cov.get_data().arcs(module.__file__) or [])


def _monitor_arcs(module: ModuleType, files: list[str] | None = None) -> set[tuple[int, int]]:
    collector = MonitorCollector(files or [module.__file__])
    assert collector.start() is None
    try:
        collector.switch("cpu")
        _exercise(module)
        collector.switch(None)
    finally:
        collector.stop()
    return collector.arcs("cpu", module.__file__)


# -- which collector ------------------------------------------------------------------------------------

def test_the_default_collector_follows_the_python():
    assert reach_core({}) == ("sysmon" if sys.version_info[:2] == (3, 12) else "ctrace")
    assert reach_core({REACH_CORE_ENV: "ctrace"}) == "ctrace"


def test_an_unknown_collector_is_refused_before_any_command_runs():
    with pytest.raises(UsageError, match="use ctrace or sysmon"):
        check_environment({REACH_CORE_ENV: "settrace"})


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="sys.monitoring exists here")
def test_sysmon_without_sys_monitoring_is_refused_not_ignored():
    with pytest.raises(UsageError, match="needs Python 3.12"):
        check_environment({REACH_CORE_ENV: "sysmon"})


# -- the collector --------------------------------------------------------------------------------------

@needs_monitoring
def test_the_arcs_are_coverage_py_c_tracers_arcs(tmp_path):
    module = _module(tmp_path, "sample_ctrace")
    expected = _ctrace_arcs(module)
    assert len(expected) > 100
    assert _monitor_arcs(module) == expected
    # The one-line loop's (L, L), the handler entered from a swallowed exception, a generator's exit.
    assert (11, 11) in expected and (57, 56) in expected and (25, -20) in expected


@needs_monitoring
def test_identical_functions_in_two_files_are_both_measured(tmp_path):
    # Code objects compare equal by content, not by file: legacy and optimized async_tensor_h2d are equal.
    left, right = _module(tmp_path, "left_copy"), _module(tmp_path, "right_copy")
    assert left.loops.__code__ == right.loops.__code__
    collector = MonitorCollector([left.__file__, right.__file__])
    assert collector.start() is None
    try:
        collector.switch("cpu")
        left.loops(3)
        right.loops(3)
    finally:
        collector.stop()
    assert collector.arcs("cpu", left.__file__) == collector.arcs("cpu", right.__file__) != set()


@needs_monitoring
def test_a_file_run_while_another_was_measured_is_measured_later(tmp_path):
    # The first collector disables PY_START at every code object outside its files, this one's included;
    # the next collector (the next target, same tool id) must still see them.
    first, second = _module(tmp_path, "first_file"), _module(tmp_path, "second_file")
    collector = MonitorCollector([first.__file__])
    assert collector.start() is None
    collector.switch("cpu")
    first.loops(2)
    second.loops(2)
    collector.stop()
    assert collector.arcs("cpu", second.__file__) == set()
    assert _monitor_arcs(second) == _ctrace_arcs(second)


@needs_monitoring
def test_nothing_is_recorded_while_switched_off_and_stop_gives_the_tool_back(tmp_path):
    module = _module(tmp_path, "off_and_on")
    collector = MonitorCollector([module.__file__])
    assert collector.start() is None
    tool = collector._tool
    module.loops(4)  # before any context: nothing
    collector.switch("cuda")
    module.loops(1)
    collector.switch(None)
    module.loops(6)
    collector.stop()
    assert collector.data.keys() == {"cuda"}
    assert (-4, 5) in collector.arcs("cuda", module.__file__)
    assert sys.monitoring.get_tool(tool) is None
    module.loops(3)  # no callback of a stopped collector runs
    assert collector.data.keys() == {"cuda"}


@needs_monitoring
def test_no_free_tool_id_is_a_reason_and_the_run_goes_on_unmeasured(tmp_path):
    from fuzz.config import RunConfig
    from fuzz.engine.runner import fuzz_target
    from fuzz.targets import lookup

    taken = [tool for tool in TOOL_IDS if sys.monitoring.get_tool(tool) is None]
    for tool in taken:
        sys.monitoring.use_tool_id(tool, "someone-else")
    try:
        assert "no free sys.monitoring tool id" in (MonitorCollector([str(tmp_path / "x.py")]).start() or "")
        target = lookup(["fla-chunk-offsets"])[0]
        outcome = fuzz_target(target, RunConfig(devices=("cpu",), seed=0, max_examples=5, coverage=True))
    finally:
        for tool in taken:
            sys.monitoring.free_tool_id(tool)
    assert outcome.measure is None and outcome.examples == 5 and outcome.entry().reach == {}


@needs_monitoring
def test_every_target_has_the_same_reach_under_both_collectors(monkeypatch):
    from fuzz.config import RunConfig
    from fuzz.engine.runner import fuzz_target
    from fuzz.targets import lookup

    differ = []
    for target in lookup([]):
        records = {}
        # A warm-up first: a target whose copies cache across calls (qwen3-vl's per-tower position cache) reaches
        # other lines once the cache is warm, whichever collector runs (H100, 2026-12-06: qwen3vl-rot-pos-emb,
        # qwen3vl-expanded-positions differed when ctrace ran cold and sysmon warm).
        fuzz_target(target, RunConfig(devices=("cpu",), seed=3, max_examples=40))
        for core in ("ctrace", "sysmon"):
            monkeypatch.setenv(REACH_CORE_ENV, core)
            outcome = fuzz_target(target, RunConfig(devices=("cpu",), seed=3, max_examples=40, coverage=True))
            assert outcome.measure is not None and outcome.measure.core == core
            records[core] = json.dumps(outcome.entry().reach, sort_keys=True, default=str)
        if records["ctrace"] != records["sysmon"]:
            differ.append(target.name)
    assert differ == []


def test_the_report_says_which_collector_measured_reach(monkeypatch):
    from fuzz.config import RunConfig
    from fuzz.run.session import run_info

    monkeypatch.setenv(REACH_CORE_ENV, "ctrace")
    assert run_info(RunConfig(devices=("cpu",), coverage=True))["reach_collector"] == "ctrace"
    assert "reach_collector" not in run_info(RunConfig(devices=("cpu",), coverage=False))
