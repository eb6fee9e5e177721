"""Message framing without a server: bodies cut at their headers however the bytes arrive."""
from __future__ import annotations

import json
import random
from typing import List

import pytest

from perflsp.server.transport import Framer

# A body that talks about headers: JSON escapes its line breaks, so it holds no header line.
TRICKY = {"jsonrpc": "2.0", "method": "textDocument/didChange",
          "params": {"text": "Content-Length: 5\r\n\r\n{}\nContent-Length: 7\r\n"}}
PLAIN = {"jsonrpc": "2.0", "id": 1, "method": "shutdown"}
WIDE = {"jsonrpc": "2.0", "method": "x", "params": {"text": "é😀" * 40}}


def frame(body: bytes, length_error: int = 0, content_type: bool = False) -> bytes:
    headers = b"Content-Length: %d\r\n" % (len(body) + length_error)
    if content_type:
        headers += b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
    return headers + b"\r\n" + body


def encode(message: dict) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode()


def feed_in_chunks(stream: bytes, sizes: random.Random) -> List[bytes]:
    framer = Framer()
    bodies = []
    at = 0
    while at < len(stream):
        step = sizes.randint(1, 40)
        bodies += framer.feed(stream[at:at + step])
        at += step
    return bodies


@pytest.mark.parametrize("seed", range(20))
def test_bodies_do_not_depend_on_how_the_bytes_arrive(seed):
    messages = [encode(m) for m in (TRICKY, PLAIN, WIDE, TRICKY)]
    stream = b"".join(frame(body, content_type=i % 2 == 1) for i, body in enumerate(messages))
    assert feed_in_chunks(stream, random.Random(seed)) == messages


@pytest.mark.parametrize("seed", range(10))
def test_a_wrong_length_loses_at_most_its_own_message(seed):
    short, long_, after = encode(TRICKY), encode(WIDE), encode(PLAIN)
    stream = frame(short, -9) + frame(after) + frame(long_, 30) + frame(after)
    # The short body is cut: its remainder is skipped up to the next header. The long one is
    # whole: it ends where the next header starts.
    assert feed_in_chunks(stream, random.Random(seed)) == [short[:-9], after, long_, after]


def test_a_body_is_held_back_until_it_is_complete():
    framer = Framer()
    body = encode(PLAIN)
    assert framer.feed(frame(body)[:-1]) == []
    assert framer.feed(body[-1:]) == [body]
