"""One analysis of one document or notebook, run in a worker thread.

Everything here is plain computation on a snapshot taken on the event loop: resolve the settings,
ask the project graph what it knows of the file, call the engine (`check_text` / `check_cells`,
with the file's `Reparser`, which the analysis brings up to this version: the one state it
changes), keep the last good findings of a part that no longer parses, and convert the findings
to LSP diagnostics. Nothing here touches the connection.
"""
from __future__ import annotations

import difflib
import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from lsprotocol import types as T

from perflsp.findings import Edit, Finding, Fix, Location
from perflsp.rules.evidence import Records
from perflsp.server import convert
from perflsp.server.settings import EditorSettings, Resolved, resolve

if TYPE_CHECKING:
    from perflsp.rules.reparse import Reparser
    from perflsp.rules.runner import FactsOf

log = logging.getLogger("perflsp.server")

# The engine's code for "does not parse" (`perflsp.rules.engine.SYNTAX_ERROR`), repeated here so
# that importing the server does not import libcst before the first analysis needs it.
SYNTAX_ERROR = "PFL000"

# A client that counts in UTF-16 can send half of a surrogate pair (a Python str keeps a whole pair
# as one code point): no file can hold it, and the parsers cannot read it.
_SURROGATE = re.compile("[\ud800-\udfff]")
_REPLACEMENT = "\ufffd"  # one code point, one UTF-16 unit and three UTF-8 bytes, as a lone surrogate is: positions stay
_BOM = "\ufeff"

# Set while the server warms the engine up (imports, rule table) in a thread of its own: an
# analysis that runs meanwhile shares the CPU with it and says nothing of what analyses cost.
WARMING = threading.Event()
RECORDS = Records()  # `.perflsp/evidence.json` of each workspace, read again when it changes


@dataclass
class Part:
    """A text the client shows diagnostics on: a whole file, or one cell of a notebook."""

    uri: str
    text: str
    version: Optional[int]

    def __post_init__(self) -> None:
        self.lines = convert.split_lines(self.text)
        self.surrogate = None if self.text.isascii() else _SURROGATE.search(self.text)  # the first one
        # The text the engine reads (see `file_source`).
        self.readable = self.text if self.surrogate is None else _SURROGATE.sub(_REPLACEMENT, self.text)


def file_source(part: Part) -> str:
    """The text the engine reads for a whole file: its lone surrogates as U+FFFD, without the byte
    order mark some clients send as its first character (Python reads a file's mark as its
    encoding; `from_file_source` puts the columns of the first row back)."""
    return part.readable[len(_BOM):] if part.readable.startswith(_BOM) else part.readable


def from_file_source(findings: List[Finding], part: Part) -> List[Finding]:
    """Findings on `file_source(part)` as places in the text the client sent."""
    if not part.readable.startswith(_BOM):
        return findings
    return [_after_bom(f) for f in findings]


def _after_bom(finding: Finding) -> Finding:
    def moved(loc: Location) -> Location:
        return Location(loc.row, loc.column + len(_BOM)) if loc.row == 1 else loc

    hot = finding.hot and replace(finding.hot, start=moved(finding.hot.start), end=moved(finding.hot.end))
    fix = finding.fix and replace(finding.fix, edits=tuple(replace(e, start=moved(e.start), end=moved(e.end))
                                                           for e in finding.fix.edits))
    return replace(finding, start=moved(finding.start), end=moved(finding.end), hot=hot, fix=fix)


def _surrogate_warning(part: Part, path: str) -> List[Finding]:
    """A warning at the first lone surrogate of `part` (the engine read it as U+FFFD): the findings stand."""
    found = part.surrogate
    if found is None:
        return []
    before = convert.split_lines(part.text[:found.start()])
    start = Location(len(before), len(before[-1]))
    message = (f"U+{ord(found.group()):04X} is half of a UTF-16 surrogate pair, not a character: no file can hold "
               f"it; perflsp read it as U+FFFD")
    return [Finding(code=SYNTAX_ERROR, name="syntax-error", message=message, filename=path, start=start,
                    end=Location(start.row, start.column + 1), severity="warning", url=None)]


@dataclass
class Snapshot:
    key: str  # the document's or the notebook's uri
    path: Path  # where the settings are looked up, and the name shown in messages
    generation: int
    parts: List[Part]
    cells: Optional[List[Optional[int]]] = None  # notebooks: per cell, its index in `parts` (None: not Python)
    reason: str = "change"  # "open" | "change" | "save" | "config" | "request"


@dataclass
class PartResult:
    part: Part
    findings: List[Finding]
    diagnostics: List[T.Diagnostic]
    parsed: bool  # False when the part has a syntax error (its findings are carried over)
    result_id: str = ""

    @property
    def lines(self) -> List[str]:
        return self.part.lines


@dataclass
class Result:
    key: str
    generation: int
    parts: Dict[str, PartResult]
    resolved: Optional[Resolved] = None
    skipped: Optional[str] = None  # why nothing was analysed (excluded, too large, ...)
    elapsed_s: float = 0.0
    snapshot: Optional[Snapshot] = None  # what was analysed (fix-all re-runs the engine on it)
    degraded: bool = False  # some part did not parse: findings were carried over, not a new baseline
    facts_key: Optional[str] = None  # digest of the per-step facts a file was judged with (None: a notebook)
    cold: bool = False  # ran while the engine was warming up: `elapsed_s` is not what it costs
    cpu_s: float = 0.0  # CPU time of the analysis (its thread's): what it costs, whatever else the machine runs
    incremental: bool = False  # the file's tree came from re-parsing the statements an edit changed

    def part(self, uri: str) -> Optional[PartResult]:
        return self.parts.get(uri)


Good = Dict[str, Tuple[str, List[Finding]]]  # per part uri: text and findings of the last version that parsed


class Stale(Exception):
    """A newer version arrived while this one was analysed: the rest of the work is thrown away."""


def analyse(snap: Snapshot, editor: EditorSettings, enc: convert.Encoder, good: Good,
            facts_of: "Optional[FactsOf]" = None, reparser: "Optional[Reparser]" = None,
            stale: Callable[[], bool] = lambda: False) -> Result:
    """Findings and diagnostics for a snapshot (worker thread). A file is judged with the facts
    `facts_of` gives (its workspace folder's graph); notebooks are judged alone, as by `perflsp check`.
    `reparser` keeps the file's last tree, so that an edit costs a parse of the statement it
    changed. Raises `Stale` between steps once `stale()` says a newer version arrived."""
    from perflsp.rules.runner import MAX_FILE_BYTES

    started = time.perf_counter(), time.thread_time()
    cold = WARMING.is_set()
    resolved = resolve(snap.path, editor)
    settings = resolved.settings
    empty = {p.uri: PartResult(p, [], [], True) for p in snap.parts}
    size = sum(len(p.text) for p in snap.parts)
    if size * 4 > MAX_FILE_BYTES and sum(len(p.text.encode("utf-8", "surrogatepass")) for p in snap.parts) > MAX_FILE_BYTES:
        return _finish(Result(snap.key, snap.generation, empty, resolved,
                              skipped=f"over perflsp's {MAX_FILE_BYTES // 2**20} MiB limit per file"), started, snap)
    if settings.is_excluded(str(snap.path)):
        return _finish(Result(snap.key, snap.generation, empty, resolved,
                              skipped="excluded by the `exclude` setting"), started, snap)

    by_part: Dict[str, List[Finding]] = {p.uri: [] for p in snap.parts}
    facts_key = None
    if snap.cells is None:
        from perflsp.rules.project import facts_digest, single_file_facts
        from perflsp.rules.runner import check_text

        part = snap.parts[0]
        source = file_source(part)
        facts = facts_of(snap.path, source) if facts_of is not None else None
        if facts is None:  # judged alone, as the engine would; kept so that a graph that agrees costs no second analysis
            facts = single_file_facts(source, str(snap.path), settings.hot_functions)
        facts_key = facts_digest(facts)
        if stale():
            raise Stale()
        findings = check_text(source, str(snap.path), settings, facts, reparser)
        evidence = RECORDS.for_file(snap.path, settings)
        if evidence is not None:
            from perflsp.rules.evidence import apply

            # The other tiers' findings are checked without the reparser, which keeps this tier's tree.
            findings = apply(str(snap.path), source, settings, findings, evidence,
                             lambda wider: check_text(source, str(snap.path), wider, facts))[0]
        by_part[part.uri] = from_file_source(findings, part)
    else:
        from perflsp.rules.notebook import check_cells

        sources = [snap.parts[i].readable if i is not None else None for i in snap.cells]
        for finding in check_cells(sources, str(snap.path), settings):
            index = snap.cells[finding.cell - 1] if finding.cell else None
            if index is not None:
                by_part[snap.parts[index].uri].append(finding)

    def hot_target(cell: Optional[int]) -> Optional[Tuple[str, Sequence[str]]]:
        if snap.cells is None:
            return snap.parts[0].uri, snap.parts[0].lines
        index = snap.cells[cell - 1] if cell and cell <= len(snap.cells) else None
        return (snap.parts[index].uri, snap.parts[index].lines) if index is not None else None

    if stale():
        raise Stale()
    # A notebook cell that does not parse is left out of the program, which can make code in the
    # other cells look cold (the loop that called it is gone). While any part is broken, every
    # part keeps its last good findings on unchanged lines, beside what the engine says now.
    degraded = any(f.code == SYNTAX_ERROR for found in by_part.values() for f in found)
    parts: Dict[str, PartResult] = {}
    for part in snap.parts:
        findings = by_part[part.uri]
        syntax = [f for f in findings if f.code == SYNTAX_ERROR]
        current = [f for f in findings if f.code != SYNTAX_ERROR]
        carried: List[Finding] = []
        if degraded and part.uri in good:
            old_text, old_findings = good[part.uri]
            seen = {(f.code, f.start, f.end) for f in current}
            carried = [f for f in carry_over(old_text, old_findings, part.text) if (f.code, f.start, f.end) not in seen]
            if syntax:
                current = []  # a part that does not parse has no findings of its own
        kept = current + carried + _surrogate_warning(part, str(snap.path))
        diagnostics = [convert.diagnostic(f, part.lines, enc, hot_target) for f in kept]
        for f in syntax:
            # A half-typed line must not make the other warnings flicker away, nor shout: one
            # hint says why the file was not analysed again, the carried findings stay.
            d = convert.diagnostic(f, part.lines, enc, None, severity="hint")
            d.message = (f"{f.message} (perflsp analyses the file again once it parses"
                         + ("; until then the other findings are from the last version that parsed)" if carried else ")"))
            diagnostics.append(d)
        parts[part.uri] = PartResult(part, kept + syntax, diagnostics, not syntax, result_id(diagnostics))
    result = Result(snap.key, snap.generation, parts, resolved, facts_key=facts_key)
    result.incremental = reparser is not None and reparser.spliced and snap.cells is None
    result.degraded = degraded
    result.cold = cold or WARMING.is_set()
    return _finish(result, started, snap)


def _finish(result: Result, started: Tuple[float, float], snap: Snapshot) -> Result:
    result.snapshot = snap
    result.elapsed_s = time.perf_counter() - started[0]
    result.cpu_s = time.thread_time() - started[1]
    for part in result.parts.values():
        if not part.result_id:
            part.result_id = result_id(part.diagnostics)
    return result


def result_id(diagnostics: Sequence[T.Diagnostic]) -> str:
    """Equal diagnostics give equal ids, so a pull can answer "unchanged"."""
    return hashlib.sha1(repr(list(diagnostics)).encode("utf-8", "surrogatepass")).hexdigest()[:16]


# --- keeping the last good findings while a line is half typed ---------------------------------------

def carry_over(old_text: str, old_findings: Sequence[Finding], new_text: str) -> List[Finding]:
    """The findings of `old_text` that lie on lines left unchanged in `new_text`, moved to their new rows.

    A finding (with its hot context and fix) is kept only when every row it touches is in a block
    of lines equal in both texts; findings on edited lines are dropped, since their code changed.
    """
    old_lines = convert.split_lines(old_text)
    new_lines = convert.split_lines(new_text)
    shift: Dict[int, int] = {}  # old row -> new row (1-based) for unchanged lines
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            shift[block.a + k + 1] = block.b + k + 1
    out: List[Finding] = []
    for finding in old_findings:
        if finding.code == SYNTAX_ERROR:
            continue
        moved = _move(finding.start, finding.end, shift)
        if moved is None:
            continue
        hot = finding.hot
        if hot is not None and hot.cell is None:
            hot_moved = _move(hot.start, hot.end, shift)
            hot = replace(hot, start=hot_moved[0], end=hot_moved[1]) if hot_moved else None
        fix = finding.fix
        if fix is not None:
            edits = []
            for edit in fix.edits:
                edit_moved = _move(edit.start, edit.end, shift)
                if edit_moved is None:
                    edits = []
                    break
                edits.append(Edit(edit_moved[0], edit_moved[1], edit.content))
            fix = Fix(fix.applicability, fix.message, tuple(edits)) if edits else None
        out.append(replace(finding, start=moved[0], end=moved[1], hot=hot, fix=fix))
    return out


def _move(start: Location, end: Location, shift: Dict[int, int]) -> Optional[Tuple[Location, Location]]:
    rows = range(start.row, end.row + 1)
    if not all(r in shift for r in rows):
        return None
    # Unchanged lines that stay consecutive: a block boundary inside the range would mean lines
    # were inserted or removed in the middle of the flagged code.
    if any(shift[r + 1] != shift[r] + 1 for r in range(start.row, end.row)):
        return None
    return Location(shift[start.row], start.column), Location(shift[end.row], end.column)
