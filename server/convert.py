"""Engine ⇄ LSP translation: positions, ranges, diagnostics and text edits.

The engine counts rows from 1 and columns in code points; LSP counts both from 0 and columns in
the negotiated encoding (UTF-16 unless the client offers another). A column is converted with the
text of its own line, so `"é😀".item()` lands where the editor draws it.
"""
from __future__ import annotations

import difflib
import re
from typing import Callable, List, Optional, Sequence, Tuple

from lsprotocol import types as T

from perflsp.findings import Edit, Finding, Location

SOURCE = "perflsp"
_BREAK = re.compile(r"\r\n|\r|\n")
_LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
SEVERITY = {
    "error": T.DiagnosticSeverity.Error,
    "warning": T.DiagnosticSeverity.Warning,
    "info": T.DiagnosticSeverity.Information,
    "hint": T.DiagnosticSeverity.Hint,
}


def split_lines(text: str) -> List[str]:
    """Lines without their breaks, split where LSP splits (\\n, \\r\\n, \\r; not str.splitlines' \\f or \\u2028)."""
    return _BREAK.split(text)


class Encoder:
    """Counts columns in the client's position encoding, and knows which diagnostic fields it shows."""

    def __init__(self, encoding: Optional[str] = None, related: bool = True, links: bool = True):
        # pygls hands over the enum member or a plain string, depending on how it was negotiated.
        self.encoding = str(getattr(encoding, "value", encoding) or T.PositionEncodingKind.Utf16.value)
        self.related = related  # relatedInformation (the hot loop's location)
        self.links = links  # codeDescription (the rule's page)

    def units(self, text: str) -> int:
        if self.encoding == T.PositionEncodingKind.Utf32.value:
            return len(text)
        if self.encoding == T.PositionEncodingKind.Utf8.value:
            return len(text.encode("utf-8", "surrogatepass"))
        if text.isascii():
            return len(text)
        return len(text.encode("utf-16-le", "surrogatepass")) // 2

    def position(self, lines: Sequence[str], loc: Location) -> T.Position:
        """An engine location (1-based row, code-point column) as an LSP position, clamped to the text."""
        line = loc.row - 1
        if line >= len(lines):
            line = len(lines) - 1
            return T.Position(line=max(line, 0), character=self.units(lines[line]) if lines else 0)
        text = lines[max(line, 0)]
        return T.Position(line=max(line, 0), character=self.units(text[: max(loc.column, 0)]))

    def range(self, lines: Sequence[str], start: Location, end: Location) -> T.Range:
        return T.Range(start=self.position(lines, start), end=self.position(lines, end))

    def location(self, lines: Sequence[str], pos: T.Position) -> Location:
        """An LSP position as an engine location."""
        if pos.line >= len(lines):
            return Location(len(lines) + 1, 0)
        return Location(pos.line + 1, self.column(lines[pos.line], pos.character))

    def column(self, line: str, units: int) -> int:
        """The code point `units` client units into `line`: past its end is its end (as LSP says),
        inside a surrogate pair rounds up."""
        if self.encoding == T.PositionEncodingKind.Utf32.value or line.isascii():
            return min(units, len(line))
        count = 0
        for index, char in enumerate(line):
            if count >= units:
                return index
            count += self.units(char)
        return len(line)

    def offset(self, text: str, pos: T.Position) -> int:
        """The index in `text` of an LSP position; past the last line is the end of the text."""
        breaks = _BREAK.finditer(text)
        start = 0
        for _ in range(pos.line):
            found = next(breaks, None)
            if found is None:
                return len(text)
            start = found.end()
        found = next(breaks, None)
        return start + self.column(text[start:found.start() if found else len(text)], pos.character)


def apply_change(text: str, change: T.TextDocumentContentChangeEvent, enc: Encoder) -> str:
    """`text` after one of the client's changes, with lines and positions as LSP defines them."""
    if not isinstance(change, T.TextDocumentContentChangePartial):
        return change.text
    start = enc.offset(text, change.range.start)
    end = max(start, enc.offset(text, change.range.end))
    return text[:start] + change.text + text[end:]


# --- diagnostics -------------------------------------------------------------------------------

def diagnostic(finding: Finding, lines: Sequence[str], enc: Encoder,
               hot_target: Optional[Callable[[Optional[int]], Optional[Tuple[str, Sequence[str]]]]] = None,
               severity: Optional[str] = None) -> T.Diagnostic:
    """The LSP diagnostic of a finding.

    `hot_target(cell)` names the document (uri and lines) that holds the finding's hot context; in
    a notebook that can be another cell than the finding's own.
    """
    related = None
    if finding.hot is not None and hot_target is not None and enc.related:
        target = hot_target(finding.hot.cell)
        if target is not None:
            uri, hot_lines = target
            related = [T.DiagnosticRelatedInformation(
                location=T.Location(uri=uri, range=enc.range(hot_lines, finding.hot.start, finding.hot.end)),
                message=finding.hot.message,
            )]
    return T.Diagnostic(
        range=enc.range(lines, finding.start, finding.end),
        message=finding.message,
        severity=SEVERITY[severity or finding.severity],
        code=finding.code,
        code_description=T.CodeDescription(href=finding.url) if finding.url and enc.links else None,
        source=SOURCE,
        related_information=related,
    )


def contains(rng: T.Range, pos: T.Position) -> bool:
    start, end = (rng.start.line, rng.start.character), (rng.end.line, rng.end.character)
    return start <= (pos.line, pos.character) <= end


def overlaps(a: T.Range, b: T.Range) -> bool:
    return ((a.start.line, a.start.character) <= (b.end.line, b.end.character)
            and (b.start.line, b.start.character) <= (a.end.line, a.end.character))


# --- edits ----------------------------------------------------------------------------------------

def text_edits(lines: Sequence[str], edits: Sequence[Edit], enc: Encoder) -> List[T.TextEdit]:
    """A fix's edits (engine positions in `lines`) as LSP text edits."""
    return [T.TextEdit(range=enc.range(lines, e.start, e.end), new_text=e.content) for e in edits]


def diff_edits(old: str, new: str, enc: Encoder) -> List[T.TextEdit]:
    """Line-level edits turning `old` into `new`: only the changed lines move, so the cursor and
    folds elsewhere stay put (a whole-document replacement would reset them)."""
    if old == new:
        return []
    old_lines = _LINE_WITH_END.findall(old)
    new_lines = _LINE_WITH_END.findall(new)
    plain = split_lines(old)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append(T.TextEdit(range=T.Range(start=_line_start(old_lines, plain, i1, enc),
                                            end=_line_start(old_lines, plain, i2, enc)),
                              new_text="".join(new_lines[j1:j2])))
    return out


def _line_start(with_ends: Sequence[str], plain: Sequence[str], index: int, enc: Encoder) -> T.Position:
    # The start of line `index`; one past the last line is the end of the text, which is the
    # end of the last line when the text does not end with a line break.
    if index < len(with_ends) or not with_ends or with_ends[-1] != plain[-1]:
        return T.Position(line=index, character=0)
    return T.Position(line=len(with_ends) - 1, character=enc.units(plain[-1]))
