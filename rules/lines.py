"""The engine's line model: rows end at \\n, \\r\\n and \\r, where libcst and LSP end them.

`str.splitlines` also breaks at form feeds, U+2028 and other characters Python reads as text on a
line, and `tokenize` reading a `StringIO` breaks at \\n only: anything that counts rows goes
through here so that a row means the same line to the parser, the tokenizer and an edit.
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import Iterator, List

BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(source: str) -> List[str]:
    """The rows of `source`, each with its own line break (the last one may have none)."""
    lines, start = [], 0
    for match in BREAK.finditer(source):
        lines.append(source[start:match.end()])
        start = match.end()
    if start < len(source):
        lines.append(source[start:])
    return lines


def tokens(source: str) -> Iterator[tokenize.TokenInfo]:
    """Python's tokens of `source` on the engine's rows (columns are unchanged: breaks end rows).

    Raises what `tokenize` raises on text it cannot follow (`TokenError`, `SyntaxError`)."""
    return tokenize.generate_tokens(io.StringIO(BREAK.sub("\n", source)).readline)
