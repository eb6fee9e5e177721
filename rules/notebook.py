"""Jupyter notebooks: code cells analysed together as one program, findings mapped back to cells.

A loop in one cell that calls a function defined in another makes that function hot, exactly as
in a script. IPython magics and shell escapes become `pass` so the rest still parses; a cell that
does not parse is reported on its own and the other cells are still analysed.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from perflsp.config import Settings
from perflsp.findings import Edit, Finding, Fix, HotContext, Location
from perflsp.rules.engine import SYNTAX_ERROR, check_source

_MAGIC = re.compile(r"^(\s*)([%!]|\?\?|\w[\w.]*\?\s*$)")


class NotebookError(ValueError):
    """The file is not a readable Jupyter notebook."""


def read_cells(text: str) -> List[Optional[str]]:
    """Source of every cell in order; None for markdown and raw cells."""
    try:
        data = json.loads(text)
        cells = data["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        raise NotebookError(f"not a Jupyter notebook: {exc}") from None
    out: List[Optional[str]] = []
    for cell in cells:
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        out.append(source if cell.get("cell_type") == "code" else None)
    return out


def _neutralise(source: str) -> str:
    if source.lstrip().startswith("%%"):
        return "\n" * source.count("\n")  # a cell magic: the cell is not Python
    lines = []
    for line in source.split("\n"):
        match = _MAGIC.match(line)
        lines.append(f"{match.group(1)}pass" if match else line)
    return "\n".join(lines)


class Program:
    """The code cells joined into one module, with a map from program rows back to cells."""

    def __init__(self, cells: Sequence[Optional[str]], skipped: Sequence[int] = ()):
        parts: List[str] = []
        self.first_rows: List[Tuple[int, int]] = []  # (first program row, cell number 1-based)
        row = 1
        for number, source in enumerate(cells, 1):
            if source is None or number in skipped:
                continue
            text = _neutralise(source)
            if not text.endswith("\n"):
                text += "\n"
            self.first_rows.append((row, number))
            parts.append(text)
            row += text.count("\n")
        self.source = "".join(parts)

    def label(self, row: int) -> str:
        number, cell_row = self.locate(row)
        return f"line {cell_row} of cell {number}"

    def locate(self, row: int) -> Tuple[int, int]:
        """(cell number, row inside the cell) of a program row."""
        chosen = self.first_rows[0] if self.first_rows else (1, 1)
        for first, number in self.first_rows:
            if first > row:
                break
            chosen = (first, number)
        first, number = chosen
        return number, row - first + 1


def check_cells(cells: Sequence[Optional[str]], path: str, settings: Settings) -> List[Finding]:
    """Findings with `cell` set and rows relative to their cell."""
    skipped: List[int] = []
    errors: List[Finding] = []
    while True:
        program = Program(cells, skipped)
        findings = check_source(program.source, path, settings, program.label) if program.first_rows else []
        syntax = next((f for f in findings if f.code == SYNTAX_ERROR), None)
        if syntax is None:
            break
        number, row = program.locate(syntax.start.row)
        errors.append(replace(syntax, cell=number, start=Location(row, syntax.start.column),
                              end=Location(row, syntax.end.column)))
        skipped.append(number)
    mapped = [m for m in (_to_cell(program, f) for f in findings) if m is not None]
    return sorted(errors + mapped, key=Finding.sort_key)


def _to_cell(program: Program, finding: Finding) -> Optional[Finding]:
    number, start_row = program.locate(finding.start.row)
    end_number, end_row = program.locate(finding.end.row)
    if end_number != number:
        return None
    hot = None
    if finding.hot is not None:
        hot_cell, hot_row = program.locate(finding.hot.start.row)
        _, hot_end = program.locate(finding.hot.end.row)
        hot = HotContext(finding.hot.message, Location(hot_row, finding.hot.start.column),
                         Location(hot_end, finding.hot.end.column), hot_cell)
    fix = finding.fix
    if fix is not None:
        edits = []
        for edit in fix.edits:
            edit_number, edit_row = program.locate(edit.start.row)
            _, edit_end = program.locate(edit.end.row)
            if edit_number != number:
                edits = []
                break
            edits.append(Edit(Location(edit_row, edit.start.column), Location(edit_end, edit.end.column), edit.content))
        fix = Fix(fix.applicability, fix.message, tuple(edits)) if edits else None
    return replace(finding, cell=number, start=Location(start_row, finding.start.column),
                   end=Location(end_row, finding.end.column), hot=hot, fix=fix)


def write_cells(text: str, new_sources: Dict[int, str]) -> str:
    """The notebook JSON with the given cells' sources replaced (cell numbers 1-based)."""
    data: Dict[str, Any] = json.loads(text)
    for number, source in new_sources.items():
        data["cells"][number - 1]["source"] = source.splitlines(keepends=True)
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
