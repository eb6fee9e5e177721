"""`.perflsp/evidence.json`: what a short recorded run (`perflsp record`) saw on each line.

The contract between the runtime, which writes the file at the end of `perflsp record`, and the
static engine, which reads it (`perflsp.rules.evidence`). Standard library only: both sides
import it. The format is documented in `docs/evidence-json.md`.
"""
from __future__ import annotations

import hashlib
import io
import os
import tokenize
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

EVIDENCE_VERSION = 2
EVIDENCE_FILE = Path(".perflsp") / "evidence.json"

STEP_SOURCES = ("optimizer.step", "function")

# What a run counts as reading a tensor on the host, by the name of the call that did it. On an
# accelerator each one waits for the device to finish the work queued before it.
HOST_READ_KINDS = ("item", "tolist", "numpy", "cpu", "to-host", "bool", "int", "float", "index", "format",
                   "equal", "data-dependent-shape")

_NOT_CODE = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER})
# Python 3.12 tokenizes an f-string (3.14 a t-string) into parts, earlier versions as one string:
# its source text stands for the parts, so that a record made on one version applies on another.
_STRING_STARTS = frozenset(getattr(tokenize, n) for n in ("FSTRING_START", "TSTRING_START") if hasattr(tokenize, n))
_STRING_ENDS = frozenset(getattr(tokenize, n) for n in ("FSTRING_END", "TSTRING_END") if hasattr(tokenize, n))


def evidence_path(workspace: os.PathLike | str) -> Path:
    return Path(workspace) / EVIDENCE_FILE


class Statement(NamedTuple):
    """One logical line of a file: a simple statement with all its physical lines, or a compound
    statement's header from its keyword to its colon (`for x in loader:`, `if ...:`, `def ...:`),
    without the body below it. Statements joined by `;`, or a header with its body on the same
    line, are one."""

    first: int  # 1-based rows
    last: int
    fingerprint: str


def statements(text: str) -> Optional[List[Statement]]:
    """The statements of `text` in order, or None when it does not tokenize.

    Evidence about a line applies while the statement that holds it is unchanged. The fingerprint
    is a hash (SHA-256, 16 hex digits) of the statement's tokens, each with its row in the
    statement: indentation, spaces between tokens and comments do not count; a token changed,
    moved to another row, or a row added or removed inside the statement does."""
    lines = io.StringIO(text, newline=None).readlines()  # rows as Python counts them, \r\n as \n
    found: List[Statement] = []
    parts: List[str] = []  # the statement's tokens, and a run of "\n" where a token starts a row below
    first = row = last = 0
    string_start, depth = (0, 0), 0
    try:
        for kind, token, start, end, _ in tokenize.generate_tokens(iter(lines).__next__):
            if kind in _STRING_STARTS:
                depth += 1
                if depth == 1:
                    string_start = start
                continue
            if depth:
                if kind in _STRING_ENDS:
                    depth -= 1
                if depth:
                    continue
                start, token = string_start, _source(lines, string_start, end)
            if kind == tokenize.NEWLINE:
                if parts:
                    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
                    found.append(Statement(first, last, digest))
                parts = []
            elif kind not in _NOT_CODE:
                if not parts:
                    first = row = start[0]
                elif start[0] != row:
                    parts.append("\n" * (start[0] - row))
                    row = start[0]
                parts.append(token)
                last = end[0]
    except (tokenize.TokenError, SyntaxError):
        return None
    return found


def _source(lines: List[str], start: Tuple[int, int], end: Tuple[int, int]) -> str:
    """The text between two of tokenize's (row, column) positions."""
    (row, col), (end_row, end_col) = start, end
    if row == end_row:
        return lines[row - 1][col:end_col]
    return lines[row - 1][col:] + "".join(lines[row:end_row - 1]) + lines[end_row - 1][:end_col]
