"""`perflsp record [--steps N] -- python train.py ...`: confirm or refute the findings with a short run.

This process finds the static candidates (every rule, preview included, as `check --preview`
would), hands their lines to the recording process (`perflsp.runtime.record`, under the same
supervisor, timeout, reaper and cancel as `profile --run`), and publishes what it recorded as
`<workspace>/.perflsp/evidence.json` (`docs/evidence-json.md`), atomically. It never imports
torch: the program runs in the child. Exit codes as `perflsp profile`: 0 ok, 2 usage error,
3 the program raised (what ran until then is still published), 4 timeout.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from perflsp import output
from perflsp.evidence_file import evidence_path
from perflsp.hot_file import MIN_STEPS
from perflsp.profile_result import EXIT_OK, EXIT_TARGET_RAISED, EXIT_TIMEOUT, EXIT_USAGE, write_json_atomic

DEFAULT_STEPS = 5
DEFAULT_WARMUP = 2


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perflsp record",
        description="Run the program for a few steps and record, on each line that holds a finding, how often it ran "
                    "per step, on which tensors, and which host reads and host-to-device copies it made. "
                    "`perflsp check` and the language server then confirm or refute the findings from it.")
    parser.add_argument("--steps", type=_positive, default=DEFAULT_STEPS, metavar="N",
                        help="steps to record after the warm-up (default %(default)s)")
    parser.add_argument("--warmup", type=_positive, default=DEFAULT_WARMUP, metavar="N",
                        help="steps before recording starts (default %(default)s)")
    parser.add_argument("--step-function", metavar="SPEC",
                        help="for inference: a step is one call of this function (file.py:func); default: "
                             "[tool.perflsp] record-step-function, else one optimizer.step()")
    parser.add_argument("--workspace", metavar="DIR",
                        help="where .perflsp/ lives and whose files are recorded (default: the config file's folder)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="stop the program after this long (default: [tool.perflsp] profile-timeout)")
    parser.add_argument("--cwd", metavar="DIR",
                        help="run the program in DIR and read the configuration from there (default: the current "
                             "folder; lets an editor start perflsp outside the project)")
    parser.add_argument("--progress", choices=("auto", "bar", "json", "none"), default="auto")
    parser.add_argument("--progress-fd", type=int, metavar="N",
                        help="write the progress as JSON lines to file descriptor N instead (for editors)")
    parser.add_argument("--json", metavar="PATH", help="also write the evidence here ('-': print it instead)")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- python train.py ARGS...")
    return parser


def main(argv: Sequence[str]) -> int:
    from perflsp.config import ConfigError, settings_for
    from perflsp.runtime import program, supervisor
    from perflsp.runtime.targets import UsageError

    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    words = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not words:
        return _error("record needs the program to run: perflsp record -- python train.py")
    command = shlex.join(words)
    cwd = Path(args.cwd).resolve() if args.cwd else Path.cwd()
    if not cwd.is_dir():
        return _error(f"--cwd: no such folder: {cwd}")
    try:
        kind, name, _ = program.parse_command(command, program.RECORDED)
        settings = settings_for(cwd)
    except (UsageError, ConfigError) as exc:
        return _error(str(exc))
    if kind == "script" and not (cwd / name).is_file():  # before the workspace is read for candidates
        return _error(f"{program.RECORDED}: no such script {cwd / name}")
    workspace = Path(args.workspace).resolve() if args.workspace else Path(settings.root) if settings.source else cwd
    try:
        progress = _progress(args.progress, args.progress_fd)
    except OSError as exc:
        return _error(f"--progress-fd {args.progress_fd}: {exc}")
    progress({"event": "phase", "phase": "finding the lines to record", "detail": str(workspace)})
    try:
        candidates = static_candidates(workspace)
    except ConfigError as exc:  # a configuration inside the workspace, as `perflsp check` would say
        progress.finish()
        return _error(str(exc))
    job = {"command": "record", "run": command, "cwd": str(cwd), "workspace": str(workspace),
           "candidates": candidates, "steps": args.steps, "warmup": args.warmup,
           "step_function": args.step_function or settings.record_step_function}
    timeout_s = args.timeout or settings.profile_timeout
    try:
        outcome = supervisor.run_job(job, timeout_s, on_message=progress)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        progress.finish()
    if outcome.timed_out:
        print(f"perflsp: record timed out after {timeout_s:g} s during {outcome.phase}; nothing was saved "
              f"(lower --steps or raise --timeout)", file=sys.stderr)
        return EXIT_TIMEOUT
    payload = outcome.payload or {}
    evidence, error = payload.get("evidence"), payload.get("error")
    if error is not None:
        print(f"perflsp: {error['message']}", file=sys.stderr)
        if error.get("traceback"):
            print(error["traceback"], file=sys.stderr, end="")
        if error["kind"] == "usage":
            return EXIT_USAGE
    if evidence is None:
        print(f"perflsp: the recording process exited with status {outcome.exit_code} without a record",
              file=sys.stderr)
        return EXIT_TARGET_RAISED
    return _publish(args, evidence, workspace, EXIT_TARGET_RAISED if error else EXIT_OK)


def static_candidates(workspace: Path) -> List[Tuple[str, int]]:
    """(file relative to the workspace, line) of every finding of every tier in the workspace."""
    from perflsp.rules import runner

    files = runner.discover([str(workspace)])
    # The workspace's check cache, as `perflsp check` run there keeps it: a record of an unchanged
    # project re-reads its findings instead of parsing every file.
    cache = runner.Cache(workspace / ".perflsp_cache", warn=lambda message: None)
    results = runner.check_paths(files, {"preview": True}, cache=cache, recorded=False)
    found = set()
    for result in results:
        for finding in result.findings:
            try:
                relative = Path(finding.filename).resolve().relative_to(workspace).as_posix()
            except ValueError:
                continue
            if finding.cell is None and finding.code != "PFL000":
                found.add((relative, finding.start.row))
    return sorted(found)


def _publish(args: argparse.Namespace, evidence: Dict[str, Any], workspace: Path, code: int) -> int:
    path = evidence_path(workspace)
    try:
        write_json_atomic(path, evidence, inside=workspace)
    except OSError as exc:
        print(f"perflsp: error: the record is not saved: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json == "-":
        output.write(json.dumps(evidence, indent=2) + "\n")
        return code
    if args.json:
        write_json_atomic(args.json, evidence)
    output.write(summary(evidence, path) + "\n")
    return code


def summary(evidence: Dict[str, Any], path: Path) -> str:
    """Three lines: what ran, what it saw, where it is saved."""
    lines = evidence["lines"]
    steps = evidence["steps"]
    per_step = [entry for entry in lines if steps and entry["steps"] == steps]
    reads = [entry for entry in lines if entry["host_reads"] and entry["host_read_steps"] == steps and steps]
    copies = [entry for entry in lines if entry["h2d_copies"] and entry["h2d_steps"] == steps and steps]
    ended = "" if evidence["ended"] == "stopped" else f" (the program {evidence['ended']})"
    step_time = f", {evidence['step_ms']:g} ms a step while recorded" if evidence.get("step_ms") else ""
    hint = ""
    if steps < MIN_STEPS:
        unit = "optimizer.step() calls" if evidence["step_source"] == "optimizer.step" else "calls of the step function"
        hint = (f"\nnote      too few {unit} to judge any finding (at least {MIN_STEPS} after the warm-up): run the "
                f"program longer" + (", or name the step with --step-function FILE:FUNC for inference"
                                      if evidence["step_source"] == "optimizer.step" else ""))
    return (f"recorded  {steps} steps ({evidence['step_source']}) after {evidence['warmup_steps']} of warm-up"
            f"{step_time}{ended}{hint}\n"
            f"lines     {len(lines)} recorded, {len(per_step)} ran on every step; host reads of device-bound "
            f"tensors on {len(reads)}, host-to-device copies on {len(copies)}\n"
            f"saved     {path}")


def refuted_listing(refuted: List[Any]) -> str:
    """`check --show-refuted`: the findings the record refuted, one a line, and why."""
    if not refuted:
        return "No finding was refuted by a recorded run.\n"
    rows = [f"{f.filename}:{f.start.row}:{f.start.column + 1}: {f.code} {f.message}" for f in refuted]
    return f"Refuted by the recorded run ({len(refuted)}, not reported):\n" + "\n".join(rows) + "\n"


def _progress(mode: str, fd: Optional[int]) -> Any:
    from perflsp.runtime import report

    if fd is None:
        return report.Progress(mode)
    return report.Progress("json", os.fdopen(fd, "w", encoding="utf-8"))


def _error(message: str) -> int:
    print(f"perflsp: {message}", file=sys.stderr)
    return EXIT_USAGE
