"""The language server's wiring: LSP messages in, engine calls out (`perflsp serve`).

Diagnostics are pulled (`textDocument/diagnostic`, `workspace/diagnostic`) when the client
advertises pull diagnostics and pushed otherwise, as Ruff's server does. The modules beside this
one do the work: `documents` schedules analyses, `analysis` runs the engine in a worker thread,
`convert` speaks LSP positions, `actions` and `hover` answer requests, `configuration` follows
settings and config files, `workspace` checks the files that are not open, `notebooks` maps cells,
`projects` keeps each folder's project graph current as files are typed in and change on disk,
`protocol` puts pygls right where it departs from JSON-RPC and LSP, `transport` reads messages
off the stream.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from functools import reduce
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple
from urllib.parse import unquote

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from perflsp import __version__
from perflsp.rules.runner import read_text
from perflsp.server import START_UP_S, end_start_up
from perflsp.server import actions, hover, notebooks, profiling, protocol, recording, transport
from perflsp.server import log as client_log
from perflsp.server.analysis import WARMING, Part, Result, Snapshot
from perflsp.server.configuration import CONFIG_NAMES, EditorConfig
from perflsp.server.convert import SOURCE, Encoder
from perflsp.server.documents import GC_FREEZE, Documents, Unit
from perflsp.server.projects import Projects
from perflsp.server.settings import EditorSettings, Resolved, key_line
from perflsp.server.workspace import SCANNED, WorkspaceScan

log = logging.getLogger("perflsp.server")

PYTHON_SUFFIXES = (".py", ".pyi")


class PerflspServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("perflsp", __version__, text_document_sync_kind=T.TextDocumentSyncKind.Incremental,
                         notebook_document_sync=notebooks.SYNC_OPTIONS, protocol_cls=protocol.PerflspProtocol)
        self.docs = Documents(self)
        self.config = EditorConfig(self)
        self.scan = WorkspaceScan(self)
        self.projects = Projects(self)
        self.profiles = profiling.Profiler(self)
        self.recorder = recording.Recorder(self)
        self.encoder = Encoder()
        self.pull = False  # the client pulls diagnostics (else they are pushed)
        self.log_handler = client_log.install(self._log_to_client)
        self.shown: Set[str] = set()  # problems already shown in a message (once each)
        self.config_diagnostics: Set[str] = set()  # config file uris holding a config-error diagnostic
        self.shutdown_requested = False
        self.exit_code = 0

    # --- small helpers the other modules use --------------------------------------------------------

    def capability(self, dotted: str) -> Any:
        """A client capability by its snake_case path (`text_document.diagnostic`), or None."""
        try:
            return reduce(getattr, dotted.split("."), self.client_capabilities)
        except AttributeError:
            return None

    def lazy_edits(self) -> bool:
        props = self.capability("text_document.code_action.resolve_support.properties") or []
        return bool(self.capability("text_document.code_action.data_support")) and "edit" in props

    def folder_paths(self) -> List[Tuple[str, str]]:
        """(uri, path) of every workspace folder; the root when the client sent no folders."""
        out = []
        for folder in self.workspace.folders.values():
            path = to_fs_path(folder.uri)
            if path:
                out.append((folder.uri, path))
        if not out and self.workspace.root_path:
            out.append((self.workspace.root_uri, self.workspace.root_path))
        return out

    def path_of(self, uri: str, suffix: str = ".py") -> Path:
        """The file a document's settings are looked up for; untitled documents count as the root's."""
        path = to_fs_path(uri) if uri.startswith("file:") else None
        if path:
            return Path(path)
        folders = self.folder_paths()
        return Path(folders[0][1] if folders else os.getcwd()) / f"untitled{suffix}"

    def editor_for_uri(self, uri: str) -> EditorSettings:
        return self.config.for_path(str(self.path_of(uri)))

    def unit_for(self, uri: str) -> Optional[Tuple[Unit, str]]:
        """The open unit showing `uri` (a document, or the notebook of a cell) and the part's uri."""
        unit = self.docs.units.get(uri)
        if unit is not None:
            return unit, uri
        key = notebooks.notebook_key(self, uri)
        unit = self.docs.units.get(key) if key else None
        return (unit, uri) if unit is not None else None

    def is_open(self, uri: str) -> bool:
        """Whether a file is open (the workspace scan asks from its thread: hence the copies)."""
        path = to_fs_path(uri) if uri.startswith("file:") else None
        if not path:
            return uri in self.docs.units
        resolved = str(Path(path).resolve())
        return any(u.path == resolved for u in list(self.docs.units.values()))

    def snapshot(self, unit: Unit, reason: str) -> Optional[Snapshot]:
        if unit.notebook:
            return notebooks.snapshot(self, unit.key, unit.generation, reason)
        doc = self.workspace.text_documents.get(unquote(unit.key))
        if doc is None:
            return None
        return Snapshot(unit.key, self.path_of(unit.key), unit.generation, [Part(unit.key, doc.source, doc.version)],
                        None, reason)

    def workspace_edit(self, changes: Dict[str, Tuple[Optional[int], List[T.TextEdit]]]) -> T.WorkspaceEdit:
        if self.capability("workspace.workspace_edit.document_changes"):
            # Versioned: the client refuses the edit if the document changed since it was computed.
            return T.WorkspaceEdit(document_changes=[
                T.TextDocumentEdit(text_document=T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                                   edits=edits)
                for uri, (version, edits) in changes.items()])
        return T.WorkspaceEdit(changes={uri: edits for uri, (_, edits) in changes.items()})

    # --- publishing ------------------------------------------------------------------------------------

    def push(self, uri: str, diagnostics: Sequence[T.Diagnostic], version: Optional[int]) -> None:
        """Publish diagnostics, unless the client pulls them."""
        if not self.pull:
            if uri in self.docs.units:  # open documents carry their profile results too
                diagnostics = self.profiles.decorate(uri, diagnostics)
            self.text_document_publish_diagnostics(
                T.PublishDiagnosticsParams(uri=uri, diagnostics=list(diagnostics), version=version))

    def deliver(self, unit: Unit, result: Result, pulled: bool) -> None:
        """A new result for an open unit: push it, or tell a pulling client that it changed."""
        if not self.pull:
            for uri, part in result.parts.items():
                self.push(uri, part.diagnostics, part.part.version)
            for uri in unit.published - set(result.parts):  # cells deleted from a notebook
                self.push(uri, [], None)
            unit.published = set(result.parts)
        elif not pulled and result.snapshot is not None and result.snapshot.reason in ("save", "config", "project"):
            self.refresh_diagnostics()

    def refresh_diagnostics(self) -> None:
        if self.pull and self.capability("workspace.diagnostics.refresh_support"):
            self.workspace_diagnostic_refresh(None)

    def report_config(self, resolved: Optional[Resolved]) -> None:
        """Show a configuration error once (message + a diagnostic on the config file); linting goes on.
        Show each warning once (a message)."""
        if resolved is None:
            return
        for warning in resolved.warnings:
            self.report_problem(warning, None, T.MessageType.Warning)
        if resolved.error is None:
            return
        self.report_problem(resolved.error, "perflsp uses its default settings until it is fixed"
                            if resolved.error_file else "perflsp ignores these editor settings until they are fixed")
        if resolved.error_file:
            uri = from_fs_path(resolved.error_file)
            if uri and uri not in self.config_diagnostics:
                try:
                    line = key_line(read_text(Path(resolved.error_file)), resolved.error)
                except (OSError, ValueError):
                    line = 0
                self.config_diagnostics.add(uri)
                # Pushed even to pulling clients: config files are not Python documents they pull for.
                self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[T.Diagnostic(
                    range=T.Range(start=T.Position(line=line, character=0), end=T.Position(line=line + 1, character=0)),
                    message=resolved.error, severity=T.DiagnosticSeverity.Error, source=SOURCE)]))

    def report_problem(self, problem: str, consequence: Optional[str],
                       kind: T.MessageType = T.MessageType.Error) -> None:
        if problem in self.shown:
            return
        self.shown.add(problem)
        log.log(logging.ERROR if kind == T.MessageType.Error else logging.WARNING, "perflsp: %s", problem)
        message = f"perflsp: {problem} ({consequence})" if consequence else f"perflsp: {problem}"
        self.window_show_message(T.ShowMessageParams(type=kind, message=message))

    def config_changed(self) -> None:
        """Config files or editor settings changed: clear config errors, check everything again."""
        self.log_handler.set_level_name(self.config.base.log_level)
        for uri in self.config_diagnostics:
            self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        self.config_diagnostics.clear()
        self.shown.clear()
        self._report_editor_problems()
        self.projects.configure()
        self.docs.relint_all("config")
        if self.scan.started or self.scan.enabled():
            self.scan.scan_all()

    def _report_editor_problems(self) -> None:
        for settings in self.config.all():
            for problem in settings.problems:
                self.report_problem(problem, "its default is used")

    def _log_to_client(self, params: T.LogMessageParams) -> None:
        if not self.shutdown_requested:
            self.window_log_message(params)


def _is_python(doc: T.TextDocumentItem) -> bool:
    # Notebooks opened as plain JSON text are not analysed: their findings belong to cells.
    return doc.uri.endswith(PYTHON_SUFFIXES) or (doc.language_id == "python" and not doc.uri.endswith(".ipynb"))


def create_server() -> PerflspServer:
    ls = PerflspServer()

    @ls.feature(T.INITIALIZE)
    def initialize(ls: PerflspServer, params: T.InitializeParams) -> None:
        ls.log_handler.loop = asyncio.get_running_loop()
        ls.pull = ls.capability("text_document.diagnostic") is not None
        # Send what the client says it shows (VS Code 1.65 declares both, eglot neither).
        def shows(field: str) -> bool:
            return bool(ls.capability(f"text_document.publish_diagnostics.{field}")
                        or ls.capability(f"text_document.diagnostic.{field}"))

        ls.encoder = Encoder(ls.workspace.position_encoding, related=shows("related_information"),
                             links=shows("code_description_support"))
        ls.config.initialization_options(params.initialization_options)
        ls.log_handler.set_level_name(ls.config.base.log_level)

    @ls.feature(T.INITIALIZED)
    async def initialized(ls: PerflspServer, params: T.InitializedParams) -> None:
        await ls.config.fetch()
        ls.log_handler.set_level_name(ls.config.base.log_level)
        log.info("perflsp %s: %s diagnostics, %s positions, linting %s", __version__,
                 "pull" if ls.pull else "push", ls.encoder.encoding, ls.config.base.run)
        ls._report_editor_problems()
        if ls.capability("workspace.did_change_configuration.dynamic_registration"):
            try:
                await ls.client_register_capability_async(T.RegistrationParams(registrations=[T.Registration(
                    id="perflsp-configuration", method=T.WORKSPACE_DID_CHANGE_CONFIGURATION,
                    register_options=T.DidChangeConfigurationRegistrationOptions(section="perflsp"))]))
            except Exception as exc:
                log.info("perflsp: could not register for configuration changes: %s", exc)
        await ls.config.watch()
        ls.projects.configure()
        if ls.scan.enabled():
            ls.scan.scan_all()

    # --- text documents ---------------------------------------------------------------------------

    @ls.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: PerflspServer, params: T.DidOpenTextDocumentParams) -> None:
        if _is_python(params.text_document):
            ls.profiles.opened(params.text_document.uri)
            unit = ls.docs.opened(params.text_document.uri)
            path = to_fs_path(params.text_document.uri) if params.text_document.uri.startswith("file:") else None
            unit.path = str(Path(path).resolve()) if path else None
            ls.projects.buffer(unit)

    @ls.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: PerflspServer, params: T.DidChangeTextDocumentParams) -> None:
        ls.projects.buffer(ls.docs.units.get(params.text_document.uri))
        ls.docs.changed(params.text_document.uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_SAVE, T.SaveOptions(include_text=False))
    def did_save(ls: PerflspServer, params: T.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri.rsplit("/", 1)[-1] in CONFIG_NAMES:
            ls.config_changed()  # a client that syncs TOML files too: no need to wait for a watcher
        else:
            ls.docs.saved(params.text_document.uri)
            unit = ls.docs.units.get(params.text_document.uri)
            if unit is not None and unit.path:
                ls.projects.files_changed([unit.path])  # a new file joins the graph once it exists on disk

    @ls.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: PerflspServer, params: T.DidCloseTextDocumentParams) -> None:
        _closed(ls, ls.docs.closed(params.text_document.uri))
        ls.profiles.closed(params.text_document.uri)

    # --- notebooks --------------------------------------------------------------------------------

    @ls.feature(T.NOTEBOOK_DOCUMENT_DID_OPEN)
    def nb_open(ls: PerflspServer, params: T.DidOpenNotebookDocumentParams) -> None:
        ls.docs.opened(params.notebook_document.uri, notebook=True)

    @ls.feature(T.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def nb_change(ls: PerflspServer, params: T.DidChangeNotebookDocumentParams) -> None:
        ls.docs.changed(params.notebook_document.uri)

    @ls.feature(T.NOTEBOOK_DOCUMENT_DID_SAVE)
    def nb_save(ls: PerflspServer, params: T.DidSaveNotebookDocumentParams) -> None:
        ls.docs.saved(params.notebook_document.uri)

    @ls.feature(T.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def nb_close(ls: PerflspServer, params: T.DidCloseNotebookDocumentParams) -> None:
        _closed(ls, ls.docs.closed(params.notebook_document.uri))

    # --- pull diagnostics ---------------------------------------------------------------------------

    # `inter_file_dependencies`: an edit in one notebook cell can change another cell's
    # diagnostics (a loop in cell 3 makes a function in cell 1 hot), so the client must pull again
    # for the other open documents after an edit.
    @ls.feature(T.TEXT_DOCUMENT_DIAGNOSTIC, T.DiagnosticOptions(
        identifier="perflsp", inter_file_dependencies=True, workspace_diagnostics=True))
    async def pull(ls: PerflspServer, params: T.DocumentDiagnosticParams):
        found = ls.unit_for(params.text_document.uri)
        if found is None:
            return T.FullDocumentDiagnosticReport(items=[])
        result = await ls.docs.latest(found[0])
        part = result.part(found[1])
        if part is None:
            return T.FullDocumentDiagnosticReport(items=[])
        result_id = part.result_id + ls.profiles.key(params.text_document.uri)
        if params.previous_result_id == result_id:
            return T.UnchangedDocumentDiagnosticReport(result_id=result_id)
        return T.FullDocumentDiagnosticReport(items=ls.profiles.decorate(params.text_document.uri, part.diagnostics),
                                              result_id=result_id)

    @ls.feature(T.WORKSPACE_DIAGNOSTIC)
    async def pull_workspace(ls: PerflspServer, params: T.WorkspaceDiagnosticParams):
        return await ls.scan.report(params.previous_result_ids)

    # --- code actions and hover -------------------------------------------------------------------

    @ls.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=actions.KINDS, resolve_provider=True))
    async def code_action(ls: PerflspServer, params: T.CodeActionParams):
        found = await actions.code_actions(ls, params)
        # "Profile this function" is neither a quick fix nor a source action; "Try torch.compile"
        # is a quick fix where the profile's lever names torch.compile.
        only = params.context.only
        found.extend(a for a in ls.profiles.code_actions(params.text_document.uri, params.range)
                     if not only or (a.kind is not None and actions.wanted(a.kind.value, only)))
        return found

    @ls.feature(T.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: PerflspServer, params: T.CodeAction):
        return await actions.resolve(ls, params)

    @ls.feature(T.TEXT_DOCUMENT_HOVER)
    async def on_hover(ls: PerflspServer, params: T.HoverParams):
        static = await hover.hover(ls, params)
        found = [text for text in (ls.profiles.hover(params.text_document.uri, params.position),
                                   ls.recorder.hover(params.text_document.uri, params.position)) if text]
        if not found:
            return static
        value = "\n\n---\n\n".join(found + ([static.contents.value] if static is not None else []))
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=value))

    @ls.feature(T.TEXT_DOCUMENT_CODE_LENS, T.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: PerflspServer, params: T.CodeLensParams):
        return ls.profiles.code_lenses(params.text_document.uri) + ls.recorder.code_lenses(params.text_document.uri)

    # --- profiling (explicit user actions only: it runs the user's code) ---------------------------

    @ls.command("perflsp.profileFunction")
    async def profile_function(ls: PerflspServer, *args: Any):
        uri, function = _target_args(args)
        return await ls.profiles.profile(uri, function)

    @ls.command("perflsp.compileFunction")
    async def compile_function(ls: PerflspServer, *args: Any):
        uri, function = _target_args(args)
        return await ls.profiles.profile(uri, function, mode="compile")

    @ls.command("perflsp.findGraphBreaks")
    async def find_graph_breaks(ls: PerflspServer, *args: Any):
        uri, function = _target_args(args)
        return await ls.profiles.profile(uri, function, mode="breaks")

    @ls.command("perflsp.profileAgain")
    async def profile_again(ls: PerflspServer, *args: Any):
        uri, function = _target_args(args)
        return await ls.profiles.profile(uri, function)

    @ls.command(recording.COMMAND)
    async def record_run(ls: PerflspServer, *args: Any):
        return await ls.recorder.record(args)

    @ls.command("perflsp.clearProfile")
    def clear_profile(ls: PerflspServer, *args: Any):
        uri, function = _target_args(args)
        return ls.profiles.clear(uri, function)

    # --- settings and files -------------------------------------------------------------------------

    @ls.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: PerflspServer, params: T.DidChangeConfigurationParams) -> None:
        if not ls.config.pushed(params.settings):
            await ls.config.fetch()  # VS Code sends `settings: null`: the values must be pulled
        ls.config_changed()

    @ls.feature(T.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: PerflspServer, params: T.DidChangeWatchedFilesParams) -> None:
        config = False
        changed: List[str] = []
        deleted: List[str] = []
        for event in params.changes:
            path = to_fs_path(event.uri)
            if not path:
                continue
            if os.path.basename(path) in CONFIG_NAMES:
                config = True
            elif path.endswith(SCANNED):
                (deleted if event.type == T.FileChangeType.Deleted else changed).append(path)
        ls.projects.files_changed(changed + deleted)
        if config:
            ls.config_changed()
        else:
            ls.scan.scan_files(changed)
            ls.scan.removed(deleted)

    @ls.feature(T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def did_change_folders(ls: PerflspServer, params: T.DidChangeWorkspaceFoldersParams) -> None:
        await ls.config.fetch()  # each folder may have its own editor settings
        ls.config_changed()

    # --- lifecycle --------------------------------------------------------------------------------

    @ls.feature(T.SHUTDOWN)
    def shutdown(ls: PerflspServer, params: None) -> None:
        ls.shutdown_requested = True
        ls.profiles.shutdown()
        ls.recorder.shutdown()
        ls.docs.shutdown()
        ls.scan.stop()
        ls.config.stop()

    @ls.feature(T.EXIT)
    def exit_(ls: PerflspServer, params: None) -> None:
        ls.exit_code = 0 if ls.shutdown_requested else 1  # LSP: exit without shutdown is an error

    return ls


def _target_args(args: Sequence[Any]) -> Tuple[str, Optional[str]]:
    """(uri, function qualname) from `[uri, function]` or `[{uri, function}]`."""
    if len(args) == 1 and isinstance(args[0], dict):
        return str(args[0].get("uri", "")), args[0].get("function") or args[0].get("qualname")
    if not args:
        return "", None
    return str(args[0]), (str(args[1]) if len(args) > 1 and args[1] else None)


def _closed(ls: PerflspServer, unit: Optional[Unit]) -> None:
    if unit is None:
        return
    ls.projects.closed(unit)
    for uri in unit.published:
        ls.push(uri, [], None)
    if unit.path and ls.scan.enabled():
        ls.scan.scan_files([unit.path])  # back to its on-disk state in the workspace diagnostics


def _warm_engine() -> None:
    """Import the engine and build the rule table while the client starts up (~0.5 s saved on the
    first diagnostics); analyses that start earlier simply wait on the import lock."""
    def warm() -> None:
        try:
            from perflsp.config import Settings
            from perflsp.rules.runner import check_text

            check_text("import torch\n", "warm-up.py", Settings())
            import perflsp.rules.fixes  # noqa: F401  (code actions)
            import perflsp.rules.notebook  # noqa: F401
        except Exception:  # the first real analysis will report the same problem properly
            log.debug("perflsp: warming up the engine failed", exc_info=True)
        finally:
            WARMING.clear()

    WARMING.set()

    threading.Thread(target=warm, name="perflsp-warm-up", daemon=True).start()


def serve(tcp: Optional[str] = None) -> int:
    """Run the server over stdio, or on `HOST:PORT` when `tcp` is given, until the client says exit.

    The process ends here with the LSP exit status (0 after `shutdown`, else 1); the return type
    is the CLI's contract, nothing returns in practice.
    """
    _warm_engine()
    timer = threading.Timer(START_UP_S, end_start_up, (GC_FREEZE,))  # no document opened: it ends all the same
    timer.daemon = True
    timer.start()
    server = create_server()
    if tcp:
        host, sep, port = tcp.rpartition(":")
        if not sep or not port.isdigit():
            raise SystemExit(f"perflsp serve: --tcp expects HOST:PORT, got {tcp!r}")
        transport.start_tcp(server, host or "127.0.0.1", int(port))
    else:
        transport.start_io(server)
    # Leave without tearing the interpreter down: finalizing libcst's and lsprotocol's thousands
    # of objects takes ~0.5 s the editor spends waiting for the process to end (the connection
    # is closed and nothing is left to flush but our own streams).
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(server.exit_code)
