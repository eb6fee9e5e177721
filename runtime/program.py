"""`--run "python train.py ..."`: measure real calls of the target while the program runs.

The program runs inside the profiling process. Before it starts, an import hook rewrites the
target's module as it is loaded, adding one decorator to the target's `def` (the outermost,
but inside `staticmethod`/`classmethod`), so every call goes through `capture`'s wrapper
however the program reaches it: by attribute, by a name imported earlier in another module,
or from the same file. If the target's file is the script itself it is compiled the same way.

Real calls are measured as they happen, in this order: warm-up (until stable, and until the hot
recorder has `MIN_STEPS` whole steps), `ATTRIBUTION_CALLS` calls under
the attribution pass on a CPU (per-line medians; one on a GPU), one under the clean profile,
then timed calls. The order puts the
passes that need only one call first, so a short program still yields a breakdown. Once enough
calls were timed the result is written and the program is stopped (`StopProgram`, a
BaseException that ordinary `except Exception` blocks let through) unless --no-stop.
"""
from __future__ import annotations

import builtins
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import runpy
import shlex
import sys
import threading
import time
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from perflsp.profile_result import find_definition
from perflsp.runtime.targets import TargetError, TargetSpec, UsageError, refuse_unmeasurable

CAPTURE_EXPRESSION = "__import__('perflsp.runtime.program', fromlist=['capture']).capture"
_KEEP_OUTSIDE = {"staticmethod", "classmethod"}
ATTRIBUTION_CALLS = 3  # on a CPU: a median per line needs three calls (session.attribution_calls_for)


class StopProgram(BaseException):
    """Raised out of the target's wrapper to end the program once the measurement is done."""


# --- source rewriting ---------------------------------------------------------------------------

def add_capture(source: str, filename: str, qualname: str) -> Any:
    """Compile `source` with `@capture` added to the definition of `qualname`.

    Line numbers are untouched (one decorator node is added, nothing is moved), so tracebacks
    and line attribution point at the user's real lines.
    """
    import ast

    tree = ast.parse(source, filename)
    node = find_definition(tree, qualname)
    if node is None or isinstance(node, ast.ClassDef):
        raise TargetError(f"{qualname!r} is not a function defined in {filename}")
    refuse_unmeasurable(node, qualname)
    decorator = ast.parse(CAPTURE_EXPRESSION, mode="eval").body
    position = 0
    for existing in node.decorator_list:
        if isinstance(existing, ast.Name) and existing.id in _KEEP_OUTSIDE:
            position += 1
        else:
            break
    node.decorator_list.insert(position, decorator)
    for child in ast.walk(decorator):
        child.lineno = child.end_lineno = node.lineno
        child.col_offset = child.end_col_offset = 0
    return compile(tree, filename, "exec", dont_inherit=True)


class CaptureLoader(importlib.machinery.SourceFileLoader):
    """Loads the target's module from source with the capture decorator added (never from a
    .pyc, and never writing one: the rewritten code must not outlive this run)."""

    def __init__(self, fullname: str, path: str, qualname: str):
        super().__init__(fullname, path)
        self.qualname = qualname

    def get_code(self, fullname: str) -> Any:
        source = importlib.util.decode_source(self.get_data(self.path))
        return add_capture(source, self.path, self.qualname)


class CaptureFinder(importlib.abc.MetaPathFinder):
    """Hands out `CaptureLoader` for the target's module, found by file or by module name."""

    def __init__(self, target: TargetSpec):
        self.target = target
        self.installed_for: Optional[str] = None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        wanted = self.target
        leaf = fullname.rpartition(".")[2]
        if wanted.file is not None:
            expected = wanted.file.parent.name if wanted.file.stem == "__init__" else wanted.file.stem
            if leaf != expected:
                return None
        elif fullname != wanted.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if wanted.file is not None and not _same_file(spec.origin, str(wanted.file)):
            return None
        spec.loader = CaptureLoader(fullname, spec.origin, wanted.qualname)
        self.installed_for = fullname
        return spec


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# --- the command --------------------------------------------------------------------------------

RECORDED = "the command after `perflsp record --`"  # how errors name the program `perflsp record` runs
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?(\.exe)?$")
_FLAG_OPTIONS = {"-u", "-B", "-O", "-OO", "-s", "-S", "-E", "-I", "-q", "-b", "-bb", "-d", "-v", "-P"}


def parse_command(command: str, what: str = "--run") -> Tuple[str, str, List[str]]:
    """('script', path, argv) or ('module', name, argv) for a `python ...` command line; `what`
    names the command in errors as the user gave it (`--run`, the command of `perflsp record --`)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"cannot parse {what} command {command!r}: {exc}") from None
    if not argv:
        raise UsageError(f"the {what} command is empty")
    if not _PYTHON.match(os.path.basename(argv[0])) and argv[0] != sys.executable:
        raise UsageError(f"{what} must start with python (perflsp runs the program in its own interpreter to "
                         f"measure calls as they happen), got {argv[0]!r} in {command!r}")
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        option = argv[i]
        if option == "-m":
            if i + 1 >= len(argv):
                raise UsageError(f"{what}: -m needs a module name")
            return "module", argv[i + 1], argv[i + 1:]
        if option == "-c":
            raise UsageError(f"{what} does not take python -c; put the program in a file")
        if option in _FLAG_OPTIONS:
            i += 1
        elif option in ("-W", "-X"):
            i += 2
        elif option.startswith(("-W", "-X")):
            i += 1
        else:
            raise UsageError(f"{what}: python option {option} is not supported")
    if i >= len(argv):
        raise UsageError(f"{what} command {command!r} names no script")
    return "script", argv[i], argv[i:]


def run_command(command: str, target: Optional[TargetSpec], cwd: str, what: str = "--run") -> None:
    """Run the program with the import hook installed (none without a target: `perflsp record`
    steps on the optimizer). Returns when the program ends (a `SystemExit` from it is returned
    as-is by raising it); `StopProgram` passes through."""
    kind, name, argv = parse_command(command, what)
    finder = CaptureFinder(target) if target is not None else None
    if finder is not None:
        sys.meta_path.insert(0, finder)
    saved_argv, saved_path = sys.argv, list(sys.path)
    try:
        if kind == "module":
            sys.argv = list(argv)
            sys.path.insert(0, cwd)
            runpy.run_module(name, run_name="__main__", alter_sys=True)
            return
        script = os.path.abspath(os.path.join(cwd, name))
        if not os.path.isfile(script):
            raise UsageError(f"{what}: no such script {script}")
        sys.argv = [script] + list(argv[1:])
        sys.path.insert(0, os.path.dirname(script))
        is_target = target is not None and target.file is not None and _same_file(script, str(target.file))
        _run_script(script, target.qualname if is_target and target is not None else None)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)


def _run_script(path: str, capture_qualname: Optional[str]) -> None:
    with open(path, "rb") as handle:
        source = importlib.util.decode_source(handle.read())
    code = add_capture(source, path, capture_qualname) if capture_qualname else compile(source, path, "exec")
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


# --- measuring real calls -----------------------------------------------------------------------

_ACTIVE: Optional["ProgramSession"] = None
_LOCAL = threading.local()


def capture(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The decorator the import hook adds to the target."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        session = _ACTIVE
        if session is None or getattr(_LOCAL, "depth", 0):
            return fn(*args, **kwargs)
        _LOCAL.depth = 1  # recursive calls of the target run unmeasured inside the outer one
        try:
            session.target_called()
            if session.finished:
                return fn(*args, **kwargs)
            return session.measured_call(fn, args, kwargs)
        finally:
            _LOCAL.depth = 0

    return wrapper


def activate(session: Optional["ProgramSession"]) -> None:
    global _ACTIVE
    _ACTIVE = session


class ProgramSession:
    """State machine over the target's real calls: warm-up, attribution, profile, timing.

    With a hot recorder (`hot_record.HotRecorder`), each call of the target is a step boundary
    for it, and it is paused from the first instrumented call until the measurement is complete:
    the measured calls run as the program would run them without perflsp.
    """

    def __init__(self, device: str, timing_options: Any, reporter: Any, stop: bool,
                 on_complete: Callable[["ProgramSession"], None],
                 probe_device: Optional[Callable[[Callable[[], Any], str], str]] = None,
                 recorder: Any = None):
        from perflsp.runtime.timing import make_timer

        self.device = device
        self.probe_device = probe_device  # decides cpu/cuda from the first call (--device auto)
        self.options = timing_options
        self.reporter = reporter
        self.stop = stop
        self.on_complete = on_complete
        self.phase = "warm-up"
        self.calls_seen = 0
        self.warmup_s: List[float] = []
        self.timer = make_timer(device)
        self.timed = 0
        self.wanted = 0
        self.attribution: Any = None
        self._attributed: List[Any] = []  # CPU: the attribution pass's calls so far
        self.arguments: Optional[List[str]] = None  # the measured calls' arguments, described
        self.load_before_1m: Optional[float] = None  # the load average at the first call
        self.clean: Any = None
        self.source_file: Optional[str] = None
        self.function: Any = None
        self.finished = False
        self.recorder = recorder
        self._lock = threading.Lock()

    def target_called(self) -> None:
        if self.recorder is not None:
            self.recorder.target_called()

    def measured_call(self, fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if not self._lock.acquire(blocking=False):
            return fn(*args, **kwargs)  # another thread is being measured: let this one through
        try:
            return self._step(fn, args, kwargs)
        finally:
            self._lock.release()

    def _step(self, fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        from perflsp.runtime import profiling
        from perflsp.runtime.arguments import describe_arguments
        from perflsp.runtime.timing import choose_iters, make_timer, percentile, synchronize, warmup_done

        self.calls_seen += 1
        if self.function is None:
            from perflsp.runtime.env import load_average_1m

            self.load_before_1m = load_average_1m()
            self.function = fn
            code = getattr(fn, "__code__", None)
            self.source_file = os.path.realpath(code.co_filename) if code else None
            self.reporter.phase("warm-up")
        box: List[Any] = []

        def call() -> None:
            box.append(fn(*args, **kwargs))

        if self.phase != "warm-up" and self.recorder is not None:
            self.recorder.pause()
        if self.probe_device is not None:
            # The first call shows where the work runs; it counts as a warm-up call.
            self.device = self.probe_device(call, self.source_file or "")
            self.probe_device = None
            self.timer = make_timer(self.device)
        elif self.phase == "warm-up":
            synchronize(self.device)
            t0 = time.perf_counter()
            call()
            synchronize(self.device)
            self.warmup_s.append(time.perf_counter() - t0)
            self.reporter.progress(len(self.warmup_s), None)
            if warmup_done(self.warmup_s, self.options) and self._steps_known():
                self.phase = "attribution"
                self.reporter.phase("attribution")
        elif self.phase == "attribution":
            self.arguments = self.arguments or describe_arguments(args, kwargs)
            if self.device == "cuda":
                self.attribution = profiling.run_attribution(call, self.source_file or "", self.device)
            else:
                self._attributed.append(profiling.attribute_cpu_call(call, self.source_file or ""))
                if len(self._attributed) == ATTRIBUTION_CALLS:
                    self.attribution = profiling.merge_cpu_calls(self._attributed)
            if self.attribution is not None:
                self.phase = "profile"
                self.reporter.phase("profile")
        elif self.phase == "profile":
            self.clean = profiling.run_clean_profile(call, 1, self.device)
            estimate = percentile(sorted(self.warmup_s[-3:]), 0.5)
            self.wanted = choose_iters(estimate, self.options)
            self.phase = "timing"
            self.reporter.phase("timing", f"{self.wanted} calls")
        else:
            self.timer.start()
            call()
            self.timer.stop()
            self.timed += 1
            self.reporter.progress(self.timed, self.wanted)
            if self.timed >= self.wanted:
                self.finished = True
                self.on_complete(self)
                if self.recorder is not None:
                    self.recorder.resume()
                if self.stop:
                    raise StopProgram()
        return box[0] if box else None

    def _steps_known(self) -> bool:
        # Measuring pauses the recorder, so a warm-up that settles in three calls would leave
        # hot.json too few whole steps to tell an optimizer step from a call of the target.
        return (self.recorder is None or len(self.warmup_s) >= self.options.max_warmup
                or self.recorder.steps_known())

    @property
    def can_report(self) -> bool:
        return self.timed > 0 and self.attribution is not None and self.clean is not None

    def samples_s(self) -> List[float]:
        return self.timer.samples_s()
