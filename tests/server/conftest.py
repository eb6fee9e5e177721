"""End-to-end harness: the real server over stdio, driven by pytest-lsp with recorded client capabilities.

`shared(spec)` hands out a server with default settings that many tests share (each in its own
folder; a server start costs ~1 s of CPU). `start(...)` spawns `python -m perflsp.server`, initializes it with the capabilities a real client
recorded (Neovim 0.7, VS Code 1.65, Emacs 29), optionally extended with what newer clients add
(pull diagnostics, notebook sync), and returns a `Session` with small helpers. Every publish is
recorded with its arrival time so tests can reason about debounce and stale results.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest
import pytest_asyncio
from pytest_asyncio import is_async_test
from lsprotocol import types as T
from lsprotocol.converters import get_converter
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

NEOVIM = "neovim@v0.7.0"
VSCODE = "visual_studio_code@v1.65.2"
EMACS = "emacs@v29.1"
SERVER = [sys.executable, "-m", "perflsp.server"]
# The rules these tests rely on; others are being written concurrently and would add findings
# to the sample files. Sent as editor settings, so each workspace's pyproject still applies.
PINNED = ["PFL101", "PFL106", "PFL502"]

# A file every rule family the tests rely on flags: PFL101 (`.item()` in a loop, no fix), PFL502
# (`torch.log(1 + x)`, unsafe fix) and PFL106 (`.cuda()` in a loop, safe fix).
TRAIN = """\
import torch


def train(model, loader, opt):
    for x, y in loader:
        loss = model(x).sum()
        print(loss.item())
        z = torch.log(1 + x)
        w = x.pin_memory().cuda()
"""


def capabilities(spec: str, pull: bool = False, notebooks: bool = False) -> T.ClientCapabilities:
    """A recorded client's capabilities, plus pull diagnostics and notebook sync as VS Code >= 1.73 sends them."""
    converter = get_converter()
    raw: Dict[str, Any] = converter.unstructure(client_capabilities(spec))
    if pull:
        raw.setdefault("textDocument", {})["diagnostic"] = {"dynamicRegistration": True, "relatedDocumentSupport": False}
        raw.setdefault("workspace", {})["diagnostics"] = {"refreshSupport": True}
    if notebooks:
        raw["notebookDocument"] = {"synchronization": {"dynamicRegistration": True, "executionSummarySupport": True}}
    return converter.structure(raw, T.ClientCapabilities)


def _record_publish(client: LanguageClient, params: T.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.append((time.monotonic(), params))  # type: ignore[attr-defined]


def _register_capability(client: LanguageClient, params: T.RegistrationParams) -> None:
    client.registrations.extend(params.registrations)  # type: ignore[attr-defined]


def make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    features = dict(DEFAULT_CLIENT_FEATURES)
    features[T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = _record_publish
    features[T.CLIENT_REGISTER_CAPABILITY] = _register_capability  # accept like VS Code and Emacs do
    register_lsp_features(client, features)
    client.published = []  # type: ignore[attr-defined]
    client.registrations = []  # type: ignore[attr-defined]
    return client


class Session:
    def __init__(self, client: LanguageClient, root: Path, result: T.InitializeResult):
        self.client = client
        self.root = root
        self.result = result
        self.versions: Dict[str, int] = {}
        self.closed = False  # set by tests that shut the server down themselves

    def within(self, folder: str) -> "Session":
        """The same server, with this test's files in their own folder of the shared workspace."""
        view = Session(self.client, self.root / folder, self.result)
        view.versions = self.versions
        return view

    # --- files and documents ---------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.root / name

    def uri(self, name: str) -> str:
        return self.path(name).as_uri()

    def write(self, name: str, text: str) -> Path:
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def open(self, name: str, text: Optional[str] = None) -> str:
        """Open a file (written to disk first, as editors open files that exist)."""
        if text is None:
            text = self.path(name).read_text(encoding="utf-8")
        else:
            self.write(name, text)
        uri = self.uri(name)
        self.versions[uri] = 1
        self.client.text_document_did_open(T.DidOpenTextDocumentParams(
            T.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def replace(self, uri: str, text: str) -> int:
        """Send the whole new text (allowed under incremental sync); returns the new version."""
        self.versions[uri] += 1
        self.client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            [T.TextDocumentContentChangeWholeDocument(text=text)]))
        return self.versions[uri]

    def edit(self, uri: str, start: tuple, end: tuple, text: str) -> int:
        """An incremental change, as editors send while typing."""
        self.versions[uri] += 1
        self.client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            [T.TextDocumentContentChangePartial(range=T.Range(T.Position(*start), T.Position(*end)), text=text)]))
        return self.versions[uri]

    def save(self, uri: str) -> None:
        self.client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri=uri)))

    # --- results -------------------------------------------------------------------------------------

    def published(self, uri: str) -> List[T.PublishDiagnosticsParams]:
        return [p for _, p in self.client.published if p.uri == uri]  # type: ignore[attr-defined]

    async def diagnostics(self, uri: str, version: Optional[int] = None,
                          where: Callable[[Sequence[T.Diagnostic]], bool] = lambda ds: True,
                          timeout: float = 15.0) -> List[T.Diagnostic]:
        """Wait for a push for `uri` (of `version`, when given) whose diagnostics satisfy `where`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for params in reversed(self.published(uri)):
                if (version is None or params.version == version) and where(params.diagnostics):
                    return list(params.diagnostics)
            await asyncio.sleep(0.02)
        raise AssertionError(f"no matching diagnostics for {uri} (version {version}) within {timeout}s; "
                             f"got {[(p.version, [d.code for d in p.diagnostics]) for p in self.published(uri)]}")

    async def pull(self, uri: str, previous: Optional[str] = None):
        return await self.client.text_document_diagnostic_async(
            T.DocumentDiagnosticParams(text_document=T.TextDocumentIdentifier(uri=uri), previous_result_id=previous))

    async def actions(self, uri: str, line: int, only: Optional[List[str]] = None,
                      end: Optional[tuple] = None) -> List[T.CodeAction]:
        rng = T.Range(T.Position(line, 0), T.Position(*(end or (line, 200))))
        return list(await self.client.text_document_code_action_async(T.CodeActionParams(
            T.TextDocumentIdentifier(uri=uri), rng, T.CodeActionContext(diagnostics=[], only=only))) or [])

    async def edit_of(self, action: T.CodeAction) -> T.WorkspaceEdit:
        """The action's edit, resolving it first when the server deferred it."""
        if action.edit is None:
            action = await self.client.code_action_resolve_async(action)
        assert action.edit is not None, f"no edit for {action.title!r}"
        return action.edit

    def log_text(self) -> str:
        return "\n".join(m.message for m in self.client.log_messages)


def text_edits(edit: T.WorkspaceEdit, uri: str) -> List[T.TextEdit]:
    if edit.document_changes:
        return [e for change in edit.document_changes if change.text_document.uri == uri for e in change.edits]
    return list((edit.changes or {}).get(uri, []))


def apply_edits(text: str, edits: Sequence[T.TextEdit], encoding: str = "utf-16") -> str:
    """Apply LSP edits the way an editor does (an independent re-implementation, not the server's)."""
    lines = text.split("\n")

    def offset(pos: T.Position) -> int:
        if pos.line >= len(lines):
            return len(text)
        before = sum(len(line) + 1 for line in lines[: pos.line])
        units = 0
        for index, char in enumerate(lines[pos.line]):
            if units >= pos.character:
                return before + index
            units += len(char.encode("utf-16-le")) // 2 if encoding == "utf-16" else (
                len(char.encode()) if encoding == "utf-8" else 1)
        return before + len(lines[pos.line])

    spans = sorted(((offset(e.range.start), offset(e.range.end), e.new_text) for e in edits), reverse=True)
    for begin, end, new in spans:
        text = text[:begin] + new + text[end:]
    return text


def pytest_collection_modifyitems(items):
    # One event loop for the whole session, so servers started once (see `shared`) serve many tests.
    here = Path(__file__).parent
    for item in items:
        if is_async_test(item) and here in Path(item.path).parents:
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)


async def _initialize(client: LanguageClient, spec: str, root: Path, *, pull: bool, notebooks: bool,
                      init_options: Any, folders: Optional[Sequence[str]]) -> T.InitializeResult:
    workspace_folders = [T.WorkspaceFolder(uri=(root / f).as_uri(), name=f) for f in folders] if folders else \
        [T.WorkspaceFolder(uri=root.as_uri(), name=root.name)]
    options = dict(init_options or {})
    # PFL106 and PFL502 are preview rules: the server's behaviour, not the tiers, is under test here.
    options["settings"] = {"select": PINNED, "preview": True, **options.get("settings", {})}
    return await client.initialize_session(T.InitializeParams(
        capabilities=capabilities(spec, pull=pull, notebooks=notebooks), root_uri=root.as_uri(),
        workspace_folders=workspace_folders, initialization_options=options))


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def _shared_servers(tmp_path_factory):
    """Servers with default settings, started once and shared by the tests that only read."""
    servers: Dict[tuple, Session] = {}

    async def get(spec: str, pull: bool, notebooks: bool) -> Session:
        key = (spec, pull, notebooks)
        if key not in servers:
            root = tmp_path_factory.mktemp("shared")
            client = await ClientServerConfig(server_command=SERVER, client_factory=make_client).start()
            result = await _initialize(client, spec, root, pull=pull, notebooks=notebooks, init_options=None,
                                       folders=None)
            servers[key] = Session(client, root, result)
        return servers[key]

    yield get
    for session in servers.values():
        await asyncio.wait_for(session.client.shutdown_session(), timeout=15)
        await session.client.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def shared(_shared_servers, request):
    """`await shared(spec)`: a running server with default settings, this test's files in their own folder."""
    async def get(spec: str = NEOVIM, *, pull: bool = False) -> Session:
        # VS Code sessions sync notebooks (as VS Code >= 1.67 does), so notebook tests share them too.
        session = await _shared_servers(spec, pull, spec == VSCODE)
        return session.within(request.node.name.replace("[", "-").replace("]", "").replace("@", "-"))

    return get


@pytest_asyncio.fixture(loop_scope="session")
async def start(tmp_path: Path):
    """A factory of initialized sessions; every session is shut down (and checked to exit) at the end."""
    sessions: List[Session] = []
    clients: List[LanguageClient] = []

    async def _start(spec: str = NEOVIM, *, pull: bool = False, notebooks: bool = False,
                     settings: Optional[Dict[str, Any]] = None, init_options: Any = None,
                     folders: Optional[Sequence[str]] = None, root: Optional[Path] = None,
                     env: Optional[Dict[str, str]] = None) -> Session:
        root = root or tmp_path / "ws"
        root.mkdir(parents=True, exist_ok=True)
        config = ClientServerConfig(server_command=SERVER, client_factory=make_client,
                                    server_env={**os.environ, **env} if env else None)
        client = await config.start()
        clients.append(client)
        if settings is not None:
            client.set_configuration({"perflsp": settings})
        result = await _initialize(client, spec, root, pull=pull, notebooks=notebooks, init_options=init_options,
                                   folders=folders)
        sessions.append(Session(client, root, result))
        return sessions[-1]

    yield _start
    for session in sessions:
        if not session.closed and session.client.error is None:
            await asyncio.wait_for(session.client.shutdown_session(), timeout=15)
    for client in clients:
        await client.stop()
