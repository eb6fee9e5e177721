"""Suppression comments: `# noqa`, `# noqa: PFL101`, `# perflsp: ignore[PFL101]`, `# perflsp: ignore-file`."""
from __future__ import annotations

import re
import tokenize
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple

from perflsp.rules.lines import split_lines, tokens

NOQA = re.compile(r"#\s*noqa(?P<sep>:\s*(?P<codes>[A-Z]+\d+(?:[\s,]+[A-Z]+\d+)*))?", re.IGNORECASE)
IGNORE = re.compile(r"#\s*perflsp:\s*ignore\[(?P<codes>[^\]]*)\]")
IGNORE_FILE = re.compile(r"#\s*perflsp:\s*ignore-file\b")
_CODES = re.compile(r"[A-Z]+\d+")
ALL = frozenset({"*"})
_LINE_ENDS = frozenset({tokenize.NEWLINE, tokenize.NL})


def comments_by_row(source: str) -> Dict[int, str]:
    """Real comments (not `#` inside strings) by 1-based row; tokenizes only when a directive may exist.

    A comment also stands for the rows that cannot hold one (see `comment_places`), so that the
    `# noqa` which `--add-noqa` puts after a multi-line string covers the string's first row too."""
    if "perflsp:" not in source and "noqa" not in source.lower():
        return {}
    try:
        places = comment_places(source)
    except (tokenize.TokenError, SyntaxError):
        lines = enumerate(split_lines(source), 1)
        return {row: line[line.index("#"):].rstrip("\r\n") for row, line in lines if "#" in line}
    out = {row: text for row, (_, text) in places.comments.items()}
    for row, holder in places.holders.items():
        if holder in out:
            out[row] = out[holder]
    return out


@dataclass
class CommentPlaces:
    comments: Dict[int, Tuple[int, str]]  # row -> (column, text) of each real comment
    holders: Dict[int, int]  # row that cannot end in a comment -> the first row after it that can

    def holder(self, row: int) -> int:
        return self.holders.get(row, row)


def comment_places(source: str) -> CommentPlaces:
    """Where comments are and where they can go. A row cannot end in a comment when it ends inside
    a string (a triple-quoted one, or an f-string's) or with a backslash continuation: its comment
    goes at the end of the row where the string or the continued line ends, as in Ruff.

    Raises what `tokenize` raises on text it cannot follow."""
    comments: Dict[int, Tuple[int, str]] = {}
    holders: Dict[int, int] = {}
    previous = None
    for token in tokens(source):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.start[1], token.string)
        last_row = token.start[0] if previous is None or previous.type in _LINE_ENDS else previous.end[0]
        for row in range(last_row, token.start[0]):  # rows joined by backslashes
            holders[row] = token.start[0]
        for row in range(token.start[0], token.end[0]):  # rows inside a multi-line token
            holders[row] = token.end[0]
        previous = token
    for row in sorted(holders, reverse=True):  # a string may end on a row that goes on with a backslash
        holders[row] = holders.get(holders[row], holders[row])
    return CommentPlaces(comments, holders)


def suppressed_codes(comment: str) -> Optional[FrozenSet[str]]:
    """Codes a comment suppresses: `ALL` for a bare `# noqa`, None when it suppresses nothing."""
    codes = set()
    found = False
    for match in NOQA.finditer(comment):
        found = True
        if not match.group("codes"):
            return ALL
        codes.update(_CODES.findall(match.group("codes").upper()))
    for match in IGNORE.finditer(comment):
        found = True
        codes.update(_CODES.findall(match.group("codes").upper()))
    return frozenset(codes) if found else None


def is_suppressed(code: str, rows, comments: Dict[int, str]) -> bool:
    for row in rows:
        comment = comments.get(row)
        if comment is None:
            continue
        codes = suppressed_codes(comment)
        if codes is not None and (codes is ALL or code in codes):
            return True
    return False


def ignores_file(source: str) -> bool:
    return bool(IGNORE_FILE.search(source)) and any(IGNORE_FILE.search(c) for c in comments_by_row(source).values())


def with_noqa(line: str, codes, comment_column: Optional[int]) -> str:
    """`line` with `# noqa: CODES` added, merged into its `# noqa: ...` comment (which starts at
    `comment_column`) when it has one."""
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    match = NOQA.search(body, comment_column) if comment_column is not None else None
    if match and not match.group("codes"):
        return line  # a bare `# noqa` already silences everything
    if match:
        merged = sorted(set(_CODES.findall(match.group("codes").upper())) | set(codes))
        return body[: match.start()] + "# noqa: " + ", ".join(merged) + body[match.end():] + ending
    return body.rstrip() + "  # noqa: " + ", ".join(sorted(set(codes))) + ending
