"""Reach's line and arc collector on ``sys.monitoring`` (Python 3.12+; fuzz/reach/collect.py picks it there).

Why: on 3.12 ``sys.settrace`` sits on ``sys.monitoring``, and each start or stop of coverage.py's tracer
re-instruments the code on the stack and everything that runs after it: 390-540 us a toggle on the H200,
two toggles per traced call, and every Python frame inside a traced call pays the tracer (torch's wrappers,
the harness). Here events are asked for only on the code objects of the measured files, once per target,
and never toggled: an example that is not traced costs a callback that returns at once, per line of the
sides' own code. docs/reach.md ("What it costs") has the figures.

What it records is what coverage.py's tracer records through ``sys.settrace`` with ``branch=True``, so the
same file reporter cuts it into lines and branches (fuzz/reach/collect.py ``SideCode.record``): per context, per
file, the set of arcs ``(from_line, to_line)`` of each frame, where a frame's entry is ``-co_firstlineno``
and its exit (a return or an exception leaving it) is ``(last_line, -co_firstlineno)``; a generator that
yields records no exit, and resumes at its current line. The rules follow coverage.py's ``PyTracer`` and
CPython 3.12's settrace-on-monitoring (Python/legacy_tracing.c): a line event is skipped when it repeats the
frame's last traced line, and a backward jump within one line is a line event (a one-line loop's
``(L, L)``). (coverage.py's pure-Python tracer also drops the line event at an exception handler's
``PUSH_EXC_INFO``; its C tracer, the one fuzz/reach/collect.py runs, keeps it, and so does this.)
tests/unit/test_reach_monitor.py holds both collectors to the same arcs, on a file of loops, generators
and exceptions and on every target.
"""

from __future__ import annotations

import dis
import os
import sys
from collections.abc import Iterable
from types import CodeType, FrameType
from typing import Any

from fuzz.config import REACH_CORE_ENV, reach_core  # noqa: F401 -- defined in the ground: preflight checks it

RESUME = dis.opmap["RESUME"] if "RESUME" in dis.opmap else -1
LASTI_IS_YIELD = sys.version_info[:2] != (3, 13)  # coverage.py's env.PYBEHAVIOR.lasti_is_yield


def _real_exit(code: CodeType, lasti: int) -> bool:
    """Does the frame leave for good (an exit arc), or is it a generator closed or thrown into at a yield
    (no arc: coverage.py's tracer sees the RESUME after it and calls it a yield)? Its rule, as written."""
    raw = code.co_code
    if len(raw) == lasti + 2:
        return True
    if LASTI_IS_YIELD:
        lasti += 2
    return lasti >= len(raw) or raw[lasti] != RESUME


def arc_lines(arcs: Iterable[tuple[int, int]]) -> set[int]:
    """The lines of a file's arcs, as coverage.py's data derives them with branches on (both ends, positive
    only): what either collector's arcs say ran."""
    return {line for arc in arcs for line in arc if line > 0}


TOOL_IDS = (3, 4, 2, 5)  # sys.monitoring ids tried in turn: 3 and 4 have no assigned use; 1 is coverage.py's
TOOL_NAME = "syncfuzz-reach"


class MonitorCollector:
    """Arcs per context and file for the code objects of ``files``. ``start`` claims a tool id and asks for
    the events; ``switch(context)`` starts recording under ``context``, ``switch(None)`` stops recording
    (the events stay: no re-instrumenting); ``stop`` gives the events and the tool id back."""

    def __init__(self, files: Iterable[str]) -> None:
        """``files``: the measured paths; a code object counts for one when its file is the same file
        (resolved, as coverage.py matches them), and its arcs are kept under the path as given here."""
        self.files = {os.path.realpath(path): path for path in files}
        self._which: dict[str, str | None] = {}  # co_filename -> the measured path it is, or None
        self.data: dict[str, dict[str, set[tuple[int, int]]]] = {}
        self.context: str | None = None
        self._arcs: dict[str, set[tuple[int, int]]] | None = None  # data[context], while recording
        self._tool: int | None = None
        self._frames: dict[int, list[int]] = {}  # id(frame) -> [last line for arcs, last traced line]
        # By id: code objects compare equal by content, not by file, so the legacy and optimized copies of
        # one unchanged function (async_tensor_h2d) are "equal" and would share an entry. The dict holds the
        # code objects, so an id is not reused while it is here.
        self._instrumented: dict[int, CodeType] = {}
        self._lines: dict[int, dict[int, int]] = {}  # id(code) -> instruction offset -> line

    # ------------------------------------------------------------------ life

    def start(self) -> str | None:
        """Claim a tool id and ask for the events; None, or why it cannot (then nothing is asked for)."""
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return "sys.monitoring needs Python 3.12+"
        for tool in TOOL_IDS:
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, TOOL_NAME)
                self._tool = tool
                break
        else:
            return f"no free sys.monitoring tool id (tried {', '.join(map(str, TOOL_IDS))})"
        # A code object a former user of this id (the last target's collector) disabled PY_START at stays
        # disabled after free_tool_id: start from a clean slate. Other tools only see their own disabled
        # events come back once.
        monitoring.restart_events()
        events = monitoring.events
        register = monitoring.register_callback
        register(self._tool, events.PY_START, self._on_start)
        register(self._tool, events.PY_RESUME, self._on_resume)
        register(self._tool, events.PY_THROW, self._on_resume)
        register(self._tool, events.PY_RETURN, self._on_return)
        register(self._tool, events.PY_UNWIND, self._on_unwind)
        register(self._tool, events.LINE, self._on_line)
        register(self._tool, events.JUMP, self._on_jump)
        # PY_START everywhere finds the measured files' code objects as they first run (every other code
        # object's is disabled at its first call); unwinding and throwing are not local events in 3.12.
        monitoring.set_events(self._tool, events.PY_START | events.PY_UNWIND | events.PY_THROW)
        return None

    def switch(self, context: str | None) -> None:
        """Record under ``context`` from here; None: record nothing (frames entered meanwhile are not
        followed, as a stopped tracer does not follow them)."""
        if context is None:
            self._frames.clear()
            self._arcs = None
        else:
            self._arcs = self.data.setdefault(context, {})
        self.context = context

    def stop(self) -> None:
        if self._tool is None:
            return
        monitoring = sys.monitoring
        self.switch(None)
        monitoring.set_events(self._tool, 0)
        for code in self._instrumented.values():
            monitoring.set_local_events(self._tool, code, 0)
        for event in (monitoring.events.PY_START, monitoring.events.PY_RESUME, monitoring.events.PY_THROW,
                      monitoring.events.PY_RETURN, monitoring.events.PY_UNWIND, monitoring.events.LINE,
                      monitoring.events.JUMP):
            monitoring.register_callback(self._tool, event, None)
        monitoring.free_tool_id(self._tool)
        self._tool = None
        self._instrumented.clear()
        self._lines.clear()

    def arcs(self, context: str, path: str) -> set[tuple[int, int]]:
        return self.data.get(context, {}).get(path, set())

    # ------------------------------------------------------------------ events

    def _measured(self, code: CodeType) -> str | None:
        """The measured path ``code`` belongs to, or None."""
        name = code.co_filename
        try:
            return self._which[name]
        except KeyError:
            path = self._which[name] = self.files.get(os.path.realpath(name)) if name[:1] != "<" else None
            return path

    def _record(self, code: CodeType, arc: tuple[int, int]) -> None:
        arcs = self._arcs
        if arcs is not None:
            path = self._measured(code)
            found = arcs.get(path)  # type: ignore[arg-type]  # only measured code has events
            if found is None:
                found = arcs[path] = set()  # type: ignore[index]
            found.add(arc)

    def _on_start(self, code: CodeType, offset: int) -> Any:
        if self._measured(code) is None:
            return sys.monitoring.DISABLE
        if id(code) not in self._instrumented:
            events = sys.monitoring.events
            # No PY_YIELD: a yield records no exit, and the frame's state waits for its resume.
            sys.monitoring.set_local_events(self._tool, code, events.LINE | events.JUMP | events.PY_RETURN
                                            | events.PY_RESUME)
            self._instrumented[id(code)] = code
        if self._arcs is not None:
            self._frames[id(sys._getframe(1))] = [-code.co_firstlineno, -1]
        return None

    def _on_resume(self, code: CodeType, offset: int, *_: object) -> None:
        if self._arcs is None or self._measured(code) is None:
            return
        frame = sys._getframe(1)
        state = self._frames.get(id(frame))
        line = frame.f_lineno
        if state is None:  # resumed while recording, started before it: followed from here, as settrace does
            self._frames[id(frame)] = [line, -1]
        else:
            state[0] = line

    def _on_return(self, code: CodeType, offset: int, value: object) -> None:
        self._exit(code, sys._getframe(1))

    def _on_unwind(self, code: CodeType, offset: int, exc: BaseException) -> None:
        if self._measured(code) is not None:  # a global event: every frame the exception leaves
            self._exit(code, sys._getframe(1))

    def _exit(self, code: CodeType, frame: FrameType) -> None:
        state = self._frames.pop(id(frame), None)
        if state is not None and self._arcs is not None and _real_exit(code, frame.f_lasti):
            self._record(code, (state[0], -code.co_firstlineno))

    def _on_line(self, code: CodeType, line: int) -> None:
        if self._arcs is None:
            return
        frame = sys._getframe(1)
        state = self._frames.get(id(frame))
        if state is None or state[1] == line:
            return
        state[1] = line
        self._record(code, (state[0], line))
        state[0] = line

    def _on_jump(self, code: CodeType, source: int, target: int) -> Any:
        if target > source:
            return sys.monitoring.DISABLE  # forward jumps are never line events
        if self._arcs is None:
            return None
        lines = self._lines.get(id(code))
        if lines is None:
            lines = self._lines[id(code)] = {offset: line for start, end, line in code.co_lines()
                                         if line is not None for offset in range(start, end, 2)}
        line = lines.get(target)
        if line is None or line != lines.get(source):
            return None  # a jump to another line: its LINE event follows
        frame: FrameType = sys._getframe(1)
        state = self._frames.get(id(frame))
        if state is not None:
            state[1] = line
            self._record(code, (state[0], line))
            state[0] = line
        return None
