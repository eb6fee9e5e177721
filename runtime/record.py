"""`perflsp record`: run the user's program for a few steps and record what its lines did.

Runs in the profiling process (`worker.py` hands it the job), under the supervisor's timeout and
reaper like `profile --run`. The program runs in this interpreter (`program.run_command`) with
three recorders on: line counts for the lines that hold a static candidate (`line_record`), the
torch-function mode that marks tensors bound for the compute device and counts host reads and
host-to-device copies per line (`host_reads`), and on CUDA the sync-debug warnings
(`cuda_syncs`). Steps are `Optimizer.step()` calls of the program's first optimizer (torch's
global post-hook), or calls of a configured function for inference. After `warmup` steps the
recorders are armed; after `steps` more the document is written as the job's result and the
program is stopped. The supervisor publishes it as `<workspace>/.perflsp/evidence.json`.
"""
from __future__ import annotations

import linecache
import os
import time
import traceback
import weakref
from pathlib import Path
from typing import Any, Dict, List, Optional

from perflsp.evidence_file import EVIDENCE_VERSION, Statement, statements
from perflsp.profile_result import EXIT_OK, write_json_atomic
from perflsp.runtime import program
from perflsp.runtime.hot_record import WorkspaceFiles
from perflsp.runtime.line_record import Line, LineRecorder

MAX_OPERANDS = 4  # distinct (device, bound, dtype) per line: a line sees a few kinds of tensor


class RecordSession:
    """Counts step boundaries; arms the recorders after the warm-up and stops after the steps."""

    def __init__(self, job: Dict[str, Any]):
        from perflsp.runtime.cuda_syncs import SyncWatch
        from perflsp.runtime.host_reads import HostReadMode

        self.job = job
        self.workspace = job["workspace"]
        self.files = WorkspaceFiles(self.workspace, job.get("cwd") or os.getcwd())
        candidates = [(path, int(line)) for path, line in job.get("candidates", [])]
        self.lines = LineRecorder(candidates, self.files.relative_path)
        self.mode = HostReadMode(self.files.relative_path, candidates, self.lines.counts)
        self.syncs = SyncWatch(self.mode)
        self.warmup = int(job.get("warmup", 2))
        self.wanted = int(job.get("steps", 5))
        self.boundaries = 0
        self.recorded = 0
        self.step_source = "function" if job.get("step_function") else "optimizer.step"
        self.finished = True  # for `program.capture`: the step function runs unmeasured
        self._stepper: Optional[weakref.ref] = None
        self._step_started = 0.0
        self.step_s: List[float] = []

    # --- step boundaries ------------------------------------------------------------------------

    def optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        first = self._stepper() if self._stepper is not None else None
        if first is None:
            self._stepper = weakref.ref(optimizer)
        elif first is not optimizer:
            return  # a second optimizer (a GAN's) steps within the same step
        self.boundary()

    def target_called(self) -> None:
        """`program.capture`: the configured step function was called."""
        self.boundary()

    def boundary(self) -> None:
        self.boundaries += 1
        now = time.perf_counter()
        if self.boundaries == self.warmup:
            self.lines.counts.end_setup()
            self.mode.tally.forget_step()
            self.mode.armed = True
            self.syncs.arm()
        elif self.boundaries > self.warmup:
            self.lines.counts.end_step()
            self.mode.end_step()
            self.recorded += 1
            self.step_s.append(now - self._step_started)
            self.job["reporter"].progress(self.recorded, self.wanted, unit="steps", force=True)  # a few, far apart
            if self.recorded >= self.wanted:
                raise program.StopProgram()
        self._step_started = now

    # --- the document ---------------------------------------------------------------------------

    def document(self, command: str, ended: str) -> Dict[str, Any]:
        counts, tally = self.lines.counts, self.mode.tally
        # Every candidate line, and the lines that read a bound tensor or copied to the device.
        keys = set(self.mode.candidates)
        keys |= {line for line, counter in tally.totals if counter.startswith("read:") or counter in ("h2d", "sync")}
        in_statement = {path: _statement_rows(os.path.join(self.files.root, path)) for path in {p for p, _ in keys}}
        entries = [self._entry(line, in_statement[line[0]].get(line[1])) for line in sorted(keys)]
        return {
            "version": EVIDENCE_VERSION,
            "steps": self.recorded,
            "warmup_steps": self.warmup,
            "step_source": self.step_source,
            "command": command,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "recorder": self.lines.method,
            "ended": ended,
            "accelerator": _accelerator(),
            "step_ms": round(_median(self.step_s) * 1e3, 3) if self.step_s else None,
            "lines": [entry for entry in entries if entry is not None],
        }

    def _entry(self, line: Line, statement: Optional[Statement]) -> Optional[Dict[str, Any]]:
        if statement is None:
            return None  # evidence applies through a statement: without one it never would
        path, number = line
        counts, tally = self.lines.counts, self.mode.tally
        reads = {counter[5:]: int(amount) for (at, counter), amount in tally.totals.items()
                 if at == line and counter.startswith("read:")}
        read_steps = max((tally.steps_seen[(at, c)] for (at, c) in tally.totals if at == line and c.startswith("read:")),
                         default=0)
        operands = sorted(self.mode.operands.get(line, {}).items(), key=lambda item: (not item[0][1], item[0]))
        return {
            "file": path,
            "line": number,
            "statement": statement.fingerprint,
            "offset": number - statement.first,
            "candidate": line in self.mode.candidates,
            "setup_runs": counts.setup.get(line, 0),
            "runs": counts.runs.get(line, 0),
            "steps": counts.steps_ran.get(line, 0),
            "tensor_ops": int(tally.totals.get((line, "tensor-op"), 0)),
            "operands": [{"device": device, "bound": bound, "dtype": dtype, "numel": numel}
                         for (device, bound, dtype), numel in operands[:MAX_OPERANDS]],
            "host_reads": reads,
            "host_read_steps": read_steps,
            "host_reads_of_host_tensors": int(tally.totals.get((line, "host-read"), 0)),
            "h2d_copies": int(tally.totals.get((line, "h2d"), 0)),
            "h2d_steps": tally.steps_seen.get((line, "h2d"), 0),
            "syncs": int(tally.totals.get((line, "sync"), 0)),
            "stall_us": round(tally.totals.get((line, "stall_us"), 0.0), 1),
        }


def _statement_rows(filename: str) -> Dict[int, Statement]:
    """Row -> the statement that holds it, in the file's text as the run ends (linecache's copy when
    something in the run read it, else the file, which ran moments ago); empty when the file
    cannot be read or does not tokenize."""
    found = statements("".join(linecache.getlines(filename))) or []
    return {row: statement for statement in found for row in range(statement.first, statement.last + 1)}


def _accelerator() -> Optional[str]:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def run_record(job: Any) -> int:
    """The `record` job: run the program, write the evidence as the job's result."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from perflsp.runtime.host_reads import QuietOptimizer
    from perflsp.runtime.targets import UsageError, parse_target

    d = job.data
    command = d["run"]
    session = RecordSession(dict(d, reporter=job.reporter))
    cwd = d.get("cwd") or os.getcwd()
    target = parse_target(d["step_function"], Path(cwd)) if d.get("step_function") else None
    quiet = QuietOptimizer().install()  # before the step counter's post-hook, which may stop the program
    handle = register_optimizer_step_post_hook(session.optimizer_stepped) if target is None else None
    program.activate(session if target is not None else None)  # type: ignore[arg-type]
    job.reporter.phase("program", command)
    ended, error = "stopped", None
    session.lines.start()
    # A forked child (a DataLoader worker) would count into a copy nobody reads: spare it the cost.
    os.register_at_fork(after_in_child=session.lines.stop)
    try:
        with session.mode, session.syncs:
            program.run_command(command, target, cwd, program.RECORDED)
        ended = "finished"
    except program.StopProgram:
        pass
    except SystemExit as exc:
        ended = "finished" if exc.code in (None, 0) else f"exited with status {exc.code}"
    except UsageError as exc:
        error = {"kind": "usage", "message": str(exc)}
    except Exception as exc:  # the user's program raised: what ran until then is still evidence
        ended = "raised"
        error = {"kind": "exception", "message": f"{type(exc).__name__}: {exc}",
                 "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}
    finally:
        session.lines.stop()
        program.activate(None)
        if handle is not None:
            handle.remove()
        quiet.remove()
    write_json_atomic(d["result"], {"evidence": session.document(command, ended), "error": error})
    return EXIT_OK
