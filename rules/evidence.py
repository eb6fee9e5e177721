"""Recorded evidence: what `perflsp record` saw on each line (`.perflsp/evidence.json`).

A finding on a recorded line is
- **confirmed** when the run saw its cost: the line ran on every recorded step on a tensor bound
  for the compute device, or made a host read of such a tensor or a host-to-device copy on every
  step, or a sync. It is reported in the default tier whatever its rule's tier, and its message
  carries what was recorded ("recorded: 2 host reads per step of a tensor bound for the device").
- **refuted** when the run saw none: the line never ran during the recorded steps (or ran only
  in setup or the warm-up), or ran without a tensor, or (for the sync rules, PFL1xx) its tensors
  stayed on the host. It is reported in no tier; `perflsp check --show-refuted` lists it.
- otherwise the static tier decides, as without a record.
A host read of a device-bound tensor on every step that no finding of any tier is on becomes a
PFL108 finding of its own.

Evidence applies to a line only while the statement that holds it is the one that ran: the
record names the statement by a fingerprint of its tokens and the line by its row in it
(`perflsp.evidence_file.statements`: a simple statement with all its physical lines, or a
compound statement's header). A statement that moved is found again by its fingerprint when no
other statement of the file, recorded or now, has it; a file that does not tokenize has no
evidence that applies. Setup rules (`SETUP_RULES`, a DataLoader built once) are about code that
runs once: evidence leaves them alone; for the rules of `ANY_RULES` (a float64 tensor built once)
a line that ran only in setup is not refuted. Fewer than `MIN_STEPS` recorded steps confirm and
refute nothing. Reading never raises: a missing file is None, a malformed one or one of another
version is None with a warning in the log (for another version: to record again).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from perflsp.config import Settings
from perflsp.evidence_file import EVIDENCE_VERSION, STEP_SOURCES, Statement, evidence_path, statements
from perflsp.findings import Finding, Location, rule_url
from perflsp.hot_file import MIN_STEPS
from perflsp.rules import suppress
from perflsp.rules.measured import count, read_record, record_steps, text_field

MAX_EVIDENCE_BYTES = 64 * 1024 * 1024
MEASURED_SYNC = "PFL108"
# The rules of code that runs once by design (`scope = "setup"`: a DataLoader built once), which
# evidence leaves alone. Named here so that reading evidence never imports the rule modules (and
# libcst) in a check whose files all come from the cache; tests/rules/test_evidence.py holds
# these two to the registry.
SETUP_RULES = frozenset({"PFL601", "PFL602", "PFL603", "PFL604", "PFL606"})
# The rules of `scope = "any"`: what they flag may cost on every step although it ran once (a
# float64 tensor built during setup, then used each step), so running only in setup refutes
# nothing there; never running does.
ANY_RULES = frozenset({"PFL201", "PFL202", "PFL204", "PFL701", "PFL702"})
SYNC_GROUP = "PFL1"
_COUNTS = ("setup_runs", "runs", "steps", "tensor_ops", "host_read_steps", "host_reads_of_host_tensors",
           "h2d_copies", "h2d_steps", "syncs")  # the integer fields of a line


@dataclass(frozen=True)
class Operand:
    device: str
    bound: bool
    dtype: str
    numel: int


@dataclass(frozen=True)
class LineRecord:
    """One recorded line; the counts are over the recorded steps unless named otherwise."""

    file: str
    line: int
    statement: str  # the fingerprint of the statement that holds the line
    offset: int  # the line's row in that statement, 0 for its first
    candidate: bool  # a static candidate: its executions were counted
    setup_runs: int  # executions before the recorded steps
    runs: int
    steps: int  # recorded steps in which it ran
    tensor_ops: int
    host_reads: Mapping[str, int]  # of device-bound tensors, by kind
    host_read_steps: int
    host_reads_of_host_tensors: int
    h2d_copies: int
    h2d_steps: int
    syncs: int
    operands: Tuple[Operand, ...]
    stall_us: float

    @property
    def reads(self) -> int:
        return sum(self.host_reads.values())

    def bound_operand(self) -> Optional[Operand]:
        return next((o for o in self.operands if o.bound), None)


@dataclass(frozen=True)
class Evidence:
    steps: int
    step_source: str
    command: Optional[str]
    measured_at: Optional[str]
    accelerator: Optional[str]
    by_file: Mapping[str, Mapping[int, LineRecord]] = field(repr=False)

    def lines_of(self, path: str) -> Optional["FileEvidence"]:
        found = self.by_file.get(path)
        return FileEvidence(self, found) if found else None


@dataclass(frozen=True)
class Verdict:
    confirmed: bool  # False: refuted
    why: str  # "recorded: 2 host reads per step of ..." / "refuted: never ran during the 5 recorded steps"


class FileEvidence:
    """One file's recorded lines, matched to the file's current text."""

    def __init__(self, run: Evidence, records: Mapping[int, LineRecord]):
        self.run = run
        self.records = records
        # fingerprint -> the first rows of the recorded statements that have it
        self._recorded: Dict[str, Set[int]] = {}
        for record in records.values():
            self._recorded.setdefault(record.statement, set()).add(record.line - record.offset)

    def by_row(self, text: str) -> Dict[int, LineRecord]:
        """The records that apply to `text` (the file now), by 1-based row: those whose statement is
        unchanged where it was, or moved and unambiguous (its fingerprint is on one statement of
        the record and one of `text`)."""
        now = statements(text)
        if now is None:
            return {}
        by_first = {statement.first: statement for statement in now}
        where: Dict[str, List[Statement]] = {}
        for statement in now:
            where.setdefault(statement.fingerprint, []).append(statement)
        found = {}
        for record in self.records.values():
            statement = by_first.get(record.line - record.offset)
            if statement is None or statement.fingerprint != record.statement:
                moved = where.get(record.statement, [])
                if len(moved) != 1 or len(self._recorded[record.statement]) != 1:
                    continue
                statement = moved[0]
            row = statement.first + record.offset
            if row <= statement.last:  # the same fingerprint has the same rows: only a hand-made offset is past them
                found[row] = record
        return found

    def verdict(self, code: str, record: LineRecord) -> Optional[Verdict]:
        """Confirmed, refuted, or None (the static tier decides)."""
        steps = self.run.steps
        if steps < MIN_STEPS or code in SETUP_RULES:
            return None
        seen = seen_cost(record, steps)
        if seen is not None:
            return Verdict(True, seen)
        if not record.candidate:
            return None  # recorded for its reads, which were not per step: the lines were not traced
        if record.steps == 0:
            if record.setup_runs and code in ANY_RULES:
                return None
            where = "ran only before them (setup or warm-up)" if record.setup_runs else "never ran"
            return Verdict(False, f"{where}: not during the {steps} recorded steps")
        if not record.tensor_ops and not record.reads and not record.host_reads_of_host_tensors:
            return Verdict(False, f"ran {_times(record.runs, steps)} but on no tensor")
        bound = record.bound_operand()
        if bound is not None and record.steps == steps:
            return Verdict(True, f"recorded: ran on every step ({_times(record.runs, steps)}) on "
                                 f"{_tensor(bound)}")
        if code.startswith(SYNC_GROUP) and bound is None and not record.reads:
            return Verdict(False, "its tensors stayed on the host: nothing to wait for")
        return None


def seen_cost(record: LineRecord, steps: int) -> Optional[str]:
    """What the run saw this line cost on every step (host reads, copies, syncs), or None."""
    parts = []
    operand = record.bound_operand()
    if record.reads and record.host_read_steps == steps:
        kinds = ", ".join(f"{kind} ×{_per_step(n, steps)}" for kind, n in sorted(record.host_reads.items()))
        parts.append(f"{_per_step(record.reads, steps)} host read{_s(record.reads, steps)} per step "
                     f"[{kinds}] of {_tensor(operand)}")
    if record.h2d_copies and record.h2d_steps == steps:
        parts.append(f"{_per_step(record.h2d_copies, steps)} host-to-device cop"
                     f"{'y' if record.h2d_copies == steps else 'ies'} per step")
    if record.syncs >= steps:
        parts.append(f"{_per_step(record.syncs, steps)} sync{_s(record.syncs, steps)} per step")
    if not parts:
        return None
    stall = f", {record.stall_us / steps:.0f} µs stalled per step" if record.stall_us else ""
    on_cpu = "" if operand is None or operand.device != "cpu" else "; the run was on the CPU, on a GPU each one waits"
    return "recorded on this line: " + "; ".join(parts) + stall + on_cpu


def _per_step(count: int, steps: int) -> str:
    return f"{count / steps:g}" if count % steps else str(count // steps)


def _s(count: int, steps: int) -> str:
    return "" if count == steps else "s"


def _times(runs: int, steps: int) -> str:
    return f"{_per_step(runs, steps)}× per step"


def _tensor(operand: Optional[Operand]) -> str:
    if operand is None:
        return "a tensor bound for the device"
    if operand.device != "cpu":
        return f"a {operand.dtype} tensor on {operand.device}"
    return f"a {operand.dtype} tensor bound for the device"


# --- reading ---------------------------------------------------------------------------------------

class Records:
    """The records of workspace roots, each read again only when its file changed (the language
    server asks at every analysis)."""

    def __init__(self) -> None:
        self._runs: Dict[str, Tuple[Optional[Tuple[int, int]], Optional[Evidence]]] = {}

    def for_file(self, path: Path, settings: Settings) -> Optional[FileEvidence]:
        """The evidence about `path`: the record of its workspace (the config file's folder, else
        the nearest folder above it that holds one), or None."""
        root = evidence_root(path, settings)
        if root is None:
            return None
        run = self.run(root)
        if run is None:
            return None
        try:
            relative = path.resolve().relative_to(root).as_posix()
        except ValueError:
            return None
        return run.lines_of(relative)

    def run(self, root: Path) -> Optional[Evidence]:
        try:
            info = evidence_path(root).stat()
            stamp: Optional[Tuple[int, int]] = (info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        key = str(root)
        known = self._runs.get(key)
        if known is None or known[0] != stamp:
            known = self._runs[key] = (stamp, load_evidence(root) if stamp is not None else None)
        return known[1]


def evidence_root(path: Path, settings: Settings) -> Optional[Path]:
    if settings.source and settings.root:
        return Path(settings.root).resolve()
    for folder in path.resolve().parents:
        if evidence_path(folder).is_file():
            return folder
    return Path(settings.root).resolve() if settings.root else None


def load_evidence(workspace_root: Path) -> Optional[Evidence]:
    """The workspace's recorded evidence, or None (no file; a bad one is also logged as a warning)."""
    return read_record(evidence_path(workspace_root), MAX_EVIDENCE_BYTES, parse)


def parse(data: Any) -> Evidence:
    steps = record_steps(data, EVIDENCE_VERSION, STEP_SOURCES, "run `perflsp record` again")
    if not isinstance(data.get("lines"), list):
        raise ValueError("`lines` is not a list")
    by_file: Dict[str, Dict[int, LineRecord]] = {}
    for index, entry in enumerate(data["lines"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) \
                or not isinstance(entry.get("statement"), str):
            raise ValueError(f"lines[{index}] needs a `file` and a `statement`")
        reads = entry.get("host_reads")
        if not isinstance(reads, dict) or not all(isinstance(v, int) and v >= 0 for v in reads.values()):
            raise ValueError(f"lines[{index}].host_reads must map kinds to counts")
        record = LineRecord(
            file=entry["file"], line=count(entry, "line"), statement=entry["statement"], offset=count(entry, "offset"),
            candidate=bool(entry.get("candidate")), host_reads=dict(reads),
            stall_us=float(entry.get("stall_us") or 0.0),
            operands=tuple(Operand(str(o["device"]), bool(o["bound"]), str(o["dtype"]), int(o["numel"]))
                           for o in entry.get("operands") or ()),
            **{name: count(entry, name) for name in _COUNTS})
        by_file.setdefault(record.file, {})[record.line] = record
    return Evidence(steps=steps, step_source=data["step_source"], command=text_field(data, "command"),
                    measured_at=text_field(data, "measured_at"), accelerator=text_field(data, "accelerator"),
                    by_file=by_file)


# --- judging a file's findings --------------------------------------------------------------------

def apply(path: str, text: str, settings: Settings, findings: List[Finding], evidence: FileEvidence,
          every_tier: Callable[[Settings], List[Finding]]) -> Tuple[List[Finding], List[Finding]]:
    """(findings to report, refuted findings) of a file with evidence. `findings` are those of
    its own settings; `every_tier(settings)` checks it in preview mode (cached by the caller)."""
    if suppress.ignores_file(text):
        return findings, []
    everything = findings if settings.preview else every_tier(settings.with_overrides({"preview": True},
                                                                                      "perflsp record"))
    found, refuted = judge(path, findings, everything, evidence, text, settings.is_enabled(MEASURED_SYNC, path),
                           settings.rule_docs_url)
    comments = suppress.comments_by_row(text)
    found = [f for f in found if f.code != MEASURED_SYNC or not suppress.is_suppressed(f.code, {f.start.row}, comments)]
    return found, refuted


def judge(path: str, default: Iterable[Finding], everything: Iterable[Finding], evidence: FileEvidence,
          source: str, measured_enabled: bool, docs_url: Optional[str] = None) -> Tuple[List[Finding], List[Finding]]:
    """(findings to report, refuted findings) of one file.

    `default`: the findings of the file's own tier; `everything`: those of every tier (preview
    included). `measured_enabled`: PFL108 is selected for this file; `docs_url`: the
    `rule-docs-url` its findings link to."""
    records = evidence.by_row(source)
    shown = {_key(f) for f in default}
    reported: Dict[Tuple[Any, ...], Finding] = {}
    refuted: Dict[Tuple[Any, ...], Finding] = {}
    for finding in list(default) + list(everything):
        key = _key(finding)
        if key in reported or key in refuted:
            continue
        record = records.get(finding.start.row)
        verdict = evidence.verdict(finding.code, record) if record else None
        if verdict is None:
            if key in shown:
                reported[key] = finding
        elif verdict.confirmed:
            reported[key] = replace(finding, message=f"{finding.message} ({verdict.why})",
                                    severity="warning" if finding.severity in ("info", "hint") else finding.severity)
        else:
            refuted[key] = replace(finding, message=f"{finding.message} (refuted by the record: {verdict.why})")
    found = list(reported.values())
    if measured_enabled:
        flagged = {f.start.row for f in list(default) + list(everything)}
        found.extend(measured_syncs(path, evidence.run.steps, records, source.splitlines(), flagged, docs_url))
    return sorted(found, key=Finding.sort_key), sorted(refuted.values(), key=Finding.sort_key)


def measured_syncs(path: str, steps: int, records: Mapping[int, LineRecord], lines: List[str],
                   flagged_rows: Iterable[int], docs_url: Optional[str] = None) -> List[Finding]:
    """PFL108: a host read of a device-bound tensor (or a sync) on every step that no finding is on.
    `records`: those that apply to the file's `lines`, by row (`FileEvidence.by_row`)."""
    flagged = set(flagged_rows)
    found = []
    if steps < MIN_STEPS:
        return found
    for row, record in sorted(records.items()):
        if row in flagged:
            continue
        if not ((record.reads and record.host_read_steps == steps) or record.syncs >= steps):
            continue
        why = seen_cost(record, steps)
        if why is None:
            continue
        text = lines[row - 1]
        start = len(text) - len(text.lstrip())
        excerpt = text.strip()
        if len(excerpt) > 60:
            excerpt = excerpt[:59] + "…"
        found.append(Finding(
            code=MEASURED_SYNC, name="measured-host-read", filename=path,
            message=f"`{excerpt}` reads a device-bound tensor on the host on every step, which waits for the "
                    f"device to finish the work queued before it ({why}); keep the values on the device and read "
                    f"them every N steps",
            start=Location(row, start), end=Location(row, len(text.rstrip())), severity="warning",
            url=rule_url(MEASURED_SYNC, docs_url)))
        flagged.add(row)
    return found


def _key(finding: Finding) -> Tuple[Any, ...]:
    return finding.code, finding.cell, finding.start, finding.end
