"""Where nodes are: ((row, col), (row, col)) spans as libcst's PositionProvider has them, from the
code of the top-level statements that hold them alone.

libcst's PositionProvider costs about as much as the parse (its code generation records a
position for every node, through a context manager per node). Plain code generation that notes the
token index where each wanted node starts and ends costs a fifth of that; here it runs only over
the top-level statements that hold wanted nodes. libcst writes a module as its header, then each
top-level statement's code (at column 0, with the module's indentation and line break), then its
footer, so a statement's code alone, moved down to the row the statement starts at, gives the
very spans the whole module's code gives.

Where each statement starts (`first_rows`): `ast` knows the row where its code starts (the
summary keeps it), libcst how many comment and blank rows above it the statement owns. In the
language server the reparser moves those rows with each edit. Every statement's code is compared
with the source's rows where it is said to start; where a row is not known, or the comparison
fails, the rows are counted by generating every statement's code in order (what one pass over
the whole module costs). An open file keeps what was located in each statement (`Kept`): a
statement its next version keeps, the very same node, has the very same code, and its spans move
by the rows it moved.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst._add_slots import add_slots
from libcst._nodes.internal import CodegenState

from perflsp.rules.lines import BREAK

if TYPE_CHECKING:
    from perflsp.rules.walk import Walk

Span = Tuple[Tuple[int, int], Tuple[int, int]]


class Kept:
    """The spans located in each top-level statement of an open file's last analysed version, their
    rows counted from the statement's first row (1)."""

    __slots__ = ("statements", "moved")

    def __init__(self) -> None:
        # id of a top-level statement -> (the statement, id of a node in it -> its span)
        self.statements: Dict[int, Tuple[cst.CSTNode, Dict[int, Span]]] = {}
        self.moved = 0  # statements whose spans the last version moved, not generated again (for benchmarks)


def locate(module: cst.Module, walk: "Walk", lines: List[str], nodes: Iterable[cst.CSTNode],
           rows: Optional[Sequence[int]], kept: Optional[Kept] = None) -> Dict[int, Span]:
    """id of each of `nodes` -> its span. `lines`: the source's rows (the text `module` was parsed
    from); `rows`: the first row of each top-level statement, when known; `kept`: an open file's
    spans of its last version, replaced by this version's."""
    wanted: Dict[int, Dict[int, cst.CSTNode]] = {}
    for node in nodes:
        stmt = walk.statement_of(node)
        if stmt is not None:
            wanted.setdefault(id(stmt), {})[id(node)] = node
    found = _relative(module, wanted, rows, lines, kept) if rows is not None else None
    if found is None:
        found = _relative(module, wanted, rows_of(module.body, 1 + len(module.header), module), None, kept)
        assert found is not None
    if kept is not None:
        kept.moved = sum(kept.statements.get(id(stmt), (None, None))[1] is spans for stmt, spans, _ in found)
        kept.statements = {id(stmt): (stmt, spans) for stmt, spans, _ in found}
    return {key: ((r0 + first - 1, c0), (r1 + first - 1, c1))
            for _, spans, first in found for key, ((r0, c0), (r1, c1)) in spans.items()}


def first_rows(module: cst.Module, code_rows: Optional[Sequence[int]]) -> Optional[List[int]]:
    """The first row of each top-level statement of `module` (the blank and comment rows it owns
    included) from `code_rows`, the row where each one's code starts (the summary's
    `statement_rows`, decorators included), or None when they do not fit."""
    if code_rows is None or len(code_rows) != len(module.body):
        return None
    out = []
    for row, stmt in zip(code_rows, module.body):
        decorators = getattr(stmt, "decorators", ())
        out.append(row - len(stmt.leading_lines) - (len(decorators[0].leading_lines) if decorators else 0))
    if out and out[0] != 1 + len(module.header):
        return None
    return out


def rows_of(statements: Sequence[cst.CSTNode], first: int, module: cst.Module) -> List[int]:
    """The row each statement's rows start at, the first at `first`, then the row after the last
    one: counted by generating their code."""
    out = [first]
    for stmt in statements:
        out.append(out[-1] + row_count(stmt, module))
    return out


def row_count(node: cst.CSTNode, module: cst.Module) -> int:
    return len(BREAK.findall(module.code_for_node(node)))


def _relative(module: cst.Module, wanted: Dict[int, Dict[int, cst.CSTNode]], rows: Sequence[int],
              lines: Optional[List[str]], kept: Optional[Kept]
              ) -> Optional[List[Tuple[cst.CSTNode, Dict[int, Span], int]]]:
    """(statement, the spans in it counted from its first row, that row) for each statement that
    holds wanted nodes; None when, compared with the source's `lines`, a statement's code is not
    there (without `lines`, `rows` are sure)."""
    out = []
    for index, stmt in enumerate(module.body):
        nodes = wanted.get(id(stmt))
        if nodes is None:
            continue
        first = rows[index]
        previous = kept.statements.get(id(stmt)) if kept is not None else None
        if previous is not None and previous[0] is stmt and previous[1].keys() >= nodes.keys():
            spans = previous[1]
        else:
            spans, code_lines = _statement_spans(stmt, nodes, module)
            if lines is not None and lines[first - 1:first - 1 + len(code_lines)] != code_lines:
                return None
        out.append((stmt, spans, first))
    return out


def _statement_spans(stmt: cst.CSTNode, nodes: Dict[int, cst.CSTNode], module: cst.Module
                     ) -> Tuple[Dict[int, Span], List[str]]:
    """The spans of `nodes` in the code of the top-level statement `stmt`, rows counted from its
    first row (1), and the rows of that code."""
    by_id = dict(nodes)
    # A decorated def starts, as libcst counts it, at `def`: its name's row, the decorator's column.
    decorated = [n for n in nodes.values() if isinstance(n, (cst.FunctionDef, cst.ClassDef)) and n.decorators]
    by_id.update((id(n.name), n.name) for n in decorated)
    state = _SpanState(default_indent=module.default_indent, default_newline=module.default_newline,
                       wanted=set(by_id))
    stmt._codegen(state)
    text = "".join(state.tokens)
    token_ends = list(accumulate(len(t) for t in state.tokens))
    line_starts = [0] + [m.end() for m in BREAK.finditer(text)]
    spans: Dict[int, Span] = {}
    for node_id, (first, last) in state.spans.items():
        begin = token_ends[first - 1] if first else 0
        end = token_ends[last - 1] if last else 0
        # Like libcst's PositionProvider: an expression's range leaves out its own parentheses.
        lpar = getattr(by_id[node_id], "lpar", ())
        begin, end = _trim(text, begin, end, len(lpar) if isinstance(lpar, (list, tuple)) else 0)
        spans[node_id] = (_row_col(line_starts, begin), _row_col(line_starts, end))
    for node in decorated:
        (_, column), end = spans[id(node)]
        spans[id(node)] = ((spans[id(node.name)][0][0], column), end)
    code_lines = BREAK.split(text)
    return spans, code_lines[:-1] if code_lines[-1] == "" else code_lines


@add_slots
@dataclass(frozen=False)
class _SpanState(CodegenState):
    """Plain code generation that notes the token indexes where wanted nodes start and end."""

    wanted: Set[int] = field(default_factory=set)
    spans: Dict[int, List[int]] = field(default_factory=dict)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.spans[id(node)] = [len(self.tokens), 0]

    def after_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.spans[id(node)][1] = len(self.tokens)


def _trim(text: str, begin: int, end: int, parens: int) -> Tuple[int, int]:
    """Skip the whitespace, comment lines and `parens` parentheses a node owns around its code."""
    for layer in range(parens + 1):
        while begin < end:
            ch = text[begin]
            if ch in " \t\f\r\n\\":
                begin += 1
            elif ch == "#":  # a comment line ends at any line break (a file may break rows at \r alone)
                newline = BREAK.search(text, begin, end)
                begin = end if newline is None else newline.end()
            else:
                break
        while end > begin and text[end - 1] in " \t\f\r\n\\":
            end -= 1
        if layer < parens and text[begin:begin + 1] == "(" and text[end - 1:end] == ")":
            begin, end = begin + 1, end - 1
    return begin, end


def _row_col(line_starts: List[int], offset: int) -> Tuple[int, int]:
    row = bisect_right(line_starts, offset)
    return row, offset - line_starts[row - 1]
