"""Document sync under random incremental edits: the server's copy stays the client's, edit after edit.

Random edits from fixed seeds (so a failure is reproduced by its seed): ranges anywhere, also past
a line's or the document's end, text across lines with every kind of line break and characters
beyond ASCII and beyond the Basic Multilingual Plane, positions counted in UTF-16 as the client
negotiated. The server is the real one plus a request that reads back its copy (`probe_server.py`).
"""
from __future__ import annotations

import random
import re
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
import pytest_asyncio
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig

from tests.server.conftest import VSCODE, capabilities, make_client

PROBE = [sys.executable, str(Path(__file__).with_name("probe_server.py"))]
SEEDS = 40
EDITS_PER_DOCUMENT = 25
# LSP ends lines at \n, \r\n and \r only; form feeds, U+2028 and NEL are text on a line.
PIECES = ["a", "b", "x = 1", " ", "    ", "é", "ß", "中文", "😀", "𝔘", "e\u0301", "\n", "\n", "\r\n", "\r",
          "\x0c", "\u2028", "\x85", "\t", "'''", "#"]
_BREAK = re.compile(r"\r\n|\r|\n")

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def probe(tmp_path_factory):
    root = tmp_path_factory.mktemp("sync")
    client = await ClientServerConfig(server_command=PROBE, client_factory=make_client).start()
    result = await client.initialize_session(T.InitializeParams(
        capabilities=capabilities(VSCODE), root_uri=root.as_uri(),
        workspace_folders=[T.WorkspaceFolder(uri=root.as_uri(), name="sync")]))
    assert result.capabilities.position_encoding in (None, T.PositionEncodingKind.Utf16)
    yield client, root
    await client.shutdown_session()
    await client.stop()


# --- the client's side: LSP's own rules, written out independently of the server ---------------

def line_spans(text: str) -> List[Tuple[int, int]]:
    """(start, end) of each line's text, breaks excluded."""
    spans, start = [], 0
    for match in _BREAK.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    return spans + [(start, len(text))]


def offset(text: str, position: T.Position) -> int:
    """Past a line's end means its end; past the last line, the end of the text."""
    spans = line_spans(text)
    if position.line >= len(spans):
        return len(text)
    start, end = spans[position.line]
    units = 0
    for index in range(start, end):
        if units >= position.character:
            return index
        units += 2 if ord(text[index]) > 0xFFFF else 1
    return end


def utf16(text: str) -> int:
    return sum(2 if ord(char) > 0xFFFF else 1 for char in text)


def random_position(rng: random.Random, text: str) -> T.Position:
    spans = line_spans(text)
    line = rng.randrange(len(spans) + 1)  # one past the last line now and then
    if line == len(spans):
        return T.Position(line, rng.randrange(3))
    start, end = spans[line]
    column = rng.randint(0, end - start)
    overshoot = rng.choice([0, 0, 0, 1, 5])  # past the line's end now and then
    return T.Position(line, utf16(text[start:start + column]) + overshoot)


def random_change(rng: random.Random, text: str) -> T.TextDocumentContentChangePartial:
    first, second = sorted([random_position(rng, text), random_position(rng, text)],
                           key=lambda p: offset(text, p))
    inserted = "".join(rng.choice(PIECES) for _ in range(rng.choice([0, 1, 2, 5, 12])))
    return T.TextDocumentContentChangePartial(range=T.Range(first, second), text=inserted)


def apply(text: str, change: T.TextDocumentContentChangePartial) -> str:
    start, end = offset(text, change.range.start), offset(text, change.range.end)
    return text[:start] + change.text + text[end:]


# --- the test ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(SEEDS))
async def test_random_incremental_edits_leave_the_server_copy_equal_to_the_client_copy(probe, seed):
    client, root = probe
    rng = random.Random(seed)
    uri = (root / f"doc{seed}.py").as_uri()
    text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(40)))
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        T.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    history = [text]
    for version in range(2, EDITS_PER_DOCUMENT + 2):
        changes = []
        for _ in range(rng.choice([1, 1, 1, 3])):  # editors batch several changes in one notification
            change = random_change(rng, text)
            text = apply(text, change)
            changes.append(change)
        history.append(text)
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=version), changes))
    held = await client.protocol.send_request_async("perflsp/test/documentText", {"uri": uri})
    assert held == text, f"seed {seed}: the copies differ after these texts: {history!r}"
    # The server still answers requests about the document it now holds.
    await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri=uri),
                                                         random_position(rng, text)))
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri=uri)))


async def test_notebook_cell_edits_follow_the_same_rules(probe):
    client, root = probe
    notebook = (root / "edits.ipynb").as_uri()
    first, second = f"{notebook}#cell1", f"{notebook}#cell2"
    client.notebook_document_did_open(T.DidOpenNotebookDocumentParams(
        notebook_document=T.NotebookDocument(uri=notebook, notebook_type="jupyter-notebook", version=1, cells=[
            T.NotebookCell(kind=T.NotebookCellKind.Code, document=first)]),
        cell_text_documents=[T.TextDocumentItem(uri=first, language_id="python", version=1, text="a\x0cb\nc")]))
    # One event adds a cell and edits both: past the end of a line after a form feed, and in the new cell.
    client.notebook_document_did_change(T.DidChangeNotebookDocumentParams(
        notebook_document=T.VersionedNotebookDocumentIdentifier(uri=notebook, version=2),
        change=T.NotebookDocumentChangeEvent(cells=T.NotebookDocumentCellChanges(
            structure=T.NotebookDocumentCellChangeStructure(
                array=T.NotebookCellArrayChange(start=1, delete_count=0, cells=[
                    T.NotebookCell(kind=T.NotebookCellKind.Code, document=second)]),
                did_open=[T.TextDocumentItem(uri=second, language_id="python", version=1, text="x = 1")]),
            text_content=[
                T.NotebookDocumentCellContentChanges(
                    document=T.VersionedTextDocumentIdentifier(uri=first, version=2),
                    changes=[T.TextDocumentContentChangePartial(
                        range=T.Range(T.Position(1, 9), T.Position(1, 9)), text="😀")]),
                T.NotebookDocumentCellContentChanges(
                    document=T.VersionedTextDocumentIdentifier(uri=second, version=2),
                    changes=[T.TextDocumentContentChangePartial(
                        range=T.Range(T.Position(0, 4), T.Position(0, 5)), text="2")])]))))
    read = client.protocol.send_request_async
    assert await read("perflsp/test/documentText", {"uri": first}) == "a\x0cb\nc😀"
    assert await read("perflsp/test/documentText", {"uri": second}) == "x = 2"
    client.notebook_document_did_close(T.DidCloseNotebookDocumentParams(
        notebook_document=T.NotebookDocumentIdentifier(uri=notebook),
        cell_text_documents=[T.TextDocumentIdentifier(uri=first), T.TextDocumentIdentifier(uri=second)]))
