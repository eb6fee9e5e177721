""""Profile this function" end to end: the real server, the real runtime subprocess, real torch on CPU.

Each run pays the runtime's start (importing torch, ~3 s here); the timing window is kept tiny with
the `profile.minTime` setting.
"""
from __future__ import annotations

import ast
import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from lsprotocol import types as T

from pytest_lsp import ClientServerConfig

from perflsp import comparison
from perflsp.profile_result import read_result
from perflsp.server import profile_view as view
from tests.server.conftest import NEOVIM, SERVER, capabilities, make_client

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

FAST = {"profile": {"minTime": 0.02, "timeout": 60}}

KERNELS = """\
import time

import torch
import perflsp


def make():
    return (torch.randn(32, 32), torch.randn(32, 32))


@perflsp.profile(setup=make)
def step(a, b):
    c = a @ b
    d = c.relu() + a
    for _ in range(3):
        d = d * 2
    total = d.sum().item()
    return total


def no_inputs(a):
    return a * 2


@perflsp.profile(setup=make)
def boom(a, b):
    c = a + b
    raise ValueError("shapes do not line up")


@perflsp.profile(setup=make)
def slow(a, b):
    time.sleep(120)
    return a
"""


# A file whose module code leaves a mark when it runs: profiling imports it.
MARKS_ITS_IMPORT = """\
import perflsp

open(__file__ + ".ran", "w").close()


def make():
    return (1,)


@perflsp.profile(setup=make)
def step(x):
    return x
"""


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


def title_and_command(item):
    """lsprotocol parses a CodeAction carrying a command as a bare Command on the client side."""
    if isinstance(item, T.Command):
        inner = item.command
        if isinstance(inner, str) and inner.startswith("{"):  # the CodeAction's own `command`, as a repr
            inner = ast.literal_eval(inner)
        if isinstance(inner, dict):
            return item.title, T.Command(title=inner["title"], command=inner["command"], arguments=inner.get("arguments"))
        return item.title, item
    return item.title, item.command


async def profile(session, uri: str, function: str, command: str = "perflsp.profileFunction"):
    return await asyncio.wait_for(session.client.workspace_execute_command_async(
        T.ExecuteCommandParams(command=command, arguments=[uri, function])), timeout=90)


def shown(session):
    return [m.message for m in session.client.messages]


def profile_diags(diags):
    return [d for d in diags if d.source == "perflsp-profile"]


async def test_profile_action_progress_and_verdict_on_the_right_lines(start):
    session = await start(NEOVIM, init_options={"settings": FAST})
    uri = session.open("kernels.py", KERNELS)
    await session.diagnostics(uri, version=1)
    assert "perflsp.profileFunction" in session.result.capabilities.execute_command_provider.commands

    # The action appears anywhere inside a def, naming the innermost function.
    items = await session.actions(uri, line_of(KERNELS, "d = c.relu()"))
    titles = {title_and_command(i)[0]: title_and_command(i)[1] for i in items}
    assert "Profile this function (step)" in titles
    command = titles["Profile this function (step)"]
    assert command.command == "perflsp.profileFunction" and command.arguments == [uri, "step"]
    assert not [i for i in await session.actions(uri, line_of(KERNELS, "import time")) if "Profile" in i.title]

    # Marked functions carry a lens before any result.
    lenses = await session.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    assert {(l.range.start.line, l.command.title) for l in lenses} >= {(line_of(KERNELS, "def step"), "▶ Profile")}

    reply = await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command=command.command, arguments=command.arguments))
    assert reply["status"] == "ok", reply

    # $/progress: begin (cancellable), reports of the runtime's phases, end.
    [reports] = [r for r in session.client.progress_reports.values() if r and getattr(r[0], "title", "") == "Profiling step"]
    assert isinstance(reports[0], T.WorkDoneProgressBegin) and reports[0].cancellable
    assert any("timing" in (r.message or "") for r in reports if isinstance(r, T.WorkDoneProgressReport))
    assert isinstance(reports[-1], T.WorkDoneProgressEnd)

    diags = await session.diagnostics(uri, where=lambda ds: bool(profile_diags(ds)))
    measured = profile_diags(diags)
    verdict = [d for d in measured if d.range.start.line == line_of(KERNELS, "def step")]
    assert len(verdict) == 1 and verdict[0].severity == T.DiagnosticSeverity.Information
    regime = reply["regime"]
    assert regime in verdict[0].message and "Lever:" in verdict[0].message and " of " in verdict[0].message
    body = range(line_of(KERNELS, "c = a @ b"), line_of(KERNELS, "return total") + 1)
    lines = [d for d in measured if d not in verdict]
    assert lines and all(d.range.start.line in body for d in lines)
    assert all("% of the call" in d.message for d in lines)
    # The static finding on a measured line gets the measured cost.
    [item] = [d for d in diags if d.source == "perflsp" and d.code == "PFL101"]
    assert item.range.start.line == line_of(KERNELS, "total = d.sum().item()")
    assert item.range.start.line in {d.range.start.line for d in lines}
    assert "measured:" in item.message and "of step's call" in item.message

    # Persisted, and the lens now reads the verdict.
    assert list((session.root / ".perflsp" / "profiles").glob("*.step.json"))
    lenses = await session.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    [lens] = [l for l in lenses if l.range.start.line == line_of(KERNELS, "def step")]
    assert lens.command.title.startswith(f"▶ {regime} · ") and lens.command.command == "perflsp.profileAgain"

    hover = await session.client.text_document_hover_async(T.HoverParams(
        T.TextDocumentIdentifier(uri), T.Position(line_of(KERNELS, "def step"), 5)))
    for word in ("time", "FLOPs", "bytes", "intensity", "compute", "memory", "| line |", "roofline plot](file://"):
        assert word in hover.contents.value
    assert any("perflsp.runtime profile" in m.message and "kernels.py:step" in m.message
               for m in session.client.log_messages)  # the exact command line is logged

    # Reopened by a new server: the result is loaded from disk and published again.
    session.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    other = await start(NEOVIM, init_options={"settings": FAST}, root=session.root)
    uri2 = other.open("kernels.py")
    diags = await other.diagnostics(uri2, where=lambda ds: bool(profile_diags(ds)))
    assert any(d.range.start.line == line_of(KERNELS, "def step") for d in profile_diags(diags))

    # An edit elsewhere moves the lines along; an edit of the function makes the result stale.
    moved = "# a comment\n" + KERNELS
    version = other.replace(uri2, moved)
    diags = await other.diagnostics(uri2, version=version)
    assert any(d.range.start.line == line_of(moved, "def step") for d in profile_diags(diags))
    edited = moved.replace("d = d * 2", "d = d * 3")
    version = other.replace(uri2, edited)
    diags = await other.diagnostics(uri2, version=version)
    assert profile_diags(diags) == []
    lenses = await other.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri2)))
    assert [l.command.title for l in lenses if l.range.start.line == line_of(edited, "def step")] == ["▶ Profile"]

    # Clear removes the result file.
    other.replace(uri2, moved)
    await other.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="perflsp.clearProfile", arguments=[uri2, "step"]))
    assert not list((session.root / ".perflsp" / "profiles").glob("*.step.json"))


async def test_profiling_again_shows_what_changed_in_the_lens_and_the_hover(start):
    session = await start(NEOVIM, init_options={"settings": FAST})
    uri = session.open("kernels.py", KERNELS)
    await session.diagnostics(uri, version=1)
    first = await profile(session, uri, "step")
    assert first["status"] == "ok", first
    second = await profile(session, uri, "step", command="perflsp.profileAgain")
    assert second["status"] == "ok", second

    [stored] = (session.root / ".perflsp" / "profiles").glob("*.step.json")
    result = read_result(stored)
    block = result["comparison"]
    assert block["source_changed"] is False and block["inputs_changed"] is False and block["speedup"] > 0
    when = comparison.since(block["previous_created_at"])
    lenses = await session.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    [lens] = [l for l in lenses if l.range.start.line == line_of(KERNELS, "def step")]
    assert lens.command.title == f"▶ {view.headline(result)}" and lens.command.title.endswith(f" since {when}")
    hover = await session.client.text_document_hover_async(T.HoverParams(
        T.TextDocumentIdentifier(uri), T.Position(line_of(KERNELS, "def step"), 5)))
    assert f"| since last | {comparison.describe(result)} |" in hover.contents.value
    assert "; same code" in hover.contents.value
    assert len(list((session.root / ".perflsp" / "profiles" / "history").glob("*.step.json"))) == 1


async def test_failures_are_shown(start, tmp_path):
    session = await start(NEOVIM, init_options={"settings": FAST})
    uri = session.open("kernels.py", KERNELS)
    await session.diagnostics(uri, version=1)

    reply = await profile(session, uri, "boom")
    assert reply["status"] == "error" and reply["kind"] == "exception"
    assert "shapes do not line up" in reply["message"] and "kernels.py:" in reply["message"]
    assert any("shapes do not line up" in m for m in shown(session))
    diags = await session.diagnostics(uri, where=lambda ds: bool(profile_diags(ds)))
    assert [d.range.start.line for d in profile_diags(diags)] == [line_of(KERNELS, "def boom")]

    reply = await profile(session, uri, "no_inputs")
    assert reply["status"] == "error" and reply["kind"] == "usage"
    assert "setup=" in reply["message"] and "profile-command" in reply["message"]
    assert any("setup=" in m for m in shown(session))


async def test_timeout_is_reported(start):
    session = await start(NEOVIM, init_options={"settings": {"profile": {"minTime": 0.02, "timeout": 2}}})
    uri = session.open("kernels.py", KERNELS)
    reply = await profile(session, uri, "slow")
    assert reply["status"] == "error" and reply["kind"] == "timeout", reply
    assert "timed out" in reply["message"] and any("timed out" in m for m in shown(session))


async def test_missing_torch_names_the_interpreter(start, python_without_torch):
    python = python_without_torch
    settings = dict(FAST, interpreter=[str(python)])
    session = await start(NEOVIM, init_options={"settings": settings})
    uri = session.open("kernels.py", KERNELS)
    reply = await profile(session, uri, "step")
    assert reply["status"] == "error" and "torch is not installed" in reply["message"]
    assert str(python) in reply["message"] and any(str(python) in m for m in shown(session))


async def test_disabled_refuses(start):
    session = await start(NEOVIM, init_options={"settings": {"profile": {"enabled": False}}})
    uri = session.open("kernels.py", KERNELS)
    reply = await profile(session, uri, "step")
    assert reply["status"] == "refused" and any("disabled" in m for m in shown(session))


def _tree(pid: int):
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _until_warming_up(session) -> None:
    """Wait until the profiled function is running (its warm-up), so that cancelling hits a live run."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reports = [r for rs in session.client.progress_reports.values() for r in rs]
        if any("warming up" in (getattr(r, "message", "") or "") for r in reports):
            return
        await asyncio.sleep(0.05)
    pytest.fail("the run never reached the warm-up")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_cancel_kills_the_run_within_2s_and_a_second_request_is_refused(start):
    session = await start(NEOVIM, init_options={"settings": FAST})
    uri = session.open("kernels.py", KERNELS)
    server_pid = session.client._server.pid
    run = asyncio.ensure_future(profile(session, uri, "slow"))
    await _until_warming_up(session)
    busy = await profile(session, uri, "slow")
    assert busy["status"] == "busy" and any("already being profiled" in m for m in shown(session))

    tree = _tree(server_pid)
    assert any("_worker" in Path(f"/proc/{p}/cmdline").read_text() for p in tree if _alive(p))
    [token] = [t for t, rs in session.client.progress_reports.items() if getattr(rs[0], "title", "") == "Profiling slow"]
    cancelled_at = time.monotonic()
    session.client.window_work_done_progress_cancel(T.WorkDoneProgressCancelParams(token=token))
    reply = await asyncio.wait_for(run, timeout=10)
    assert reply["status"] == "cancelled"
    while any(_alive(p) for p in tree) and time.monotonic() - cancelled_at < 2.0:
        await asyncio.sleep(0.05)
    assert not [p for p in tree if _alive(p)], "the profiling processes outlived the cancel by 2 s"
    assert isinstance(session.client.progress_reports[token][-1], T.WorkDoneProgressEnd)


# Output the profiled code prints: lines longer than asyncio's 64 KiB line limit, and lines that
# look like the runtime's progress events.
NOISY = """\
import sys

import torch
import perflsp


def make():
    print("x" * 100_000)
    print('{"event": "phase", "phase": 5}')
    print('{"event": "progress", "phase": "timing", "done": "all", "fraction": "half"}', file=sys.stderr)
    print("y" * 100_000, file=sys.stderr)
    return (torch.randn(8, 8),)


@perflsp.profile(setup=make)
def step(a):
    return a @ a
"""


async def test_the_programs_output_never_mixes_with_the_runtimes_progress(start):
    session = await start(NEOVIM, init_options={"settings": FAST})
    uri = session.open("noisy.py", NOISY)
    reply = await profile(session, uri, "step")
    assert reply["status"] == "ok", reply
    [reports] = [r for r in session.client.progress_reports.values() if r and getattr(r[0], "title", "") == "Profiling step"]
    messages = [r.message or "" for r in reports if isinstance(r, T.WorkDoneProgressReport)]
    assert any("timing" in m for m in messages)
    assert not any(m == "5" or ": all" in m for m in messages)  # the program's lookalike events are not progress


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_cancel_request_kills_the_run_within_2s(start):
    """`$/cancelRequest` of the command, not the progress's Cancel button: the same end."""
    session = await start(NEOVIM, init_options={"settings": FAST})
    uri = session.open("kernels.py", KERNELS)
    server_pid = session.client._server.pid
    request = asyncio.ensure_future(session.client.protocol.send_request_async(
        T.WORKSPACE_EXECUTE_COMMAND, T.ExecuteCommandParams(command="perflsp.profileFunction", arguments=[uri, "slow"]),
        msg_id="profile-slow"))
    await _until_warming_up(session)
    tree = _tree(server_pid)
    assert any("_worker" in Path(f"/proc/{p}/cmdline").read_text() for p in tree if _alive(p))
    cancelled_at = time.monotonic()
    session.client.protocol.notify(T.CANCEL_REQUEST, T.CancelParams(id="profile-slow"))
    with pytest.raises(Exception, match="cancel"):
        await asyncio.wait_for(request, timeout=10)
    while any(_alive(p) for p in tree) and time.monotonic() - cancelled_at < 2.0:
        await asyncio.sleep(0.05)
    assert not [p for p in tree if _alive(p)], "the profiling processes outlived the cancel by 2 s"


def test_a_relative_interpreter_setting_is_the_workspaces(tmp_path):
    """The runtime starts outside the workspace, so `.venv/bin/python` must be anchored in it."""
    from perflsp.server.profiling import resolve_interpreter

    setting = "the perflsp.interpreter setting"
    assert resolve_interpreter([".venv/bin/python", "-X", "dev"], tmp_path) == (
        [str(tmp_path / ".venv" / "bin" / "python"), "-X", "dev"], setting)
    assert resolve_interpreter(["python3"], tmp_path) == (["python3"], setting)
    assert resolve_interpreter(["/opt/env/bin/python"], tmp_path) == (["/opt/env/bin/python"], setting)


async def test_a_perflsp_package_in_the_workspace_never_runs(start, shadowing_project):
    """The runtime starts outside the workspace: with `-m`, the current folder comes first on sys.path."""
    session = await start(NEOVIM, init_options={"settings": FAST}, root=shadowing_project)
    uri = session.open("src/step.py")
    reply = await profile(session, uri, "step")
    assert not (shadowing_project / "PWNED").exists()
    assert reply["status"] == "ok", reply
    assert list((shadowing_project / ".perflsp" / "profiles").glob("step.step.json"))


async def test_commands_refuse_files_outside_the_workspace(start, tmp_path):
    """Any client can name any file: none outside the workspace is run, written beside or cleared."""
    session = await start(NEOVIM, init_options={"settings": FAST})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kernels.py").write_text(MARKS_ITS_IMPORT)
    (session.root / "linked.py").symlink_to(outside / "kernels.py")
    uris = [(outside / "kernels.py").as_uri(), session.uri("linked.py"),
            f"{session.root.as_uri()}/../outside/kernels.py"]
    for uri in uris:
        for command in ("perflsp.profileFunction", "perflsp.profileAgain", "perflsp.clearProfile"):
            reply = await profile(session, uri, "step", command)
            assert reply["status"] == "refused", (uri, command, reply)
            assert "outside every workspace folder" in reply["message"]
    assert any("outside every workspace folder" in m for m in shown(session))
    assert sorted(p.name for p in outside.iterdir()) == ["kernels.py"]  # nothing ran, nothing was written
    assert not (session.root / ".perflsp").exists()

    # Nor is profiling offered there.
    uri = session.open("../outside/kernels.py")
    assert not [i for i in await session.actions(uri, line_of(MARKS_ITS_IMPORT, "return x")) if "Profile" in i.title]
    assert not await session.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))


async def test_without_a_workspace_folder_nothing_is_profiled(tmp_path):
    (tmp_path / "kernels.py").write_text(MARKS_ITS_IMPORT)
    client = await ClientServerConfig(server_command=SERVER, client_factory=make_client).start()
    try:
        await client.initialize_session(T.InitializeParams(capabilities=capabilities(NEOVIM), root_uri=None,
                                                           workspace_folders=None))
        reply = await asyncio.wait_for(client.workspace_execute_command_async(T.ExecuteCommandParams(
            command="perflsp.profileFunction", arguments=[(tmp_path / "kernels.py").as_uri(), "step"])), timeout=90)
    finally:
        await asyncio.wait_for(client.shutdown_session(), timeout=15)
        await client.stop()
    assert reply["status"] == "refused" and "none is open" in reply["message"], reply
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels.py"]
