""""Try torch.compile on this function" end to end: the real server, the real runtime, real inductor.

One compile (tens of seconds on two cores, less with inductor's cache warm) serves every assert of
the first test; finding graph breaks only (explain) takes seconds.
"""
from __future__ import annotations

import json

import pytest

from lsprotocol import types as T

from tests.server.conftest import NEOVIM
from tests.server.test_profile import line_of, profile, title_and_command

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

MODEL = """\
import torch
import perflsp


def make():
    return (torch.randn(64, 64),)


@perflsp.profile(setup=make)
def step(x):
    y = x * 2 + 1
    if y.sum() > 0:
        y = y.tanh()
    return (y.sin() + y.cos()) * 0.5
"""


@pytest.mark.slow
async def test_try_torch_compile_puts_breaks_on_their_lines_and_the_verdict_on_the_function(start):
    session = await start(NEOVIM, init_options={"settings": {"profile": {"minTime": 0.05, "timeout": 240}}})
    uri = session.open("model.py", MODEL)
    await session.diagnostics(uri, version=1)
    assert "perflsp.compileFunction" in session.result.capabilities.execute_command_provider.commands

    # Offered next to "Profile this function", anywhere in the function.
    items = await session.actions(uri, line_of(MODEL, "y = x * 2"))
    titles = dict(title_and_command(i) for i in items)
    assert {"Profile this function (step)", "Find torch.compile graph breaks (step)"} <= set(titles)
    action = titles["Try torch.compile on this function (step)"]
    assert action.command == "perflsp.compileFunction" and action.arguments == [uri, "step"]

    reply = await profile(session, uri, "step", command=action.command)
    assert reply["status"] == "ok", reply
    assert reply["headline"].startswith("compiled: ") and "1 graph break" in reply["headline"], reply
    [reports] = [r for r in session.client.progress_reports.values()
                 if r and getattr(r[0], "title", "") == "Trying torch.compile on step"]
    messages = [r.message or "" for r in reports if isinstance(r, T.WorkDoneProgressReport)]
    assert any("finding graph breaks" in m for m in messages) and any("compiling" in m for m in messages)

    diags = await session.diagnostics(uri, where=lambda ds: bool(compiled(ds)))
    by_line = {d.range.start.line: d for d in compiled(diags)}
    assert set(by_line) == {line_of(MODEL, "def step"), line_of(MODEL, "if y.sum() > 0")}
    verdict, brk = by_line[line_of(MODEL, "def step")], by_line[line_of(MODEL, "if y.sum() > 0")]
    assert verdict.message.startswith("step: compiled: ") and " vs eager " in verdict.message
    assert "graph break" in brk.message and "torch.where" in brk.message
    assert brk.severity == T.DiagnosticSeverity.Warning
    assert any(d.source == "perflsp-profile" for d in diags)  # the eager profile stands beside it

    # The profile's levers name torch.compile (overhead-, memory- or latency-bound): then the action
    # is their quick fix (asked for with `only: quickfix`), else not.
    [saved] = (session.root / ".perflsp" / "profiles").glob("*.step.json")
    result = json.loads(saved.read_text())
    assert result["compile"]["graph_breaks"][0]["line"] == line_of(MODEL, "if y.sum() > 0") + 1
    lever = any("torch.compile" in item for item in result["verdict"]["levers"])
    quick = await session.actions(uri, line_of(MODEL, "def step"), only=[T.CodeActionKind.QuickFix])
    offered = [i for i in quick if "Try torch.compile" in i.title]
    assert bool(offered) == lever

    hover = await session.client.text_document_hover_async(T.HoverParams(
        T.TextDocumentIdentifier(uri), T.Position(line_of(MODEL, "def step"), 5)))
    assert "**torch.compile**" in hover.contents.value
    assert f"graph break at `model.py:{line_of(MODEL, 'if y.sum() > 0') + 1}`" in hover.contents.value


def compiled(diags):
    return [d for d in diags if d.source == "perflsp-compile"]


async def test_finding_graph_breaks_only_shows_them_fast_and_saves_nothing(start):
    session = await start(NEOVIM, init_options={"settings": {"profile": {"timeout": 120}}})
    uri = session.open("model.py", MODEL)
    await session.diagnostics(uri, version=1)
    reply = await profile(session, uri, "step", command="perflsp.findGraphBreaks")
    assert reply["status"] == "ok" and reply["headline"] == "torch.compile: 1 graph break (explain only, not compiled)"
    [reports] = [r for r in session.client.progress_reports.values()
                 if r and getattr(r[0], "title", "") == "Finding graph breaks in step"]
    assert isinstance(reports[-1], T.WorkDoneProgressEnd)

    diags = await session.diagnostics(uri, where=lambda ds: bool(compiled(ds)))
    lines = {d.range.start.line: d.message for d in compiled(diags)}
    assert set(lines) == {line_of(MODEL, "def step"), line_of(MODEL, "if y.sum() > 0")}
    assert "torch.where" in lines[line_of(MODEL, "if y.sum() > 0")]
    assert not [d for d in diags if d.source == "perflsp-profile"]  # nothing was profiled
    assert not (session.root / ".perflsp").exists()  # nor saved

    # An edit of the function makes them stale: they go.
    version = session.replace(uri, MODEL.replace("y.tanh()", "y.sin()"))
    diags = await session.diagnostics(uri, version=version)
    assert compiled(diags) == []
