"""A profile result (the runtime's JSON, see docs/profile-result.md) as the editor shows it.

Pure functions, no I/O and no torch: the def line's verdict and the top lines' shares as
diagnostics (source `perflsp-profile`), the measured cost appended to a static finding on a measured
line, the code lens title and the hover table. Also finds the functions of a file (`functions`):
what "Profile this function" offers and where the lenses go.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from lsprotocol import types as T

from perflsp import comparison, units
from perflsp.profile_result import compile_summary
from perflsp.server import markdown as md

PROFILE_SOURCE = "perflsp-profile"
COMPILE_SOURCE = "perflsp-compile"
MARKERS = ("profile", "hot")


# --- functions of a file ------------------------------------------------------------------------

@dataclass(frozen=True)
class Function:
    qualname: str  # `step`, `Model.forward`
    def_line: int  # 1-based line of the `def` keyword
    first_line: int  # 1-based, the first decorator
    last_line: int  # 1-based, the body's last line
    marked: bool  # decorated with @perflsp.profile / @perflsp.hot


def functions(text: str) -> List[Function]:
    """The profilable functions: module level and class methods (not functions inside functions)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out: List[Function] = []

    def visit(body: Sequence[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                out.append(Function(prefix + node.name, node.lineno, first, node.end_lineno or node.lineno,
                                    any(_is_marker(d) for d in node.decorator_list)))
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.If):
                visit(node.body, prefix)
                visit(node.orelse, prefix)
            elif isinstance(node, ast.Try):
                visit(node.body, prefix)
                for handler in node.handlers:
                    visit(handler.body, prefix)
                visit(node.orelse, prefix)
                visit(node.finalbody, prefix)

    visit(tree.body, "")
    return out


def _is_marker(decorator: ast.expr) -> bool:
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    if isinstance(decorator, ast.Attribute):
        return decorator.attr in MARKERS and isinstance(decorator.value, ast.Name) and decorator.value.id == "perflsp"
    return False


def function_at(text: str, line: int) -> Optional[Function]:
    """The innermost profilable function whose lines (decorators included) hold 0-based `line`."""
    row = line + 1
    found = [f for f in functions(text) if f.first_line <= row <= f.last_line]
    return max(found, key=lambda f: f.first_line) if found else None


# --- numbers ----------------------------------------------------------------------------------------

def headline(result: Mapping[str, Any]) -> Optional[str]:
    """`memory-bound · 0.41 ms · 44% of 4.3 TB/s · 3.4× faster since 11:02` (None for a failed run)."""
    verdict = result.get("verdict") or {}
    regime = verdict.get("regime")
    if result.get("status") != "ok" or not regime:
        return None
    parts = [regime, units.duration_us((result.get("timing") or {}).get("median_us"))]
    attained = _attained(result)
    if attained:
        parts.append(attained)
    change = comparison.short(result)
    if change:
        parts.append(change)
    return " · ".join(parts)


def _attained(result: Mapping[str, Any]) -> Optional[str]:
    totals = result.get("totals") or {}
    ceilings = result.get("ceilings") or {}
    regime = (result.get("verdict") or {}).get("regime")
    flops = (totals.get("flops_fraction"), ceilings.get("peak_flops_per_s"), units.flop_rate)
    bandwidth = (totals.get("bandwidth_fraction"), ceilings.get("bandwidth_bytes_per_s"), units.byte_rate)
    if regime == "compute-bound":
        order = [flops, bandwidth]
    elif regime == "latency-bound":  # far from both roofs: show the nearer one
        order = sorted([flops, bandwidth], key=lambda side: -(side[0] if side[0] is not None and side[1] else -1.0))
    else:
        order = [bandwidth, flops]
    for fraction, ceiling, fmt in order:
        if fraction is not None and ceiling:
            return f"{units.percent(fraction)} of {fmt(ceiling)}"
    return None


def lever(result: Mapping[str, Any]) -> Optional[str]:
    levers = (result.get("verdict") or {}).get("levers") or []
    return levers[0] if levers else None


def compile_is_a_lever(result: Mapping[str, Any]) -> bool:
    """The verdict's levers name torch.compile (overhead-bound code, unfused pointwise chains, a
    slow kernel): the profile offers "Try torch.compile" as their quick fix."""
    return any("torch.compile" in item for item in (result.get("verdict") or {}).get("levers") or [])


def compile_headline(result: Mapping[str, Any]) -> str:
    """What "Try torch.compile" ran into, in one line (the compile block, else the profile)."""
    block = result.get("compile")
    return compile_summary(block) if block else headline(result) or ""


# --- diagnostics ---------------------------------------------------------------------------------

def _line_range(lines: Sequence[str], line: int, units) -> T.Range:
    """0-based `line`, from its first non-blank character to its end."""
    line = max(0, min(line, len(lines) - 1)) if lines else 0
    text = lines[line] if lines else ""
    start = len(text) - len(text.lstrip())
    return T.Range(start=T.Position(line, units(text[:start])), end=T.Position(line, units(text)))


@dataclass
class Placed:
    """A result placed on the current text: the offset its recorded lines move by."""

    result: Dict[str, Any]
    function: Function  # where the function is now
    offset: int  # current def line - recorded def line

    def line_of(self, recorded: int) -> Optional[int]:
        """The 0-based current line of a recorded 1-based line inside the function, else None."""
        row = recorded + self.offset
        if self.function.first_line <= row <= self.function.last_line:
            return row - 1
        return None


def verdict_message(result: Mapping[str, Any]) -> str:
    qualname = (result.get("target") or {}).get("qualname", "?")
    verdict = result.get("verdict") or {}
    device = result.get("device") or {}
    text = f"{qualname}: {headline(result)} on {device.get('kind', '?')}"
    summary = verdict.get("summary")
    if summary:
        text += f" — {summary}"
    if lever(result):
        text += f". Lever: {lever(result)}"
    return text


def error_message(result: Mapping[str, Any]) -> str:
    error = result.get("error") or {}
    qualname = (result.get("target") or {}).get("qualname", "?")
    return f"{qualname}: profiling failed ({error.get('kind', 'error')}): {error.get('message', '')}"


def diagnostics(placed: Placed, lines: Sequence[str], units) -> List[T.Diagnostic]:
    result = placed.result
    def_line = placed.function.def_line - 1
    out: List[T.Diagnostic] = []
    if result.get("status") != "ok":
        out.append(T.Diagnostic(range=_line_range(lines, def_line, units), message=error_message(result),
                                severity=T.DiagnosticSeverity.Information, source=PROFILE_SOURCE,
                                code=f"profile-{(result.get('error') or {}).get('kind', 'error')}"))
        return out
    out.append(T.Diagnostic(range=_line_range(lines, def_line, units), message=verdict_message(result),
                            severity=T.DiagnosticSeverity.Information, source=PROFILE_SOURCE,
                            code=(result.get("verdict") or {}).get("regime")))
    path = (result.get("target") or {}).get("file")
    for entry in result.get("lines") or []:
        if path and entry.get("file") and entry.get("file") != path:
            continue
        line = placed.line_of(entry.get("line", 0))
        if line is None or line == def_line:
            continue
        out.append(T.Diagnostic(range=_line_range(lines, line, units), message=line_message(entry),
                                severity=T.DiagnosticSeverity.Information, source=PROFILE_SOURCE,
                                code=entry.get("regime")))
    if result.get("compile"):
        out.extend(compile_diagnostics(placed, lines, units))
    return out


def compile_diagnostics(placed: Placed, lines: Sequence[str], units) -> List[T.Diagnostic]:
    """The compile verdict on the def line, and each graph break of the function on its line.
    Breaks elsewhere (a helper in another file) are the verdict's related information."""
    result = placed.result
    block = result["compile"]
    qualname = (result.get("target") or {}).get("qualname", "?")
    path = os.path.realpath((result.get("target") or {}).get("file") or "")
    breaks: List[T.Diagnostic] = []
    elsewhere: List[T.DiagnosticRelatedInformation] = []
    for item in block.get("graph_breaks") or []:
        message = f"graph break: {item['explanation']}"
        line = placed.line_of(item["line"]) if os.path.realpath(item["file"]) == path else None
        if line is not None:
            breaks.append(T.Diagnostic(range=_line_range(lines, line, units), message=message,
                                       severity=T.DiagnosticSeverity.Warning, source=COMPILE_SOURCE, code="graph-break"))
        else:
            start = T.Position(item["line"] - 1, 0)
            elsewhere.append(T.DiagnosticRelatedInformation(
                location=T.Location(uri=Path(item["file"]).as_uri(), range=T.Range(start=start, end=start)),
                message=message))
    error = block.get("error")
    verdict = T.Diagnostic(range=_line_range(lines, placed.function.def_line - 1, units),
                           message=f"{qualname}: {compile_summary(block)}", severity=T.DiagnosticSeverity.Information,
                           source=COMPILE_SOURCE, code=f"compile-{error['kind']}" if error else "compile",
                           related_information=elsewhere or None)
    return [verdict] + breaks

def line_message(entry: Mapping[str, Any]) -> str:
    text = f"{units.percent(entry.get('share'))} of the call ({units.duration_us(entry.get('time_us'))}), {entry.get('regime', '?')}"
    if entry.get("flops") or entry.get("bytes"):
        text += f"; {units.si(entry.get('flops') or 0, 'FLOP')}, {units.si(entry.get('bytes') or 0, 'B')}"
    ops = entry.get("top_ops") or []
    if ops:
        text += f"; ops: {', '.join(ops)}"
    return text


def measured_costs(placed: Placed) -> Dict[int, str]:
    """0-based current line -> the measured cost on it, for static findings on measured lines."""
    result = placed.result
    if result.get("status") != "ok":
        return {}
    qualname = (result.get("target") or {}).get("qualname", "?")
    out: Dict[int, str] = {}
    for sync in result.get("syncs") or []:
        line = placed.line_of(sync.get("line", 0))
        if line is not None and sync.get("share"):
            out[line] = (f"measured: {units.percent(sync.get('share'))} of {qualname}'s call spent waiting on this sync "
                         f"({units.duration_us(sync.get('blocked_us'))})")
    for entry in result.get("lines") or []:
        line = placed.line_of(entry.get("line", 0))
        if line is not None and line not in out:
            out[line] = (f"measured: {units.percent(entry.get('share'))} of {qualname}'s call "
                         f"({units.duration_us(entry.get('time_us'))}, {entry.get('regime', '?')})")
    return out


def with_measured_cost(diag: T.Diagnostic, cost: str) -> T.Diagnostic:
    return T.Diagnostic(range=diag.range, message=f"{diag.message} — {cost}", severity=diag.severity,
                        code=diag.code, code_description=diag.code_description, source=diag.source,
                        tags=diag.tags, related_information=diag.related_information, data=diag.data)


def compile_hover(block: Mapping[str, Any]) -> str:
    rows = [f"**torch.compile** (mode {md.text(block.get('mode'))}): {md.prose(compile_summary(block))}"]
    for item in block.get("graph_breaks") or []:
        where = md.code(f"{os.path.basename(item['file'])}:{item['line']}")
        rows.append(f"- graph break at {where}: {md.prose(item['explanation'])}")
    rows += [f"- recompiled: guard {md.code(r['reason'])} failed" for r in block.get("recompiles") or []]
    rows += [f"- note: {md.prose(note)}" for note in block.get("notes") or []]
    return "\n".join(rows)


# --- hover -----------------------------------------------------------------------------------------

def hover_text(result: Mapping[str, Any], stale: bool, result_file: Optional[str],
               plot_uri: Optional[str] = None) -> str:
    # A result file can come from a cloned repository: every string in it is escaped (`markdown`).
    target = result.get("target") or {}
    title = f"**perflsp profile: {md.text(target.get('qualname', '?'))}**"
    if stale:
        title += " *(stale: the function changed since it was profiled; run Profile again)*"
    if result.get("status") != "ok":
        error = result.get("error") or {}
        text = [title, f"Profiling failed ({md.text(error.get('kind'))}): {md.prose(error.get('message', ''))}"]
        if error.get("traceback"):
            text.append(md.block(error["traceback"]))
        return "\n\n".join(text)
    verdict = result.get("verdict") or {}
    timing = result.get("timing") or {}
    totals = result.get("totals") or {}
    ceilings = result.get("ceilings") or {}
    device = result.get("device") or {}
    rows = [
        ("verdict", f"**{md.text(verdict.get('regime'))}**"),
        ("device", f"{md.text(device.get('kind', '?'))}: {md.text(device.get('name', '?'))}"),
        ("time", f"median {units.duration_us(timing.get('median_us'))} (p10 {units.duration_us(timing.get('p10_us'))}, "
                 f"p90 {units.duration_us(timing.get('p90_us'))}, {timing.get('calls', '?')} calls)"),
        ("FLOPs", units.si(totals.get("flops"), "FLOP")),
        ("bytes", units.si(totals.get("bytes"), "B")),
        ("intensity", "?" if totals.get("intensity_flop_per_byte") is None
         else f"{totals['intensity_flop_per_byte']:.3g} FLOP/B (ridge {ceilings.get('ridge_flop_per_byte', 0):.3g})"),
        ("compute", f"{units.flop_rate(totals.get('attained_flops_per_s'))} = {units.percent(totals.get('flops_fraction'))} "
                    f"of {units.flop_rate(ceilings.get('peak_flops_per_s'))} ({md.text(ceilings.get('dtype', '?'))})"),
        ("memory", f"{units.byte_rate(totals.get('attained_bytes_per_s'))} = {units.percent(totals.get('bandwidth_fraction'))} "
                   f"of {units.byte_rate(ceilings.get('bandwidth_bytes_per_s'))}"),
    ]
    change = comparison.describe(result)
    if change:
        rows.append(("since last", md.prose(change)))
    text = [title, "| | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)]
    if verdict.get("summary"):
        text.append(md.prose(verdict["summary"]))
    for reason in verdict.get("reasons") or []:
        text.append(f"- because {md.prose(reason)}")
    for item in verdict.get("levers") or []:
        text.append(f"- lever: {md.prose(item)}")
    for note in verdict.get("notes") or []:
        text.append(f"- note: {md.prose(note)}")
    for note in (result.get("comparison") or {}).get("notes") or []:
        text.append(f"- note: {md.prose(note)}")
    lines = result.get("lines") or []
    if lines:
        table = ["| line | time | spread | share | FLOPs | bytes | regime | code |",
                 "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for entry in lines:
            table.append(f"| {entry.get('line')} | {units.duration_us(entry.get('time_us'))} | {units.spread(entry)} | "
                         f"{units.percent(entry.get('share'))} | "
                         f"{units.si(entry.get('flops'), '')} | {units.si(entry.get('bytes'), 'B')} | "
                         f"{md.text(entry.get('regime'))} | {md.code(entry.get('code', ''), in_table=True)} |")
        text.append("\n".join(table))
    if result.get("compile"):
        text.append(compile_hover(result["compile"]))
    if plot_uri:
        text.append(f"[Open the roofline plot]({plot_uri})")
    if result_file:
        text.append(f"Result: {md.code(result_file)}")
    return "\n\n".join(text)
