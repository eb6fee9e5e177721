"""Measured hotness: count which workspace functions a program run calls, and in how many steps.

Runs inside the profiling process while `--run` runs the user's program (see `program.py`), and
writes the document the supervisor publishes as `<workspace>/.perflsp/hot.json`
(`docs/hot-json.md`).

Counting. Only functions whose file lies inside the workspace are counted: never the standard
library, installed packages (`site-packages`, also inside a project's `.venv`) or perflsp
itself, and never module bodies, lambdas or comprehensions (`<...>` code, which no rule can
name). On Python 3.12+ `sys.monitoring` calls us on PY_START only; code outside the workspace
answers DISABLE on its first start and costs nothing afterwards, so the cost is one small
callback per call of a workspace function. Older Pythons have only `sys.setprofile`, whose
callback sees every Python and C call and return, filtered by a per-code-object cache, and which
runs all code on the interpreter's slower tracing path: bench/hot_overhead.py measures both.

Steps. One step is the work between two `Optimizer.step()` calls of the program's first
optimizer (torch's global step post-hook, `register_optimizer_step_post_hook`), or between two
calls of the profiled function when the program did not step an optimizer at least
`MIN_STEPS` times while recorded (inference, or a program stopped early). A step counts only
if it was recorded from its start to its end: the recorder is paused while the profiler
measures the target's calls (so that it never distorts the timing), and a step cut by the
pause is dropped.
"""
from __future__ import annotations

import ast
import dis
import functools
import os
import sys
import sysconfig
import threading
import time
import weakref
from types import CodeType, FrameType
from typing import Any, Dict, Optional, Tuple

import perflsp
from perflsp.hot_file import HOT_VERSION, MIN_STEPS

_FUNCTION = 0x1  # CO_OPTIMIZED: set for functions, never for module and class bodies
_RESUMABLE = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
_EXCLUDED, _PLAIN = -3, -2  # not counted; counted on every call (else: the offset of a fresh frame)
_LIBRARY_FOLDERS = ("site-packages", "dist-packages")


class StepTrack:
    """Steps delimited by one kind of boundary, and in how many of them each function ran."""

    def __init__(self) -> None:
        self.steps = 0
        self.ran_in: Dict[CodeType, int] = {}
        self._at_start: Optional[Dict[CodeType, int]] = None  # the call counts when this step began
        self._whole = False  # recorded since it began, without a pause

    @property
    def seen(self) -> bool:
        """Whether one boundary of this kind happened at all."""
        return self._at_start is not None

    def boundary(self, counts: Dict[CodeType, int], recording: bool) -> None:
        now = dict(counts)  # one C-level copy: other threads may be counting meanwhile
        if self._whole and self._at_start is not None:
            self.steps += 1
            at_start = self._at_start
            for code, calls in now.items():
                if calls != at_start.get(code, 0):
                    self.ran_in[code] = self.ran_in.get(code, 0) + 1
        self._at_start = now
        self._whole = recording

    def interrupt(self) -> None:
        self._whole = False


class WorkspaceFiles:
    """Which code objects belong to the workspace, by file (each file is resolved once)."""

    def __init__(self, root: str, cwd: str):
        self.root = os.path.realpath(root)
        self.cwd = cwd
        paths = sysconfig.get_paths()
        candidates = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
        candidates += [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(perflsp.__file__),
                       os.path.dirname(__file__)]
        # A library folder that holds the workspace (a system prefix above a project) excludes nothing.
        self.excluded = tuple(real for real in {os.path.realpath(c) for c in candidates if c}
                              if not _inside(self.root, real))
        self.relative: Dict[str, Optional[str]] = {}

    def relative_path(self, filename: str) -> Optional[str]:
        """The file's path relative to the workspace (with `/`), or None when it is not the user's code."""
        if filename in self.relative:
            return self.relative[filename]
        found = None
        if filename and not filename.startswith("<"):
            path = os.path.realpath(os.path.join(self.cwd, filename))
            if (_inside(path, self.root) and not any(_inside(path, folder) for folder in self.excluded)
                    and not set(_LIBRARY_FOLDERS) & set(path.split(os.sep))):
                found = os.path.relpath(path, self.root).replace(os.sep, "/")
        self.relative[filename] = found
        return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class HotRecorder:
    """Counts calls of workspace functions and the steps they ran in; see the module docstring."""

    def __init__(self, workspace: str, command: str, cwd: Optional[str] = None):
        self.files = WorkspaceFiles(workspace, cwd or os.getcwd())
        self.command = command
        self.counts: Dict[CodeType, int] = {}
        self.optimizer_steps = StepTrack()
        self.target_steps = StepTrack()
        self.recording = False
        self._hook = _choose_hook(self)
        self._optimizer_handle: Any = None
        self._stepper: Optional[weakref.ref] = None  # the first optimizer seen stepping

    @property
    def method(self) -> str:
        return self._hook.name

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._optimizer_handle = _register_optimizer_hook(self._optimizer_stepped)
        os.register_at_fork(after_in_child=self._forget_in_child)
        self.resume()

    def stop(self) -> None:
        self.pause()
        if self._optimizer_handle is not None:
            self._optimizer_handle.remove()
            self._optimizer_handle = None
        self._hook.release()

    def pause(self) -> None:
        """Stop counting (the profiler is about to measure); the step under way is dropped."""
        if self.recording:
            self._hook.uninstall()
            self.recording = False
            self.optimizer_steps.interrupt()
            self.target_steps.interrupt()

    def resume(self) -> None:
        if not self.recording:
            self._hook.install()
            self.recording = True

    def _forget_in_child(self) -> None:
        # A forked child (a DataLoader worker) would count into a copy nobody reads: spare it the cost.
        if self.recording:
            self._hook.uninstall()
            self.recording = False

    # --- step boundaries -----------------------------------------------------------------------

    def target_called(self) -> None:
        self.target_steps.boundary(self.counts, self.recording)

    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        first = self._stepper() if self._stepper is not None else None
        if first is None:  # the first optimizer, or a new one after it was freed
            self._stepper = weakref.ref(optimizer)
        elif first is not optimizer:
            return  # a second optimizer (a GAN's) steps within the same training step
        self.optimizer_steps.boundary(self.counts, self.recording)

    def steps_known(self) -> bool:
        """Enough whole steps recorded to choose the step's source (`document`) and count in them."""
        if self.optimizer_steps.steps >= MIN_STEPS:
            return True
        return not self.optimizer_steps.seen and self.target_steps.steps >= MIN_STEPS

    # --- counting (the hooks call these) -------------------------------------------------------

    def wanted(self, code: CodeType) -> bool:
        """A function (not a module or class body, a lambda or a comprehension) of the workspace."""
        return (bool(code.co_flags & _FUNCTION) and not code.co_name.startswith("<")
                and self.files.relative_path(code.co_filename) is not None)

    # --- the document --------------------------------------------------------------------------

    def document(self) -> Dict[str, Any]:
        """The content of hot.json (docs/hot-json.md)."""
        by_optimizer = self.optimizer_steps.steps >= MIN_STEPS
        track = self.optimizer_steps if by_optimizer else self.target_steps
        merged: Dict[Tuple[str, str], Dict[str, Any]] = {}
        for code, calls in dict(self.counts).items():
            path = self.files.relative_path(code.co_filename)
            if path is None:
                continue
            qualname = qualname_of(code, os.path.join(self.files.root, path))
            entry = merged.setdefault((path, qualname), {"file": path, "qualname": qualname,
                                                         "first_line": code.co_firstlineno, "calls": 0, "steps": 0})
            entry["calls"] += calls  # one function, several code objects: a reloaded module
            entry["steps"] = min(track.steps, entry["steps"] + track.ran_in.get(code, 0))
        return {
            "version": HOT_VERSION,
            "steps": track.steps,
            "step_source": "optimizer.step" if by_optimizer else "target",
            "command": self.command,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "recorder": self.method,
            "functions": sorted(merged.values(), key=lambda f: (f["file"], f["first_line"], f["qualname"])),
        }


def _register_optimizer_hook(callback: Any) -> Any:
    """torch's global post-hook on every `Optimizer.step()`, or None without torch (>= 2.0)."""
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        return None
    return register_optimizer_step_post_hook(callback)


# --- hooks -------------------------------------------------------------------------------------

class _MonitoringHook:
    """Python 3.12+: `sys.monitoring` PY_START events."""

    name = "sys.monitoring"

    def __init__(self, recorder: HotRecorder):
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        self.monitoring = monitoring
        self.tool = _free_tool_id(monitoring)
        counts, wanted, disable = recorder.counts, recorder.wanted, monitoring.DISABLE

        def on_start(code: CodeType, offset: int) -> Any:
            calls = counts.get(code)
            if calls is None:
                if not wanted(code):
                    return disable
                calls = 0
            counts[code] = calls + 1
            return None

        if self.tool is not None:
            monitoring.use_tool_id(self.tool, "perflsp-hot")
            monitoring.register_callback(self.tool, monitoring.events.PY_START, on_start)

    def install(self) -> None:
        if self.tool is not None:
            self.monitoring.set_events(self.tool, self.monitoring.events.PY_START)

    def uninstall(self) -> None:
        # No events at all: instrumented code with no callback still runs ~15% slower.
        if self.tool is not None:
            self.monitoring.set_events(self.tool, 0)

    def release(self) -> None:
        if self.tool is not None:
            self.monitoring.set_events(self.tool, 0)
            self.monitoring.register_callback(self.tool, self.monitoring.events.PY_START, None)
            self.monitoring.free_tool_id(self.tool)
            self.tool = None


def _free_tool_id(monitoring: Any) -> Optional[int]:
    """The profiler slot, else another free one (cProfile takes the profiler slot on 3.12)."""
    for tool in (monitoring.PROFILER_ID, 3, 4):
        if monitoring.get_tool(tool) is None:
            return tool
    return None


class _ProfileHook:
    """Python < 3.12: `sys.setprofile`, on this thread and on threads started later."""

    name = "sys.setprofile"

    def __init__(self, recorder: HotRecorder):
        counts, wanted = recorder.counts, recorder.wanted
        starts: Dict[CodeType, int] = {}

        def on_event(frame: FrameType, event: str, arg: Any) -> None:
            if event != "call":
                return
            code = frame.f_code
            start = starts.get(code)
            if start is None:
                start = starts[code] = _fresh_offset(code) if wanted(code) else _EXCLUDED
            # A generator's frame is "called" again on every resumption: count its first entry only.
            if start == _PLAIN or frame.f_lasti == start:
                counts[code] = counts.get(code, 0) + 1

        self.callback = on_event

    def install(self) -> None:
        sys.setprofile(self.callback)
        threading.setprofile(self.callback)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def release(self) -> None:
        self.uninstall()


def _fresh_offset(code: CodeType) -> int:
    """_PLAIN for plain functions; for generators and coroutines, `f_lasti` when their frame
    enters the first time: -1 before 3.11, the offset of the first RESUME since."""
    if not code.co_flags & _RESUMABLE:
        return _PLAIN
    if sys.version_info < (3, 11):
        return -1
    return next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), -1)


def _choose_hook(recorder: HotRecorder) -> Any:
    return _MonitoringHook(recorder) if hasattr(sys, "monitoring") else _ProfileHook(recorder)


# --- names -------------------------------------------------------------------------------------

def qualname_of(code: CodeType, path: str) -> str:
    """Python's qualified name (`Class.method`, `outer.<locals>.inner`): `co_qualname` on 3.11+,
    else rebuilt from the source by the function's name and first line."""
    qualname = getattr(code, "co_qualname", None)
    if qualname:
        return qualname
    return _source_qualnames(path).get((code.co_name, code.co_firstlineno), code.co_name)


@functools.lru_cache(maxsize=256)
def _source_qualnames(path: str) -> Dict[Tuple[str, int], str]:
    """(name, first line) -> qualname for every function in a file; the first line is the first
    decorator's, as in `co_firstlineno`."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: Dict[Tuple[str, int], str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found[(child.name, first)] = qualname
                visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found
