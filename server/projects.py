"""The project graph behind the diagnostics: one `ProjectIndex` per workspace folder, fed by the
editor's events, so a file is judged with its whole folder's per-step model, as `perflsp check`
judges it, and open buffers count with their unsaved text.

An edit in one file can change what the graph says of another (typing a call in `forward` makes
a helper in another module per-step). After each analysis, and after files change on disk, the
open documents and the workspace diagnostics whose facts changed are computed again; pulling
clients are asked to pull again (`workspace/diagnostic/refresh`), pushing clients get new publishes.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple
from urllib.parse import unquote

from perflsp.server import release_free_memory
from perflsp.server.analysis import file_source
from perflsp.server.workspace import CACHE_DIR, inside, lower_thread_priority

if TYPE_CHECKING:
    from perflsp.rules.project_index import ProjectIndex
    from perflsp.server.app import PerflspServer
    from perflsp.server.documents import Unit

log = logging.getLogger("perflsp.server")

# Quiet time after the last analysis before a graph whose line numbers alone moved is rebuilt
# (0.2 s on pytorch-lightning, 1.1 s on diffusers): once per pause in typing, not per keystroke.
SETTLE_S = 1.0


class Projects:
    def __init__(self, server: "PerflspServer"):
        self.server = server
        self.indexes: Dict[str, "ProjectIndex"] = {}  # folder path -> index; replaced whole, read from threads
        self._timer: Optional[asyncio.TimerHandle] = None
        self._checking = False
        self._again = False
        self._builds_seen = 0

    # --- events (event loop) -----------------------------------------------------------------------

    def configure(self) -> None:
        """One index per workspace folder with its editor settings; a new one loads in the background."""
        from perflsp.rules.project_index import ProjectIndex

        indexes: Dict[str, ProjectIndex] = {}
        for _, folder in self.server.folder_paths():
            overrides = self.server.config.for_path(folder).overrides_dict()
            index = self.indexes.get(folder)
            if index is not None:
                index.reconfigure(overrides)
            else:
                index = ProjectIndex(Path(folder), overrides, Path(folder) / CACHE_DIR)
                for unit in self.server.docs.units.values():  # buffers opened before the folder was known
                    text = self._buffer_text(unit)
                    if unit.path and text is not None:
                        index.buffer_changed(unit.path, text)
                self._load(index)
            indexes[folder] = index
        self.indexes = indexes

    def buffer(self, unit: Optional["Unit"]) -> None:
        """A document was opened or edited: its text stands for the file in the graph."""
        text = self._buffer_text(unit) if unit is not None else None
        index = self.index_for(unit.path) if unit is not None else None
        if index is not None and text is not None:
            index.buffer_changed(unit.path, text)

    def closed(self, unit: Optional["Unit"]) -> None:
        index = self.index_for(unit.path) if unit is not None else None
        if index is not None:
            index.buffer_closed(unit.path)
            self.check_soon(0.0)

    def files_changed(self, paths: List[str]) -> None:
        """Files created, changed or deleted on disk (a watcher, or a save)."""
        for index in self.indexes.values():
            index.files_changed([p for p in paths if inside(p, str(index.root))])
        self.check_soon(0.0)

    def analysed(self) -> None:
        """An analysis was accepted: if it rebuilt a graph, others may be stale now; else look once
        typing pauses (line numbers may have moved)."""
        rebuilt = self._builds() != self._builds_seen
        self.check_soon(0.0 if rebuilt else SETTLE_S)

    # --- answers (worker threads) ----------------------------------------------------------------

    def index_for(self, path: Optional[str]) -> Optional["ProjectIndex"]:
        """The index of the innermost workspace folder holding `path`."""
        if not path:
            return None
        found = [index for index in self.indexes.values() if inside(path, str(index.root))]
        return max(found, key=lambda index: len(str(index.root))) if found else None

    def facts(self, path: Path, text: str) -> Optional[Dict[str, Any]]:
        """The facts of the file at `path` holding `text`, or None: judged alone (not loaded yet,
        outside every folder, or not part of the project)."""
        index = self.index_for(str(path.resolve()))
        if index is None:
            return None
        try:
            return index.facts(str(path), text)
        except Exception:  # a bug in the graph costs the cross-file evidence, never the diagnostics
            log.exception("perflsp: the project graph failed on %s; the file is judged alone", path)
            return None

    # --- looking for stale diagnostics -----------------------------------------------------------------

    def check_soon(self, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._start_check)

    def _start_check(self) -> None:
        self._timer = None
        if self.server.shutdown_requested:
            return
        if self._checking:
            self._again = True  # one check at a time; the next sees whatever changed meanwhile
            return
        self._checking = True
        task = asyncio.get_running_loop().create_task(self._check())
        self.server.docs.tasks.add(task)
        task.add_done_callback(self.server.docs.tasks.discard)

    async def _check(self) -> None:
        # Only documents whose latest result is for their current text: an edited one is analysed
        # anyway, and linting on save must not analyse unsaved text because another file changed.
        docs = [(unit, unit.path, file_source(unit.result.snapshot.parts[0]), unit.result.facts_key)
                for unit in self.server.docs.units.values()
                if not unit.notebook and unit.path and unit.current() and unit.result.snapshot is not None
                and unit.result.snapshot.parts]
        open_paths = {unit.path for unit in self.server.docs.units.values()}
        scanned = {path: key for path, key in self.server.scan.facts_keys.items() if path not in open_paths}
        try:
            stale_units, stale_files = await asyncio.get_running_loop().run_in_executor(
                self.server.docs.pool, self._stale, docs, scanned)
        except Exception:  # a bug here must not stop the diagnostics of the open documents
            log.exception("perflsp: looking for diagnostics the project graph made stale failed")
            stale_units, stale_files = [], []
        finally:
            self._checking = False
        for unit in stale_units:
            if not unit.closed:
                log.debug("perflsp: %s analysed again: the project graph says other things of it now", unit.key)
                self.server.docs.schedule(unit, 0.0, "project")
        self.server.scan.scan_files(stale_files)
        if self._again:
            self._again = False
            self.check_soon(0.0)

    def _stale(self, docs: List[Tuple["Unit", str, str, Optional[str]]], scanned: Dict[str, Optional[str]]
               ) -> Tuple[List["Unit"], List[str]]:
        """(worker) The open documents and the scanned files whose facts differ from those they
        were judged with."""
        from perflsp.rules.project import facts_digest

        for index in self.indexes.values():
            index.settle()
        self._builds_seen = self._builds()
        stale_units = []
        for unit, path, text, key in docs:
            facts = self.facts(Path(path), text)
            if facts is not None and facts_digest(facts) != key:
                stale_units.append(unit)
        stale_files = []
        for path, key in scanned.items():
            index = self.index_for(path)
            facts = index.facts(path) if index is not None else None
            if facts is not None and facts_digest(facts) != key:
                stale_files.append(path)
        return stale_units, stale_files

    # --- helpers -----------------------------------------------------------------------------------

    def _builds(self) -> int:
        return sum(index.builds for index in self.indexes.values())

    def _buffer_text(self, unit: Optional["Unit"]) -> Optional[str]:
        if unit is None or unit.notebook or not unit.path:
            return None
        doc = self.server.workspace.text_documents.get(unquote(unit.key))
        return doc.source if doc is not None else None

    def _load(self, index: "ProjectIndex") -> None:
        loop = asyncio.get_running_loop()

        def load() -> None:
            lower_thread_priority()
            try:
                index.load()
            except Exception:
                log.exception("perflsp: building the project graph of %s failed; its files are judged alone",
                              index.root)
                return
            finally:
                release_free_memory()  # what summarising every file of the folder freed
            try:
                loop.call_soon_threadsafe(self.check_soon, 0.0)
            except RuntimeError:  # the loop closed meanwhile (exit)
                pass

        threading.Thread(target=load, name="perflsp-project", daemon=True).start()
