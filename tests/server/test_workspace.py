"""Whole-workspace diagnostics end to end: files that are not open, pushed or pulled, via the CLI's cache."""
from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types as T

from tests.server.conftest import NEOVIM, TRAIN, VSCODE

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

CLEAN = "import torch\n\nx = torch.zeros(3, device=\"cuda\")\n"


def workspace(root):
    """A project on disk before the editor starts, as usual."""
    for name, text in [("train.py", TRAIN), ("pkg/model.py", TRAIN.replace("w = x.pin_memory().cuda()", "w = x")),
                       ("clean.py", CLEAN), ("open_me.py", TRAIN)]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


async def test_workspace_diagnostics_are_pushed_for_files_that_are_not_open(start, tmp_path):
    root = workspace(tmp_path / "ws")
    session = await start(NEOVIM, root=root, init_options={"settings": {"workspaceDiagnostics": True}})
    train = await session.diagnostics(session.uri("train.py"), where=lambda ds: len(ds) == 3)
    assert sorted(d.code for d in train) == ["PFL101", "PFL106", "PFL502"]
    model = await session.diagnostics(session.uri("pkg/model.py"), where=lambda ds: len(ds) == 2)
    assert all(p.version is None for p in session.published(session.uri("pkg/model.py")))  # not open: no version
    assert sorted(d.code for d in model) == ["PFL101", "PFL502"]
    assert list(session.published(session.uri("clean.py"))[-1].diagnostics) == []
    # The same cache as `perflsp check`: a second run is a stat per file.
    [cache] = list((root / ".perflsp_cache").glob("*/findings.json"))
    assert str((root / "train.py").resolve()) in json.loads(cache.read_text())
    # A file changed on disk is checked again (here Neovim has no watcher: the save of an open
    # file or a watcher event triggers it; we send the event a watching client would send).
    (root / "clean.py").write_text(CLEAN + "for batch in loader:\n    x.sum().item()\n")
    session.client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(
        changes=[T.FileEvent(uri=session.uri("clean.py"), type=T.FileChangeType.Changed)]))
    changed = await session.diagnostics(session.uri("clean.py"), where=lambda ds: len(ds) == 1)
    assert changed[0].code == "PFL101"


async def test_workspace_diagnostics_are_pulled_without_the_open_files(start, tmp_path):
    root = workspace(tmp_path / "ws")
    session = await start(VSCODE, pull=True, settings={"workspaceDiagnostics": True}, root=root)
    uri = session.open("open_me.py")
    first = await session.client.workspace_diagnostic_async(T.WorkspaceDiagnosticParams(previous_result_ids=[]))
    reports = {item.uri: item for item in first.items}
    assert set(reports) == {session.uri("train.py"), session.uri("pkg/model.py"), session.uri("clean.py")}
    assert uri not in reports  # open: the document pull answers for it
    assert sorted(d.code for d in reports[session.uri("train.py")].items) == ["PFL101", "PFL106", "PFL502"]
    assert list(reports[session.uri("clean.py")].items) == []
    # Nothing changed: every report comes back "unchanged" with the same result id.
    previous = [T.PreviousResultId(uri=u, value=r.result_id) for u, r in reports.items()]
    second = await session.client.workspace_diagnostic_async(T.WorkspaceDiagnosticParams(previous_result_ids=previous))
    assert {item.kind for item in second.items} == {"unchanged"}
    await asyncio.sleep(0.2)
    assert session.published(session.uri("train.py")) == []  # a pulling client is not pushed to


async def test_workspace_diagnostics_are_off_by_default(shared):
    session = await shared(VSCODE, pull=True)
    workspace(session.root)
    report = await session.client.workspace_diagnostic_async(T.WorkspaceDiagnosticParams(previous_result_ids=[]))
    assert list(report.items) == []
