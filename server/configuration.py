"""Where settings come from and when they change: editor settings per workspace folder, config files watched.

- Editor settings: `initializationOptions`, then `workspace/configuration` per folder when the
  client offers it (VS Code, Emacs), else what `didChangeConfiguration` pushes (Neovim 0.7).
- Config files (`pyproject.toml`, `perflsp.toml`): the client watches them when it can register
  file watchers; otherwise a one-second poll of the few files that can apply to the open documents
  notices the change. Either way every open document is analysed again.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from lsprotocol import types as T
from pygls.uris import to_fs_path

from perflsp.server.settings import EditorSettings, parse, section

if TYPE_CHECKING:
    from perflsp.server.app import PerflspServer

log = logging.getLogger("perflsp.server")

CONFIG_NAMES = ("pyproject.toml", "perflsp.toml")
POLL_INTERVAL_S = 1.0
WATCHERS = ["**/pyproject.toml", "**/perflsp.toml", "**/*.py", "**/*.pyi"]


class EditorConfig:
    def __init__(self, server: "PerflspServer"):
        self.server = server
        self.base = EditorSettings()  # initializationOptions, merged with what the client sends later
        self._initial: Dict[str, Any] = {}  # the raw initializationOptions
        self.folders: Dict[str, EditorSettings] = {}  # folder path -> settings pulled for it
        self.ready = asyncio.Event()
        self._poller: Optional[asyncio.Task] = None
        self._stamps: Dict[str, Optional[int]] = {}

    # --- editor settings ---------------------------------------------------------------------------

    def pulls(self) -> bool:
        return bool(self.server.capability("workspace.configuration"))

    def initialization_options(self, options: Any) -> None:
        self._initial = section(options)
        self.base = parse(self._initial)

    def _merged(self, value: Any) -> EditorSettings:
        # Keys the client sends win; keys it leaves out keep their initializationOptions value.
        return parse({**self._initial, **section(value)})

    async def fetch(self) -> None:
        """Ask the client for the `perflsp` section, globally and for every workspace folder."""
        try:
            if not self.pulls():
                return
            folders = self.server.folder_paths()
            items = [T.ConfigurationItem(section="perflsp")]
            items += [T.ConfigurationItem(scope_uri=uri, section="perflsp") for uri, _ in folders]
            try:
                values = await asyncio.wait_for(
                    self.server.workspace_configuration_async(T.ConfigurationParams(items=items)), timeout=5.0)
            except Exception as exc:  # a client that fails or never answers must not stop linting
                log.warning("perflsp: could not read the editor settings (%s); using the defaults", exc)
                return
            values = list(values or [])
            self.base = self._merged(values[0] if values else None)
            self.folders = {}
            for (_, path), value in zip(folders, values[1:]):
                if isinstance(value, dict):
                    self.folders[path] = self._merged(value)
        finally:
            self.ready.set()

    def pushed(self, settings: Any) -> bool:
        """`didChangeConfiguration` carrying the settings themselves; False when they must be pulled."""
        if self.pulls() or settings is None:
            return False
        self.base = self._merged(settings)
        return True

    def for_path(self, path: Optional[str]) -> EditorSettings:
        if path and self.folders:
            best: Tuple[int, Optional[EditorSettings]] = (-1, None)
            for folder, settings in self.folders.items():
                if (path == folder or path.startswith(folder.rstrip("/") + "/")) and len(folder) > best[0]:
                    best = (len(folder), settings)
            if best[1] is not None:
                return best[1]
        return self.base

    def all(self) -> List[EditorSettings]:
        return [self.base, *self.folders.values()]

    # --- config files ------------------------------------------------------------------------------

    async def watch(self) -> None:
        """Have the client watch config (and Python) files, or poll config files when it cannot."""
        if self.server.capability("workspace.did_change_watched_files.dynamic_registration"):
            options = T.DidChangeWatchedFilesRegistrationOptions(
                watchers=[T.FileSystemWatcher(glob_pattern=g) for g in WATCHERS])
            try:
                await self.server.client_register_capability_async(T.RegistrationParams(registrations=[
                    T.Registration(id="perflsp-watch", method=T.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                   register_options=options)]))
                return
            except Exception as exc:
                log.info("perflsp: the client refused file watching (%s); polling config files instead", exc)
        self._stamps = self._config_stamps()
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            stamps = self._config_stamps()
            if stamps != self._stamps:
                changed = sorted(p for p in set(stamps) | set(self._stamps) if stamps.get(p) != self._stamps.get(p))
                self._stamps = stamps
                log.info("perflsp: %s changed; checking the open files again", ", ".join(changed))
                self.server.config_changed()

    def _config_stamps(self) -> Dict[str, Optional[int]]:
        """mtimes of every config file that could apply to an open document or a workspace folder."""
        folders = {Path(p) for _, p in self.server.folder_paths()}
        for unit in self.server.docs.units.values():
            path = to_fs_path(unit.key)
            if path:
                folders.add(Path(path).parent)
        stamps: Dict[str, Optional[int]] = {}
        seen = set()
        for folder in folders:
            for parent in (folder, *folder.parents):
                if parent in seen:
                    break
                seen.add(parent)
                for name in CONFIG_NAMES:
                    candidate = parent / name
                    try:
                        stamps[str(candidate)] = candidate.stat().st_mtime_ns
                    except OSError:
                        pass
        return stamps

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
