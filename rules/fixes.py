"""Applying fixes to source text, to a fixed point, the way `ruff --fix` does."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import libcst as cst

from perflsp.config import Settings
from perflsp.findings import Edit, Finding
from perflsp.rules.engine import check_source

MAX_ROUNDS = 10


def applies(finding: Finding, unsafe: bool) -> bool:
    return finding.fix is not None and (finding.fix.applicability == "safe" or unsafe)


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (rows 1-based, columns in code points)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(row: int, column: int) -> int:
        return starts[row - 1] + column if row - 1 < len(starts) else len(source)

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


def fix_source(source: str, path: str, settings: Settings, unsafe: bool = False) -> Tuple[str, List[Finding], List[Finding]]:
    """Apply fixes until none applies. Returns (new source, fixed findings, remaining findings).

    A round whose result would not parse is dropped: a fix must never break a file.
    """
    fixed: List[Finding] = []
    findings = check_source(source, path, settings)
    for _ in range(MAX_ROUNDS):
        chosen = pick_non_overlapping(findings, unsafe)
        if not chosen:
            break
        candidate = apply_edits(source, [e for f in chosen for e in f.fix.edits])  # type: ignore[union-attr]
        try:
            cst.parse_module(candidate)
        except cst.ParserSyntaxError:
            break
        source = candidate
        fixed.extend(chosen)
        findings = check_source(source, path, settings)
    return source, fixed, findings
