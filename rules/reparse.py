"""Parsing the next version of an open file: only the statement an edit falls in is parsed again
(and walked again: the engine keeps its `Walk` here, whose parts of unchanged statements the next
walk takes over).

libcst parses a 5,000-line file in a third of a second, longer than a keystroke may wait. Its tree
is a list of top-level statements, and each statement owns whole rows: the blank and comment lines
above it, its code, and the deeper-indented comments closing its blocks. So when an edit lies
inside one top-level statement, that statement's rows are parsed alone and put in the place of
the old node; inside a class or a def, the innermost statement of their bodies that holds the edit
(a method, a statement of a method or of a function), parsed inside wrappers indented as the
classes and defs around it (`class _:`, `def _():`). Every other node is kept as it is, and
the rows where the top-level statements start move by the rows the edit added: the positions of
the statements kept move with them (`perflsp.rules.positions`).

The result must be the tree a whole parse gives. The first statement's rows take the module's
header with them, the last one's the module's footer, a class's last statement the class body's
footer. Where the rows a statement owns could change hands (blank or comment rows at its edges
that a neighbour would claim by their indentation), where the first indented block of the file
(which sets the indentation libcst writes the whole tree with) would change, or where the new
rows do not parse as exactly one statement, the whole text is parsed: that also raises the
parser's error for a text that does not parse. tests/rules/test_incremental.py compares the trees.
"""
from __future__ import annotations

import logging
from bisect import bisect_right
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

import libcst as cst

from perflsp.rules.lines import BREAK, Change, changed_rows
from perflsp.rules.positions import Kept, first_rows, row_count, rows_of
from perflsp.rules.reuse import Reuse

if TYPE_CHECKING:
    from perflsp.rules.walk import Walk

log = logging.getLogger("perflsp")


class _Piece(NamedTuple):
    stmt: cst.BaseStatement
    header: Sequence[cst.EmptyLine]  # the module's, when the piece is the file's first statement
    footer: Sequence[cst.EmptyLine]  # the module's or the class body's, when the piece closes it
    ends_with_newline: bool  # when the piece runs to the end of the file


class Reparser:
    """The last version of one document that parsed, and where its statements' rows start."""

    def __init__(self) -> None:
        self.text: Optional[str] = None
        self.module: Optional[cst.Module] = None
        self.spliced = False  # the last parse re-parsed one statement only
        self.walk: Optional["Walk"] = None  # the engine's walk of the last tree it analysed (see `Walk`)
        self.reuse = Reuse()  # the rules' candidates per statement of that tree (see `perflsp.rules.reuse`)
        self.positions = Kept()  # the positions located per statement of that tree (see `perflsp.rules.positions`)
        self._rows: Optional[List[int]] = None  # first row of each top-level statement; then the footer's
        self._bodies: Dict[Tuple[int, ...], List[int]] = {}  # a class's or def's path -> its body's rows, likewise
        self._first_block = 0  # index of the first top-level statement holding an indented block

    def parse(self, text: str, code_rows: Optional[Sequence[int]] = None) -> cst.Module:
        """The tree of `text`; raises what `libcst.parse_module` raises. `code_rows`: the row where
        each top-level statement's code starts, from the summary of `text` (`statement_rows`)."""
        module = None
        if self.module is not None and self.text is not None:
            try:
                module = self._splice(text)
            except Exception:  # a bug here must cost the time of a whole parse, never the findings
                log.exception("perflsp: parsing one statement again failed; parsing the whole file")
        self.spliced = module is not None
        if module is None:
            module = cst.parse_module(text)
            self._rows, self._bodies = _rows_from_summary(module, text, code_rows), {}
            self._first_block = next((i for i, s in enumerate(module.body) if _has_block(s)), len(module.body))
        self.text, self.module = text, module
        return module

    # --- splicing --------------------------------------------------------------------------------

    def _splice(self, text: str) -> Optional[cst.Module]:
        assert self.module is not None and self.text is not None
        change = changed_rows(self.text, text)
        if change is None:
            return self.module
        module, rows, body = self.module, self.rows(), self.module.body
        if not body:
            return None
        index = max(bisect_right(rows, change.first, 0, len(body)) - 1, 0)  # the header's rows go with the first
        last = index == len(body) - 1
        if not last and change.old_last >= rows[index + 1]:
            return None  # more than one statement
        old = body[index]
        header, footer, ends_with_newline = module.header, module.footer, module.has_trailing_newline
        spliced = self._splice_inside((index,), old, rows[index], None if last else rows[index + 1], change, text)
        if spliced is not None:
            new, path = spliced
        else:
            piece = self._parse_rows(text, change, 1 if index == 0 else rows[index], None if last else rows[index + 1],
                                     None if last else body[index + 1], (), True)
            # The file's first indented block sets the indentation its tree is written with: while
            # that block stays where it is, `_parse_rows` checks the new rows agree with it.
            if piece is None or (index == self._first_block and not _has_block(piece.stmt)):
                return None
            new, path = piece.stmt, (index,)
            header = piece.header if index == 0 else header
            footer, ends_with_newline = (piece.footer, piece.ends_with_newline) if last else (footer, ends_with_newline)
        self._rows = [1 + len(header), *rows[1:index + 1], *(r + change.delta for r in rows[index + 1:])]
        self._bodies = _moved_bodies(self._bodies, path, change.delta)
        return module.with_changes(body=(*body[:index], new, *body[index + 1:]), header=header, footer=footer,
                                   has_trailing_newline=ends_with_newline)

    def _splice_inside(self, path: Tuple[int, ...], node: cst.CSTNode, first: int, end: Optional[int],
                       change: Change, text: str, ancestors: Sequence[cst.CSTNode] = ()):
        """(`node`, a class or a def whose rows start at `first`, with the one statement of its
        body the edit lies in parsed again, the path of that statement), or None. `end`: the
        row `node`'s rows end before, when its last statement may be parsed alone (top level
        only: a nested body's last rows may go to the blocks around it)."""
        assert self.module is not None
        block = getattr(node, "body", None)
        if not isinstance(node, (cst.ClassDef, cst.FunctionDef)) or not isinstance(block, cst.IndentedBlock):
            return None
        rows = self._body_rows(path, node, first)
        k = bisect_right(rows, change.first, 0, len(block.body)) - 1
        closing = k == len(block.body) - 1  # the body's last statement: its rows run to the next statement's
        if k < 0 or (closing and end is None):
            return None  # the header; the end of the file or of a nested body
        stop = end if closing else rows[k + 1]
        assert stop is not None
        if change.old_last >= stop:
            return None
        child = block.body[k]
        if not closing:  # a method's statement, a nested def's: the smallest piece that parses alone
            deeper = self._splice_inside((*path, k), child, rows[k], None, change, text, (*ancestors, node))
            if deeper is not None:
                new_child, child_path = deeper
                return node.with_changes(body=block.with_changes(
                    body=(*block.body[:k], new_child, *block.body[k + 1:]))), child_path
        following = self.module.body[path[0] + 1] if closing else block.body[k + 1]
        piece = self._parse_rows(text, change, rows[k], stop, following, (*ancestors, node), closing)
        if piece is None:
            return None
        new_block = block.with_changes(body=(*block.body[:k], piece.stmt, *block.body[k + 1:]),
                                       footer=piece.footer if closing else block.footer)
        return node.with_changes(body=new_block), (*path, k)

    def _parse_rows(self, text: str, change: Change, first: int, end: Optional[int], following: Optional[cst.CSTNode],
                    ancestors: Sequence[cst.CSTNode], top_follows: bool) -> Optional[_Piece]:
        """The one statement in the new text's rows from `first` to `end + delta` (1-based; None: the
        end of the file), parsed at the top level or, inside `ancestors` (the classes and defs
        around it, outermost first), in wrappers indented as they are; `top_follows`: its rows
        end where a top-level statement's start. None when that is not sure to be what a whole
        parse makes of those rows: blank and comment rows around a statement belong to it or to
        its neighbours by their indentation, and the rows at either edge must leave no doubt."""
        assert self.module is not None
        module = self.module
        starts = change.starts
        if end is None:
            snippet = text[starts[first - 1]:]
        else:
            stop = end - 1 + change.delta
            if stop >= len(starts) or stop < first:
                return None
            snippet = text[starts[first - 1]:starts[stop]]
            lines = BREAK.split(snippet)[:-1]  # the snippet ends with a line break
            if not lines or not lines[-1].strip() or (top_follows and lines[-1].startswith("#")):
                return None  # blank or comment rows at the end would belong to the next statement
            if _indented_lines(getattr(following, "leading_lines", ())):
                return None  # an indented comment above the next statement would go to this one's blocks
        wrappers, indent = [], ""
        for node in ancestors:
            wrappers.append(indent + _WRAPPER[_kind(node)] + module.default_newline)
            block = node.body  # type: ignore[attr-defined]
            indent += block.indent if block.indent is not None else module.default_indent
        config = cst.PartialParserConfig(encoding=module.encoding, future_imports=_future_imports(module))
        try:
            parsed = cst.parse_module("".join(wrappers) + snippet, config=config)
        except (cst.ParserSyntaxError, SyntaxError, RecursionError):
            return None
        if (len(parsed.body) != 1 or parsed.default_newline != module.default_newline
                or parsed.encoding != module.encoding or (parsed.footer and end is not None)):
            return None
        # libcst takes the indentation it writes blocks relative to from the text it parses (the
        # first indented line), whatever the configuration says.
        if parsed.default_indent != module.default_indent and (ancestors or _has_block(parsed.body[0])):
            return None
        if not ancestors:
            stmt = parsed.body[0]
            if first == 1:  # the file's first statement: the comments above it are the module's header
                return _Piece(stmt, parsed.header, parsed.footer, parsed.has_trailing_newline)
            if any(line.whitespace.value or not line.indent for line in parsed.header):
                return None  # an indented comment at the top may close the previous statement's blocks
            return _Piece(stmt.with_changes(leading_lines=(*parsed.header, *stmt.leading_lines)), (),
                          parsed.footer, parsed.has_trailing_newline)
        if parsed.header or parsed.footer:
            return None
        wrapper: cst.CSTNode = parsed.body[0]
        for depth, node in enumerate(ancestors):
            inner, block = getattr(wrapper, "body", None), node.body  # type: ignore[attr-defined]
            innermost = depth == len(ancestors) - 1
            if (_kind(wrapper) != _kind(node) or not isinstance(inner, cst.IndentedBlock) or len(inner.body) != 1
                    or inner.indent != block.indent or (inner.footer and not (innermost and top_follows))):
                return None
            wrapper = inner.body[0]
        if _indented_lines(wrapper.leading_lines):  # type: ignore[attr-defined]
            return None  # a deeper-indented comment on top closes the previous statement's blocks
        return _Piece(wrapper, (), inner.footer, True)  # type: ignore[arg-type]

    # --- where statements start ----------------------------------------------------------------------

    def rows(self) -> List[int]:
        """Where the top-level statements of the last tree start, then the row after the last one."""
        if self._rows is None:
            assert self.module is not None
            self._rows = rows_of(self.module.body, 1 + len(self.module.header), self.module)
        return self._rows

    def _body_rows(self, path: Tuple[int, ...], node: cst.CSTNode, first: int) -> List[int]:
        """Where the statements of the body of `node` (at `path`, its rows starting at `first`)
        start, then the row after the last one."""
        found = self._bodies.get(path)
        if found is None:
            assert self.module is not None
            block = node.body  # type: ignore[attr-defined]
            # The body starts on the row after the header's colon: count the rows of the node
            # with a one-line body instead of generating all of its code.
            header = node.with_changes(body=cst.SimpleStatementSuite(body=[cst.Pass()]))
            found = self._bodies[path] = rows_of(block.body, first + row_count(header, self.module), self.module)
        return found


def _moved_bodies(bodies: Dict[Tuple[int, ...], List[int]], path: Tuple[int, ...], delta: int
                  ) -> Dict[Tuple[int, ...], List[int]]:
    """The known body rows after the statement at `path` was parsed again, `delta` rows longer:
    the bodies around it keep theirs, moved below it; those under the same top-level statement
    beside it or inside it are forgotten (counted again when an edit needs them)."""
    out = {}
    for key, rows in bodies.items():
        if key[0] != path[0]:
            out[key] = rows if key[0] < path[0] else [r + delta for r in rows]
        elif len(key) < len(path) and path[:len(key)] == key:
            child = path[len(key)]
            out[key] = [*rows[:child + 1], *(r + delta for r in rows[child + 1:])]
    return out


_WRAPPER = {"class": "class _:", "def": "def _():", "async def": "async def _():"}


def _kind(node: cst.CSTNode) -> str:
    if isinstance(node, cst.ClassDef):
        return "class"
    if isinstance(node, cst.FunctionDef):
        return "async def" if node.asynchronous is not None else "def"
    return type(node).__name__


def _rows_from_summary(module: cst.Module, text: str, code_rows: Optional[Sequence[int]]) -> Optional[List[int]]:
    """The statements' first rows from the summary of the same text (made for its per-step facts
    just before), then the row past the end. Saves generating the code of the whole file."""
    rows = first_rows(module, code_rows)
    return None if rows is None else [*rows, len(BREAK.findall(text)) + 2]  # the last statement's rows run to the end


def _indented_lines(lines: Sequence[cst.EmptyLine]) -> bool:
    return any(line.whitespace.value for line in lines)


def _has_block(node: cst.CSTNode) -> bool:
    """The statement holds an indented block (the file's first one sets its indentation)."""
    body = getattr(node, "body", None)
    if isinstance(body, cst.IndentedBlock):
        return True
    parts = [getattr(node, name, None) for name in ("orelse", "finalbody")]
    parts += list(getattr(node, "handlers", ()) or ()) + list(getattr(node, "cases", ()) or ())
    return any(part is not None and _has_block(part) for part in parts)


def _future_imports(module: cst.Module) -> frozenset:
    names = set()
    for stmt in module.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
        if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
            continue  # the docstring
        if not (isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name)
                and small.module.value == "__future__" and not isinstance(small.names, cst.ImportStar)):
            break
        names.update(alias.name.value for alias in small.names if isinstance(alias.name, cst.Name))
    return frozenset(names)
