"""The profiling process: runs one job (profile or peaks) that its supervisor wrote to a file.

It is started by `supervisor.py` in a fresh session, under a reaper that owns every process it
starts (`reaper.py`), so a timeout can end it and anything it spawned, wherever it is stuck. It
writes its messages and its result into the job folder; the supervisor publishes the result
atomically in the workspace.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from perflsp.profile_result import EXIT_OK, exit_code_for, write_json_atomic
from perflsp.runtime import analysis, env
from perflsp.runtime.arguments import describe_arguments
from perflsp.runtime.channel import Reporter
from perflsp.runtime.program import StopProgram
from perflsp.runtime.targets import (SpecSyntaxError, TargetError, TargetSpec, UsageError, check_exists,
                                     import_target_module, parse_target, resolve_attribute, source_file_of)
from perflsp.runtime.timing import TimingOptions
from perflsp.units import byte_count


def install_stack_dump(path: str) -> Any:
    """On SIGUSR1, write every thread's Python stack to `path` (works while stuck in C code:
    faulthandler's handler does not need the interpreter to get control back)."""
    import faulthandler

    handle = open(path, "w", encoding="utf-8")
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)
    return handle


def raised_by_perflsp(exc: BaseException, user_files: Tuple[str, ...] = ()) -> bool:
    """A bug in perflsp rather than a failure of the target: no frame of the traceback is the
    user's code (the target's file, or anything that is not the runtime's own, the standard
    library's or an installed package's such as torch's)."""
    frames = [frame.f_code.co_filename for frame, _ in traceback.walk_tb(exc.__traceback__)]
    if not frames or any(os.path.realpath(name) in user_files for name in frames):
        return False
    libraries = env.library_dirs()
    return all(name.startswith((env.RUNTIME_DIR, "<frozen") + libraries) for name in frames)


def user_traceback(exc: BaseException, internal: bool = False) -> str:
    """The traceback without perflsp's and importlib's own frames: the user's code only. A
    perflsp bug (`internal`) keeps its full traceback, so it can be reported."""
    if internal:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    frames = [(frame, lineno) for frame, lineno in traceback.walk_tb(exc.__traceback__)
              if not frame.f_code.co_filename.startswith(env.RUNTIME_DIR)
              and "importlib._bootstrap" not in frame.f_code.co_filename
              and not frame.f_code.co_filename.endswith("runpy.py")]
    summary = traceback.StackSummary.extract(frames)
    text = "Traceback (most recent call last):\n" + "".join(summary.format()) if frames else ""
    return text + "".join(traceback.format_exception_only(type(exc), exc))


def normalize_inputs(value: Any) -> Tuple[tuple, Dict[str, Any]]:
    """A setup's return value as (args, kwargs): a tuple is the positional arguments, a dict
    the keyword arguments, an `(args_tuple, kwargs_dict)` pair both, None no arguments, and
    anything else the single positional argument."""
    if value is None:
        return (), {}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], dict):
        return value[0], value[1]
    if isinstance(value, tuple):
        return value, {}
    if isinstance(value, dict):
        return (), value
    return (value,), {}


def oom_message(exc: BaseException, device: str, phase: str) -> str:
    """The allocator's own first line (it names the size asked for) plus what the device has."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = f"out of memory during {phase}: {first[:400]}"
    try:
        if device == "cuda":
            import torch

            free, total = torch.cuda.mem_get_info()
            text += (f" | device: {byte_count(free)} free of {byte_count(total)}; PyTorch holds "
                     f"{byte_count(torch.cuda.memory_allocated())} in tensors "
                     f"({byte_count(torch.cuda.memory_reserved())} reserved, peak "
                     f"{byte_count(torch.cuda.max_memory_allocated())})")
        else:
            available, total = _meminfo_bytes("MemAvailable"), _meminfo_bytes("MemTotal")
            if available is not None and total is not None:
                text += f" | host memory: {byte_count(available)} available of {byte_count(total)}"
    except Exception:  # the sizes are a courtesy; never mask the OOM itself
        pass
    return text + ". Profile smaller inputs (a smaller batch) or free memory first."


def _meminfo_bytes(key: str) -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class Job:
    def __init__(self, data: Dict[str, Any]):
        self.data = data
        self.reporter = Reporter(data.get("messages"))
        self.device = "cpu"

    def timing_options(self, marker: Any = None) -> TimingOptions:
        """CLI flags win over the marker's `warmup=`/`iters=`, which win over the defaults."""
        d = self.data
        options = TimingOptions(min_time_s=d.get("min_time_s") or 1.0)
        warmup = d.get("warmup") if d.get("warmup") is not None else getattr(marker, "warmup", None)
        iters = d.get("iters") if d.get("iters") is not None else getattr(marker, "iters", None)
        if warmup is not None:
            options.warmup = int(warmup)
        if iters is not None:
            options.iters = int(iters)
        return options

    def settings(self, inputs: Optional[str], options: TimingOptions) -> Dict[str, Any]:
        d = self.data
        return analysis.settings_block(inputs=inputs, setup=d.get("setup"), run_command=d.get("run"),
                                       stop_program=bool(d.get("stop_program", True)), timing=options,
                                       timeout_s=d.get("timeout_s"), device=d.get("device", "auto"),
                                       cold_cache=bool(d.get("cold_cache")))

    def write(self, result: Dict[str, Any]) -> None:
        write_json_atomic(self.data["result"], result)


def run_peaks(job: Job) -> int:
    from perflsp.runtime import env, peaks

    d = job.data
    try:
        device = env.choose_device(d.get("device", "auto"))
    except RuntimeError as exc:
        job.write({"error": str(exc)})
        return 2
    job.reporter.phase("peaks", device)
    if d.get("cached_only"):
        import torch

        desc = env.describe_device(device)
        key = peaks.cache_key(desc, torch.__version__, torch.version.cuda if device == "cuda" else None)
        found = peaks.load_cached(key)
        if found is None:
            job.write({"error": f"no cached ceilings for this device at {peaks.cache_path(key)}; run `perflsp peaks`"})
            return 2
        job.write({"peaks": found, "source": "cache", "cache_path": str(peaks.cache_path(key))})
        return EXIT_OK
    measured, source = peaks.get(device, refresh=True, budget_s=d.get("budget_s") or peaks.DEFAULT_BUDGET_S,
                                 on_step=lambda step: job.reporter.phase("peaks", step))
    job.write({"peaks": measured, "source": source, "cache_path": str(peaks.cache_path(measured["key"]))})
    return EXIT_OK


def run_profile(job: Job) -> int:
    d = job.data
    cwd = Path(d.get("cwd") or os.getcwd())
    target = parse_target(d["target"], cwd)
    options = job.timing_options()
    base = analysis.new_result(analysis.target_block(target.spec, target.module, target.qualname, target.file),
                               job.settings(None, options))
    reporter = job.reporter
    reporter.phase("import", target.spec)
    try:
        check_exists(target)
        return _profile(job, target, base)
    except TargetError as exc:
        return _fail(job, base, "target-not-found", str(exc), defined=exc.defined)
    except (UsageError, SpecSyntaxError) as exc:
        return _fail(job, base, "usage", str(exc))
    except StopProgram:
        return EXIT_OK  # a result was written when the measurement completed
    except SystemExit as exc:
        return _fail(job, base, "exception", f"the program exited (status {exc.code}) during {reporter.phase_name}")
    except BaseException as exc:  # the user's code raised: report it, with its traceback
        from perflsp.runtime import compat

        if compat.is_out_of_memory(exc):
            return _fail(job, base, "out-of-memory", oom_message(exc, job.device, reporter.phase_name),
                         exc=exc)
        user_files = tuple(os.path.realpath(f) for f in (base["target"].get("file"), target.file) if f)
        internal = raised_by_perflsp(exc, user_files)
        prefix = "internal error in perflsp (please report it): " if internal else ""
        return _fail(job, base, "exception",
                     f"{prefix}{type(exc).__name__}: {exc} (during {reporter.phase_name})", exc=exc, internal=internal)


def run_compile(job: Job) -> int:
    """The `--compile` (or `--graph-breaks`) job: writes `{"compile": block}`, once right after
    explain (the breaks outlive a compile that then times out) and again at the end. A failure
    is the block's `error`, never the run's: the eager profile stands either way."""
    from perflsp.runtime import compiling
    from perflsp.runtime.dynamo_compat import CompileUnavailable

    d = job.data
    block = compiling.new_block(d["compile_mode"], d["device"], bool(d.get("explain_only")))
    try:
        try:
            job.device = env.choose_device(d["device"])  # the eager profile's device, or auto for --graph-breaks
        except RuntimeError as exc:
            raise UsageError(str(exc)) from None
        block = compiling.new_block(d["compile_mode"], job.device, block["explain_only"])
        target = parse_target(d["target"], Path(d.get("cwd") or os.getcwd()))
        check_exists(target)
        if _inputs_from_program(d, target):
            raise UsageError("--compile needs the function's inputs from --setup or @perflsp.profile(setup=...): "
                             "a --run program's calls are not replayed compiled")
        fn, _, marker, setup_fn, _ = _target_and_inputs(job, target)
        job.reporter.phase("setup")
        args, kwargs = normalize_inputs(setup_fn())
        job.reporter.phase("explain")
        compiling.find_breaks(fn, args, kwargs, block)
        job.write({"compile": block})
        if not block["explain_only"]:
            compiling.measure(fn, args, kwargs, job.device, block, job.timing_options(marker), job.reporter,
                              cold_levels=d.get("cold_levels") if d.get("cold_cache") else None)
    except CompileUnavailable as exc:
        block["error"] = {"kind": "unavailable", "message": str(exc)}
    except (TargetError, UsageError, SpecSyntaxError) as exc:
        block["error"] = {"kind": "usage", "message": str(exc)}
    except BaseException as exc:  # the target, or torch.compile on it, failed: say where and why
        from perflsp.runtime import compat, graph_breaks

        phase = job.reporter.phase_name
        if compat.is_out_of_memory(exc):
            block["error"] = {"kind": "out-of-memory", "message": oom_message(exc, job.device, phase)}
        else:
            block["error"] = {"kind": "exception", "message": f"{type(exc).__name__} during {phase}: "
                                                                f"{graph_breaks.first_lines(str(exc))}"}
    job.write({"compile": block})
    return EXIT_OK


def _fail(job: Job, base: Dict[str, Any], kind: str, message: str, exc: Optional[BaseException] = None,
          defined: Optional[List[str]] = None, internal: bool = False) -> int:
    error = analysis.error_block(kind, message, phase=job.reporter.phase_name,
                                 exception_type=type(exc).__name__ if exc is not None else None,
                                 traceback=user_traceback(exc, internal) if exc is not None else None,
                                 defined=defined)
    job.write(analysis.with_error(base, error))
    return exit_code_for(kind)


def _ceilings(job: Job, device: str) -> Tuple[Dict[str, Any], str]:
    from perflsp.runtime import peaks

    d = job.data
    job.reporter.phase("peaks")
    return peaks.get(device, refresh=bool(d.get("refresh_peaks")),
                     budget_s=d.get("peaks_budget_s") or peaks.DEFAULT_BUDGET_S,
                     on_step=lambda step: job.reporter.phase("peaks", step))


def probe_device(call: Any, source_file: str) -> str:
    """'cuda' if one call of the target runs any op on the GPU, else 'cpu'.

    With --device auto on a CUDA machine, a function whose tensors all live on the CPU is CPU
    code: judging it against the GPU's ceilings would call all of it a transfer problem.
    """
    from perflsp.runtime.counting import OpCounter

    with OpCounter(source_file, ranges=False) as counter:
        call()
    return "cuda" if any(r.device == "cuda" for r in counter.records) else "cpu"


CPU_CODE_NOTE = ("CUDA is available but this function's tensors are on the CPU: profiled as CPU code "
                 "(pass --device cuda to judge it as GPU code)")


def _profile(job: Job, target: TargetSpec, base: Dict[str, Any]) -> int:
    from perflsp.runtime import env, session

    d = job.data
    reporter = job.reporter
    requested = d.get("device", "auto")
    try:
        job.device = device = env.choose_device(requested)
    except RuntimeError as exc:
        raise UsageError(str(exc)) from None
    base["device"] = env.describe_device(device)
    base["environment"] = env.environment()
    if _inputs_from_program(d, target):
        return _profile_program(job, target, base, d["run"], probe=requested == "auto" and device == "cuda")

    fn, module, marker, setup_fn, inputs = _target_and_inputs(job, target)
    options = job.timing_options(marker)
    base["settings"] = job.settings(inputs, options)
    source = source_file_of(fn, module)
    source_file = str(source) if source else ""
    base["target"] = analysis.target_block(target.spec, target.module, target.qualname, source,
                                           analysis.code_qualname_of(fn))
    reporter.phase("setup")
    args, kwargs = normalize_inputs(setup_fn())
    base["settings"]["arguments"] = describe_arguments(args, kwargs)
    call = lambda: fn(*args, **kwargs)  # noqa: E731
    notes: List[str] = []
    if requested == "auto" and device == "cuda":
        reporter.phase("warm-up", "finding where the work runs")
        job.device = device = probe_device(call, source_file)
        if device == "cpu":
            notes.append(CPU_CODE_NOTE)
            base["device"] = env.describe_device(device)
    measured_peaks, peaks_source = _ceilings(job, device)
    if d.get("cold_cache"):
        from perflsp.runtime.cold_cache import rotating_call

        reporter.phase("setup", "copies of the inputs for --cold-cache")
        call, note = rotating_call(fn, args, kwargs, measured_peaks["levels"])
        notes.append(note)
    ctx = session.Context(device=device, peaks=measured_peaks, peaks_source=peaks_source, target=base["target"],
                          settings=base["settings"], source_file=source_file,
                          top_lines=int(d.get("top_lines") or 10), notes=notes, requested_device=requested,
                          cold_cache=bool(d.get("cold_cache")))
    result = session.profile_call(call, ctx, session.MeasureOptions(timing=options, top_lines=ctx.top_lines), reporter)
    job.write(result)
    return EXIT_OK


def _target_and_inputs(job: Job, target: TargetSpec) -> Tuple[Any, Any, Any, Any, str]:
    """(function, its module, its @perflsp.profile marker, the setup function, where the inputs
    come from): the target imported and its inputs found, as --setup or the marker give them."""
    d = job.data
    job.reporter.phase("import", target.spec)
    module = import_target_module(target)
    fn = resolve_attribute(module, target)
    _check_module_target(target, fn, module)
    marker = getattr(fn, "__perflsp_profile__", None)
    if d.get("setup") is not None:
        setup_spec = parse_target(d["setup"], Path(d.get("cwd") or os.getcwd()))
        check_exists(setup_spec)
        return fn, module, marker, resolve_attribute(import_target_module(setup_spec), setup_spec), "setup"
    if marker is not None and marker.setup is not None:
        return fn, module, marker, marker.setup, "marker"
    if d.get("run"):
        raise UsageError(f"{target.spec} was imported before the program started, so its calls cannot be "
                         "captured; remove the @perflsp.profile marker without setup= or pass --setup")
    raise UsageError(f"no inputs for {target.spec}: add @perflsp.profile(setup=make_inputs) to it, pass "
                     "--setup module:function, or --run \"python your_program.py\" (or set "
                     "[tool.perflsp] profile-command)")


def _check_module_target(target: TargetSpec, fn: Any, module: Any) -> None:
    """A `pkg.mod:func` target's definition is known only once imported: check it as a file
    target's is checked before the profiling process starts."""
    if target.file is not None:
        return
    source, qualname = source_file_of(fn, module), analysis.code_qualname_of(fn)
    if source is not None and qualname:
        check_exists(dataclasses.replace(target, file=source, qualname=qualname))


def _inputs_from_program(d: Dict[str, Any], target: TargetSpec) -> bool:
    """The calls to measure come from running the program (--run), not from a setup function."""
    return d.get("setup") is None and bool(d.get("run")) and not _has_marker_statically(target)


def _has_marker_statically(target: TargetSpec) -> bool:
    """Whether the target's `def` carries a `@perflsp.profile(setup=...)`-looking decorator.

    Decided from the source, because importing the module to look would load it before the
    program runs and defeat the import hook that captures real calls.
    """
    import ast

    from perflsp.profile_result import find_definition

    file = target.file
    if file is None:
        import importlib.util

        spec = importlib.util.find_spec(target.module)
        file = Path(spec.origin) if spec is not None and spec.origin else None
    if file is None:
        return False
    try:
        node = find_definition(ast.parse(file.read_text(encoding="utf-8")), target.qualname)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for decorator in getattr(node, "decorator_list", []):
        if isinstance(decorator, ast.Call) and any(k.arg == "setup" for k in decorator.keywords):
            func = decorator.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "profile":
                return True
    return False


def _profile_program(job: Job, target: TargetSpec, base: Dict[str, Any], command: str, probe: bool) -> int:
    from perflsp.runtime import program, session

    d = job.data
    if d.get("cold_cache"):
        raise UsageError("--cold-cache needs inputs from --setup or the @perflsp.profile marker: a program's real "
                         "calls bring their own inputs")
    options = job.timing_options()
    stop = bool(d.get("stop_program", True))
    base["settings"] = job.settings("run", options)
    written = {}

    def complete(ps: program.ProgramSession, stopped_early: bool = True) -> None:
        job.device = ps.device
        measured_peaks, peaks_source = _ceilings(job, ps.device)
        source = Path(ps.source_file) if ps.source_file else target.file
        target_info = analysis.target_block(target.spec, target.module, target.qualname, source,
                                            analysis.code_qualname_of(ps.function))
        notes = [CPU_CODE_NOTE] if probe and ps.device == "cpu" else []
        ctx = session.Context(device=ps.device, peaks=measured_peaks, peaks_source=peaks_source, target=target_info,
                              settings=dict(base["settings"], arguments=ps.arguments), source_file=str(source) if source else "",
                              top_lines=int(d.get("top_lines") or 10), notes=notes,
                              requested_device=d.get("device", "auto"))
        measured = session.Measurement(ps.warmup_s, ps.samples_s(), ps.timer.clock, ps.clean, ps.attribution,
                                       ps.load_before_1m, wanted_calls=ps.wanted)
        job.reporter.phase("analysis")
        job.write(session.result_from(measured, ctx, {"command": command, "calls_seen": ps.calls_seen,
                                                       "stopped_early": stopped_early and stop}))
        written["done"] = True

    recorder = _hot_recorder(d, command)
    ps = program.ProgramSession(job.device, options, job.reporter, stop, complete,
                                probe_device=probe_device if probe else None, recorder=recorder)
    program.activate(ps)
    job.reporter.phase("program", command)
    exit_status = None
    if recorder is not None:
        recorder.start()
    try:
        program.run_command(command, target, d.get("cwd") or os.getcwd())
    except StopProgram:
        return EXIT_OK
    except SystemExit as exc:
        exit_status = exc.code
    finally:
        program.activate(None)
        if recorder is not None:
            _write_hot(recorder, d["hot_record"])
    if written:
        return EXIT_OK
    if ps.can_report:
        complete(ps, stopped_early=False)
        return EXIT_OK
    ended = "ended" if exit_status in (None, 0) else f"exited with status {exit_status}"
    if ps.calls_seen == 0:
        return _fail(job, base, "not-called", f"the program {ended} without calling {target.qualname} "
                     f"({command})")
    attributed = 1 if ps.device == "cuda" else program.ATTRIBUTION_CALLS
    needed = options.warmup + attributed + 2
    return _fail(job, base, "not-called", f"the program {ended} after calling {target.qualname} {ps.calls_seen} "
                 f"times; perflsp needs at least {needed} (warm-up, {attributed} attributed, one profiled and one "
                 "timed call): run "
                 "more steps or lower --warmup")


def _hot_recorder(d: Dict[str, Any], command: str) -> Any:
    """The measured-hotness recorder for a program run, when the supervisor asked for one."""
    if not d.get("hot_record") or not d.get("workspace"):
        return None
    from perflsp.runtime.hot_record import HotRecorder

    return HotRecorder(d["workspace"], command, cwd=d.get("cwd") or os.getcwd())


def _write_hot(recorder: Any, path: str) -> None:
    recorder.stop()
    if recorder.counts:  # a program that never reached the user's code leaves the last measurement be
        write_json_atomic(path, recorder.document())


def _run_record(job: Job) -> int:
    from perflsp.runtime.record import run_record

    return run_record(job)


def main(job_path: str) -> int:
    with open(job_path, encoding="utf-8") as handle:
        data = json.load(handle)
    dump = install_stack_dump(data["stack_dump"]) if data.get("stack_dump") else None
    if data.get("cwd"):
        os.chdir(data["cwd"])
        # The user's code imports as under `python -m` run there. perflsp itself is imported by
        # now (the process started elsewhere), so a `perflsp/` folder there cannot replace it.
        sys.path.insert(0, data["cwd"])
    job = Job(data)
    try:
        code = {"peaks": run_peaks, "compile": run_compile, "record": _run_record}.get(data["command"], run_profile)(job)
    finally:
        job.reporter.close()
        if dump is not None:
            dump.flush()
    if data["command"] != "profile" or data.get("stop_program", True) or not data.get("run"):
        # The result is written. Tearing down an interpreter that imported torch takes most of
        # a second; the user's own atexit work only matters for a program run to its end.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
