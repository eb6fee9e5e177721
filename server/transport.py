"""The server's byte streams (stdio, TCP): messages cut at their headers, resynchronised after a wrong length.

pygls' reader trusts every `Content-Length`. One that is too short leaves the rest of the body to be
read as header lines; one that is too long swallows the start of the next message; either way each
later message is misread too, and the server stays alive but deaf. Here a CRLF-terminated
`Content-Length:` line starts a message wherever it appears: a JSON body can never hold one (JSON
strings escape line breaks), so finding it inside a declared body proves that length wrong. A
misframed message costs only itself, and the next one is read as usual.

A body nested deeper than Python's JSON reader goes (its recursion limit, ~1,000 levels) raised
RecursionError out of the read loop and ended the process. Such a body is read again shallowly, for
its top-level `id` and `method` only: a request is answered with a parse error (-32700) that says
how deep it is, anything else is logged and dropped.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from pygls.exceptions import JsonRpcException, JsonRpcParseError
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from perflsp.server.protocol import Refused

log = logging.getLogger("perflsp.server")

CHUNK_BYTES = 65536
_HEADER = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r\n", re.IGNORECASE)
_HEADERS_END = b"\r\n\r\n"
_LONGEST_HEADER = 64  # bytes kept of a stretch without a header: one may be arriving in pieces
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[][{}]')  # a string, or a bracket outside strings
_COLON = re.compile(r"\s*:\s*")
_ENVELOPE = ("jsonrpc", "id", "method")
_DECODER = json.JSONDecoder()


class Framer:
    """Cuts received bytes into message bodies."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.length: Optional[int] = None  # the declared body length, once the current message's headers are read
        self.searched = 0  # how much of the body being received has been searched for a header

    def feed(self, data: bytes) -> List[bytes]:
        """The bodies completed by `data`, in order."""
        self.buffer += data
        bodies = []
        while (body := self._next_body()) is not None:
            bodies.append(body)
        return bodies

    def _next_body(self) -> Optional[bytes]:
        if self.length is None and not self._read_headers():
            return None
        return self._read_body()

    def _read_headers(self) -> bool:
        match = _HEADER.search(self.buffer)
        if match is None:
            self._skip(len(self.buffer) - _LONGEST_HEADER)
            return False
        start, end, length = match.start(), match.end(), int(match.group(1))  # `match` reads the buffer, which moves
        self._skip(start)
        headers_end = self.buffer.find(_HEADERS_END, end - start - 2)
        if headers_end < 0:
            return False
        del self.buffer[:headers_end + len(_HEADERS_END)]
        self.length = length
        self.searched = 0
        return True

    def _read_body(self) -> Optional[bytes]:
        assert self.length is not None
        length = self.length
        match = _HEADER.search(self.buffer, max(0, self.searched - _LONGEST_HEADER))
        if match is not None and match.start() < length:
            log.warning("perflsp: a message declared %d bytes but the next one starts after %d: "
                        "the wrong Content-Length is ignored", length, match.start())
            length = match.start()
        elif len(self.buffer) < length:
            self.searched = len(self.buffer)
            return None
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        self.length = None
        return body

    def _skip(self, count: int) -> None:
        # Bytes before a header belong to no message: the tail of a body whose length was too short.
        if count <= 0:
            return
        if self.buffer[:count].strip():
            log.warning("perflsp: skipped %d bytes outside any message (a wrong Content-Length?)", count)
        del self.buffer[:count]


async def pump(receive: Callable[[], Awaitable[bytes]], server: LanguageServer) -> None:
    """Hand every message received to the protocol until the stream ends."""
    framer = Framer()
    while data := await receive():
        for body in framer.feed(data):
            _dispatch(server, body)


def _dispatch(server: LanguageServer, body: bytes) -> None:
    try:
        message = json.loads(body, object_hook=server.protocol.structure_message)
    except JsonRpcException as exc:  # a notification or response that does not fit its type
        log.warning("perflsp: dropped a message: %s", exc)
        server.report_server_error(exc, type(exc))
        return
    except ValueError as exc:
        log.warning("perflsp: dropped a message that is not JSON (%s): %r", exc, body[:80])
        return
    except RecursionError:
        message = _too_deep(server, body.decode("utf-8"))  # json.loads decoded it before going that deep
        if message is None:
            return
    try:
        server.protocol.handle_message(message)
    except Exception:  # one bad message must not end the read loop: the server would go deaf
        log.exception("perflsp: handling a message failed")


def _too_deep(server: LanguageServer, text: str) -> Optional[Refused]:
    """The refusal of a request nested too deeply to read; None (logged) for any other message."""
    envelope, depth = _shallow_read(text)
    error = JsonRpcParseError(message=f"{envelope.get('method', 'a message')}: nested {depth} levels deep, deeper "
                                      f"than Python's JSON reader goes (recursion limit {sys.getrecursionlimit()})")
    refused = server.protocol.refusal(envelope, error)
    if refused is None:
        log.warning("perflsp: dropped a message: %s", error.message)
    return refused


def _shallow_read(text: str) -> Tuple[Dict[str, Any], int]:
    """The top-level `jsonrpc`, `id` and `method` of a JSON object (their values are shallow; the
    others are only stepped over), and how deep the text nests."""
    members: Dict[str, Any] = {}
    depth = deepest = 0
    is_object = text.lstrip().startswith("{")
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
        elif depth == 1 and is_object:
            colon = _COLON.match(text, match.end())
            name = json.loads(token)
            if colon is not None and name in _ENVELOPE:
                try:
                    members[name] = _DECODER.raw_decode(text, colon.end())[0]
                except (ValueError, RecursionError):  # not a member after all, or a deep id
                    pass
    return members, deepest



def start_io(server: LanguageServer) -> None:
    """Serve over stdin/stdout until the client says exit or closes stdin."""
    stdin = sys.stdin.buffer
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))

    async def receive() -> bytes:
        return await asyncio.get_running_loop().run_in_executor(server.thread_pool, stdin.read1, CHUNK_BYTES)

    _run(server, pump(receive, server))


def start_tcp(server: LanguageServer, host: str, port: int) -> None:
    """Serve the first client that connects to HOST:PORT, until it says exit or disconnects."""
    async def serve() -> None:
        done = asyncio.Event()

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            server.protocol.set_writer(writer)
            await pump(lambda: reader.read(CHUNK_BYTES), server)
            done.set()

        async with await asyncio.start_server(connected, host, port):
            await done.wait()

    _run(server, serve())


def _run(server: LanguageServer, main: Awaitable[None]) -> None:
    try:
        asyncio.run(main)  # type: ignore[arg-type]
    except BrokenPipeError:
        log.error("perflsp: the connection to the client is lost")
    except (KeyboardInterrupt, SystemExit):  # SystemExit: pygls' `exit` handler ends the loop
        pass
    finally:
        server.shutdown()
