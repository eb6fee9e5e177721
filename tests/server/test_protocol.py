"""The JSON-RPC layer under bad input: malformed params, wrong framing, requests out of lifecycle order.

pytest-lsp's client only sends well-formed messages, so these tests talk to the real server over
stdio with a raw client that writes bytes and reads framed replies.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest

from tests.server.conftest import SERVER

HOVER = {"textDocument": {"uri": "file:///nowhere/a.py"}, "position": {"line": 0, "character": 0}}
TRAIN = "import torch\n\nfor x in loader:\n    print(x.sum().item())\n"


class RawClient:
    """A client that can say what a real one never would."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        self.received: List[Dict[str, Any]] = []  # every message from the server, in order
        threading.Thread(target=self._read_replies, daemon=True).start()

    def _read_replies(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            for line in iter(stream.readline, b"\r\n"):
                if not line:
                    return
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            self.received.append(json.loads(stream.read(length)))

    def send_bytes(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, payload: Dict[str, Any], length_error: int = 0) -> None:
        """Send one message, its Content-Length off by `length_error` bytes."""
        self.send_body(json.dumps(payload), length_error)

    def send_body(self, text: str, length_error: int = 0) -> None:
        """Send a body as written (json.dumps cannot write what is too deep for it)."""
        body = text.encode()
        self.send_bytes(b"Content-Length: %d\r\n\r\n%s" % (len(body) + length_error, body))

    def request(self, msg_id: int, method: str, params: Any = None, length_error: int = 0) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}, length_error)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def reply(self, msg_id: Optional[int], timeout: float = 10.0) -> Optional[Dict[str, Any]]:
        """The response to request `msg_id`, or None when none came in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in list(self.received):
                if message.get("id") == msg_id and "method" not in message:
                    return message
            time.sleep(0.02)
        return None

    def notifications(self, method: str) -> List[Dict[str, Any]]:
        return [m for m in list(self.received) if m.get("method") == method]

    def initialize(self, tmp_path) -> None:
        self.request(1, "initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
        assert self.reply(1, timeout=30) is not None
        self.notify("initialized", {})

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def raw() -> Iterator[RawClient]:
    client = RawClient()
    yield client
    client.close()


@pytest.mark.parametrize("params, complaint", [
    (5, "expected HoverParams @ $.params"),
    ({**HOVER, "position": {"line": -1, "character": 0}},
     "Position.line should be in range [0:2147483647], but was -1. @ $.params.position"),
], ids=["params-not-an-object", "negative-line"])
def test_a_request_with_invalid_params_is_answered_with_invalid_params(raw, tmp_path, params, complaint):
    raw.initialize(tmp_path)
    raw.request(7, "textDocument/hover", params)
    reply = raw.reply(7)
    assert reply is not None, "no answer: the client would wait forever"
    assert reply["error"]["code"] == -32602
    assert "textDocument/hover" in reply["error"]["message"] and complaint in reply["error"]["message"]
    raw.request(8, "textDocument/hover", HOVER)
    assert raw.reply(8) == {"jsonrpc": "2.0", "id": 8, "result": None}


def test_before_initialize_requests_are_refused_and_notifications_dropped_except_exit(raw, tmp_path):
    raw.request(2, "textDocument/hover", HOVER)
    assert raw.reply(2)["error"]["code"] == -32002  # ServerNotInitialized, not an internal error
    uri = (tmp_path / "train.py").as_uri()
    raw.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                         "text": TRAIN}})
    raw.initialize(tmp_path)
    raw.request(3, "textDocument/hover", HOVER)
    assert raw.reply(3)["result"] is None
    # The early didOpen was dropped: it neither failed (an error message) nor opened the document.
    assert raw.notifications("window/showMessage") == []
    assert [p for p in raw.notifications("textDocument/publishDiagnostics") if p["params"]["uri"] == uri] == []
    raw.notify("exit")
    assert raw.process.wait(timeout=10) == 1  # exit without shutdown


def test_exit_before_initialize_ends_the_process(raw):
    raw.notify("exit")
    assert raw.process.wait(timeout=10) == 1


def test_after_shutdown_requests_are_answered_with_invalid_request(raw, tmp_path):
    raw.initialize(tmp_path)
    raw.request(2, "shutdown")
    assert raw.reply(2) == {"jsonrpc": "2.0", "id": 2, "result": None}
    raw.request(3, "textDocument/hover", HOVER)
    reply = raw.reply(3)
    assert reply is not None, "no answer: the client would wait forever"
    assert reply["error"]["code"] == -32600 and "shutting down" in reply["error"]["message"]
    raw.notify("exit")
    assert raw.process.wait(timeout=10) == 0


@pytest.mark.parametrize("length_error", [-20, 20, 4000], ids=["too-short", "too-long", "longer-than-the-stream"])
def test_a_wrong_content_length_costs_at_most_its_own_message(raw, tmp_path, length_error):
    raw.initialize(tmp_path)
    raw.request(2, "textDocument/hover", HOVER, length_error=length_error)
    raw.request(3, "textDocument/hover", HOVER)
    assert raw.reply(3) == {"jsonrpc": "2.0", "id": 3, "result": None}
    if length_error > 0:  # the whole message was there: only its length was wrong
        assert raw.reply(2) == {"jsonrpc": "2.0", "id": 2, "result": None}
    raw.request(4, "textDocument/hover", HOVER)
    assert raw.reply(4) == {"jsonrpc": "2.0", "id": 4, "result": None}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_message_nested_too_deeply_to_read_is_answered_if_a_request_and_the_server_goes_on(raw, tmp_path):
    # Python's JSON reader stops at its recursion limit (1,000 levels): that used to end the process.
    raw.initialize(tmp_path)
    too_deep = "nested 1001 levels deep, deeper than Python's JSON reader goes (recursion limit 1000)"
    raw.send_body('{"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": %s}' % _nested(1000))
    assert raw.reply(2) == {"jsonrpc": "2.0", "id": 2,
                            "error": {"code": -32700, "message": f"textDocument/hover: {too_deep}"}}
    raw.send_body('{"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": %s}' % _nested(1000))
    raw.send_body(_nested(1000))
    raw.request(3, "textDocument/hover", HOVER)
    assert raw.reply(3) == {"jsonrpc": "2.0", "id": 3, "result": None}
    logged = [m["params"]["message"] for m in raw.notifications("window/logMessage")]
    assert f"perflsp: dropped a message: workspace/didChangeConfiguration: {too_deep}" in logged
    assert ("perflsp: dropped a message: a message: nested 1000 levels deep, deeper than Python's JSON reader "
            "goes (recursion limit 1000)") in logged
    assert raw.process.poll() is None


@pytest.mark.parametrize("bad_id, named", [([1], "an array"), ({}, "an object"), (True, "true"), (None, "null")],
                         ids=["array", "object", "bool", "null"])
def test_a_request_with_an_invalid_id_is_an_invalid_request_answered_with_a_null_id(raw, tmp_path, bad_id, named):
    raw.initialize(tmp_path)
    raw.send({"jsonrpc": "2.0", "id": bad_id, "method": "textDocument/hover", "params": HOVER})
    assert raw.reply(None) == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": f"textDocument/hover: a request's id must be a number or a string, not {named}"}}


def test_shutdown_with_a_bool_id_does_not_shut_the_server_down(raw, tmp_path):
    raw.initialize(tmp_path)
    raw.send({"jsonrpc": "2.0", "id": True, "method": "shutdown"})
    assert raw.reply(None)["error"] == {"code": -32600,
                                        "message": "shutdown: a request's id must be a number or a string, not true"}
    raw.request(3, "textDocument/hover", HOVER)
    assert raw.reply(3) == {"jsonrpc": "2.0", "id": 3, "result": None}  # not "shutting down"
