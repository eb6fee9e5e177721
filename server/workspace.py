"""Whole-workspace diagnostics: every Python file of each workspace folder, not only the open ones.

Enabled by the `workspaceDiagnostics` setting. One background thread at the lowest OS priority
checks the files in small batches with `check_paths` and the `.perflsp_cache` of `perflsp check`
(so a file the CLI already checked costs a read and a digest), every batch judged with the whole
folder's project graph (`projects`), and pauses while an open document is being analysed: the
file being typed in always goes first. Results are pushed, or served by
`workspace/diagnostic` when the client pulls. Open documents are left out (their live diagnostics
win); notebooks on disk are left out too, since their cells have no uris until the notebook is open.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from lsprotocol import types as T
from pygls.uris import from_fs_path

from perflsp.rules.runner import read_text
from perflsp.server import convert
from perflsp.server.analysis import result_id
from perflsp.server.settings import EditorSettings, resolve

if TYPE_CHECKING:
    from perflsp.findings import Finding
    from perflsp.rules.project_index import ProjectIndex
    from perflsp.server.app import PerflspServer

log = logging.getLogger("perflsp.server")

CACHE_DIR = ".perflsp_cache"  # the default of `perflsp check --cache-dir`
BATCH = 16
SCANNED = (".py", ".pyi")


class WorkspaceScan:
    def __init__(self, server: "PerflspServer"):
        self.server = server
        self.results: Dict[str, Tuple[str, List[T.Diagnostic]]] = {}  # uri -> (result id, diagnostics)
        # path -> digest of the project facts its diagnostics were computed with (None: judged alone)
        self.facts_keys: Dict[str, Optional[str]] = {}
        self.idle = asyncio.Event()
        self.idle.set()
        self.started = False
        self._requested = 0  # bumped on the loop for each request; the thread reports which it finished
        self._wake = threading.Condition()
        self._todo_all = False
        self._todo_files: Set[str] = set()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def enabled(self) -> bool:
        return any(s.workspace_diagnostics for s in self.server.config.all())

    # --- requests (event loop) ----------------------------------------------------------------------

    def scan_all(self) -> None:
        if not self.enabled():
            self._clear_all()
            return
        self._request(all_files=True)

    def scan_files(self, paths: Sequence[str]) -> None:
        if self.enabled() and paths:
            self._request(files=paths)

    def removed(self, paths: Sequence[str]) -> None:
        for path in paths:
            self.facts_keys.pop(str(Path(path).resolve()), None)
            uri = from_fs_path(path)
            if uri and self.results.pop(uri, None) is not None:
                self.server.push(uri, [], None)

    def _request(self, all_files: bool = False, files: Sequence[str] = ()) -> None:
        self.started = True
        self._requested += 1
        self.idle.clear()
        with self._wake:
            self._todo_all = self._todo_all or all_files
            self._todo_files.update(files)
            self._wake.notify()
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._work, name="perflsp-workspace", daemon=True)
            self._thread.start()

    def _clear_all(self) -> None:
        self.facts_keys.clear()
        for uri in list(self.results):
            del self.results[uri]
            self.server.push(uri, [], None)

    async def report(self, previous: Sequence[T.PreviousResultId]) -> T.WorkspaceDiagnosticReport:
        """The `workspace/diagnostic` answer: full reports for what changed since `previous`."""
        try:  # whether the scan is enabled is an editor setting, maybe still on its way
            await asyncio.wait_for(self.server.config.ready.wait(), timeout=5.0)
        except asyncio.TimeoutError:
            pass
        if not self.enabled():
            return T.WorkspaceDiagnosticReport(items=[])
        if not self.started:
            self.scan_all()
        await self.idle.wait()
        known = {p.uri: p.value for p in previous}
        items: List = []
        for uri, (rid, diagnostics) in sorted(self.results.items()):
            if self.server.is_open(uri):
                continue
            if known.get(uri) == rid:
                items.append(T.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, result_id=rid, version=None))
            else:
                items.append(T.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=diagnostics, result_id=rid,
                                                                     version=None))
        return T.WorkspaceDiagnosticReport(items=items)

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify()

    # --- the worker thread -------------------------------------------------------------------------

    def _post(self, fn, *args) -> None:
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop closed meanwhile (exit)
                pass

    def _work(self) -> None:
        lower_thread_priority()
        while not self._stop.is_set():
            with self._wake:
                while not (self._todo_all or self._todo_files or self._stop.is_set()):
                    self._wake.wait()
                requested = self._requested
                all_files, files = self._todo_all, sorted(self._todo_files)
                self._todo_all, self._todo_files = False, set()
            if self._stop.is_set():
                return
            started = time.perf_counter()
            try:
                count = self._scan(all_files, files)
                log.info("perflsp: workspace diagnostics: %d files in %.1f s", count, time.perf_counter() - started)
            except Exception:
                log.exception("perflsp: the workspace scan failed")
            self._post(self._finished, requested)

    def _finished(self, requested: int) -> None:
        if requested == self._requested:
            self.idle.set()
            self.server.refresh_diagnostics()

    def _scan(self, all_files: bool, files: Sequence[str]) -> int:
        from perflsp.config import ConfigError
        from perflsp.rules.runner import discover

        count = 0
        for folder_uri, folder in self.server.folder_paths():
            editor = self.server.config.for_path(folder)
            if not editor.workspace_diagnostics:
                continue
            if all_files:
                try:
                    try:
                        paths = discover([folder], editor.overrides_dict())
                    except ConfigError:  # bad editor overrides: the files the project's config lists
                        paths = discover([folder])
                except (ConfigError, OSError) as exc:
                    # The config problem is shown once like any other; the scan waits for the fix.
                    self._post(self.server.report_config, resolve(Path(folder) / "__init__.py", editor))
                    log.warning("perflsp: workspace diagnostics skipped for %s: %s", folder, exc)
                    continue
                seen = {from_fs_path(str(p.resolve())) for p in paths}
                self._post(self._forget_missing, folder, seen)
            else:
                paths = [Path(f) for f in files if inside(f, folder)]
            paths = [p for p in paths if p.suffix in SCANNED and p.is_file()
                     and not self.server.is_open(from_fs_path(str(p.resolve())) or "")]
            index = self.server.projects.index_for(str(Path(folder).resolve()))
            if index is not None and paths:
                index.load()  # no-op once loaded; until then the batches would be judged alone
            for start in range(0, len(paths), BATCH):
                if self._stop.is_set():
                    return count
                while self.server.docs.in_flight and not self._stop.is_set():
                    time.sleep(0.05)  # someone is typing: their file first
                self._check(paths[start:start + BATCH], Path(folder), editor, index)
                count += len(paths[start:start + BATCH])
        return count

    def _check(self, batch: List[Path], folder: Path, editor: EditorSettings, index: "Optional[ProjectIndex]") -> None:
        from perflsp.config import ConfigError
        from perflsp.rules.project import facts_digest
        from perflsp.rules.runner import Cache, check_paths, check_text

        keys: Dict[str, Optional[str]] = {}

        def facts_of(path: Path, text: str) -> Optional[Dict[str, Any]]:
            facts = index.facts(str(path), text) if index is not None else None
            keys[str(path)] = facts_digest(facts) if facts is not None else None
            return facts

        try:
            outcome = [(r.path, r.findings, r.error) for r in check_paths(
                batch, editor.overrides_dict(), jobs=1, cache=Cache(folder / CACHE_DIR), facts_of=facts_of)]
        except ConfigError:
            # One of these files has a broken config: check them one by one with the server's
            # fallback (defaults), without the cache, whose keys assume valid settings.
            outcome = []
            for path in batch:
                try:
                    text = read_text(path)
                    outcome.append((str(path), check_text(text, str(path), resolve(path, editor).settings,
                                                          facts_of(path, text)), None))
                except (OSError, ValueError) as exc:
                    outcome.append((str(path), [], str(exc)))
        for path, findings, error in outcome:
            if error:
                log.debug("perflsp: %s skipped: %s", path, error)
                continue
            resolved = str(Path(path).resolve())
            uri = from_fs_path(resolved)
            if uri:
                self._post(self._store, uri, _diagnostics(Path(path), uri, findings, self.server.encoder),
                           resolved, keys.get(path))

    # --- results (event loop) -------------------------------------------------------------------

    def _store(self, uri: str, diagnostics: List[T.Diagnostic], path: str, facts_key: Optional[str]) -> None:
        if self.server.is_open(uri):
            return
        self.facts_keys[path] = facts_key
        rid = result_id(diagnostics)
        previous = self.results.get(uri)
        self.results[uri] = (rid, diagnostics)
        if previous is None or previous[0] != rid:
            self.server.push(uri, diagnostics, None)

    def _forget_missing(self, folder: str, seen: Set[str]) -> None:
        for uri in [u for u in self.results if u not in seen and inside(self.server.path_of(u), folder)]:
            del self.results[uri]
            self.facts_keys.pop(str(self.server.path_of(uri).resolve()), None)
            self.server.push(uri, [], None)


def inside(path, folder: str) -> bool:
    path = str(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def lower_thread_priority() -> None:
    """Background work yields the CPU to the editor and to the analysis of the file being typed in."""
    try:  # Linux: a thread id is a valid "process" for setpriority and only that thread is niced
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def _diagnostics(path: Path, uri: str, findings: "List[Finding]", enc: convert.Encoder) -> List[T.Diagnostic]:
    if not findings:
        return []
    try:
        lines = convert.split_lines(read_text(path))
    except (OSError, ValueError):
        return []
    return [convert.diagnostic(f, lines, enc, lambda cell: (uri, lines)) for f in findings]
