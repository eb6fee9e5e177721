"""Summarising a text again after an edit inside one top-level statement: only that statement.

The language server summarises the file being typed in on every keystroke (its per-step facts
depend on it). A summary is the concatenation of what each group of top-level statements adds
(`perflsp.rules.summary.Group`), and a group reads of the others only the module-level state
before it (imports, module-level names, periodic names) and the set of names defined at the top
level. So when an edit lies inside one group, and summarising the group's new text leaves that
state and those names as they were, the other groups' parts stand, moved by the rows the edit
added or removed. Anything else is summarised whole: the result is always the summary
`summarize_whole` gives for the same text (tests/rules/test_incremental.py checks it edit by edit).
"""
from __future__ import annotations

import ast
import logging
import os
import threading
import warnings
from bisect import bisect_right
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Dict, NamedTuple, Optional, Tuple

from perflsp.rules import limits
from perflsp.rules import summary as S
from perflsp.rules.lines import changed_rows, row_starts

log = logging.getLogger("perflsp")

KEPT = 8  # texts remembered: the open files being typed in, a few at a time
# `PERFLSP_INCREMENTAL=0` summarises every text whole (a benchmark knob, shared with the server's
# incremental parsing).
REUSE = os.environ.get("PERFLSP_INCREMENTAL", "1") != "0"


class _Known(NamedTuple):
    source: str
    summary: Dict[str, Any]
    table: Optional[S.Table]


_known: "OrderedDict[Tuple[str, bool, str], _Known]" = OrderedDict()
_lock = threading.Lock()


def summarize_reusing(source: str, module: str, is_package: bool, path: str) -> Dict[str, Any]:
    if not REUSE:
        return S.summarize_whole(source, module, is_package, path)[0]
    key = (module, is_package, path)
    with _lock:
        known = _known.get(key)
    if known is not None and known.source == source:
        return known.summary
    found = None
    if known is not None and known.table is not None:
        try:
            found = resummarize(known, source, is_package)
        except Exception:  # a bug here must cost the time of a whole summary, never the summary
            log.exception("perflsp: summarising one statement again failed; summarising the whole file")
    summary, table = found if found is not None else S.summarize_whole(source, module, is_package, path)
    with _lock:
        _known[key] = _Known(source, summary, table)
        _known.move_to_end(key)
        while len(_known) > KEPT:
            _known.popitem(last=False)
    return summary


def resummarize(known: _Known, source: str, is_package: bool) -> Optional[Tuple[Dict[str, Any], S.Table]]:
    """The summary of `source` from `known`'s, when the edit lies inside one group; else None."""
    old_table = known.table
    assert old_table is not None
    change = changed_rows(known.source, source)
    if change is None:
        return None
    first_row, old_last, delta, new_starts = change
    groups = old_table.groups
    index = bisect_right([g.first for g in groups], first_row) - 1
    if index < 0:
        return None
    old = groups[index]
    if old_last > old.last:
        return None  # not inside one group (the lines between groups are nobody's: summarised whole)
    after = groups[index + 1] if index + 1 < len(groups) else None
    if after is not None and after.first == old.last + 1 and old_last == old.last:
        return None  # the next group's `# perflsp: hot` comment may sit on the group's last row
    last = old.last + delta
    begin = new_starts[old.first - 1]
    end = new_starts[last] if last < len(new_starts) else len(source)
    tokens = _tokens(known, old, source, source[begin:end])
    if tokens is not None and tokens > limits.MAX_TOKENS:
        return None  # summarised whole, which leaves out a text past what the parser takes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Blank rows in front put the group's rows where they are in the whole text.
            tree = ast.parse("\n" * (old.first - 1) + source[begin:end])
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    stmts = S.statement_groups(tree.body)
    if len(stmts) != 1:
        return None
    found = S.summarize_group(stmts[0], source, known.summary["module"], is_package, old.before,
                              frozenset(name for g in groups for name in g.top))
    if found is None or found[0].first != old.first:
        return None
    group, state = found
    state_after = after.before if after is not None else old_table.after
    if group.last != last or group.top != old.top or state != state_after:
        return None  # what the other groups read changed
    new_groups = [*groups[:index], group, *(_moved(g, delta) for g in groups[index + 1:])]
    summary = dict(known.summary)
    summary.update(functions=[f for g in new_groups for f in g.functions],
                   calls=[c for g in new_groups for c in g.calls],
                   regions=[r for g in new_groups for r in g.regions],
                   classes={}, depth=max(g.depth for g in new_groups), statement_rows=[g.first for g in new_groups])
    for g in new_groups:
        summary["classes"].update(g.classes)
    return summary, S.Table(new_groups, old_table.after, tokens)


def _tokens(known: _Known, old: S.Group, source: str, group_text: str) -> Optional[int]:
    """`limits.tokens_in(source)`, where only the group `old` of the known text changed, into
    `group_text`: a text that grows past the limit a statement at a time is caught, and a large
    one is not counted whole again at every keystroke."""
    if len(source) <= limits.MAX_TOKENS:
        return None
    counted = known.table.tokens  # type: ignore[union-attr]
    if counted is None:  # the known text was too short to be counted
        return limits.count_tokens(source)
    starts = row_starts(known.source)
    end = starts[old.last] if old.last < len(starts) else len(known.source)
    return counted - _count_tokens(known.source[starts[old.first - 1]:end]) + _count_tokens(group_text)


@lru_cache(maxsize=2)  # typing in a statement: an edit's old text is the edit before's new one
def _count_tokens(group_text: str) -> int:
    return limits.count_tokens(group_text)


def _moved(group: S.Group, delta: int) -> S.Group:
    """The group `delta` rows further down (the same object when nothing moved)."""
    if delta == 0:
        return group
    moved = S.Group(group.first + delta, group.last + delta, group.before, group.top)
    moved.depth = group.depth
    moved.functions = [{**f, "start": f["start"] + delta, "end": f["end"] + delta, "row": f["row"] + delta}
                       for f in group.functions]
    moved.calls = [[c[0], c[1], c[2] + delta, *c[3:]] for c in group.calls]
    moved.regions = [[r[0], r[1] + delta, r[2], r[3] + delta, r[4], r[5] + delta, r[6],
                      None if r[7] is None else (r[7][0] + delta, r[7][1], r[7][2] + delta, r[7][3]), r[8]]
                     for r in group.regions]
    moved.classes = {k: {**v, "row": v["row"] + delta} for k, v in group.classes.items()}
    return moved
