"""Renderers for `perflsp check`: Ruff's output formats, applied to perflsp's findings.

Standard library only; the CLI imports this module when it has something to print. Every format
reports rows 1-based and columns 1-based, as Ruff does (a `Finding` stores columns 0-based).

Formats (`FORMATS`):

- `text`: Ruff's "full" format: `path:row:col: CODE [*] message`, the source with the range
  underlined (when `sources` holds the file's text), `= note:` naming the loop or function that
  makes the code hot, `= help:` with the fix's message, then the summary.
- `concise`: one `path:row:col: CODE [*] message` line per finding, then the summary.
- `json`: an array of objects with Ruff's field names (`code`, `message`, `filename`, `location`,
  `end_location`, `fix`, `url`, `noqa_row`, `cell`) plus perflsp's `name`, `severity`, `hot`.
- `json-lines`: the same objects, one per line.
- `sarif`: a SARIF 2.1.0 log.
- `github`: GitHub Actions workflow commands (`::warning title=...::...`).
- `junit`: JUnit XML, one testsuite per file.

`statistics=True` replaces the listing with Ruff's `--statistics` table (a JSON array for `json`).
A notebook finding (`cell` set, rows relative to the cell) is located as `nb.ipynb:cell_3:12:5`.
"""
from __future__ import annotations

import json
import os
import unicodedata
import xml.etree.ElementTree as ET
from collections import Counter
from difflib import SequenceMatcher
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import quote

from perflsp.findings import Edit, Finding, Location

FORMATS = ("text", "concise", "json", "json-lines", "sarif", "github", "junit")
_ALIASES = {"full": "text"}  # Ruff calls the text format "full"

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
CONTEXT_LINES = 2  # lines of source shown around a finding, as Ruff shows
_FOLD_AFTER = 6  # a multi-line range longer than this shows its first and last lines only
_TAB_WIDTH = 4

_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note", "hint": "note"}
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice", "hint": "notice"}


# --------------------------------------------------------------------------------------------
# entry point


def render(
    findings: Sequence[Finding],
    fmt: str,
    *,
    show_fixes: bool = False,
    statistics: bool = False,
    fixed_count: int = 0,
    unsafe_hidden: int = 0,
    sources: Optional[Mapping[str, str]] = None,
    color: bool = False,
    unsafe_fixes: Optional[bool] = None,
    fixed: Optional[Sequence[Finding]] = None,
    rule_summaries: Optional[Mapping[str, str]] = None,
) -> str:
    """The report for `findings` (the ones that remain after any fixing) in format `fmt`.

    `fixed_count`: findings fixed by `--fix` (Ruff's "(N fixed, M remaining)").
    `unsafe_hidden`: unsafe fixes not offered because `--unsafe-fixes` is off; pass
    `unsafe_fixes` to say so explicitly, otherwise unsafe fixes count as available exactly when
    `unsafe_hidden` is 0. `sources`: file name -> file text (a notebook's JSON for `.ipynb`),
    used for the source excerpts and fix diffs of `text`. `show_fixes`: in `text`, show each
    fix as a diff and, when `fixed` (the findings that were fixed) is given, list them.
    `rule_summaries`: code -> one-line summary for SARIF's rule descriptions (the finding's
    name otherwise). `color`: ANSI colours in `text`, `concise` and the statistics table.
    """
    fmt = _ALIASES.get(fmt, fmt)
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    if unsafe_fixes is None:
        unsafe_fixes = unsafe_hidden == 0
    ordered = sorted(findings, key=Finding.sort_key)
    style = _Style(color)
    if statistics:
        return _statistics(ordered, fmt, unsafe_fixes, style)
    if fmt == "text":
        return _text(ordered, sources or {}, show_fixes, fixed or (), fixed_count, unsafe_hidden, unsafe_fixes, style)
    if fmt == "concise":
        return _concise(ordered, show_fixes, fixed or (), fixed_count, unsafe_hidden, unsafe_fixes, style)
    if fmt == "json":
        return json.dumps([to_json(f) for f in ordered], indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if fmt == "json-lines":
        return "".join(json.dumps(to_json(f), sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
                       for f in ordered)
    if fmt == "sarif":
        return json.dumps(sarif_log(ordered, rule_summaries), indent=2, ensure_ascii=False) + "\n"
    if fmt == "github":
        return "".join(github_line(f) + "\n" for f in ordered)
    return _junit(ordered)


# --------------------------------------------------------------------------------------------
# shared helpers


def _applies(finding: Finding, unsafe_fixes: bool) -> bool:
    """Whether `--fix` would apply the finding's fix (Ruff's `[*]`)."""
    fix = finding.fix
    return fix is not None and (fix.applicability == "safe" or unsafe_fixes)


def _display_path(path: str) -> str:
    """Relative to the working directory when inside it, as Ruff prints paths."""
    if os.path.isabs(path):
        try:
            rel = os.path.relpath(path)
        except ValueError:  # another drive on Windows
            return path
        if not rel.startswith(".."):
            return rel
    return path


def _position(finding: Finding) -> str:
    """`path:row:col` (`nb.ipynb:cell_3:row:col` in a notebook), 1-based."""
    cell = f"cell_{finding.cell}:" if finding.cell is not None else ""
    return f"{_display_path(finding.filename)}:{cell}{finding.start.row}:{finding.start.column + 1}"


def _loc(location: Location) -> Dict[str, int]:
    return {"row": location.row, "column": location.column + 1}


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n} {word}{'' if n == 1 else suffix}"


class _Style:
    _CODES = {"bold": "1", "red": "31", "cyan": "36", "blue": "34", "green": "32", "yellow": "33"}

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles:
            return text
        return f"\x1b[{';'.join(self._CODES[s] for s in styles)}m{text}\x1b[0m"


# --------------------------------------------------------------------------------------------
# summaries (text, concise)


def _header(finding: Finding, unsafe_fixes: bool, style: _Style) -> str:
    cell = f"cell_{finding.cell}{style(':', 'cyan')}" if finding.cell is not None else ""
    colon = style(":", "cyan")
    where = (f"{style(_display_path(finding.filename), 'bold')}{colon}{cell}"
             f"{finding.start.row}{colon}{finding.start.column + 1}{colon}")
    marker = f"{style('[*]', 'cyan')} " if _applies(finding, unsafe_fixes) else ""
    return f"{where} {style(finding.code, 'red', 'bold')} {marker}{_one_line(finding.message)}"


def _one_line(message: str) -> str:
    """A message on one line: line breaks (which Ruff's messages never hold) become spaces."""
    return " ".join(message.split()) if "\n" in message or "\r" in message else message


def _summary(findings: Sequence[Finding], fixed_count: int, unsafe_hidden: int, unsafe_fixes: bool,
             style: _Style) -> List[str]:
    remaining = len(findings)
    total = remaining + fixed_count
    lines: List[str] = []
    if fixed_count > 0:
        lines.append(f"Found {_plural(total, 'error')} ({fixed_count} fixed, {remaining} remaining).")
    elif remaining > 0:
        lines.append(f"Found {_plural(remaining, 'error')}.")
    else:
        lines.append("All checks passed!")
    fixable = sum(1 for f in findings if _applies(f, unsafe_fixes))
    prefix = style("[*]", "cyan")
    if unsafe_hidden > 0:
        hidden = f"{_plural(unsafe_hidden, 'hidden fix', 'es')} can be enabled with the `--unsafe-fixes` option"
        if fixable > 0:
            lines.append(f"{prefix} {fixable} fixable with the `--fix` option ({hidden}).")
        else:
            lines.append(f"No fixes available ({hidden}).")
    elif fixable > 0:
        lines.append(f"{prefix} {fixable} fixable with the `--fix` option.")
    return lines


def _fixed_listing(fixed: Sequence[Finding], style: _Style) -> List[str]:
    """Ruff's `--show-fixes` summary of what `--fix` changed."""
    if not fixed:
        return []
    lines = [f"Fixed {_plural(len(fixed), 'error')}:"]
    by_file: Dict[str, Counter] = {}
    names: Dict[str, str] = {}
    for f in fixed:
        by_file.setdefault(f.filename, Counter())[f.code] += 1
        names[f.code] = f.name
    for filename in sorted(by_file):
        lines.append(f"- {style(_display_path(filename), 'bold')}:")
        for code, count in sorted(by_file[filename].items()):
            lines.append(f"    {count} × {style(code, 'red', 'bold')} ({names[code]})")
    lines.append("")
    return lines


def _concise(findings, show_fixes, fixed, fixed_count, unsafe_hidden, unsafe_fixes, style) -> str:
    lines = [_header(f, unsafe_fixes, style) for f in findings]
    if show_fixes:
        if lines:
            lines.append("")
        lines.extend(_fixed_listing(fixed, style))
    lines.extend(_summary(findings, fixed_count, unsafe_hidden, unsafe_fixes, style))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# text (Ruff's full format)


def _text(findings, sources, show_fixes, fixed, fixed_count, unsafe_hidden, unsafe_fixes, style) -> str:
    lines: List[str] = []
    cache: Dict[Tuple[str, Optional[int]], Optional[List[str]]] = {}
    for f in findings:
        lines.append(_header(f, unsafe_fixes, style))
        key = (f.filename, f.cell)
        if key not in cache:
            cache[key] = _source_lines(sources, f.filename, f.cell)
        src = cache[key]
        width = 1
        if src is not None:
            frame, width = _frame(src, f, style)
            lines.extend(frame)
        pad = " " * (width + 1)
        if f.hot is not None:
            lines.append(f"{pad}{style('=', 'blue', 'bold')} {style('note', 'bold')}: {f.hot.message}")
        if f.fix is not None:
            lines.append(f"{pad}{style('=', 'blue', 'bold')} {style('help', 'bold')}: {f.fix.message}")
        if show_fixes and f.fix is not None and f.fix.edits and src is not None:
            lines.append("")
            lines.extend(_fix_diff(src, f, style))
        lines.append("")
    if show_fixes:
        lines.extend(_fixed_listing(fixed, style))
    lines.extend(_summary(findings, fixed_count, unsafe_hidden, unsafe_fixes, style))
    return "\n".join(lines) + "\n"


def _source_lines(sources: Mapping[str, str], filename: str, cell: Optional[int]) -> Optional[List[str]]:
    """The file's lines (or the notebook cell's), without line endings; None when unknown."""
    text = sources.get(filename)
    if text is None:
        return None
    if cell is not None:
        try:
            cells = json.loads(text)["cells"]
            source = cells[cell - 1].get("source", "")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return None
        text = "".join(source) if isinstance(source, list) else str(source)
    return text.splitlines()


def _width(text: str) -> int:
    """Terminal columns taken by `text`: tabs to the next stop of 4, wide characters count 2."""
    col = 0
    for ch in text:
        if ch == "\t":
            col += _TAB_WIDTH - col % _TAB_WIDTH
        elif unicodedata.combining(ch):
            continue
        else:
            col += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return col


def _expand(text: str) -> str:
    out, col = [], 0
    for ch in text:
        if ch == "\t":
            n = _TAB_WIDTH - col % _TAB_WIDTH
            out.append(" " * n)
            col += n
        else:
            out.append(ch)
            col += _width(ch)
    return "".join(out)


def _frame(src: List[str], f: Finding, style: _Style) -> Tuple[List[str], int]:
    """The source around the finding with its range marked, in annotate-snippets' layout, and
    the width of its line-number gutter."""
    n = len(src)
    if n == 0:
        return [], 1
    start_row = min(max(f.start.row, 1), n)
    end, end_row_raw = f.end, f.end.row
    if end_row_raw > f.start.row and end.column == 0:  # a range ending at a line break
        end_row_raw -= 1
        end = Location(end_row_raw, len(src[min(end_row_raw, n) - 1]))
    end_row = min(max(end_row_raw, start_row), n)
    first = max(1, start_row - CONTEXT_LINES)
    last = min(n, end_row + CONTEXT_LINES)
    while first < start_row and not src[first - 1].strip():
        first += 1
    while last > end_row and not src[last - 1].strip():
        last -= 1
    width = len(str(last))
    bar = style("|", "blue", "bold")
    blank = " " * width

    def numbered(row: int, mark: str = "") -> str:
        text = _expand(src[row - 1])
        body = f"{mark}{text}".rstrip()
        return f"{style(str(row).rjust(width), 'blue', 'bold')} {bar}{' ' + body if body else ''}"

    def marker(body: str) -> str:
        return f"{blank} {bar} {body}"

    label = style(f.code, "red", "bold")
    out = [f"{blank} {bar}"]
    if start_row == end_row:
        line = src[start_row - 1]
        s = len(line) if f.start.row > n else min(f.start.column, len(line))  # past the end: after it
        e = min(max(end.column, s), len(line)) if end.row == f.start.row else len(line)
        offset = _width(line[:s])
        carets = max(1, _width(line[:e]) - offset)
        for row in range(first, last + 1):
            out.append(numbered(row))
            if row == start_row:
                out.append(marker(f"{' ' * offset}{style('^' * carets, 'red', 'bold')} {label}"))
    else:
        line = src[start_row - 1]
        s = min(f.start.column, len(line))
        slash = not line[:s].strip()
        end_line = src[end_row - 1]
        e = min(end.column, len(end_line)) if end.row == end_row else len(end_line)
        end_offset = max(1, _width(end_line[:e]))
        for row in range(first, last + 1):
            if row < start_row or row > end_row:
                out.append(numbered(row, "  "))
            elif row == start_row:
                if slash:
                    out.append(numbered(row, style("/", "red", "bold") + " "))
                else:
                    out.append(numbered(row, "  "))
                    out.append(marker(style(" " + "_" * (_width(line[:s]) + 1) + "^", "red", "bold")))
            else:
                if end_row - start_row + 1 > _FOLD_AFTER and start_row + 1 < row < end_row - 1:
                    if row == start_row + 2:
                        out.append("...")
                    continue
                out.append(numbered(row, style("|", "red", "bold") + " "))
                if row == end_row:
                    out.append(marker(style("|" + "_" * end_offset + "^", "red", "bold") + f" {label}"))
    out.append(f"{blank} {bar}")
    return out, width


def _apply(lines: List[str], edits: Sequence[Edit]) -> List[str]:
    text = "\n".join(lines) + "\n"
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(loc: Location) -> int:
        if loc.row - 1 >= len(lines):
            return len(text)
        return starts[loc.row - 1] + min(loc.column, len(lines[loc.row - 1]) + 1)

    out, cursor = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        begin, end = offset(edit.start), offset(edit.end)
        if begin < cursor:
            continue  # overlapping: keep the first
        out.append(text[cursor:begin])
        out.append(edit.content)
        cursor = end
    out.append(text[cursor:])
    return "".join(out).splitlines()


def _fix_diff(src: List[str], f: Finding, style: _Style) -> List[str]:
    """Ruff's `--show-fixes` diff: old and new line numbers, `-`/`+` for changed lines."""
    assert f.fix is not None
    new = _apply(src, f.fix.edits)
    kind = "Safe fix" if f.fix.applicability == "safe" else "Unsafe fix"
    out = [style(f"ℹ {kind}", "blue", "bold")]
    width = len(str(max(len(src), len(new), 1)))
    for group in SequenceMatcher(None, src, new, autojunk=False).get_grouped_opcodes(CONTEXT_LINES):
        if len(out) > 1:
            out.append(f"{'.' * width} {'.' * width} {style('|', 'blue', 'bold')}")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for k in range(i2 - i1):
                    out.append(f"{str(i1 + k + 1).rjust(width)} {str(j1 + k + 1).rjust(width)} "
                               f"{style('|', 'blue', 'bold')} {_expand(src[i1 + k])}".rstrip())
                continue
            for i in range(i1, i2):
                out.append(f"{str(i + 1).rjust(width)} {' ' * width} {style('|', 'blue', 'bold')}"
                           + style(f"-{_expand(src[i])}", "red"))
            for j in range(j1, j2):
                out.append(f"{' ' * width} {str(j + 1).rjust(width)} {style('|', 'blue', 'bold')}"
                           + style(f"+{_expand(new[j])}", "green"))
    return out


# --------------------------------------------------------------------------------------------
# json, json-lines


def to_json(f: Finding) -> Dict[str, Any]:
    """One finding with Ruff's JSON field names (columns 1-based) plus perflsp's own fields."""
    fix = None
    if f.fix is not None:
        fix = {
            "applicability": f.fix.applicability,
            "message": f.fix.message,
            "edits": [{"content": e.content, "location": _loc(e.start), "end_location": _loc(e.end)}
                      for e in f.fix.edits],
        }
    hot = None
    if f.hot is not None:
        hot = {"message": f.hot.message, "location": _loc(f.hot.start), "end_location": _loc(f.hot.end),
               "cell": f.hot.cell, "context": f.hot.context}
    return {
        "code": f.code,
        "name": f.name,
        "message": f.message,
        "severity": f.severity,
        "filename": f.filename,
        "cell": f.cell,
        "location": _loc(f.start),
        "end_location": _loc(f.end),
        "noqa_row": f.start.row,
        "fix": fix,
        "hot": hot,
        "url": f.url,
    }


# --------------------------------------------------------------------------------------------
# SARIF 2.1.0


def _uri(path: str) -> str:
    """A relative path with forward slashes (absolute ones outside the working dir: a file URI)."""
    shown = _display_path(path)
    if os.path.isabs(shown):
        return Path(shown).as_uri()
    return quote(shown.replace(os.sep, "/"), safe="/")


def _region(start: Location, end: Location) -> Dict[str, int]:
    return {"startLine": start.row, "startColumn": start.column + 1,
            "endLine": end.row, "endColumn": end.column + 1}


def _rule_name(name: str) -> str:
    # SARIF advises an identifier-like name; Ruff-style kebab-case names become PascalCase.
    return "".join(part[:1].upper() + part[1:] for part in name.replace("_", "-").split("-")) or name


def sarif_log(findings: Sequence[Finding], rule_summaries: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    from perflsp import __version__

    summaries = rule_summaries or {}
    rules: List[Dict[str, Any]] = []
    index: Dict[str, int] = {}
    for f in sorted(findings, key=lambda f: f.code):
        if f.code in index:
            continue
        index[f.code] = len(rules)
        rule: Dict[str, Any] = {
            "id": f.code,
            "name": _rule_name(f.name),
            "shortDescription": {"text": summaries.get(f.code) or f.name.replace("-", " ").capitalize()},
            # Where perflsp runs, it prints the page; `helpUri` only where `rule-docs-url` says
            # where the pages are published (perflsp has no site that SARIF could name).
            "help": {"text": f"`perflsp rule {f.code}` prints this rule's page: why it is slow, an example "
                             "and what to write instead."},
            "properties": {"kebab-name": f.name},
        }
        if f.url:
            rule["helpUri"] = f.url
        rules.append(rule)
    results = []
    for f in findings:
        uri = _uri(f.filename)
        result: Dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": _SARIF_LEVEL.get(f.severity, "warning"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri},
                                                "region": _region(f.start, f.end)}}],
        }
        if f.cell is not None:
            result["properties"] = {"cell": f.cell}
        if f.hot is not None:
            related: Dict[str, Any] = {
                "id": 0,
                "physicalLocation": {"artifactLocation": {"uri": uri}, "region": _region(f.hot.start, f.hot.end)},
                "message": {"text": f.hot.message},
            }
            hot_cell = getattr(f.hot, "cell", None)
            if hot_cell is not None:
                related["properties"] = {"cell": hot_cell}
            result["relatedLocations"] = [related]
        if f.fix is not None and f.fix.edits:
            result["fixes"] = [{
                "description": {"text": f.fix.message},
                "artifactChanges": [{
                    "artifactLocation": {"uri": uri},
                    "replacements": [{"deletedRegion": _region(e.start, e.end), "insertedContent": {"text": e.content}}
                                     for e in f.fix.edits],
                }],
                "properties": {"applicability": f.fix.applicability},
            }]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "perflsp", "version": __version__, "rules": rules}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }


# --------------------------------------------------------------------------------------------
# GitHub Actions


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_line(f: Finding) -> str:
    level = _GITHUB_LEVEL.get(f.severity, "warning")
    props = [("title", f"perflsp ({f.code})"), ("file", _display_path(f.filename))]
    if f.cell is None:
        props += [("line", str(f.start.row)), ("col", str(f.start.column + 1)),
                  ("endLine", str(f.end.row)), ("endColumn", str(f.end.column + 1))]
        text = f"{f.code} {f.message}"
    else:
        # Rows count inside the cell, not the notebook's JSON: annotate the file, say where in it.
        text = f"{_position(f)}: {f.code} {f.message}"
    joined = ",".join(f"{k}={_escape_property(v)}" for k, v in props)
    return f"::{level} {joined}::{_escape_data(text)}"


# --------------------------------------------------------------------------------------------
# JUnit XML


def _junit(findings: Sequence[Finding]) -> str:
    root = ET.Element("testsuites", name="perflsp", tests=str(max(len(findings), 1)),
                      failures=str(len(findings)), errors="0")
    if not findings:
        suite = ET.SubElement(root, "testsuite", name="perflsp", tests="1", disabled="0", errors="0",
                              failures="0", package="org.perflsp")
        ET.SubElement(suite, "testcase", name="No errors found", classname="perflsp")
    by_file: Dict[str, List[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.filename, []).append(f)
    for filename, group in by_file.items():
        suite = ET.SubElement(root, "testsuite", name=_display_path(filename), tests=str(len(group)),
                              disabled="0", errors="0", failures=str(len(group)), package="org.perflsp")
        classname = str(PurePosixPath(_display_path(filename).replace(os.sep, "/")).with_suffix(""))
        for f in group:
            attrs = {"name": f"org.perflsp.{f.code}", "classname": classname,
                     "line": str(f.start.row), "column": str(f.start.column + 1)}
            where = f"line {f.start.row}, col {f.start.column + 1}"
            if f.cell is not None:
                attrs["cell"] = str(f.cell)
                where = f"cell {f.cell}, {where}"
            case = ET.SubElement(suite, "testcase", attrs)
            failure = ET.SubElement(case, "failure", message=f.message, type=f.code)
            failure.text = f"{where}, {f.message}"
    if hasattr(ET, "indent"):
        ET.indent(root, space="    ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --------------------------------------------------------------------------------------------
# --statistics


def statistics_rows(findings: Iterable[Finding], unsafe_fixes: bool) -> List[Dict[str, Any]]:
    counts: Counter = Counter()
    names: Dict[str, str] = {}
    fixable: Dict[str, bool] = {}
    for f in findings:
        counts[f.code] += 1
        names.setdefault(f.code, f.name)
        fixable[f.code] = fixable.get(f.code, False) or _applies(f, unsafe_fixes)
    order = sorted(counts, key=lambda code: (-counts[code], code))
    return [{"code": c, "name": names[c], "count": counts[c], "fixable": fixable[c]} for c in order]


def _statistics(findings: Sequence[Finding], fmt: str, unsafe_fixes: bool, style: _Style) -> str:
    rows = statistics_rows(findings, unsafe_fixes)
    if fmt in ("json", "json-lines"):
        return json.dumps(rows, indent=2) + "\n"
    if not rows:
        return ""
    count_width = max(len(str(r["count"])) for r in rows)
    code_width = max(len(r["code"]) for r in rows)
    any_fixable = any(r["fixable"] for r in rows)
    lines = []
    for r in rows:
        mark = (f"{style('[*]', 'cyan')} " if r["fixable"] else "[ ] ") if any_fixable else ""
        count = style(str(r["count"]).rjust(count_width), "bold")
        code = style(r["code"].ljust(code_width), "red", "bold")
        lines.append(f"{count}\t{code}\t{mark}{r['name']}")
    return "\n".join(lines) + "\n"
