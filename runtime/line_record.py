"""Count executions of chosen source lines, per step, at the cost of those lines only.

`perflsp record` hands the child the lines that hold a static candidate. Line events are
switched on only in the code objects that contain one of them: on Python 3.12+ `sys.monitoring`
sees each code object's first start (PY_START), turns LINE and PY_RETURN events on for that code
object alone when it holds a wanted line, and answers DISABLE everywhere else, so other code runs
at full speed after its first call. Older Pythons have `sys.settrace`: the global function sees
every call, and hands a line tracer (`f_trace`) only to frames of those code objects.

Besides the counts, `LineCounts.active` is the wanted line running now: the torch calls made
while it runs (in it, or in the functions it calls) are the line's, for `host_reads`.
"""
from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

Line = Tuple[str, int]  # (path relative to the workspace, 1-based line)
_NOT_UNDER_WAY = object()


class LineCounts:
    """Executions of each wanted line: in the step under way, and in the whole steps so far."""

    def __init__(self) -> None:
        self.active: Optional[Line] = None  # the wanted line running now, in the innermost frame that has one
        self.step: Dict[Line, int] = {}
        self.setup: Dict[Line, int] = {}  # before the first recorded step (start-up, warm-up)
        self.runs: Dict[Line, int] = {}
        self.steps_ran: Dict[Line, int] = {}

    def end_setup(self) -> None:
        for line, count in self.step.items():
            self.setup[line] = self.setup.get(line, 0) + count
        self.step = {}

    def end_step(self) -> None:
        for line, count in self.step.items():
            self.runs[line] = self.runs.get(line, 0) + count
            self.steps_ran[line] = self.steps_ran.get(line, 0) + 1
        self.step = {}


class LineRecorder:
    """Counts the `wanted` lines of the files `relative_path` names (None: not workspace code)."""

    def __init__(self, wanted: Iterable[Line], relative_path: Callable[[str], Optional[str]],
                 monitoring: Optional[bool] = None):
        """`monitoring`: use `sys.monitoring` (True) or `sys.settrace` (False); by default the
        first where the interpreter has it."""
        self.by_file: Dict[str, FrozenSet[int]] = {}
        for path, line in wanted:
            self.by_file[path] = self.by_file.get(path, frozenset()) | {line}
        self.relative_path = relative_path
        self.counts = LineCounts()
        self._lines_of: Dict[CodeType, Optional[Tuple[str, FrozenSet[int]]]] = {}
        if monitoring is None:
            monitoring = hasattr(sys, "monitoring")
        self._hook = _MonitoringLines(self) if monitoring else _TracedLines(self)

    @property
    def method(self) -> str:
        return self._hook.name

    def lines_of(self, code: CodeType) -> Optional[Tuple[str, FrozenSet[int]]]:
        """(file, the wanted lines this code object runs), or None when it runs none of them."""
        try:
            return self._lines_of[code]
        except KeyError:
            pass
        found = None
        path = self.relative_path(code.co_filename)
        if path is not None and path in self.by_file:
            own = self.by_file[path] & {line for _, _, line in code.co_lines() if line}
            found = (path, own) if own else None
        self._lines_of[code] = found
        return found

    def start(self) -> None:
        self._hook.install()

    def stop(self) -> None:
        self._hook.uninstall()


class _TracedLines:
    """Python < 3.12: `sys.settrace`; line events only in frames of code that holds a wanted line."""

    name = "sys.settrace"

    def __init__(self, recorder: LineRecorder):
        lines_of, counts = recorder.lines_of, recorder.counts

        known = recorder._lines_of

        def on_call(frame: FrameType, event: str, arg: Any) -> Any:
            # Called for every Python call in the program: a dict hit for all but a code object's first.
            code = frame.f_code
            found = known[code] if code in known else lines_of(code)
            if found is None:
                return None
            path, own = found
            caller = counts.active  # the caller's line goes on once this frame returns

            def on_line(frame: FrameType, event: str, arg: Any) -> Any:
                if event == "line":
                    if frame.f_lineno in own:
                        key = counts.active = (path, frame.f_lineno)
                        step = counts.step
                        step[key] = step.get(key, 0) + 1
                    else:
                        counts.active = None
                elif event == "return":
                    counts.active = caller
                return on_line

            return on_line

        self.callback = on_call

    def install(self) -> None:
        sys.settrace(self.callback)
        threading.settrace(self.callback)

    def uninstall(self) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]


class _MonitoringLines:
    """Python 3.12+: PY_START everywhere until each code object's first start, then LINE events
    in the code objects that hold a wanted line."""

    name = "sys.monitoring"

    def __init__(self, recorder: LineRecorder):
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        self.monitoring = monitoring
        self.tool: Optional[int] = None
        lines_of, counts, events = recorder.lines_of, recorder.counts, monitoring.events
        disable, frame_of = monitoring.DISABLE, sys._getframe

        # The active line of the caller of each frame of wanted code under way, by frame: a
        # generator leaves at each yield and comes back at each resume, an exception unwinds a
        # frame without a return, and a generator dropped half-way is closed whenever it is
        # collected, so no stack of starts and returns stays balanced.
        callers: Dict[int, Optional[Line]] = {}

        def on_start(code: CodeType, offset: int) -> Any:
            if lines_of(code) is None:
                return disable
            if code not in self.watched:
                self.watched.add(code)
                monitoring.set_local_events(self.tool, code, events.LINE | events.PY_RETURN | events.PY_YIELD
                                            | events.PY_RESUME)
            callers[id(frame_of(1))] = counts.active
            return None

        def on_leave(code: CodeType, offset: int, value: Any, depth: int = 1) -> Any:
            caller = callers.pop(id(frame_of(depth)), _NOT_UNDER_WAY)
            if caller is not _NOT_UNDER_WAY:
                counts.active = caller
            return None

        def on_unwind(code: CodeType, offset: int, exception: BaseException) -> Any:
            return on_leave(code, offset, exception, 2) if code in self.watched else None

        def on_throw(code: CodeType, offset: int, exception: BaseException) -> Any:
            # PY_THROW and PY_UNWIND are global events (they cannot be set per code object): a
            # generator resumed by `throw()` or `close()`, any frame an exception leaves.
            if code in self.watched:
                callers[id(frame_of(1))] = counts.active
            return None

        def on_line(code: CodeType, line: int) -> Any:
            found = lines_of(code)
            if found is None or line not in found[1]:
                counts.active = None
                return None
            key = counts.active = (found[0], line)
            counts.step[key] = counts.step.get(key, 0) + 1
            return None

        self.watched: Set[CodeType] = set()
        self.callbacks = {events.PY_START: on_start, events.PY_RESUME: on_start, events.PY_RETURN: on_leave,
                          events.PY_YIELD: on_leave, events.PY_THROW: on_throw, events.PY_UNWIND: on_unwind,
                          events.LINE: on_line}

    def install(self) -> None:
        monitoring, events = self.monitoring, self.monitoring.events
        self.tool = next((t for t in (monitoring.DEBUGGER_ID, 3, 4) if monitoring.get_tool(t) is None), None)
        if self.tool is None:  # a debugger and two other tools hold every id we may take
            return
        monitoring.use_tool_id(self.tool, "perflsp-record")
        for event, callback in self.callbacks.items():
            monitoring.register_callback(self.tool, event, callback)
        monitoring.set_events(self.tool, events.PY_START | events.PY_THROW | events.PY_UNWIND)

    def uninstall(self) -> None:
        if self.tool is None:
            return
        self.monitoring.set_events(self.tool, 0)
        for code in self.watched:
            self.monitoring.set_local_events(self.tool, code, 0)
        for event in self.callbacks:
            self.monitoring.register_callback(self.tool, event, None)
        self.monitoring.free_tool_id(self.tool)
        self.tool = None
