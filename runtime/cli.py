"""`perflsp profile` and `perflsp peaks` (also `python -m perflsp.runtime profile|peaks`).

This process only parses arguments, supervises the profiling process, publishes the result
atomically and prints; it never imports torch. Exit codes: 0 ok, 2 usage error, 3 the target
raised (or the profiling process crashed), 4 timeout, 5 out of memory, 6 target not found.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from perflsp import output
from perflsp.profile_result import (EXIT_GRAPH_BREAKS, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, compile_falls_short,
                                    exit_code_for, result_path, write_json_atomic)
from perflsp.safe_files import ensure_inside, write_blocker, write_problem

DEFAULT_PEAKS_TIMEOUT_S = 300.0
DEFAULT_PEAKS_BUDGET_S = 6.0  # perflsp.runtime.peaks.DEFAULT_BUDGET_S (not imported: it needs no torch here)
DEFAULT_COMPILE_TIMEOUT_S = 300.0
# Error kinds that describe an attempt to run the target: worth a result file the editor shows.
PUBLISHED_ERRORS = {"exception", "crash", "timeout", "out-of-memory", "not-called"}


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _count(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    from perflsp.runtime.compiling import MODES

    parser = argparse.ArgumentParser(prog="perflsp", description="Profile PyTorch functions against the roofline.")
    commands = parser.add_subparsers(dest="command", required=True)

    profile = commands.add_parser("profile", help="measure a function and say which ceiling binds it",
                                  description="Measure a function on the real device (CPU without CUDA): timing, "
                                              "FLOPs, bytes, syncs and kernels per source line, and a roofline verdict.")
    profile.add_argument("target", help="path/to/file.py:func, file.py:Class.method or pkg.mod:func")
    profile.add_argument("--cwd", metavar="DIR",
                         help="run the target and its program in DIR, and read relative paths from there "
                              "(default: the current folder; lets an editor start perflsp outside the project)")
    inputs = profile.add_argument_group("inputs (first found wins: --setup, the @perflsp.profile marker, --run)")
    inputs.add_argument("--setup", metavar="SPEC", help="function returning the call's arguments (file.py:fn or mod:fn)")
    inputs.add_argument("--run", metavar="CMD", help="run this program and measure its real calls of the target "
                                                      "(default: [tool.perflsp] profile-command)")
    inputs.add_argument("--no-stop", action="store_true", help="let the program run on after the measurement")
    measure = profile.add_argument_group("measurement")
    measure.add_argument("--warmup", type=_count(0), metavar="N",
                         help="minimum warm-up calls (default: the marker's, else 3; more run until stable)")
    measure.add_argument("--iters", type=_count(1), metavar="N",
                         help="timed calls (default: the marker's, else enough for --min-time, at least 10)")
    measure.add_argument("--min-time", type=_positive_float, default=1.0, metavar="S",
                         help="time the function for about this long (default 1 s)")
    measure.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                         help="auto: CUDA if there is one and the function's tensors are on it, else CPU")
    measure.add_argument("--timeout", type=_positive_float, metavar="S",
                         help="kill the run after this long (default: [tool.perflsp] profile-timeout, 300 s)")
    measure.add_argument("--refresh-peaks", action="store_true", help="re-measure the device ceilings first")
    measure.add_argument("--cold-cache", action="store_true",
                         help="give each call the next of enough copies of its inputs that they come from main "
                              "memory, not from a cache (setup or marker inputs only)")
    compiled = profile.add_argument_group("torch.compile")
    compiled.add_argument("--compile", action="store_true",
                          help="also run the function under torch.compile: eager and compiled medians, speedup, "
                               "compile time, graph breaks on their lines, recompilations")
    compiled.add_argument("--compile-mode", choices=MODES, metavar="MODE",
                          help="torch.compile mode, implies --compile: default, reduce-overhead (CUDA graphs; the "
                               "default mode on a CPU) or max-autotune")
    compiled.add_argument("--compile-timeout", type=_positive_float, default=DEFAULT_COMPILE_TIMEOUT_S, metavar="S",
                          help="stop compiling after this long; the eager profile stands (default %(default)g)")
    compiled.add_argument("--graph-breaks", action="store_true",
                          help="only find the graph breaks (torch._dynamo.explain, about a second): no profile, "
                               "no compile, nothing written to .perflsp/")
    compiled.add_argument("--fail-on-break", action="store_true",
                          help="exit with status 1 when torch.compile breaks the graph (for CI; with --compile or "
                               "--graph-breaks)")
    output = profile.add_argument_group("output")
    output.add_argument("--json", metavar="PATH", help="also write the result here ('-': print it instead of the table)")
    output.add_argument("--plot", metavar="PATH", help="roofline plot: .png/.svg/.pdf (matplotlib: the plot extra) or "
                                                        ".html (self-contained)")
    output.add_argument("--top", type=_count(1), default=10, metavar="N",
                        help="source lines to keep in the result (default 10)")
    output.add_argument("--workspace", metavar="DIR", help="where .perflsp/ lives (default: the config file's folder)")
    output.add_argument("--progress", choices=("auto", "bar", "json", "none"), default="auto",
                        help="progress on stderr (auto: a bar on a terminal)")
    output.add_argument("--progress-fd", type=_count(0), metavar="N",
                        help="write the progress as JSON lines to file descriptor N instead, never mixed with "
                             "the profiled program's output (for editors)")

    peaks = commands.add_parser("peaks", help="measure (and cache) the device's bandwidth and matmul ceilings")
    peaks.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                       help="auto: CUDA if there is one, else CPU")
    peaks.add_argument("--budget", type=_positive_float, default=DEFAULT_PEAKS_BUDGET_S, metavar="S",
                       help="at most this many seconds of measuring; each figure stops earlier once it has "
                            "converged (default %(default)g)")
    peaks.add_argument("--cached", action="store_true", help="show the cached ceilings without measuring")
    peaks.add_argument("--json", metavar="PATH", help="also write the ceilings here ('-': print them instead)")
    peaks.add_argument("--timeout", type=_positive_float, default=DEFAULT_PEAKS_TIMEOUT_S, metavar="S")
    peaks.add_argument("--progress", choices=("auto", "bar", "json", "none"), default="auto")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_worker"]:  # the profiling process (see supervisor.py); not for users
        from perflsp.runtime import reaper

        reaper.split(argv[1])  # the reaper stays behind; the worker goes on
        from perflsp.runtime import worker

        return worker.main(argv[1])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "profile":
            return profile_command(args)
        return peaks_command(args)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except output.OutputError as exc:  # `perflsp profile ... | head -1`, `> /dev/full`
        return output.failed(exc)


def _error(message: str) -> int:
    print(f"perflsp: {message}", file=sys.stderr)
    return EXIT_USAGE


def profile_command(args: argparse.Namespace) -> int:
    from perflsp.config import ConfigError, settings_for
    from perflsp.runtime import analysis, program, supervisor
    from perflsp.runtime.targets import SpecSyntaxError, TargetError, UsageError, check_exists, parse_target
    from perflsp.runtime.timing import TimingOptions

    cwd = Path(args.cwd).resolve() if args.cwd else Path.cwd()
    if not cwd.is_dir():
        return _error(f"--cwd: no such folder: {cwd}")
    problem = (_output_problem("--json", args.json) or _output_problem("--plot", args.plot)
               or (_plot_problem(args.plot) if args.plot else None))
    if problem is not None:  # say so now, not after the whole measurement
        return _error(problem)
    try:
        target = parse_target(args.target, cwd)
    except SpecSyntaxError as exc:
        return _error(str(exc))
    try:
        settings = settings_for(target.file if target.file is not None else cwd)
    except ConfigError as exc:
        return _error(str(exc))
    workspace = Path(args.workspace).resolve() if args.workspace else Path(settings.root) if settings.source else cwd
    run_command = args.run if args.run is not None else settings.profile_command
    timeout_s = args.timeout or settings.profile_timeout
    compile_mode = args.compile_mode or ("default" if args.compile or args.graph_breaks else None)
    if args.fail_on_break and compile_mode is None:
        return _error("--fail-on-break needs --compile or --graph-breaks")
    timing = TimingOptions(min_time_s=args.min_time)
    if args.warmup is not None:
        timing.warmup = args.warmup
    if args.iters is not None:
        timing.iters = args.iters
    base = analysis.new_result(
        analysis.target_block(target.spec, target.module, target.qualname, target.file),
        analysis.settings_block(inputs=None, setup=args.setup, run_command=run_command, stop_program=not args.no_stop,
                                timing=timing, timeout_s=timeout_s, device=args.device, cold_cache=args.cold_cache))

    try:  # a missing file or name, or an unusable --run, needs no child process: answer at once
        check_exists(target)
        if args.run is not None:
            program.parse_command(args.run)
    except TargetError as exc:
        result = analysis.with_error(base, analysis.error_block("target-not-found", str(exc), phase="import",
                                                                defined=exc.defined))
        return _finish(args, result, workspace)
    except UsageError as exc:
        return _finish(args, analysis.with_error(base, analysis.error_block("usage", str(exc), phase="start")), workspace)

    try:
        progress = _progress(args)
    except OSError as exc:
        return _error(f"--progress-fd {args.progress_fd}: {exc}")
    job = {
        "command": "profile", "target": args.target, "cwd": str(cwd), "setup": args.setup, "run": run_command,
        "stop_program": not args.no_stop, "warmup": args.warmup, "iters": args.iters, "min_time_s": args.min_time,
        "timeout_s": timeout_s, "device": args.device, "refresh_peaks": args.refresh_peaks, "top_lines": args.top,
        "cold_cache": args.cold_cache,
        "workspace": str(workspace),
    }
    try:
        if args.graph_breaks:
            block = _compile_block(job, args.device, compile_mode, args.compile_timeout, progress, explain_only=True)
        else:
            outcome = supervisor.run_job(job, timeout_s, on_message=progress, stop_after_result=not args.no_stop)
            result = outcome.payload if outcome.payload is not None else _failed_run(base, outcome, timeout_s, target)
            if result["status"] == "ok" and compile_mode is not None:
                result["compile"] = _compile_block(dict(job, cold_levels=result["ceilings"]["levels"]),
                                                   result["device"]["kind"], compile_mode, args.compile_timeout,
                                                   progress)
                _cross_check(result)
    finally:
        progress.finish()
    if args.graph_breaks:
        return _finish_graph_breaks(args, base["target"], block)
    if result["status"] == "ok" and outcome.notes:
        result["verdict"]["notes"].extend(outcome.notes)
    code = _finish(args, result, workspace)
    _publish_hot(args, outcome.hot, workspace)
    if code == EXIT_OK and args.fail_on_break and compile_falls_short(result["compile"]):  # status ok: it ran
        return EXIT_GRAPH_BREAKS
    return code


def _cross_check(result: Dict[str, Any]) -> None:
    """A note in the compile block when its eager calls and the eager profile's disagree."""
    from perflsp.runtime import compile_windows

    note = compile_windows.disagreement_note(result["timing"], result["compile"],
                                             (result.get("environment") or {}).get("load_average_1m"))
    if note:
        result["compile"]["notes"].append(note)


def _compile_block(job: Dict[str, Any], device: str, mode: str, timeout_s: float, progress: Any,
                   explain_only: bool = False) -> Dict[str, Any]:
    """The `compile` block, from a profiling process of its own under its own timeout (see
    runtime/compiling.py); whatever happens to it is said in the block's `error`."""
    from perflsp.runtime import compiling, supervisor

    compile_job = dict(job, command="compile", device=device, compile_mode=mode, explain_only=explain_only)
    outcome = supervisor.run_job(compile_job, timeout_s, on_message=progress, partial_results=True)
    block = (outcome.payload or {}).get("compile") or compiling.new_block(mode, device, explain_only)
    if outcome.timed_out:
        block["error"] = {"kind": "timeout", "message": f"torch.compile timed out after {timeout_s:g} s during "
                                                        f"{outcome.phase} (--compile-timeout)"}
    elif outcome.exit_code != EXIT_OK:
        block["error"] = {"kind": "crash", "message": f"the compiling process ended with status {outcome.exit_code} "
                                                      f"during {outcome.phase} (its output is above)"}
    return block


def _finish_graph_breaks(args: argparse.Namespace, target: Dict[str, Any], block: Dict[str, Any]) -> int:
    """`--graph-breaks`: the breaks only (JSON: `{"target": ..., "compile": ...}`), nothing saved."""
    from perflsp.runtime import report

    document = {"target": target, "compile": block}
    if args.json and args.json != "-" and not _write_output(
            "--json", args.json, lambda: write_json_atomic(args.json, document)):
        return EXIT_USAGE
    if args.json == "-":
        output.write(json.dumps(document, indent=2) + "\n")
    else:
        output.write(report.render_graph_breaks(target, block))
    if block["error"] is not None:  # the profile's exit codes; a missing facility is the environment's, as usage
        return EXIT_USAGE if block["error"]["kind"] == "unavailable" else exit_code_for(block["error"]["kind"])
    return EXIT_GRAPH_BREAKS if args.fail_on_break and compile_falls_short(block) else EXIT_OK


def _progress(args: argparse.Namespace) -> Any:
    from perflsp.runtime import report

    if args.progress_fd is None:
        return report.Progress(args.progress)
    return report.Progress("json", os.fdopen(args.progress_fd, "w", encoding="utf-8"))


def _publish_hot(args: argparse.Namespace, document: Optional[Dict[str, Any]], workspace: Path) -> None:
    """What the program run recorded about its functions: `.perflsp/hot.json`, for the static rules."""
    from perflsp.hot_file import hot_path
    from perflsp.runtime import report

    if document is None:
        return
    try:
        written = write_json_atomic(hot_path(workspace), document, inside=workspace)
    except OSError as exc:
        print(f"perflsp: warning: the recorded run is not saved: {write_problem(hot_path(workspace), exc)}",
              file=sys.stderr)
        return
    if args.json != "-":
        output.write(report.hot_row(document, str(written)) + "\n")


def _output_problem(option: str, path: Optional[str]) -> Optional[str]:
    """Why the file `option` names could not be written (None: it can, or there is none)."""
    blocker = write_blocker(path) if path and path != "-" else None
    return f"{option} {path}: cannot write there: {blocker}" if blocker else None


def _write_output(option: str, path: str, write: Callable[[], Any]) -> bool:
    """Write the file `option` names; False, with one line saying why, when that fails (the place
    was checked before measuring, but can change while the measurement runs)."""
    try:
        write()
    except OSError as exc:
        print(f"perflsp: {option} {path}: cannot write there: {write_problem(path, exc)}", file=sys.stderr)
        return False
    return True


def _plot_problem(path: str) -> Optional[str]:
    """Why `--plot path` could not be written (None: it can). Images need matplotlib."""
    suffix = Path(path).suffix.lower()
    if suffix in (".html", ".htm"):
        return None
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return (f"--plot {path}: image plots need matplotlib, which {sys.executable} cannot import; install it "
                f"({sys.executable} -m pip install matplotlib), or write --plot roofline.html, which needs nothing")
    if suffix.lstrip(".") not in FigureCanvasBase.get_supported_filetypes():
        return (f"--plot {path}: matplotlib cannot write {suffix or 'a file without an extension'}; "
                "use .png, .svg, .pdf or .html")
    return None


def _failed_run(base: Dict[str, Any], outcome: Any, timeout_s: float, target: Any) -> Dict[str, Any]:
    """The result when the profiling process left none: it hung, or it died."""
    from perflsp.runtime import analysis, reaper, supervisor

    progress = ""
    if outcome.progress and outcome.progress.get("done") is not None:
        total = outcome.progress.get("total")
        progress = f" ({outcome.progress['done']}/{total} calls)" if total else f" ({outcome.progress['done']} calls)"
    if outcome.timed_out:
        where = supervisor.hang_location(outcome.stack_dump, str(target.file) if target.file else None)
        message = (f"timed out after {timeout_s:g} s during {outcome.phase}{progress}; the profiling process and "
                   f"everything it started were killed" + (f"; it was at {where}" if where else ""))
        error = analysis.error_block("timeout", message, phase=outcome.phase,
                                     traceback=outcome.stack_dump.strip() or None)
    elif outcome.signal_number == signal.SIGKILL and outcome.oom_kills:
        error = analysis.error_block("out-of-memory", f"the profiling process was killed by the system's "
                                     f"out-of-memory killer during {outcome.phase}{progress} (the OOM kill count of "
                                     f"its memory cgroup rose by {outcome.oom_kills})", phase=outcome.phase)
    elif outcome.signal_number == signal.SIGKILL:  # who sent it leaves no trace: say both
        error = analysis.error_block("crash", f"the profiling process was killed by SIGKILL during {outcome.phase}"
                                     f"{progress} (by another process or the system's out-of-memory killer)",
                                     phase=outcome.phase)
    elif outcome.signal_number in reaper.STOP_SIGNALS:  # sent by someone else: ours are the timeout's, handled above
        error = analysis.error_block("crash", f"the profiling process was stopped by {_signal_name(outcome.signal_number)} "
                                     f"from another process during {outcome.phase}{progress}; perflsp killed every "
                                     f"process of the job", phase=outcome.phase)
    elif outcome.signal_number:
        error = analysis.error_block("crash", f"the profiling process died with {_signal_name(outcome.signal_number)} "
                                     f"during {outcome.phase}{progress}", phase=outcome.phase)
    else:
        error = analysis.error_block("crash", f"the profiling process exited with status {outcome.exit_code} during "
                                     f"{outcome.phase} without a result (its output is above)", phase=outcome.phase)
    return analysis.with_error(base, error)


def _signal_name(number: int) -> str:
    return signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)


def _finish(args: argparse.Namespace, result: Dict[str, Any], workspace: Path) -> int:
    from perflsp.runtime import report

    error = result.get("error")
    code = EXIT_OK if result["status"] == "ok" else exit_code_for(error["kind"])
    written: Optional[Path] = None
    previous: Optional[Dict[str, Any]] = None
    if result["status"] == "ok" or error["kind"] in PUBLISHED_ERRORS:
        path = result_path(workspace, result["target"]["module"], result["target"]["qualname"])
        try:
            written, previous = _publish(result, path, workspace)
        except OSError as exc:  # the measurement still counts: printed, and in --json
            print(f"perflsp: warning: the result is not saved in the workspace: {write_problem(path, exc)}",
                  file=sys.stderr)
    outputs_written = True
    if args.json and args.json != "-":
        outputs_written = _write_output("--json", args.json, lambda: write_json_atomic(args.json, result))
    if args.json == "-":
        output.write(json.dumps(result, indent=2) + "\n")
    else:
        output.write(report.render_result(result, str(written) if written else None))
    if args.plot:
        if result["status"] != "ok":
            print("perflsp: no plot: the profile failed", file=sys.stderr)
        else:
            from perflsp.runtime import plot

            if _write_output("--plot", args.plot, lambda: plot.write(result, args.plot, previous)):
                if args.json != "-":
                    output.write(f"{'plot':<10} {args.plot}\n")
            else:
                outputs_written = False
    return code if outputs_written else EXIT_USAGE


def _publish(result: Dict[str, Any], path: Path, workspace: Path) -> Tuple[Path, Optional[Dict[str, Any]]]:
    """Compare a successful result with the function's previous one, then write the result file
    and add it to the function's history (`perflsp.profile_history`). Returns the file written and
    the previous successful result (None: none), which the plot shows too."""
    from perflsp import comparison, profile_history
    from perflsp.runtime import analysis

    ensure_inside(path, workspace)
    history = profile_history.load(profile_history.history_path(path), workspace)
    previous = None
    if result["status"] == "ok":
        if not history.results:  # a result from before histories were kept starts the history
            older = analysis.read_previous(path)
            if older is not None and older.get("status") == "ok":
                history.results.append(older)
        previous = history.previous
        result["comparison"] = comparison.compare(result, previous)
        analysis.note_ceilings_change(result, previous)
    written = write_json_atomic(path, result, inside=workspace)
    if result["status"] == "ok":
        try:
            history.append(result)
        except OSError as exc:
            history.warning = f"could not write the profile history {history.path}: {exc}"
    if history.warning:
        print(f"perflsp: warning: {history.warning}", file=sys.stderr)
    return written, previous


def peaks_command(args: argparse.Namespace) -> int:
    from perflsp.runtime import report, supervisor

    problem = _output_problem("--json", args.json)
    if problem is not None:
        return _error(problem)
    progress = report.Progress(args.progress)
    job = {"command": "peaks", "device": args.device, "budget_s": args.budget, "cached_only": args.cached,
           "cwd": str(Path.cwd())}
    try:
        outcome = supervisor.run_job(job, args.timeout, on_message=progress)
    finally:
        progress.finish()
    if outcome.timed_out:
        print(f"perflsp: peaks timed out after {args.timeout:g} s during {outcome.phase}", file=sys.stderr)
        return EXIT_TIMEOUT
    payload = outcome.payload
    if payload is None:
        print(f"perflsp: the measuring process exited with status {outcome.exit_code} without a result", file=sys.stderr)
        return outcome.exit_code or 3
    if "error" in payload:
        return _error(payload["error"])
    if args.json and args.json != "-" and not _write_output(
            "--json", args.json, lambda: write_json_atomic(args.json, payload["peaks"])):
        return EXIT_USAGE
    if args.json == "-":
        output.write(json.dumps(payload["peaks"], indent=2) + "\n")
    else:
        output.write(report.render_peaks(payload))
    return EXIT_OK
