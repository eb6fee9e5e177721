""""Record a run" from the editor: `perflsp.recordRun` runs `perflsp record` with progress and
cancel, and the record shows in diagnostics, code lenses and hovers of open files."""
from __future__ import annotations

import asyncio
import time

import pytest
from lsprotocol import types as T

from perflsp.rules.registry import rule_by_code
from tests.server.conftest import NEOVIM
from tests.server.test_profile import shown

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

PROGRAM = rule_by_code("PFL108").invalid[0].code  # a per-batch callback that reads the loss
READ_ROW = next(i for i, line in enumerate(PROGRAM.splitlines()) if "loss.item()" in line)
SETTINGS = {"select": ["PFL1"], "preview": False}

SLOW = """\
import time

import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.step()
time.sleep(120)
"""


async def record(session, uri, **extra):
    return await asyncio.wait_for(session.client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="perflsp.recordRun", arguments=[{"uri": uri, **extra}])), timeout=150)


async def test_record_a_run_then_see_it_in_lenses_hovers_and_diagnostics(start):
    session = await start(NEOVIM, init_options={"settings": {**SETTINGS, "record": {"command": "python train.py",
                                                                                  "steps": 3}}})
    session.write("perflsp.toml", "")
    uri = session.open("train.py", PROGRAM)
    before = await session.diagnostics(uri, version=1)
    assert "perflsp.recordRun" in session.result.capabilities.execute_command_provider.commands
    assert not [d for d in before if d.code == "PFL108"]

    reply = await record(session, uri)
    assert reply["status"] == "ok", (reply, shown(session))
    assert reply["headline"].startswith("recorded  3 steps (optimizer.step)")
    [reports] = [r for r in session.client.progress_reports.values()
                 if r and getattr(r[0], "title", "") == "Recording a run of python train.py"]
    assert any("3/3 steps" in (getattr(r, "message", "") or "") for r in reports)
    assert isinstance(reports[-1], T.WorkDoneProgressEnd)

    # Every open file is analysed again with the new record.
    diagnostics = await session.diagnostics(uri, where=lambda ds: any(d.code == "PFL108" for d in ds))
    [measured] = [d for d in diagnostics if d.code == "PFL108"]
    assert measured.range.start.line == READ_ROW
    lenses = await session.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    assert [(l.range.start.line, l.command.title) for l in lenses if l.command.command == "perflsp.recordRun"] == [
        (READ_ROW, "recorded: 1 host reads/step")]
    hover = await session.client.text_document_hover_async(T.HoverParams(
        T.TextDocumentIdentifier(uri), T.Position(READ_ROW, 30)))
    assert "**Recorded** by `perflsp record` (3 steps of `python train.py`" in hover.contents.value
    assert "host reads of device-bound tensors: item ×3 (in 3 steps)" in hover.contents.value


async def test_recording_is_refused_where_profiling_is_off_or_nothing_says_what_to_run(start):
    session = await start(NEOVIM, init_options={"settings": {**SETTINGS, "profile": {"enabled": False}}})
    uri = session.open("train.py", PROGRAM)
    reply = await record(session, uri, command="python train.py")
    assert reply["status"] == "refused" and "runs your code" in reply["message"]
    assert not (session.root / ".perflsp").exists()

    other = await start(NEOVIM, init_options={"settings": SETTINGS}, root=session.root.parent / "other")
    uri = other.open("train.py", PROGRAM)
    reply = await record(other, uri)
    assert reply["status"] == "refused" and "perflsp.record.command" in reply["message"]


async def test_cancel_stops_the_recorded_program(start):
    session = await start(NEOVIM, init_options={"settings": SETTINGS})
    uri = session.open("slow.py", SLOW)
    run = asyncio.ensure_future(record(session, uri, command="python slow.py"))
    deadline = time.monotonic() + 60
    token = None
    while token is None and time.monotonic() < deadline:
        token = next((t for t, rs in session.client.progress_reports.items()
                      if rs and getattr(rs[0], "title", "") == "Recording a run of python slow.py"
                      and any("running the program" in (getattr(r, "message", "") or "") for r in rs)), None)
        await asyncio.sleep(0.1)
    assert token is not None, session.client.progress_reports
    session.client.window_work_done_progress_cancel(T.WorkDoneProgressCancelParams(token=token))
    reply = await asyncio.wait_for(run, timeout=15)
    assert reply["status"] == "cancelled"
    assert not (session.root / ".perflsp" / "evidence.json").exists()
