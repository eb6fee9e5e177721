"""The engine's line model: rows end at \\n, \\r\\n and \\r, where libcst and LSP end them.

`str.splitlines` also breaks at form feeds, U+2028 and other characters Python reads as text on a
line, and `tokenize` reading a `StringIO` breaks at \\n only: anything that counts rows goes
through here so that a row means the same line to the parser, the tokenizer and an edit.
"""
from __future__ import annotations

import io
import re
import tokenize
from bisect import bisect_right
from typing import Iterator, List, NamedTuple, Optional

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


class Change(NamedTuple):
    """Where two texts differ, in whole rows (1-based), widened by a row on each side at most."""

    first: int  # the first row that may differ (the rows above are equal in both texts)
    old_last: int  # the old text's last row that may differ (>= first)
    delta: int  # rows added (negative: removed); the rows below the change are equal, moved by it
    starts: List[int]  # where each row of the new text starts


def changed_rows(old: str, new: str) -> Optional[Change]:
    """The rows an edit changed, or None when the texts are equal. Costs a few string comparisons
    and one scan for line breaks per text, in C."""
    if old == new:
        return None
    same = _common_prefix(old, new)
    tail = _common_suffix(old, new, min(len(old), len(new)) - same)
    old_starts, new_starts = row_starts(old), row_starts(new)
    # One character further on each side: a \r\n split by the edit ends a row in one text only, and
    # a line break the edit removed joins the row after it (at the end of the text, the empty row
    # after the last break: an edit there changes the last rows, not the rows of the code above).
    first = bisect_right(new_starts, max(same - 1, 0))
    old_last = max(bisect_right(old_starts, len(old) - tail), first)
    return Change(first, old_last, len(new_starts) - len(old_starts), new_starts)


def row_starts(text: str) -> List[int]:
    """The offset where each row starts (a text ending with a line break has an empty last row)."""
    return [0, *(m.end() for m in BREAK.finditer(text))]


_CHUNK = 4096


def _common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    at = 0
    while at < limit and a[at:at + _CHUNK] == b[at:at + _CHUNK]:
        at += _CHUNK
    if at >= limit:
        return limit
    while at < limit and a[at] == b[at]:  # they differ inside this chunk (or one ends there)
        at += 1
    return at


def _common_suffix(a: str, b: str, limit: int) -> int:
    """How many characters `a` and `b` end with in common, at most `limit`."""
    n = 0
    while n < limit:
        size = min(_CHUNK, limit - n)
        if a[len(a) - n - size:len(a) - n] != b[len(b) - n - size:len(b) - n]:
            break
        n += size
    else:
        return limit
    while n < limit and a[len(a) - n - 1] == b[len(b) - n - 1]:
        n += 1
    return n
