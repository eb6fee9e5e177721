"""Notebooks end to end: cells analysed together as one program, diagnostics and fixes per cell."""
from __future__ import annotations

import pytest
from lsprotocol import types as T

from tests.server.conftest import VSCODE, apply_edits, text_edits

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

# On the GPU, as the code shows: PFL101 reports it in a function reached through a call.
DEFINE = "import torch\n\ndef log_loss(loss):\n    scale = torch.ones((), device=\"cuda\")\n    print((loss * scale).item())\n"
MARKDOWN = "# Training loop"
LOOP = "for x in loader:\n    log_loss(model(x).sum())\n    y = x.pin_memory().cuda()\n"


def open_notebook(session, cells):
    """Open a notebook as VS Code does: one notebook document plus one text document per cell."""
    path = session.write("train.ipynb", "{}")
    uri = path.as_uri()
    cell_uris = [f"vscode-notebook-cell:{path}#W{i}" for i in range(len(cells))]
    kinds = [T.NotebookCellKind.Markup if text.startswith("#") else T.NotebookCellKind.Code for text in cells]
    session.client.notebook_document_did_open(T.DidOpenNotebookDocumentParams(
        notebook_document=T.NotebookDocument(uri=uri, notebook_type="jupyter-notebook", version=1, cells=[
            T.NotebookCell(kind=kind, document=cell) for kind, cell in zip(kinds, cell_uris)]),
        cell_text_documents=[
            T.TextDocumentItem(uri=cell, language_id="markdown" if kind == T.NotebookCellKind.Markup else "python",
                               version=1, text=text)
            for cell, kind, text in zip(cell_uris, kinds, cells)]))
    return uri, cell_uris


def change_cell(session, notebook_uri, cell_uri, version, start, end, text):
    session.client.notebook_document_did_change(T.DidChangeNotebookDocumentParams(
        notebook_document=T.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=version),
        change=T.NotebookDocumentChangeEvent(cells=T.NotebookDocumentCellChanges(text_content=[
            T.NotebookDocumentCellContentChanges(
                document=T.VersionedTextDocumentIdentifier(uri=cell_uri, version=version),
                changes=[T.TextDocumentContentChangePartial(range=T.Range(T.Position(*start), T.Position(*end)),
                                                            text=text)])]))))


async def test_cells_are_one_program_and_diagnostics_go_to_each_cell(shared):
    session = await shared(VSCODE)
    assert session.result.capabilities.notebook_document_sync is not None
    notebook, (define, markdown, loop) = open_notebook(session, [DEFINE, MARKDOWN, LOOP])

    # `log_loss` is hot only because the loop in cell 3 calls it: the finding is in cell 1 and
    # its related information points into cell 3.
    [item] = await session.diagnostics(define, version=1, where=lambda ds: len(ds) == 1)
    assert item.code == "PFL101"
    assert item.range == T.Range(T.Position(4, 10), T.Position(4, 31))
    [related] = item.related_information
    assert related.location.uri == loop and related.location.range.start == T.Position(1, 4)
    [transfer] = await session.diagnostics(loop, version=1)
    assert transfer.code == "PFL106" and transfer.range.start == T.Position(2, 8)
    assert session.published(markdown) == []  # markdown is nobody's business

    # A quick fix in a cell edits that cell.
    actions = await session.actions(loop, 2)
    safe = next(a for a in actions if a.title.startswith("PFL106"))
    edits = text_edits(await session.edit_of(safe), loop)
    assert apply_edits(LOOP, edits) == LOOP.replace("x.pin_memory().cuda()", "x.pin_memory().cuda(non_blocking=True)")

    # Fix-all runs the engine's notebook fixer over the whole notebook: edits land per cell.
    [fix_all] = await session.actions(define, 0, only=["source.fixAll"])
    edit = await session.edit_of(fix_all)
    assert [c.text_document.uri for c in edit.document_changes] == [loop]
    assert apply_edits(LOOP, text_edits(edit, loop)) == LOOP.replace("x.pin_memory().cuda()", "x.pin_memory().cuda(non_blocking=True)")

    # Stop calling `log_loss` in cell 3: cell 1's finding goes away although cell 1 did not change.
    change_cell(session, notebook, loop, 2, (1, 4), (1, 28), "pass")
    await session.diagnostics(define, where=lambda ds: len(ds) == 0)


async def test_notebook_cells_are_pulled_and_a_broken_cell_does_not_hide_the_others(shared):
    session = await shared(VSCODE, pull=True)
    notebook, (define, _, loop) = open_notebook(session, [DEFINE, MARKDOWN, LOOP])
    report = await session.pull(define)
    assert [d.code for d in report.items] == ["PFL101"]
    # Half-type a line in cell 3: it reports a parse hint, cell 1 keeps its finding.
    change_cell(session, notebook, loop, 2, (2, 29), (2, 29), "\n    z = (")
    broken = await session.pull(loop)
    codes = sorted(d.code for d in broken.items)
    assert codes == ["PFL000", "PFL106"]  # the kept finding and the parse hint
    assert next(d for d in broken.items if d.code == "PFL000").severity == T.DiagnosticSeverity.Hint
    assert [d.code for d in (await session.pull(define)).items] == ["PFL101"]
