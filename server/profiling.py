""""Profile this function": runs the runtime as a subprocess and keeps its results for the editor.

The server never imports the runtime or torch: it spawns `<interpreter> -m perflsp.runtime profile
<file.py:qualname> --json <tmp> --progress-fd N --workspace <folder> --cwd <folder> ...` from a
private temporary folder (never the workspace, whose files must not stand in for perflsp) in its
own process group, turns the runtime's JSON progress lines into `$/progress`, and reads the
result. The progress comes through a pipe of its own (fd N): the profiled code's output goes to
stdout and stderr, which are only kept as a tail for error messages, so nothing the user's code
prints (however long a line, however much like an event) is taken for progress. Only files
inside a workspace folder are profiled: the commands name their file. Cancel (the progress's
button, or `$/cancelRequest` of the command) interrupts the runtime, which stops its profiling
process and everything that started, then kills whatever is left of the process tree.

"Try torch.compile on this function" is the same run with `--compile`, "Find torch.compile graph
breaks" runs `--graph-breaks` (explain only; its breaks are kept in memory, never on disk): see
docs/compile.md.

Results persist where the runtime writes them (`<workspace>/.perflsp/profiles/`), are loaded when a
file opens and shown while the function's source hash (`perflsp.profile_result`) matches the
editor's text; a result whose function changed is stale and is not shown.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Optional, Sequence, Set, Tuple

from lsprotocol import types as T
from pygls.uris import to_fs_path

from perflsp.processes import descendants
from perflsp.rules.runner import read_text
from perflsp.safe_files import LeavesFolder, ensure_inside
from perflsp.profile_result import (ResultError, compile_summary, function_source_sha256, read_result, result_filename,
                                    results_dir)
from perflsp.server import profile_view as view

if TYPE_CHECKING:
    from perflsp.server.app import PerflspServer

log = logging.getLogger("perflsp.server")

PHASES = {
    "start": "starting", "import": "importing the target", "peaks": "measuring device ceilings (cached afterwards)",
    "setup": "building inputs", "program": "running the program", "warm-up": "warming up", "timing": "timing",
    "profile": "profiling", "attribution": "attributing ops to lines", "analysis": "analysing",
    "explain": "finding graph breaks", "compile": "compiling (torch.compile)",
}
PREFLIGHT = ("import importlib.util as u; print(u.find_spec('perflsp') is not None, "
             "u.find_spec('torch') is not None)")
DEFAULT_TIMEOUT_S = 300.0  # the runtime's, when perflsp.profile.timeout is not set
KILL_GRACE_S = 0.5  # after SIGINT, the runtime's own cleanup gets this long before SIGKILL
KEPT_LINE_BYTES = 4096  # of each line of the runtime's output, for error messages


@dataclass
class Entry:
    result: Dict[str, Any]
    file: Optional[str]  # the result file on disk (None: shown only, e.g. a usage error)


@dataclass
class Job:
    path: str
    qualname: str
    # "profile"; "compile": the profile plus the compiled run; "breaks": graph breaks only (docs/compile.md)
    mode: str = "profile"
    process: Optional[asyncio.subprocess.Process] = None
    cancelled: bool = False
    token: Optional[str] = None
    stderr: List[str] = field(default_factory=list)


def resolve_interpreter(setting: Sequence[str], workspace: Path) -> Tuple[List[str], str]:
    """The python that runs the profiler, and where the choice came from."""
    if setting:
        executable, *rest = setting
        if "/" in executable or os.sep in executable:
            # `.venv/bin/python` means the workspace's: the runtime starts outside it (see _run).
            executable = str(workspace / executable)
        return [executable, *rest], "the perflsp.interpreter setting"
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:
        for name in ("bin/python", "Scripts/python.exe"):
            if (Path(venv) / name).exists():
                return [str(Path(venv) / name)], "$VIRTUAL_ENV"
    for name in (".venv/bin/python", ".venv/Scripts/python.exe", "venv/bin/python"):
        if (workspace / name).exists():
            return [str(workspace / name)], f"the workspace's {name.split('/')[0]}"
    return [sys.executable], "the language server's own interpreter"


def _kill_tree(pid: int) -> None:
    for target in [pid, *descendants(pid)]:
        try:
            os.killpg(os.getpgid(target), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass


class Profiler:
    def __init__(self, server: "PerflspServer"):
        self.server = server
        self.running: Dict[Tuple[str, str], Job] = {}
        self.entries: Dict[str, Dict[str, Entry]] = {}  # resolved file path -> qualname -> result
        self.refused: Set[str] = set()  # result files already reported as unusable
        # Graph breaks found without a profile (`--graph-breaks`): {"target", "compile"} documents,
        # shown until the function changes or a profile of it arrives; never written to disk.
        self.breaks: Dict[str, Dict[str, Entry]] = {}
        self.tasks: set = set()

    # --- where things are --------------------------------------------------------------------------

    @staticmethod
    def file_of(uri: str) -> Optional[str]:
        path = to_fs_path(uri) if uri.startswith("file:") else None
        return os.path.realpath(path) if path and path.endswith(".py") else None

    def folder_of(self, path: str) -> Optional[Path]:
        """The innermost workspace folder holding `path` (resolved, as `file_of` gives it), or None."""
        best: Optional[str] = None
        for _, folder in self.server.folder_paths():
            folder = os.path.realpath(folder)
            if (path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)) and (best is None or len(folder) > len(best)):
                best = folder
        return Path(best) if best else None

    def workspace_for(self, path: str) -> Path:
        """Where a file's results live; a file outside the workspace has them beside it (shown only)."""
        return self.folder_of(path) or Path(path).parent

    def outside_workspace(self, path: str) -> Optional[str]:
        """Why a command may not act on `path` (None: a workspace folder holds it).

        Commands name their file, and any client may send any path: profiling runs the file's
        module code and writes results into its workspace, clearing deletes them. Only files of
        the workspace the user opened qualify.
        """
        if self.folder_of(path) is not None:
            return None
        if not self.server.folder_paths():
            return f"{path} is in no workspace folder (none is open)"
        return f"{path} is outside every workspace folder"

    def text_of(self, uri: str) -> Optional[str]:
        doc = self.server.workspace.text_documents.get(uri)
        return doc.source if doc is not None else None

    # --- results ---------------------------------------------------------------------------------------

    def opened(self, uri: str) -> None:
        """Load the persisted results of this file's functions."""
        path = self.file_of(uri)
        if path is None:
            return
        found: Dict[str, Entry] = {}
        folder = results_dir(self.workspace_for(path))
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        refused = []
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                result = read_result(folder / name)
            except ResultError as exc:
                if str(folder / name) not in self.refused:
                    self.refused.add(str(folder / name))
                    refused.append(str(exc))
                continue
            target = result.get("target") or {}
            if target.get("file") and os.path.realpath(target["file"]) == path and target.get("qualname"):
                found[target["qualname"]] = Entry(result, str(folder / name))
        self.entries[path] = found
        if found:
            log.info("perflsp: loaded %d profile result(s) for %s", len(found), path)
        if refused:  # one warning per batch, each file named once per session: a cloned repository can commit many
            others = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            self.message(T.MessageType.Warning, f"ignored a profile result that perflsp cannot use{others}: {refused[0]}")

    def closed(self, uri: str) -> None:
        path = self.file_of(uri)
        if path is not None:
            self.entries.pop(path, None)

    def placed(self, uri: str, text: Optional[str] = None, breaks: bool = False) -> List[Tuple[view.Placed, Entry]]:
        """The results (with `breaks`, the graph-breaks-only documents) that still match the text
        (fresh), placed on its current lines."""
        path = self.file_of(uri)
        entries = (self.breaks if breaks else self.entries).get(path or "", {})
        if not entries:
            return []
        text = text if text is not None else self.text_of(uri)
        if text is None:
            return []
        funcs = {f.qualname: f for f in view.functions(text)}
        out = []
        for qualname, entry in entries.items():
            function = funcs.get(qualname)
            if function is None or self.stale(entry, text):
                continue
            recorded = (entry.result.get("target") or {}).get("def_line") or function.def_line
            out.append((view.Placed(entry.result, function, function.def_line - recorded), entry))
        return out

    @staticmethod
    def stale(entry: Entry, text: str) -> bool:
        target = entry.result.get("target") or {}
        recorded = target.get("source_sha256")
        if not recorded:
            return False  # a run that failed before reading the file: shown until replaced
        current, _ = function_source_sha256(text, target.get("qualname", ""))
        return current != recorded

    def decorate(self, uri: str, diagnostics: Sequence[T.Diagnostic]) -> List[T.Diagnostic]:
        """The static diagnostics with measured costs appended, plus the profile diagnostics."""
        placed, breaks = self.placed(uri), self.placed(uri, breaks=True)
        if not placed and not breaks:
            return list(diagnostics)
        text = self.text_of(uri) or ""
        lines = text.split("\n")
        units = self.server.encoder.units
        costs: Dict[int, str] = {}
        extra: List[T.Diagnostic] = []
        for where, _ in placed:
            costs.update(view.measured_costs(where))
            extra.extend(view.diagnostics(where, lines, units))
        compiled = {w.function.qualname for w, _ in placed if w.result.get("compile")}
        for where, _ in breaks:
            if where.function.qualname not in compiled:  # a profile's own compile block says it already
                extra.extend(view.compile_diagnostics(where, lines, units))
        out = [view.with_measured_cost(d, costs[d.range.start.line])
               if d.source != view.PROFILE_SOURCE and d.range.start.line in costs else d for d in diagnostics]
        return out + extra

    def key(self, uri: str) -> str:
        """Changes whenever the shown profile diagnostics may change (part of pull result ids)."""
        placed = self.placed(uri) + self.placed(uri, breaks=True)
        return "" if not placed else "-p" + str(abs(hash(tuple(
            (id(e.result), w.offset, w.function.def_line) for w, e in placed))))

    def republish(self, uri: str) -> None:
        if self.server.pull:
            self.server.refresh_diagnostics()
        else:
            found = self.server.unit_for(uri)
            static: Sequence[T.Diagnostic] = []
            version = None
            if found is not None and found[0].result is not None:
                part = found[0].result.part(uri)
                if part is not None:
                    static, version = part.diagnostics, part.part.version
            self.server.push(uri, static, version)
        if self.server.capability("workspace.code_lens.refresh_support"):
            self.server.workspace_code_lens_refresh(None)

    # --- code lens, code action, hover -----------------------------------------------------------------

    def offers_profiling(self, uri: str) -> bool:
        """Whether to offer profiling here: the commands refuse files outside the workspace."""
        path = self.file_of(uri)
        return path is not None and self.folder_of(path) is not None

    def code_lenses(self, uri: str) -> List[T.CodeLens]:
        if not self.offers_profiling(uri):
            return []
        text = self.text_of(uri)
        if text is None:
            return []
        shown = {w.function.qualname: w.result for w, _ in self.placed(uri, text)}
        lines = text.split("\n")
        lenses = []
        for function in view.functions(text):
            result = shown.get(function.qualname)
            if not function.marked and result is None:
                continue
            rng = view._line_range(lines, function.def_line - 1, self.server.encoder.units)
            if result is None:
                title, command = "▶ Profile", "perflsp.profileFunction"
            else:
                title = "▶ " + (view.headline(result) or f"profile failed ({(result.get('error') or {}).get('kind')})")
                command = "perflsp.profileAgain"
            lenses.append(T.CodeLens(range=rng, command=T.Command(title=title, command=command,
                                                                  arguments=[uri, function.qualname])))
        return lenses

    def code_actions(self, uri: str, rng: T.Range) -> List[T.CodeAction]:
        """"Profile this function", "Try torch.compile on this function" and "Find torch.compile
        graph breaks" for the function at `rng`. When its shown profile names torch.compile as a
        lever, "Try torch.compile" is that lever's quick fix, tied to the verdict's diagnostic."""
        if not self.offers_profiling(uri):
            return []
        text = self.text_of(uri)
        function = view.function_at(text, rng.start.line) if text is not None else None
        if text is None or function is None:
            return []
        arguments = [uri, function.qualname]
        compile_action = T.CodeAction(title=f"Try torch.compile on this function ({function.qualname})",
                                      command=T.Command(title="Try torch.compile on this function",
                                                        command="perflsp.compileFunction", arguments=arguments))
        breaks_action = T.CodeAction(title=f"Find torch.compile graph breaks ({function.qualname})",
                                     command=T.Command(title="Find torch.compile graph breaks",
                                                       command="perflsp.findGraphBreaks", arguments=arguments))
        for where, _ in self.placed(uri, text):
            if where.function.qualname == function.qualname and view.compile_is_a_lever(where.result):
                compile_action.kind = T.CodeActionKind.QuickFix
                compile_action.diagnostics = view.diagnostics(where, text.split("\n"), self.server.encoder.units)[:1]
        return [T.CodeAction(title=f"Profile this function ({function.qualname})",
                             command=T.Command(title="Profile this function", command="perflsp.profileFunction",
                                               arguments=arguments)),
                compile_action, breaks_action]

    def hover(self, uri: str, position: T.Position) -> Optional[str]:
        path = self.file_of(uri)
        text = self.text_of(uri)
        if path is None or text is None or not self.entries.get(path):
            return None
        for function in view.functions(text):
            if function.def_line - 1 == position.line:
                entry = self.entries[path].get(function.qualname)
                if entry is not None:
                    plot = plot_path(self.workspace_for(path), path, function.qualname)
                    return view.hover_text(entry.result, self.stale(entry, text), entry.file,
                                           plot.as_uri() if plot.exists() else None)
        return None

    # --- running ---------------------------------------------------------------------------------------

    def message(self, kind: T.MessageType, text: str) -> None:
        self.server.window_show_message(T.ShowMessageParams(type=kind, message=f"perflsp: {text}"))

    def clear(self, uri: str, qualname: Optional[str]) -> Dict[str, Any]:
        path = self.file_of(uri)
        refused = self.outside_workspace(path) if path is not None else None
        if refused is not None:
            text = f"will not clear profile results: {refused}"
            self.message(T.MessageType.Error, text)
            return {"status": "refused", "message": text}
        entries = self.entries.get(path or "", {})
        removed = []
        for name in [qualname] if qualname else list(entries):
            entry = entries.pop(name, None) if name else None
            if entry is None:
                continue
            removed.append(name)
            if entry.file:
                for file in (entry.file, str(plot_path(self.workspace_for(path or ""), path or "", name))):
                    try:
                        os.unlink(file)
                    except OSError:
                        pass
        self.republish(uri)
        return {"status": "cleared", "functions": removed}

    async def profile(self, uri: str, qualname: Optional[str], mode: str = "profile") -> Dict[str, Any]:
        path = self.file_of(uri)
        if path is None:
            self.message(T.MessageType.Error, f"can only profile functions of saved .py files, not {uri}")
            return {"status": "refused", "message": "not a .py file"}
        refused = self.outside_workspace(path)
        if refused is not None:
            text = f"will not profile: {refused}, and profiling runs a file's code"
            self.message(T.MessageType.Error, text)
            return {"status": "refused", "message": text}
        editor = self.server.editor_for_uri(uri)
        if not editor.profile_enabled:
            text = ("profiling is disabled (perflsp.profile.enabled is false, e.g. in an untrusted workspace): "
                    "it runs your code")
            self.message(T.MessageType.Warning, text)
            return {"status": "refused", "message": text}
        text = self.text_of(uri)
        if text is None:
            try:
                text = read_text(Path(path))
            except (OSError, ValueError) as exc:
                self.message(T.MessageType.Error, f"cannot read {path}: {exc}")
                return {"status": "refused", "message": str(exc)}
        if not qualname:
            self.message(T.MessageType.Error, "which function? perflsp.profileFunction takes (uri, function)")
            return {"status": "refused", "message": "no function given"}
        if qualname not in {f.qualname for f in view.functions(text)}:
            self.message(T.MessageType.Error, f"no function {qualname} in {path}")
            return {"status": "refused", "message": f"no function {qualname}"}
        key = (path, qualname)
        if key in self.running:
            text = f"{qualname} is already being profiled: wait for that run or cancel it"
            self.message(T.MessageType.Warning, text)
            return {"status": "busy", "message": text}
        try:
            disk = read_text(Path(path))
        except (OSError, ValueError):
            disk = None
        if disk is not None and function_source_sha256(disk, qualname)[0] != function_source_sha256(text, qualname)[0]:
            self.message(T.MessageType.Warning, f"{qualname} has unsaved changes: the saved version is profiled")
        job = Job(path, qualname, mode)
        self.running[key] = job
        self._cancel_with_request(job)
        try:
            return await self._run(uri, job, editor)
        finally:
            self.running.pop(key, None)
            if job.process is not None and job.process.returncode is None:
                self._kill(job)

    def _kill(self, job: Job) -> None:
        proc = job.process
        if proc is None or proc.returncode is not None:
            return
        tree = descendants(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGINT)  # the runtime kills its profiling process on Ctrl-C
        except (ProcessLookupError, PermissionError):
            pass
        loop = asyncio.get_running_loop()

        def finish() -> None:
            _kill_tree(proc.pid)
            for pid in tree:  # those the runtime started in sessions of their own
                _kill_tree(pid)

        loop.call_later(KILL_GRACE_S, finish)

    def _cancel_with_request(self, job: Job) -> None:
        """pygls answers `$/cancelRequest` of a command by cancelling the request's own future, not
        the task running the command: cancel the run when that future is cancelled."""
        protocol = self.server.protocol
        request = getattr(protocol, "_request_futures", {}).get(protocol.msg_id)
        if request is None:
            return
        loop = asyncio.get_running_loop()
        request.add_done_callback(lambda f: loop.call_soon_threadsafe(self.cancel, job) if f.cancelled() else None)

    def cancel(self, job: Job) -> None:
        if not job.cancelled:
            job.cancelled = True
            log.info("perflsp: profiling %s cancelled", job.qualname)
            self._kill(job)

    async def _run(self, uri: str, job: Job, editor: Any) -> Dict[str, Any]:
        # The runtime (and its preflight) start in a private empty folder, never in the workspace:
        # `python -m` puts the current folder first on sys.path, where a `perflsp/` folder of the
        # workspace would run instead of perflsp (-P needs Python 3.11; perflsp supports 3.9).
        # The workspace reaches the runtime as --cwd, where the user's code runs as before.
        home = tempfile.mkdtemp(prefix="perflsp-profile-")
        try:
            return await self._run_from(home, uri, job, editor)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    async def _run_from(self, home: str, uri: str, job: Job, editor: Any) -> Dict[str, Any]:
        workspace = self.workspace_for(job.path)
        interpreter, origin = resolve_interpreter(editor.interpreter, workspace)
        shown = shlex.join(interpreter)
        problem = await self._preflight(interpreter, home)
        if problem is not None:
            text = (f"cannot profile {job.qualname}: {problem} in the interpreter {shown} (chosen from {origin}); "
                    "install it there, or set perflsp.interpreter to a python that has torch and perflsp")
            self.message(T.MessageType.Error, text)
            return {"status": "error", "kind": "environment", "message": text}
        out = os.path.join(home, "result.json")
        progress_fd, progress_out = os.pipe()
        command = [*interpreter, "-m", "perflsp.runtime", "profile", f"{job.path}:{job.qualname}", "--json", out,
                   "--progress-fd", str(progress_out), "--workspace", str(workspace), "--cwd", str(workspace)]
        if job.mode == "breaks":  # explain only: nothing profiled, compiled or saved
            command += ["--graph-breaks", "--compile-timeout", f"{editor.profile_timeout or DEFAULT_TIMEOUT_S:g}"]
        else:
            if editor.profile_timeout:
                command += ["--timeout", f"{editor.profile_timeout:g}"]
            if editor.profile_min_time:
                command += ["--min-time", f"{editor.profile_min_time:g}"]
            if job.mode == "compile":  # the compile gets the profile's timeout again, on top of the profile's own
                command += ["--compile", "--compile-timeout", f"{editor.profile_timeout or DEFAULT_TIMEOUT_S:g}"]
            plot = plot_path(workspace, job.path, job.qualname)
            try:
                ensure_inside(plot, workspace)
                command += ["--plot", str(plot)]
            except LeavesFolder as exc:
                log.warning("perflsp: no roofline plot: %s", exc)
        self.server.window_log_message(T.LogMessageParams(
            type=T.MessageType.Info, message=f"perflsp: profiling {job.qualname}: {shlex.join(command)}"))
        token = await self._progress_begin(job)
        started = time.monotonic()
        progress = os.fdopen(progress_fd, "rb", buffering=0)
        try:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            try:
                job.process = await asyncio.create_subprocess_exec(
                    *command, cwd=home, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, start_new_session=True, env=env, pass_fds=(progress_out,))
            finally:
                os.close(progress_out)  # the runtime holds it now: its end is the pipe's end
            if job.cancelled:  # Cancel pressed while it started
                self._kill(job)
            stdout_task = asyncio.ensure_future(job.process.stdout.read())
            await asyncio.gather(self._follow(job, token, progress), self._keep_stderr(job))
            # The runtime enforces its own timeout; this only guards against a runtime that hangs.
            limit = (editor.profile_timeout or DEFAULT_TIMEOUT_S) * (2 if job.mode == "compile" else 1) + 60.0
            try:
                code = await asyncio.wait_for(job.process.wait(), timeout=limit)
            except asyncio.TimeoutError:
                self._kill(job)
                code = await job.process.wait()
            stdout = (await stdout_task).decode("utf-8", "replace")
            elapsed = time.monotonic() - started
            if job.cancelled:
                text = f"profiling {job.qualname} cancelled"
                self._progress_end(token, "cancelled")
                self.message(T.MessageType.Info, text)
                return {"status": "cancelled", "message": text}
            if job.mode == "breaks":
                return self._finish_breaks(uri, job, code, out, stdout, shown, origin, token)
            return self._finish(uri, job, code, out, stdout, shown, origin, token, elapsed)
        except FileNotFoundError as exc:
            text = f"cannot start the interpreter {shown} (chosen from {origin}): {exc}"
            self._progress_end(token, "failed")
            self.message(T.MessageType.Error, text)
            return {"status": "error", "kind": "environment", "message": text}
        except BaseException:  # the server shutting down (CancelledError) or a bug: never leave the run behind
            job.cancelled = True
            self._progress_end(token, "cancelled")
            raise
        finally:
            progress.close()

    async def _preflight(self, interpreter: List[str], home: str) -> Optional[str]:
        """What keeps `interpreter` from profiling (no perflsp, no torch), seen from where the runtime starts."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *interpreter, "-c", PREFLIGHT, cwd=home, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
        except (OSError, asyncio.TimeoutError) as exc:
            return f"the interpreter could not be started ({exc})"
        words = out.decode("utf-8", "replace").split()
        if proc.returncode != 0 or len(words) != 2:
            return f"the interpreter failed ({err.decode('utf-8', 'replace').strip()[-300:]})"
        if words[0] != "True":
            return "perflsp is not installed (from a checkout of it: pip install '/path/to/perflsp[runtime]')"
        if words[1] != "True":
            return "torch is not installed"
        return None

    async def _follow(self, job: Job, token: Optional[str], progress: Any) -> None:
        """The runtime's progress events (its pipe carries nothing else) as `$/progress` reports."""
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), progress)
        try:
            async for raw in _lines(reader):
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if token is not None and isinstance(event, dict):
                    self._report(token, event)
        finally:
            transport.close()

    def _report(self, token: str, event: Dict[str, Any]) -> None:
        phase = PHASES.get(event.get("phase", ""), event.get("phase", ""))
        if event.get("event") == "phase":
            detail = event.get("detail")
            self._progress_report(token, phase + (f" ({detail})" if detail else ""), None)
        elif event.get("event") == "progress":
            done, total, fraction = event.get("done"), event.get("total"), event.get("fraction")
            count = f"{done}/{total}" if total else f"{done}"
            percent = int(min(max(fraction, 0.0), 1.0) * 100) if isinstance(fraction, (int, float)) else None
            self._progress_report(token, f"{phase}: {count} {event.get('unit', '')}".rstrip(), percent)

    async def _keep_stderr(self, job: Job) -> None:
        """The last lines of the runtime's stderr (the program's output, the runtime's messages)."""
        assert job.process is not None and job.process.stderr is not None
        async for raw in _lines(job.process.stderr):
            job.stderr.append(raw.decode("utf-8", "replace"))
            del job.stderr[:-200]

    def _finish(self, uri: str, job: Job, code: int, out: str, stdout: str, shown: str, origin: str,
                token: Optional[str], elapsed: float) -> Dict[str, Any]:
        result: Optional[Dict[str, Any]] = None
        if os.path.exists(out):
            try:
                result = read_result(out)
            except ResultError as exc:
                log.error("perflsp: %s", exc)
        if result is None:
            return self._no_result(job, code, stdout, shown, origin, token)
        target = result.get("target") or {}
        stored = None
        if target.get("module"):
            from perflsp.profile_result import result_path

            candidate = result_path(self.workspace_for(job.path), target["module"], job.qualname)
            stored = str(candidate) if candidate.exists() else None
        self.entries.setdefault(job.path, {})[job.qualname] = Entry(result, stored)
        self.breaks.get(job.path, {}).pop(job.qualname, None)  # this result's own compile block replaces them
        self.republish(uri)
        if result.get("status") == "ok":
            headline = view.compile_headline(result) if job.mode == "compile" else view.headline(result) or ""
            self._progress_end(token, headline)
            log.info("perflsp: profiled %s in %.1f s: %s", job.qualname, elapsed, headline)
            return {"status": "ok", "regime": (result.get("verdict") or {}).get("regime"), "headline": headline,
                    "exit_code": code}
        error = result.get("error") or {}
        kind = error.get("kind", "error")
        text = f"profiling {job.qualname} failed ({kind}): {error.get('message', '')}"
        frame = _user_frame(error.get("traceback"), job.path)
        if frame and kind == "exception":
            text += f" at {frame}"
        if kind == "usage" and "setup=" not in text:
            text += (" (give the function inputs: @perflsp.profile(setup=make_inputs), or set "
                     "[tool.perflsp] profile-command)")
        self._progress_end(token, f"failed: {kind}")
        self.message(T.MessageType.Error, text)
        return {"status": "error", "kind": kind, "message": text, "exit_code": code}

    def _no_result(self, job: Job, code: int, stdout: str, shown: str, origin: str,
                   token: Optional[str]) -> Dict[str, Any]:
        """The runtime ended without a result: say why from the end of its output."""
        tail = "\n".join(job.stderr[-15:]) or stdout.strip()[-1500:]
        missing = "No module named 'torch'" in tail
        text = (f"profiling {job.qualname} failed: torch is not installed in the interpreter {shown} "
                f"(chosen from {origin})" if missing else
                f"profiling {job.qualname} failed (exit status {code}, interpreter {shown}) without a result: "
                f"{tail[-800:]}")
        self._progress_end(token, "failed")
        self.message(T.MessageType.Error, text)
        return {"status": "error", "kind": "crash", "message": text, "exit_code": code}

    def _finish_breaks(self, uri: str, job: Job, code: int, out: str, stdout: str, shown: str, origin: str,
                       token: Optional[str]) -> Dict[str, Any]:
        """`--graph-breaks` finished: keep its {"target", "compile"} document and show the breaks."""
        try:
            with open(out, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError):
            return self._no_result(job, code, stdout, shown, origin, token)
        self.breaks.setdefault(job.path, {})[job.qualname] = Entry(document, None)
        self.republish(uri)
        block = document["compile"]
        summary = compile_summary(block)
        self._progress_end(token, summary)
        if block["error"] is not None:
            text = f"finding graph breaks in {job.qualname} failed: {summary}"
            self.message(T.MessageType.Error, text)
            return {"status": "error", "kind": block["error"]["kind"], "message": text, "exit_code": code}
        return {"status": "ok", "headline": summary, "exit_code": code}

    # --- $/progress --------------------------------------------------------------------------------------

    async def _progress_begin(self, job: Job) -> Optional[str]:
        if not self.server.capability("window.work_done_progress"):
            return None
        token = f"perflsp-profile-{uuid.uuid4().hex[:12]}"
        try:
            await self.server.work_done_progress.create_async(token)
        except Exception as exc:  # the client refused: run without progress
            log.info("perflsp: no progress for profiling: %s", exc)
            return None
        job.token = token
        title = {"compile": "Trying torch.compile on", "breaks": "Finding graph breaks in",
                 "record": "Recording a run of"}.get(job.mode, "Profiling")
        title = f"{title} {job.qualname}"
        self.server.work_done_progress.begin(token, T.WorkDoneProgressBegin(
            title=title, cancellable=True, message="starting", percentage=0))
        future = self.server.work_done_progress.tokens.get(token)
        if future is not None:
            loop = asyncio.get_running_loop()
            future.add_done_callback(lambda f: loop.call_soon_threadsafe(self.cancel, job) if f.cancelled() else None)
        return token

    def _progress_report(self, token: str, message: str, percentage: Optional[int]) -> None:
        self.server.work_done_progress.report(token, T.WorkDoneProgressReport(message=message, percentage=percentage,
                                                                              cancellable=True))

    def _progress_end(self, token: Optional[str], message: str) -> None:
        if token is not None:
            self.server.work_done_progress.end(token, T.WorkDoneProgressEnd(message=message))
            self.server.work_done_progress.tokens.pop(token, None)

    def shutdown(self) -> None:
        for job in list(self.running.values()):
            job.cancelled = True
            if job.process is not None and job.process.returncode is None:
                _kill_tree(job.process.pid)


async def _lines(stream: asyncio.StreamReader, keep: int = KEPT_LINE_BYTES) -> AsyncIterator[bytes]:
    """The stream's lines, each cut to `keep` bytes: a line of any length is read through
    (`StreamReader.readline` fails on one longer than its 64 KiB limit)."""
    pending, overlong = b"", False
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            if pending:
                yield pending
            return
        *complete, rest = chunk.split(b"\n")
        for part in complete:
            if not overlong:
                yield (pending + part)[:keep]
            pending, overlong = b"", False
        if not overlong:
            pending += rest
            if len(pending) > keep:
                yield pending[:keep]
                pending, overlong = b"", True


def plot_path(workspace: Path, path: str, qualname: str) -> Path:
    """The roofline plot (self-contained HTML) the hover links to, beside the results."""
    return results_dir(workspace) / result_filename(Path(path).stem, qualname).replace(".json", ".roofline.html")


def _user_frame(traceback: Optional[str], path: str) -> Optional[str]:
    """`file.py:12 in step` for the innermost frame of the user's traceback in the profiled file, else any file."""
    if not traceback:
        return None
    import re

    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', traceback)
    if not frames:
        return None
    mine = [f for f in frames if os.path.realpath(f[0]) == path] or frames
    file, line, name = mine[-1]
    return f"{os.path.basename(file)}:{line} in {name}"
