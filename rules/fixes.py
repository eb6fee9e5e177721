"""Applying fixes to source text, to a fixed point, the way `ruff --fix` does."""
from __future__ import annotations

import tokenize
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from perflsp.config import Settings
from perflsp.findings import Edit, Finding
from perflsp.rules.engine import PARSE_ERRORS, SYNTAX_ERROR, check_source
from perflsp.rules.lines import BREAK, split_lines
from perflsp.rules.notebook import Program, check_cells, read_cells, write_cells
from perflsp.rules.suppress import CommentPlaces, comment_places, with_noqa

MAX_ROUNDS = 10
FactsOfText = Callable[[str], Optional[Dict[str, Any]]]  # a text of the file -> the project graph's facts


def applies(finding: Finding, unsafe: bool) -> bool:
    return finding.fix is not None and (finding.fix.applicability == "safe" or unsafe)


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (rows 1-based, columns in code points)."""
    starts = [0] + [m.end() for m in BREAK.finditer(source)]  # the engine's rows (see `lines`)

    def offset(row: int, column: int) -> int:
        return min(starts[row - 1] + column, len(source)) if row - 1 < len(starts) else len(source)

    out, cursor = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        begin, end = offset(edit.start.row, edit.start.column), offset(edit.end.row, edit.end.column)
        if begin < cursor:
            raise ValueError("overlapping edits")
        out.append(source[cursor:begin])
        out.append(edit.content)
        cursor = end
    out.append(source[cursor:])
    return "".join(out)


def pick_non_overlapping(findings: Sequence[Finding], unsafe: bool) -> List[Finding]:
    chosen: List[Finding] = []
    taken: List[Tuple] = []
    for finding in findings:
        if not applies(finding, unsafe):
            continue
        spans = [(e.start, e.end) for e in finding.fix.edits]  # type: ignore[union-attr]
        if any(s < t_end and t_start < e for s, e in spans for t_start, t_end in taken):
            continue
        chosen.append(finding)
        taken.extend(spans)
    return chosen


def fix_source(source: str, path: str, settings: Settings, unsafe: bool = False,
               facts_of: Optional[FactsOfText] = None) -> Tuple[str, List[Finding], List[Finding]]:
    """Apply fixes until none applies. Returns (new source, fixed findings, remaining findings).

    A round whose result would not parse is dropped: a fix must never break a file. `facts_of`
    gives the project graph's facts for each round's text (`FileResult.facts_of`); without it the
    file is judged alone.
    """

    def check(text: str) -> List[Finding]:
        return check_source(text, path, settings, facts=facts_of(text) if facts_of is not None else None)

    fixed: List[Finding] = []
    findings = check(source)
    for _ in range(MAX_ROUNDS):
        chosen = pick_non_overlapping(findings, unsafe)
        if not chosen:
            break
        candidate = apply_edits(source, [e for f in chosen for e in f.fix.edits])  # type: ignore[union-attr]
        try:
            cst.parse_module(candidate)
        except PARSE_ERRORS:
            break
        source = candidate
        fixed.extend(chosen)
        findings = check(source)
    return source, fixed, findings


def fix_text(text: str, path: str, settings: Settings, unsafe: bool = False,
             facts_of: Optional[FactsOfText] = None) -> Tuple[str, List[Finding], List[Finding]]:
    """`fix_source` for Python files and for notebooks (fixes applied cell by cell; a notebook is
    judged alone, as `perflsp check` judges it)."""
    if not path.endswith(".ipynb"):
        return fix_source(text, path, settings, unsafe, facts_of)
    fixed: List[Finding] = []
    findings = check_cells(read_cells(text), path, settings)
    for _ in range(MAX_ROUNDS):
        chosen = pick_non_overlapping(findings, unsafe)
        if not chosen:
            break
        cells = read_cells(text)
        new_sources: Dict[int, str] = {}
        for number in sorted({f.cell for f in chosen if f.cell}):
            edits = [e for f in chosen if f.cell == number for e in f.fix.edits]  # type: ignore[union-attr]
            new_sources[number] = apply_edits(cells[number - 1] or "", edits)
        try:
            cst.parse_module(Program([new_sources.get(i, c) for i, c in enumerate(cells, 1)]).source)
        except PARSE_ERRORS:
            break
        text = write_cells(text, new_sources)
        fixed.extend(chosen)
        findings = check_cells(read_cells(text), path, settings)
    return text, fixed, findings


def add_noqa(source: str, findings: Sequence[Finding]) -> Tuple[str, int]:
    """`source` with `# noqa: CODE` for each finding, and how many rows got one. The comment goes
    at the end of the finding's row, or of the first row after it that can end in a comment (a row
    ending inside a multi-line string, or with a backslash, cannot); there it suppresses the finding."""
    try:
        places = comment_places(source)
    except (tokenize.TokenError, SyntaxError):
        places = CommentPlaces({}, {})
    codes_by_row: Dict[int, Set[str]] = {}
    for finding in findings:
        if finding.code != SYNTAX_ERROR:
            codes_by_row.setdefault(places.holder(finding.start.row), set()).add(finding.code)
    lines = split_lines(source)
    added = 0
    for row, codes in codes_by_row.items():
        if row <= len(lines):
            comment = places.comments.get(row)
            new = with_noqa(lines[row - 1], codes, comment[0] if comment else None)
            added += new != lines[row - 1]
            lines[row - 1] = new
    return "".join(lines), added
