"""The project graph in the editor: a file is judged with its whole workspace folder, as by
`perflsp check`; unsaved buffers and changes on disk to files that are not open both count."""
from __future__ import annotations

import asyncio
import time

import pytest
from lsprotocol import types as T

from tests.rules.test_project_index import STAGE  # the same file, checked through the server
from tests.server.conftest import NEOVIM, VSCODE, apply_edits, text_edits

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

HELPERS = "def log(t):\n    return t.item()\n"
MODEL = """\
from torch import nn

import helpers


class Net(nn.Module):
    def forward(self, x):
        return helpers.log(x)
"""
NO_CALL = MODEL.replace("return helpers.log(x)", "return x")
STEPS = "import helpers\n\n\ndef train(loader):\n    for batch in loader:\n        helpers.log(batch)\n"
CHAIN = "in `log`, called from `Net.forward` (model.py:8), which runs on every forward pass (`nn.Module.forward`)"


def workspace(root):
    """The project on disk before the editor starts."""
    root.mkdir(parents=True, exist_ok=True)
    # The graph is under test: PFL101 reports what calls make hot, not only direct evidence.
    (root / "perflsp.toml").write_text("[rules.PFL101]\ncall-chains = true\n")
    (root / "helpers.py").write_text(HELPERS)
    (root / "model.py").write_text(MODEL)
    return root


def pfl101(diagnostics):
    return [d for d in diagnostics if d.code == "PFL101"]


async def test_a_helper_is_hot_through_another_modules_forward_and_follows_unsaved_edits(start, tmp_path):
    session = await start(NEOVIM, root=workspace(tmp_path / "ws"))
    helpers = session.open("helpers.py")
    [item] = pfl101(await session.diagnostics(helpers, where=lambda ds: len(pfl101(ds)) == 1))
    assert CHAIN in item.message
    assert item.range.start == T.Position(1, 11)

    # The call is deleted in the editor, not saved: the helper is no longer per-step.
    model = session.open("model.py")
    seen = len(session.published(helpers))
    session.replace(model, NO_CALL)
    await published_after(session, helpers, seen, lambda ds: not pfl101(ds))
    assert (tmp_path / "ws" / "model.py").read_text() == MODEL

    # A file that is not open changes on disk: the client's file watcher says so.
    (tmp_path / "ws" / "steps.py").write_text(STEPS)
    seen = len(session.published(helpers))
    session.client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(
        changes=[T.FileEvent(uri=session.uri("steps.py"), type=T.FileChangeType.Created)]))
    [item] = pfl101(await published_after(session, helpers, seen, lambda ds: len(pfl101(ds)) == 1))
    assert "in `log`, called inside a step loop (steps.py:6)" in item.message

    # Deleted again; then typing the call back in `forward` makes the helper's chain name it again.
    (tmp_path / "ws" / "steps.py").unlink()
    seen = len(session.published(helpers))
    session.client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(
        changes=[T.FileEvent(uri=session.uri("steps.py"), type=T.FileChangeType.Deleted)]))
    await published_after(session, helpers, seen, lambda ds: not pfl101(ds))
    seen = len(session.published(helpers))
    session.replace(model, MODEL)
    await published_after(session, helpers, seen, lambda ds: any(CHAIN in d.message for d in pfl101(ds)))


async def test_a_pulling_client_is_asked_to_pull_again_when_another_file_changes_the_graph(start, tmp_path):
    session = await start(VSCODE, pull=True, root=workspace(tmp_path / "ws"))
    helpers = session.open("helpers.py")
    report = await pulled(session, helpers, lambda items: len(pfl101(items)) == 1)
    assert CHAIN in pfl101(report.items)[0].message
    model = session.open("model.py")
    refreshes = session.client.diagnostic_refresh_count
    session.replace(model, NO_CALL)
    await until(lambda: session.client.diagnostic_refresh_count > refreshes)
    report = await session.pull(helpers, report.result_id)
    assert report.kind == "full" and not pfl101(report.items)
    assert session.published(helpers) == []  # a pulling client is never pushed to


async def test_workspace_diagnostics_judge_every_file_with_the_whole_folder(start, tmp_path):
    root = workspace(tmp_path / "ws")
    for n in range(20):  # between the two: `helpers.py` and `model.py` land in different batches of the scan
        (root / f"i_{n:02}.py").write_text("def f(x):\n    return x\n")
    session = await start(NEOVIM, root=root, init_options={"settings": {"workspaceDiagnostics": True}})
    [item] = pfl101(await session.diagnostics(session.uri("helpers.py"), where=lambda ds: len(pfl101(ds)) == 1))
    assert CHAIN in item.message
    # An unsaved edit of an open file changes what the scan says of a file that is not open.
    model = session.open("model.py")
    seen = len(session.published(session.uri("helpers.py")))
    session.replace(model, NO_CALL)
    await published_after(session, session.uri("helpers.py"), seen, lambda ds: not pfl101(ds))


async def published_after(session, uri, seen, where, timeout=15.0):
    """The diagnostics of the first publish for `uri` after the `seen` first ones that satisfy `where`."""
    await until(lambda: any(where(p.diagnostics) for p in session.published(uri)[seen:]), timeout)
    return next(list(p.diagnostics) for p in session.published(uri)[seen:] if where(p.diagnostics))


async def pulled(session, uri, where, timeout=15.0):
    """Pull until the report's items satisfy `where` (the first answers may predate the graph)."""
    deadline = time.monotonic() + timeout
    while True:
        report = await session.pull(uri)
        if report.kind == "full" and where(report.items):
            return report
        assert time.monotonic() < deadline, f"no matching pull for {uri}: {report}"
        await asyncio.sleep(0.1)


async def until(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def hot_line(diagnostic):
    return diagnostic.related_information[0].location.range.start.line


async def test_rows_moved_before_the_graph_is_built_again_leave_no_stale_diagnostics(start, tmp_path):
    root = workspace(tmp_path / "ws")
    (root / "stage.py").write_text(STAGE)
    session = await start(NEOVIM, root=root)
    helpers = session.open("helpers.py")
    await session.diagnostics(helpers, where=lambda ds: len(pfl101(ds)) == 1)  # judged with the graph
    uri = session.open("stage.py")
    [before] = await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 1)
    assert before.code == "PFL106" and hot_line(before) == 11  # the call that makes `stage` per step
    # The graph keeps the call's row (11) until typing pauses; the text has 10 rows now.
    version = session.edit(uri, (0, 0), (2, 0), "")
    [after] = await session.diagnostics(uri, version=version, where=lambda ds: len(ds) == 1)
    assert after.range.start.line == before.range.start.line - 2
    # Built again for the moved rows, the graph names the call where it is now.
    await session.diagnostics(uri, version=version, where=lambda ds: len(ds) == 1 and hot_line(ds[0]) == 9)


OPS = "import torch\n\n\ndef zero_state(batch, device):\n    return torch.zeros(2, batch, device=device).contiguous()\n"
LOOP = "from ops import zero_state\n\n\ndef train(model, loader):\n    for x in loader:\n        model(x, zero_state(x.shape[0], x.device))\n"


@pytest.mark.parametrize("spec", [NEOVIM, VSCODE])
async def test_fix_all_fixes_what_is_per_step_through_another_file(start, tmp_path, spec):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "perflsp.toml").write_text("preview = true\n")  # PFL302, safe after a factory, is in preview
    (root / "ops.py").write_text(OPS)
    (root / "train.py").write_text(LOOP)
    session = await start(spec, root=root, init_options={"settings": {"select": ["PFL302"]}})
    ops = session.open("ops.py")
    [item] = await session.diagnostics(ops, where=lambda ds: len(ds) == 1)
    assert item.code == "PFL302" and "train.py:6" in item.related_information[0].message  # hot through train.py
    [fix_all] = await session.actions(ops, 0, only=["source.fixAll"])
    fixed = apply_edits(OPS, text_edits(await session.edit_of(fix_all), ops))
    assert fixed == OPS.replace("device=device).contiguous()", "device=device)")
