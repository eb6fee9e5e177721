"""A cloned repository is hostile input: opening its folder must neither hang, exhaust memory,
write outside it, nor let its committed files break the editor's features."""
from __future__ import annotations

import json
import os
import re

import pytest
from lsprotocol import types as T

from tests.server.conftest import NEOVIM, TRAIN

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")


def _hostile_folder(root, outside):
    root.mkdir(parents=True)
    outside.mkdir()
    (root / "train.py").write_text(TRAIN)
    (root / "zero.py").symlink_to("/dev/zero")  # read to the end, it never ends
    os.mkfifo(root / "pipe.py")  # opened for reading, it waits for a writer forever
    (root / ".perflsp_cache").symlink_to(outside, target_is_directory=True)
    profiles = root / ".perflsp" / "profiles"
    profiles.mkdir(parents=True)
    garbage = {"schema_version": 3, "status": "ok", "error": None, "verdict": 7, "lines": "all",
               "target": {"file": str((root / "train.py").resolve()), "qualname": "train", "source_sha256": None}}
    (profiles / "train.train.json").write_text(json.dumps(garbage))
    (profiles / "deep.json").write_text("[" * 100_000 + "]" * 100_000)


async def test_opening_a_hostile_folder_reads_only_its_files_and_writes_nothing_outside(start, tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    _hostile_folder(root, outside)
    session = await start(NEOVIM, root=root, init_options={"settings": {"workspaceDiagnostics": True}})
    # The folder's scan reached train.py past the device and the FIFO ...
    scanned = await session.diagnostics(session.uri("train.py"), where=lambda ds: len(ds) == 3)
    assert sorted(d.code for d in scanned) == ["PFL101", "PFL106", "PFL502"]
    # ... and wrote no cache through the link out of the folder.
    assert list(outside.iterdir()) == []
    uri = session.open("train.py")
    assert len(await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)) == 3
    # The committed results are not valid: ignored with one warning, and hover and lenses still answer.
    warnings = [m.message for m in session.client.messages if "profile result" in m.message]
    assert len(warnings) == 1 and "(and 1 more)" in warnings[0], warnings
    assert re.search(r"cannot use \(and 1 more\): .*(deep|train\.train)\.json: ", warnings[0])
    line = TRAIN.splitlines().index("        print(loss.item())")
    hover = await session.client.text_document_hover_async(T.HoverParams(
        T.TextDocumentIdentifier(uri), T.Position(line, TRAIN.splitlines()[line].index("item"))))
    assert hover is not None and "PFL101" in hover.contents.value
    assert list(await session.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))) == []
    assert list(outside.iterdir()) == []


async def test_a_change_to_a_document_never_opened_is_ignored(start, tmp_path):
    session = await start(NEOVIM)
    session.client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(uri="file:///dev/zero", version=2),
        [T.TextDocumentContentChangePartial(range=T.Range(T.Position(0, 0), T.Position(0, 0)), text="x")]))
    uri = session.open("train.py", TRAIN)  # the server is alive and current
    assert len(await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)) == 3
    assert "ignored a change to file:///dev/zero, which the client never opened" in session.log_text()


QUOTED_LINK = '''\
import torch


def train(model, loader, opt):
    for x, y in loader:
        loss = {"`[Fix](https://e.vil/x)`": model(x).sum()}
        loss["`[Fix](https://e.vil/x)`"].backward()
        print(loss["`[Fix](https://e.vil/x)`"].item())
'''


async def test_code_quoted_in_a_hover_never_becomes_a_link(shared):
    from markdown_it import MarkdownIt

    session = await shared(NEOVIM)
    uri = session.open("quoted.py", QUOTED_LINK)
    [finding] = await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 1)
    hover = await session.client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri),
                                                                         finding.range.start))
    rendered = MarkdownIt("gfm-like").render(hover.contents.value)
    assert "e.vil/x" in rendered  # the code is shown ...
    assert not re.search(r"<a href=\"[^\"]*e\.vil", rendered)  # ... and never as a link
