"""Suppression comments: `# noqa`, `# noqa: PFL101`, `# perflsp: ignore[PFL101]`, `# perflsp: ignore-file`."""
from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, FrozenSet, Optional

NOQA = re.compile(r"#\s*noqa(?P<sep>:\s*(?P<codes>[A-Z]+\d+(?:[\s,]+[A-Z]+\d+)*))?", re.IGNORECASE)
IGNORE = re.compile(r"#\s*perflsp:\s*ignore\[(?P<codes>[^\]]*)\]")
IGNORE_FILE = re.compile(r"#\s*perflsp:\s*ignore-file\b")
_CODES = re.compile(r"[A-Z]+\d+")
ALL = frozenset({"*"})


def comments_by_row(source: str) -> Dict[int, str]:
    """Real comments (not `#` inside strings) by 1-based row; tokenizes only when a directive may exist."""
    if "perflsp:" not in source and "noqa" not in source.lower():
        return {}
    out: Dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                out[token.start[0]] = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        for row, line in enumerate(source.splitlines(), 1):
            if "#" in line:
                out[row] = line[line.index("#"):]
    return out


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


def ignores_file(source: str, comments: Dict[int, str]) -> bool:
    return bool(IGNORE_FILE.search(source)) and any(IGNORE_FILE.search(c) for c in comments.values())


def with_noqa(line: str, codes) -> str:
    """`line` with `# noqa: CODES` added, merged into an existing `# noqa: ...` when there is one."""
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    match = NOQA.search(body)
    if match and not match.group("codes"):
        return line  # a bare `# noqa` already silences everything
    if match:
        merged = sorted(set(_CODES.findall(match.group("codes").upper())) | set(codes))
        return body[: match.start()] + "# noqa: " + ", ".join(merged) + body[match.end():] + ending
    return body.rstrip() + "  # noqa: " + ", ".join(sorted(set(codes))) + ending
