"""Jupyter notebooks: code cells analysed together as one program, findings mapped back to cells.

A loop in one cell that calls a function defined in another makes that function hot, exactly as
in a script. IPython's own syntax (magics, shell escapes, help) is opaque: each form becomes `pass`
so the rest still parses, with every row and column where the cell has it; a cell that does not
parse is reported on its own and the other cells are still analysed.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from perflsp.config import Settings
from perflsp.findings import Edit, Finding, Fix, HotContext, Location
from perflsp.rules.engine import SYNTAX_ERROR, check_source

# IPython's syntax, where its input transformer (IPython.core.inputtransformer2) looks for it: an
# escape at the start of a statement (`!` `!!` `%` `%%` `?` `??`, and autocall's `/` `,` `;`), a
# magic or shell command as an assigned value (`files = !ls`, `t = %time f(x)`), and help after a
# name at the end of a statement (`x?`, `y = obj.attr??`). Escapes run on over backslash-continued lines.
_LINE_ESCAPES = frozenset("!%?/,;")
_ASSIGNED_ESCAPE = re.compile(r"[ \t]*(?:%[A-Za-z_]|!)")
_HELP_END = re.compile(r"[A-Za-z_*][\w*]*(?:\.[A-Za-z_*][\w*]*)*\?\??[ \t]*$")
# Cell magics whose body is Python (Ruff's list): only their first line is opaque.
_PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})
_BEFORE_OPERATOR_EQUALS = frozenset("=!<>:+-*/%&|^@")


class NotebookError(ValueError):
    """The file is not a readable Jupyter notebook."""


def read_cells(text: str) -> List[Optional[str]]:
    """Source of every cell in order; None for markdown and raw cells. Anything but the shape
    nbformat writes (a list of cell objects, each source a string or a list of strings) raises
    NotebookError naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NotebookError(f"not a Jupyter notebook: {exc}") from None
    except RecursionError:  # the decoder descends one call per nested array or object
        raise NotebookError("not a Jupyter notebook: its JSON is nested too deeply to read") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("not a Jupyter notebook: no list of cells")
    return [_cell_source(number, cell) for number, cell in enumerate(cells, 1)]


def _cell_source(number: int, cell: Any) -> Optional[str]:
    if not isinstance(cell, dict):
        raise NotebookError(f"not a Jupyter notebook: cell {number} is not an object")
    if cell.get("cell_type") != "code":
        return None
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    if not isinstance(source, str):
        raise NotebookError(f"not a Jupyter notebook: the source of cell {number} is not text")
    return source


def _neutralise(source: str) -> str:
    """The cell as Python: each IPython form becomes `pass` (`...` as a value), its continuation lines empty."""
    lines = source.split("\n")
    first = lines[0].lstrip()
    if first.startswith("%%"):
        if _cell_magic(first) not in _PYTHON_CELL_MAGICS:
            return "\n" * (len(lines) - 1)  # the body is another language (bash, HTML, ...)
        lines[0] = ""
    code = _Tokens()
    start = row = 0  # `start`: the row where the current statement began
    while row < len(lines):
        line = lines[row]
        if code.between_statements():
            start = row
            if line.lstrip()[:1] in _LINE_ESCAPES:
                row = _replace(lines, row, _continued_end(lines, row), _indent(line) + "pass")
                continue
        assign = code.scan(line)
        if start == row and assign is not None and _ASSIGNED_ESCAPE.match(line, assign + 1):
            code = _Tokens()  # what follows the `=` is a command, not Python to follow
            row = _replace(lines, row, _continued_end(lines, row), line[:assign + 1] + " ...")
            continue
        if code.between_statements() and not code.commented and _HELP_END.search(line):
            _replace(lines, start, row, _indent(lines[start]) + "pass")
        row += 1
    return "\n".join(lines)


def _cell_magic(first_line: str) -> str:
    words = first_line[2:].split()
    return words[0] if words else ""


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _continued_end(lines: List[str], row: int) -> int:
    while lines[row].endswith("\\") and row + 1 < len(lines):
        row += 1
    return row


def _replace(lines: List[str], first: int, last: int, replacement: str) -> int:
    """Put `replacement` for rows `first..last`, keeping their count; the row after them."""
    lines[first:last + 1] = [replacement] + [""] * (last - first)
    return last + 1


class _Tokens:
    """Just enough of Python's tokenizer to tell where statements start, line by line: brackets,
    strings, comments and backslash continuations (IPython only looks for its syntax there)."""

    def __init__(self) -> None:
        self.depth = 0  # brackets open
        self.quote: Optional[str] = None  # the quotes of a string still open at the end of the last line
        self.continued = False  # the last line ended with a backslash
        self.commented = False  # the last line ended in a comment

    def between_statements(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def scan(self, line: str) -> Optional[int]:
        """Follow one line; the column of its first `=` outside brackets (an assignment's), if any."""
        assign = None
        self.commented = False
        at = 0
        while at < len(line):
            char = line[at]
            if self.quote is not None:
                at = self._past_string(line, at)
            elif char == "#":
                self.commented = True
                break
            elif char in "'\"":
                self.quote = line[at:at + 3] if line[at:at + 3] in ('"""', "'''") else char
                at += len(self.quote)
            else:
                if char in "([{":
                    self.depth += 1
                elif char in ")]}":
                    self.depth = max(self.depth - 1, 0)
                elif char == "=" and self.depth == 0 and assign is None and _is_assignment(line, at):
                    assign = at
                at += 1
        self.continued = line.endswith("\\") and not self.commented
        if self.quote in ("'", '"') and not self.continued:
            self.quote = None  # an unterminated string: the parser reports it
        return assign

    def _past_string(self, line: str, at: int) -> int:
        """Where the open string ends on this line (its end when it goes on)."""
        assert self.quote is not None
        while at < len(line):
            if line[at] == "\\":
                at += 2
            elif line.startswith(self.quote, at):
                at += len(self.quote)
                self.quote = None
                return at
            else:
                at += 1
        return len(line)


def _is_assignment(line: str, at: int) -> bool:
    # `=` alone: not part of `==`, `!=`, `<=`, `:=` nor of an augmented assignment such as `+=`
    return line[at + 1:at + 2] != "=" and line[at - 1:at] not in _BEFORE_OPERATOR_EQUALS


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
                         Location(hot_end, finding.hot.end.column), hot_cell, finding.hot.context)
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
