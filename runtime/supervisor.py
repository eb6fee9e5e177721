"""Runs a job in a child process under a watchdog.

The child (`python -m perflsp.runtime _worker JOB`) starts a new session and, on Linux, splits
into a reaper and the worker (`reaper.py`): the reaper owns every process the job starts, even
those that leave the session, and kills them all when the worker ends, when asked to stop
(SIGTERM) and when this supervisor dies. On timeout the child gets SIGUSR1 first (the worker
dumps every thread's Python stack: where it hung), then SIGTERM, and SIGKILL for its process
group if it has not ended within STOP_WAIT_S. The supervisor imports no torch: it stays
responsive whatever the child does.

Job folders are named after their supervisor's pid (`perflsp-job-<pid>-*`): a supervisor killed
with SIGKILL cannot remove its own, so every run first removes those whose supervisor is gone.

A child killed by SIGKILL says nothing of who killed it: the kernel's out-of-memory killer, or any
process. The OOM killer leaves a mark, the `oom_kill` count of the memory cgroup its victim was in
(cgroup v2 `memory.events`, v1 `memory.oom_control`); the job runs in ours, so the count is read
before and after it (`Outcome.oom_kills`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from perflsp.runtime.channel import Tail, ensure_file

POLL_S = 0.05
STACK_DUMP_WAIT_S = 1.0
STOP_GRACE_S = 5.0  # after a complete result, how long a stopped program may take to exit
STOP_WAIT_S = 5.0  # after SIGTERM, how long the reaper may take to kill the job's processes
JOB_PREFIX = "perflsp-job-"


@dataclass
class Outcome:
    exit_code: Optional[int]  # the child's, None when killed by us
    payload: Optional[Dict[str, Any]]  # what the child wrote as its result (last written, if it timed out)
    timed_out: bool = False
    signal_number: Optional[int] = None
    phase: str = "start"
    progress: Optional[Dict[str, Any]] = None
    stack_dump: str = ""
    elapsed_s: float = 0.0
    notes: List[str] = field(default_factory=list)
    hot: Optional[Dict[str, Any]] = None  # what a program run recorded for .perflsp/hot.json
    oom_kills: Optional[int] = None  # processes the OOM killer killed in our memory cgroup while it ran (None: unknown)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(child: subprocess.Popen) -> None:
    """End the job: the reaper kills every process it owns, then exits; SIGKILL if it does not."""
    try:
        child.send_signal(signal.SIGTERM)
        child.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        _kill_group(child.pid, signal.SIGKILL)
        child.wait()


def sweep_stale_jobs() -> None:
    """Remove the job folders of supervisors that are gone (killed before they could)."""
    root = tempfile.gettempdir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        owner = entry.name[len(JOB_PREFIX):].partition("-")[0]
        if not entry.name.startswith(JOB_PREFIX) or not owner.isdigit() or _alive(int(owner)):
            continue
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if mine:
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def run_job(job: Dict[str, Any], timeout_s: float, on_message: Callable[[Dict[str, Any]], None] = lambda m: None,
            stdout: Any = None, stop_after_result: bool = True, partial_results: bool = False) -> Outcome:
    """Run `job` in a watched child; returns what happened. Never raises for the child's faults.

    `stop_after_result`: a written result is the whole measurement, so a child that goes on
    (a program run) is stopped shortly after. `partial_results`: the child writes its result in
    steps (a compile job: its graph breaks, then its timings), so only its exit completes it and
    the timeout applies whatever it wrote."""
    sweep_stale_jobs()
    folder = tempfile.mkdtemp(prefix=f"{JOB_PREFIX}{os.getpid()}-")
    try:
        paths = {name: os.path.join(folder, name)
                 for name in ("job.json", "messages.jsonl", "result.json", "stack.txt", "hot.json")}
        ensure_file(paths["messages.jsonl"])
        job = dict(job, parent_pid=os.getpid(), messages=paths["messages.jsonl"], result=paths["result.json"],
                   stack_dump=paths["stack.txt"], hot_record=paths["hot.json"])
        with open(paths["job.json"], "w", encoding="utf-8") as handle:
            json.dump(job, handle)
        return _watch(paths, timeout_s, on_message, stdout, stop_after_result, partial_results)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _watch(paths: Dict[str, str], timeout_s: float, on_message: Callable[[Dict[str, Any]], None], stdout: Any,
           stop_after_result: bool, partial_results: bool) -> Outcome:
    command = [sys.executable, "-m", "perflsp.runtime", "_worker", paths["job.json"]]
    oom_kills_before = _oom_kills()
    started = time.monotonic()
    # The user's prints go to our stderr: our stdout carries the table or the JSON result. The
    # child starts in the job's private folder: `-m` puts the current folder first on sys.path,
    # and a `perflsp/` folder in the user's project must not stand in for perflsp. It changes to
    # the job's `cwd` itself once perflsp is imported.
    child = subprocess.Popen(command, cwd=os.path.dirname(paths["job.json"]), stdin=subprocess.DEVNULL,
                             stdout=stdout if stdout is not None else _stderr_fd(), start_new_session=True)
    tail = Tail(paths["messages.jsonl"])
    outcome = Outcome(exit_code=None, payload=None)
    deadline = started + timeout_s
    result_seen_at: Optional[float] = None
    try:
        while True:
            code = child.poll()
            for message in tail.read():
                if message.get("event") == "phase":
                    outcome.phase = message.get("phase", outcome.phase)
                    outcome.progress = None
                elif message.get("event") == "progress":
                    outcome.progress = message
                on_message(message)
            if code is not None:
                outcome.exit_code = code
                break
            now = time.monotonic()
            if result_seen_at is None and not partial_results and os.path.exists(paths["result.json"]):
                result_seen_at = now
            if stop_after_result and result_seen_at is not None and now - result_seen_at > STOP_GRACE_S:
                # The result is complete but the program does not stop (it caught our
                # StopProgram): the measurement is done, so it is stopped from outside.
                _stop(child)
                outcome.notes.append("the program kept running after the measurement finished; it was stopped")
                outcome.exit_code = 0
                break
            if now >= deadline:
                if result_seen_at is not None:  # --no-stop: measured, then the program ran on
                    outcome.notes.append(f"the program was still running at the {timeout_s:g} s timeout "
                                         "after the measurement finished; it was stopped")
                    outcome.exit_code = 0
                else:
                    outcome.timed_out = True
                    outcome.stack_dump = _dump_stacks(child, paths["stack.txt"])
                _stop(child)
                break
            time.sleep(POLL_S)
    except BaseException:
        _stop(child)  # Ctrl-C or our own failure: never leave it running
        raise
    finally:
        # Without a reaper (not Linux) the process group is all there is to kill.
        _kill_group(child.pid, signal.SIGKILL)
    outcome.elapsed_s = time.monotonic() - started
    if outcome.exit_code is not None and outcome.exit_code < 0:
        outcome.signal_number = -outcome.exit_code
    oom_kills_after = _oom_kills()
    if oom_kills_before is not None and oom_kills_after is not None:
        outcome.oom_kills = oom_kills_after - oom_kills_before
    # A timed-out job may have written a partial result (a compile job writes its graph breaks
    # before compiling); a profile job writes its result only when complete.
    outcome.payload = _read_json(paths["result.json"])
    outcome.hot = _read_json(paths["hot.json"])
    return outcome


def _oom_kills() -> Optional[int]:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup so far,
    or None where no cgroup tells (not Linux, no memory controller)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            memberships = [line.rstrip("\n").split(":", 2) for line in handle if line.count(":") >= 2]
    except OSError:
        return None
    for _, controllers, path in memberships:
        if "memory" in controllers.split(","):
            counter = f"/sys/fs/cgroup/memory{path}/memory.oom_control"
        elif not controllers:  # the unified (v2) hierarchy: every controller enabled there
            counter = f"/sys/fs/cgroup{path}/memory.events"
        else:
            continue
        count = _oom_kill_count(counter)
        if count is not None:
            return count
    return None


def _oom_kill_count(path: str) -> Optional[int]:
    """The `oom_kill` line of a cgroup's `memory.events` (v2) or `memory.oom_control` (v1)."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    """What the child wrote there (atomically), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _stderr_fd() -> Optional[int]:
    """Our stderr's descriptor, or None (inherit) when stderr is not a real file (captured)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def _dump_stacks(child: subprocess.Popen, path: str) -> str:
    """Ask the child for its threads' stacks (SIGUSR1 -> faulthandler) and read them back."""
    if not hasattr(signal, "SIGUSR1"):
        return ""
    try:
        os.kill(child.pid, signal.SIGUSR1)
    except ProcessLookupError:
        return ""
    text, waited = "", 0.0
    while waited < STACK_DUMP_WAIT_S:
        time.sleep(0.1)
        waited += 0.1
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                latest = handle.read()
        except OSError:
            latest = ""
        if latest and latest == text:
            break  # written and no longer growing
        text = latest
    return text


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def hang_location(stack_dump: str, target_file: Optional[str]) -> Optional[str]:
    """'file.py:42 in step', the innermost frame of the target's file in the stack dump (or the
    innermost frame of the first thread that has none)."""
    if not stack_dump:
        return None
    frames = [m.groupdict() for m in _FRAME.finditer(stack_dump)]  # most recent call first, per thread
    if target_file:
        real = os.path.realpath(target_file)
        for frame in frames:
            if os.path.realpath(frame["file"]) == real:
                return f"{os.path.basename(frame['file'])}:{frame['line']} in {frame['func']}"
    current = stack_dump.find("Current thread")  # the thread that was running: the main one
    innermost = _FRAME.search(stack_dump, current if current >= 0 else 0)
    if innermost is not None:
        return f"{innermost['file']}:{innermost['line']} in {innermost['func']}"
    return None
