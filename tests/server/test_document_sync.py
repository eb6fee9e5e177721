"""Document sync under generated incremental edits: the server's copy stays the client's, edit after edit.

Edits from hypothesis, derandomized (the same edits on every run, a failing sequence shrunk to a
short one): ranges anywhere, also past a line's or the document's end, text across lines with every
kind of line break and characters beyond ASCII and beyond the Basic Multilingual Plane, positions
counted in UTF-16 as the client negotiated. The server is the real one plus a request that reads
back its copy (`probe_server.py`).
"""
from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig

from tests.server.conftest import VSCODE, capabilities, make_client

PROBE = [sys.executable, str(Path(__file__).with_name("probe_server.py"))]
DOCUMENTS = 40
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


# A position is drawn before the text it falls in is known: (line, column, overshoot) picks, each
# taken modulo what the text then has.
position_picks = st.tuples(st.integers(0, 2**16), st.integers(0, 2**16), st.sampled_from([0, 0, 0, 1, 5]))
pieces = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
changes = st.tuples(position_picks, position_picks, pieces)
# Editors batch several changes in one notification.
notifications = st.lists(st.lists(changes, min_size=1, max_size=3), min_size=1, max_size=EDITS_PER_DOCUMENT)


def position(text: str, picks: Tuple[int, int, int]) -> T.Position:
    line_pick, column_pick, overshoot = picks
    spans = line_spans(text)
    line = line_pick % (len(spans) + 1)  # one past the last line now and then
    if line == len(spans):
        return T.Position(line, column_pick % 3)
    start, end = spans[line]
    column = column_pick % (end - start + 1)
    return T.Position(line, utf16(text[start:start + column]) + overshoot)  # past the line's end now and then


def change(text: str, picks) -> T.TextDocumentContentChangePartial:
    first_picks, second_picks, inserted = picks
    first, second = sorted([position(text, first_picks), position(text, second_picks)], key=lambda p: offset(text, p))
    return T.TextDocumentContentChangePartial(range=T.Range(first, second), text=inserted)


def apply(text: str, change: T.TextDocumentContentChangePartial) -> str:
    start, end = offset(text, change.range.start), offset(text, change.range.end)
    return text[:start] + change.text + text[end:]


# --- the test ---------------------------------------------------------------------------------------

_documents = itertools.count()


@settings(max_examples=DOCUMENTS, deadline=None, derandomize=True, database=None)
@given(text=st.lists(st.sampled_from(PIECES), max_size=40).map("".join), batches=notifications,
       hover=position_picks)
async def test_incremental_edits_leave_the_server_copy_equal_to_the_client_copy(probe, text, batches, hover):
    client, root = probe
    uri = (root / f"doc{next(_documents)}.py").as_uri()
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        T.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    history = [text]
    for version, batch in enumerate(batches, 2):
        sent = []
        for picks in batch:
            sent.append(change(text, picks))
            text = apply(text, sent[-1])
        history.append(text)
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=version), sent))
    held = await client.protocol.send_request_async("perflsp/test/documentText", {"uri": uri})
    assert held == text, f"the copies differ after these texts: {history!r}"
    # The server still answers requests about the document it now holds.
    await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri=uri), position(text, hover)))
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
