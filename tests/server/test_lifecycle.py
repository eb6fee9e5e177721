"""Startup, shutdown/exit, logging, and the TCP transport."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

import pytest
from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidRequest

from tests.server.conftest import NEOVIM, SERVER, TRAIN, VSCODE

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")


async def test_shutdown_then_exit_ends_the_process_with_status_0(start):
    session = await start(VSCODE)
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1)
    session.closed = True
    await session.client.shutdown_async(None)
    began = time.monotonic()
    session.client.exit(None)
    status = await asyncio.wait_for(session.client._server.wait(), timeout=10)
    assert status == 0
    assert time.monotonic() - began < 2.0  # editors wait for this on every restart


async def test_exit_without_shutdown_is_status_1(start):
    session = await start(NEOVIM)
    session.closed = True
    session.client.exit(None)
    assert await asyncio.wait_for(session.client._server.wait(), timeout=10) == 1


async def test_server_logs_through_window_log_message_at_the_chosen_level(start):
    session = await start(NEOVIM, init_options={"settings": {"logLevel": "warning"}})
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1)
    await asyncio.sleep(0.2)
    assert session.client.log_messages == []  # nothing at or above "warning" happened
    session.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"perflsp": {"logLevel": "debug"}}))
    version = session.replace(uri, TRAIN + "\n")
    await session.diagnostics(uri, version=version)
    await asyncio.sleep(0.2)
    assert f"analysed {uri}" in session.log_text()
    assert all(m.type == T.MessageType.Log for m in session.client.log_messages if "analysed" in m.message)
    # Automatic linting shows no progress UI (pylsp-mypy#48): no work-done tokens were created.
    assert session.client.progress_reports == {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _message(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _read(sock: socket.socket) -> dict:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    header, rest = data.split(b"\r\n\r\n", 1)
    length = int(header.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    while len(rest) < length:
        rest += sock.recv(4096)
    return json.loads(rest[:length])


def test_tcp_transport_answers_initialize(tmp_path):
    port = _free_port()
    server = subprocess.Popen([*SERVER, "--tcp", f"127.0.0.1:{port}"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        with sock:
            sock.sendall(_message({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}}))
            reply = _read(sock)
            assert reply["id"] == 1
            capabilities = reply["result"]["capabilities"]
            assert capabilities["hoverProvider"] is True
            assert "source.fixAll.perflsp" in capabilities["codeActionProvider"]["codeActionKinds"]
            assert reply["result"]["serverInfo"]["name"] == "perflsp"
    finally:
        server.kill()
        server.wait(timeout=10)


def test_cli_serve_accepts_the_stdio_flag_editors_append():
    # `perflsp serve --stdio` is what Neovim, Helix and Zed configs spell out.
    reply = subprocess.run([sys.executable, "-m", "perflsp", "serve", "--stdio"], input=_message(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}})
        + _message({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        + _message({"jsonrpc": "2.0", "method": "exit"}), capture_output=True, timeout=60)
    assert reply.returncode == 0, reply.stderr.decode()
    header, _, rest = reply.stdout.partition(b"\r\n\r\n")
    length = int(header.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    first = json.loads(rest[:length])
    assert first["id"] == 1 and first["result"]["serverInfo"]["name"] == "perflsp"


async def test_the_garbage_collector_is_off_during_start_up_only(start):
    # Off from the start (collecting what start-up makes is wasted work), on again once the
    # first analysis is published, so a long session never keeps its cyclic garbage.
    session = await start(NEOVIM, init_options={"settings": {"logLevel": "debug"}})
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1)
    deadline = time.monotonic() + 10
    while "start-up over: the garbage collector is on" not in session.log_text():
        assert time.monotonic() < deadline, session.log_text()
        await asyncio.sleep(0.02)


async def test_a_second_initialize_is_refused_and_the_session_goes_on(start):
    # pygls would start a new workspace, forgetting the open documents: their diagnostics stopped.
    session = await start(NEOVIM)
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    with pytest.raises(JsonRpcInvalidRequest, match=r"^initialize: the server is already initialized "
                                                    r"\(LSP allows one initialize per session\)$"):
        await session.client.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities(),
                                                                 root_uri=session.root.as_uri()))
    version = session.edit(uri, (6, 0), (7, 0), "")  # `print(loss.item())` goes, and its PFL101 with it
    diagnostics = await session.diagnostics(uri, version=version)
    assert sorted(d.code for d in diagnostics) == ["PFL106", "PFL502"]
