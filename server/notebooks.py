"""Notebook documents: the code cells are analysed together as one program, diagnostics go to each cell.

The client syncs a notebook as one notebook document plus one text document per cell. The engine's
`check_cells` takes the cells in order (None for markdown) and answers with findings numbered by
cell; here cell numbers become cell uris and back.
"""
from __future__ import annotations

import json
from urllib.parse import unquote
from typing import TYPE_CHECKING, Dict, List, Optional

from lsprotocol import types as T

from perflsp.server.analysis import Part, Snapshot

if TYPE_CHECKING:
    from perflsp.server.app import PerflspServer

SYNC_OPTIONS = T.NotebookDocumentSyncOptions(
    notebook_selector=[T.NotebookDocumentFilterWithCells(
        notebook="*",  # any notebook type (Jupyter, Databricks, ...) whose cells are Python
        cells=[T.NotebookCellLanguage(language="python")])],
    save=True,
)


def notebook_key(server: "PerflspServer", uri: str) -> Optional[str]:
    """The uri of the notebook that holds the cell `uri`, or None when `uri` is no notebook cell."""
    notebook = server.workspace.get_notebook_document(cell_uri=uri)
    return notebook.uri if notebook is not None else None


def snapshot(server: "PerflspServer", key: str, generation: int, reason: str) -> Optional[Snapshot]:
    notebook = server.workspace.get_notebook_document(notebook_uri=key)
    if notebook is None:
        return None
    parts: List[Part] = []
    cells: List[Optional[int]] = []
    for cell in notebook.cells:
        doc = server.workspace.text_documents.get(unquote(cell.document))
        python = (cell.kind == T.NotebookCellKind.Code and doc is not None
                  and (doc.language_id or "python") == "python")
        if not python:
            cells.append(None)  # markdown keeps its number, so "cell 3" means the third cell
            continue
        cells.append(len(parts))
        parts.append(Part(cell.document, doc.source, doc.version))
    return Snapshot(key, server.path_of(key, ".ipynb"), generation, parts, cells, reason)


def notebook_json(snap: Snapshot) -> str:
    """The snapshot as `.ipynb` text, so the engine's notebook fixer (`fix_text`) can run on it."""
    cells = []
    for index in snap.cells or []:
        if index is None:
            cells.append({"cell_type": "markdown", "metadata": {}, "source": []})
        else:
            cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                          "source": snap.parts[index].text.splitlines(keepends=True)})
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def cell_texts(snap: Snapshot, fixed_json: str) -> Dict[str, str]:
    """The text of each code cell of a fixed notebook, by cell uri."""
    from perflsp.rules.notebook import read_cells

    out: Dict[str, str] = {}
    for source, index in zip(read_cells(fixed_json), snap.cells or []):
        if index is not None and source is not None:
            out[snap.parts[index].uri] = source
    return out

