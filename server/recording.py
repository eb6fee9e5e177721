""""Record a run": `perflsp record` from the editor, and what the record says in hovers and lenses.

The command (`perflsp.recordRun`, arguments `[uri]` or `[{uri, command}]`) runs `<interpreter> -m
perflsp record --progress-fd N --workspace <folder> --cwd <folder> -- <command>` for the workspace
folder holding `uri`, with the same rules as "Profile this function" (`profiling.py`): an explicit
action, refused in a workspace where profiling is off (`perflsp.profile.enabled`, false in an
untrusted one), started from a private folder in a process group of its own, its progress as
`$/progress` with a Cancel button, and `$/cancelRequest` honoured. The command comes from the
argument, else the `perflsp.record.command` setting, else `[tool.perflsp] profile-command`.

The record itself (`.perflsp/evidence.json`) is read by the analysis like `perflsp check` does
(`analysis.RECORDS`); once a run ends, every open file is analysed again. On recorded lines a
code lens sums up what ran ("recorded: 1×/step · 2 host reads/step") and the hover tells more.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from lsprotocol import types as T

from perflsp.config import settings_for
from perflsp.server import markdown
from perflsp.server.analysis import RECORDS
from perflsp.server.profiling import DEFAULT_TIMEOUT_S, Job, resolve_interpreter
from perflsp.server.settings import resolve

if TYPE_CHECKING:
    from perflsp.rules.evidence import FileEvidence, LineRecord
    from perflsp.server.app import PerflspServer

log = logging.getLogger("perflsp.server")

COMMAND = "perflsp.recordRun"


class Recorder:
    def __init__(self, server: "PerflspServer"):
        self.server = server
        self.running: Dict[str, Job] = {}  # workspace folder -> its run

    @property
    def profiles(self) -> Any:
        return self.server.profiles  # its process, progress and cancel helpers serve both commands

    async def record(self, args: Sequence[Any]) -> Dict[str, Any]:
        uri, command = _arguments(args)
        path = _fs_path(uri)
        folder = self.profiles.folder_of(os.path.realpath(path)) if path else None
        if folder is None:
            text = f"will not record: {uri} is in no workspace folder, and recording runs the workspace's code"
            return self._refuse(T.MessageType.Error, text)
        editor = self.server.editor_for_uri(uri)
        if not editor.profile_enabled:
            return self._refuse(T.MessageType.Warning, "recording is disabled (perflsp.profile.enabled is false, e.g. "
                                                       "in an untrusted workspace): it runs your code")
        command = command or editor.record_command or settings_for(folder).profile_command
        if not command:
            return self._refuse(T.MessageType.Error, "what should run? Set perflsp.record.command (e.g. "
                                                     "`python train.py`) or `profile-command` in [tool.perflsp]")
        try:
            words = shlex.split(command)
        except ValueError as exc:
            return self._refuse(T.MessageType.Error, f"cannot read the command {command!r}: {exc}")
        key = str(folder)
        if key in self.running:
            return self._refuse(T.MessageType.Warning, "a run is already being recorded in this folder: wait for it "
                                                       "or cancel it")
        job = Job(key, command, mode="record")
        self.running[key] = job
        self.profiles._cancel_with_request(job)
        home = tempfile.mkdtemp(prefix="perflsp-record-")
        try:
            return await self._run(home, folder, words, job, editor)
        finally:
            self.running.pop(key, None)
            shutil.rmtree(home, ignore_errors=True)
            if job.process is not None and job.process.returncode is None:
                self.profiles._kill(job)

    async def _run(self, home: str, folder: Path, words: List[str], job: Job, editor: Any) -> Dict[str, Any]:
        interpreter, origin = resolve_interpreter(editor.interpreter, folder)
        problem = await self.profiles._preflight(interpreter, home)
        if problem is not None:
            return self._refuse(T.MessageType.Error, f"cannot record: {problem} in the interpreter "
                                                     f"{shlex.join(interpreter)} (chosen from {origin})")
        progress_fd, progress_out = os.pipe()
        command = [*interpreter, "-m", "perflsp", "record", "--progress-fd", str(progress_out), "--workspace",
                   str(folder), "--cwd", str(folder)]
        if editor.record_steps:
            command += ["--steps", str(editor.record_steps)]
        if editor.profile_timeout:
            command += ["--timeout", f"{editor.profile_timeout:g}"]
        command += ["--", *words]
        log.info("perflsp: recording: %s", shlex.join(command))
        token = await self.profiles._progress_begin(job)
        progress = os.fdopen(progress_fd, "rb", buffering=0)
        try:
            try:
                # Started from a private folder: `-m` puts it first on sys.path, never the workspace.
                job.process = await asyncio.create_subprocess_exec(
                    *command, cwd=home, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, start_new_session=True, pass_fds=(progress_out,),
                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
            finally:
                os.close(progress_out)
            if job.cancelled:
                self.profiles._kill(job)
            stdout_task = asyncio.ensure_future(job.process.stdout.read())
            await asyncio.gather(self.profiles._follow(job, token, progress), self.profiles._keep_stderr(job))
            limit = (editor.profile_timeout or DEFAULT_TIMEOUT_S) + 120.0  # the static pass comes first
            try:
                code = await asyncio.wait_for(job.process.wait(), timeout=limit)
            except asyncio.TimeoutError:
                self.profiles._kill(job)
                code = await job.process.wait()
            stdout = (await stdout_task).decode("utf-8", "replace").strip()
        except FileNotFoundError as exc:
            self.profiles._progress_end(token, "failed")
            return self._refuse(T.MessageType.Error, f"cannot start {shlex.join(interpreter)}: {exc}")
        except BaseException:
            job.cancelled = True
            self.profiles._progress_end(token, "cancelled")
            raise
        finally:
            progress.close()
        if job.cancelled:
            self.profiles._progress_end(token, "cancelled")
            self.profiles.message(T.MessageType.Info, "recording cancelled")
            return {"status": "cancelled", "message": "recording cancelled"}
        self.server.docs.relint_all("record")
        if code not in (0, 3) or not stdout:
            why = "".join(job.stderr[-5:]).strip() or f"exit status {code}"
            self.profiles._progress_end(token, "failed")
            return self._refuse(T.MessageType.Error, f"recording failed: {why}", status="error", exit_code=code)
        headline = stdout.splitlines()[0]
        self.profiles._progress_end(token, headline)
        kind = T.MessageType.Info if code == 0 else T.MessageType.Warning
        suffix = "" if code == 0 else " (the program raised: see the log)"
        self.profiles.message(kind, f"{headline}{suffix}")
        return {"status": "ok", "headline": headline, "exit_code": code}

    def _refuse(self, kind: T.MessageType, text: str, status: str = "refused", **extra: Any) -> Dict[str, Any]:
        self.profiles.message(kind, text)
        return {"status": status, "message": text, **extra}

    # --- what the record says, in the editor -------------------------------------------------------------

    def _evidence(self, uri: str) -> Optional["FileEvidence"]:
        path = _fs_path(uri)
        if not path or not path.endswith(".py"):
            return None
        return RECORDS.for_file(Path(path), resolve(Path(path), self.server.editor_for_uri(uri)).settings)

    def code_lenses(self, uri: str) -> List[T.CodeLens]:
        evidence, source = self._evidence(uri), self._source(uri)
        if evidence is None or source is None:
            return []
        lines = source.splitlines()
        lenses = []
        for row, record in sorted(evidence.by_row(source).items()):
            title = lens_title(record, evidence.run.steps)
            if title:
                start = len(lines[row - 1]) - len(lines[row - 1].lstrip())
                lenses.append(T.CodeLens(range=T.Range(T.Position(row - 1, start), T.Position(row - 1, start)),
                                         command=T.Command(title=title, command=COMMAND, arguments=[uri])))
        return lenses

    def hover(self, uri: str, position: T.Position) -> Optional[str]:
        evidence, source = self._evidence(uri), self._source(uri)
        if evidence is None or source is None:
            return None
        record = evidence.by_row(source).get(position.line + 1)
        return hover_text(record, evidence) if record is not None else None

    def _source(self, uri: str) -> Optional[str]:
        doc = self.server.workspace.text_documents.get(uri)
        return doc.source if doc is not None else None

    def shutdown(self) -> None:
        for job in list(self.running.values()):
            job.cancelled = True
            if job.process is not None and job.process.returncode is None:
                self.profiles._kill(job)


def lens_title(record: "LineRecord", steps: int) -> Optional[str]:
    """`recorded: 1×/step · 2 host reads/step · sync`, or None for a line with nothing to show."""
    if steps == 0:
        return None
    parts = []
    if record.candidate:
        if record.steps == 0:
            parts.append("never ran in the steps" if not record.setup_runs else "ran only in setup")
        else:
            parts.append(f"{_rate(record.runs, steps)}×/step")
    if record.host_reads:
        parts.append(f"{_rate(sum(record.host_reads.values()), steps)} host reads/step")
    if record.h2d_copies:
        parts.append(f"{_rate(record.h2d_copies, steps)} copies to the device/step")
    if record.syncs:
        parts.append("sync")
    return "recorded: " + " · ".join(parts) if parts else None


def hover_text(record: "LineRecord", evidence: "FileEvidence") -> str:
    """Markdown; what comes from the evidence file (a cloned repository may have committed one) is
    escaped, as the hovers of profile results are (`perflsp.server.markdown`)."""
    run = evidence.run
    where = (f"on {markdown.text(run.accelerator)}" if run.accelerator
             else "on the CPU (reads of device-bound tensors would wait on a GPU)")
    lines = [f"**Recorded** by `perflsp record` ({run.steps} steps of {markdown.code(run.command)}, "
             f"{markdown.text(run.measured_at)}, {where})", ""]
    if record.candidate:
        lines.append(f"- ran {record.runs} times in {record.steps} of {run.steps} steps"
                     + (f", {record.setup_runs} times before them" if record.setup_runs else ""))
    for operand in record.operands:
        bound = "bound for the device" if operand.bound else "on the host"
        lines.append(f"- on a {markdown.text(operand.dtype)} tensor on {markdown.text(operand.device)}, {bound} "
                     f"(up to {operand.numel} elements)")
    if record.host_reads:
        kinds = ", ".join(f"{markdown.text(kind)} ×{count}" for kind, count in sorted(record.host_reads.items()))
        lines.append(f"- host reads of device-bound tensors: {kinds} (in {record.host_read_steps} steps)")
    if record.host_reads_of_host_tensors:
        lines.append(f"- reads of host tensors (no wait): {record.host_reads_of_host_tensors}")
    if record.h2d_copies:
        lines.append(f"- copies to the device: {record.h2d_copies} (in {record.h2d_steps} steps)")
    if record.syncs:
        lines.append(f"- CUDA syncs: {record.syncs}")
    if record.stall_us:
        lines.append(f"- stalled {record.stall_us / max(run.steps, 1):.0f} µs per step")
    return "\n".join(lines)


def _rate(count: int, steps: int) -> str:
    return f"{count / steps:g}" if count % steps else str(count // steps)


def _arguments(args: Sequence[Any]) -> "tuple[str, Optional[str]]":
    """(uri, command or None) from `[uri]`, `[uri, command]` or `[{uri, command}]`."""
    first = args[0] if args else ""
    if isinstance(first, dict):
        return str(first.get("uri", "")), first.get("command")
    command = args[1] if len(args) > 1 and isinstance(args[1], str) else None
    return str(first), command


def _fs_path(uri: str) -> Optional[str]:
    from pygls.uris import to_fs_path

    return to_fs_path(uri) if uri.startswith("file:") else None
