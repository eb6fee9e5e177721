"""The profiling process starts as a reaper that owns every process the job starts.

`python -m perflsp.runtime _worker JOB` calls `split()` first thing, before anything heavy is
imported. On Linux it becomes a *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`: orphans of
its tree are re-parented to it instead of to init, so no descendant can leave the tree, not
even one started with `start_new_session=True`) and forks:

- the child returns from `split()` and runs the job (worker.py). It dies with the reaper
  (`PR_SET_PDEATHSIG` = SIGKILL).
- the parent stays tiny and never returns: it waits for the worker, passes SIGUSR1 on to it (the
  supervisor's request for a stack dump), and when the worker has exited, or the supervisor asks
  it to stop (SIGTERM, SIGINT, SIGHUP), or the supervisor dies (its own `PR_SET_PDEATHSIG` =
  SIGTERM, so even `kill -9` of the supervisor), it kills every process below it, waits for
  them, and exits as the worker did; when it killed the worker itself, it ends by the signal it
  was asked to stop with (the worker's SIGKILL would say that something outside killed it).

The supervisor removes the job folder; if it was killed, the next run removes folders whose
supervisor is gone (supervisor.py). Elsewhere (no /proc, no prctl) the worker runs without a
reaper and its process group is all the supervisor can kill.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Optional

from perflsp.processes import descendants

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 200  # a fork bomb gets this many rounds of SIGKILL; real trees need one or two
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stop(Exception):
    """The supervisor asked us to stop, or died (or another process sent a stop signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def split(job_path: str) -> None:
    """Become the reaper of the job's process tree; returns in the worker only."""
    with open(job_path, encoding="utf-8") as handle:
        supervisor = int(json.load(handle)["parent_pid"])
    if not sys.platform.startswith("linux"):
        _exit_if_orphaned(supervisor)
        return
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _exit_if_orphaned(supervisor)
    reaper = os.getpid()
    worker = os.fork()
    if worker == 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _exit_if_orphaned(reaper)
        return
    os._exit(_reap(worker))  # never returns: the worker's status, or dies of its signal


def _prctl(option: int, value: int) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _exit_if_orphaned(parent: int) -> None:
    """The parent died before prctl took effect: nobody wants this run any more."""
    if os.getppid() != parent:
        os._exit(1)


def _reap(worker: int) -> int:
    def stop(signum: int, frame: Any) -> None:
        raise _Stop(signum)

    def forward(signum: int, frame: Any) -> None:
        try:
            os.kill(worker, signum)
        except ProcessLookupError:
            pass

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    signal.signal(signal.SIGUSR1, forward)
    status: Optional[int] = None
    stopped_by: Optional[int] = None
    try:
        while status is None:
            pid, code = os.waitpid(-1, 0)  # orphans that end are reaped here too
            if pid == worker:
                status = code
    except _Stop as stop_request:
        stopped_by = stop_request.signum
    for signum in STOP_SIGNALS:  # nothing interrupts the cleanup
        signal.signal(signum, signal.SIG_IGN)
    reaped = kill_tree()
    status = status if status is not None else reaped.get(worker, 0)
    exit_code = os.waitstatus_to_exitcode(status)
    if stopped_by is not None and exit_code == -signal.SIGKILL:  # kill_tree's SIGKILL, not the worker's fate
        exit_code = -stopped_by
    if exit_code < 0:  # end as the worker did, so the supervisor sees its signal
        if -exit_code != signal.SIGKILL:  # the one signal whose action is fixed (setting it raises)
            signal.signal(-exit_code, signal.SIG_DFL)
        os.kill(os.getpid(), -exit_code)
    return exit_code


def kill_tree() -> dict:
    """SIGKILL every process below us until none is left, and wait for each; {pid: wait status}.

    One round is not enough: a process killed mid-fork leaves a child, re-parented to us once its
    parent is gone, that the next round finds. Once none is left alive, the children are waited
    for until they are gone: a killed process whose threads are still exiting already reads as a
    zombie (the worker, with torch's threads), but cannot be waited for before they are."""
    statuses = {}
    for _ in range(KILL_ROUNDS):
        alive = descendants(os.getpid())
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        statuses.update(_reap_ended(block=not alive))
        if not alive:
            break
        time.sleep(0.01)
    return statuses


def _reap_ended(block: bool) -> dict:
    """{pid: wait status} of the children that ended; with `block`, of every child, waiting for them."""
    statuses = {}
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        statuses[pid] = status
    return statuses
