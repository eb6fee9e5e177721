"""Check one source text: parse once, build the shared context, run every enabled rule
(and the rules that outrank one, see `precedence`) over each top-level statement (`reuse`: an
open file's next version checks only the statements whose candidates may have changed), then
judge every candidate: hot or not, outranked, suppressed, where.

This is the one entry point the CLI, the cache and the language server share, so the editor and
CI can never disagree.
"""
from __future__ import annotations

import ast
import re
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

import libcst as cst

from perflsp.config import Settings
from perflsp.findings import Edit, Finding, Fix, HotContext, Location, rule_url
from perflsp.rules import limits, precedence, reuse, suppress
from perflsp.rules.context import ModuleContext
from perflsp.rules.hotness import COLD_CODE, TRAINING_LOOP, Hot, HotMap
from perflsp.rules.positions import first_rows
from perflsp.rules.summary import source_lines
from perflsp.rules.registry import enabled_rules, outranking_rules
from perflsp.rules.rule import Report, Rule
from perflsp.rules.walk import Walk

if TYPE_CHECKING:
    from perflsp.rules.reparse import Reparser


SYNTAX_ERROR = "PFL000"
# libcst's syntax errors, and the SyntaxError (CSTValidationError) it raises for code it parses but
# cannot build a tree of (`'' b''`: str and bytes joined).
PARSE_ERRORS = (cst.ParserSyntaxError, SyntaxError)
_POSITION_IN_MESSAGE = re.compile(r"error at \d+:\d+: ")


def check_source(source: str, path: str, settings: Settings,
                 line_label: Optional[Callable[[int], str]] = None,
                 facts: Optional[Dict[str, Any]] = None, reparser: "Optional[Reparser]" = None) -> List[Finding]:
    """All findings for `source`, sorted; a file that does not parse yields one PFL000 finding.

    `line_label` names a row in messages (notebooks say "line 2 of cell 3"). `facts` is what the
    project graph knows about this file (`Project.facts`); without it the file is judged alone.
    `reparser` holds the tree and the walk of the file's previous version (the language server's
    open files): only the statements an edit changed are parsed and walked again.
    """
    if suppress.ignores_file(source):
        return []
    # libcst would crash the process, take minutes or gigabytes on it. The token scan costs a fifth
    # of the parse: a summary that saw every expression and `elif` chain shallow (CPython's own
    # parser already refuses more than 200 nested brackets) makes it unnecessary.
    too_deep = None if _shallow(facts) else limits.excess(source)
    if too_deep is not None:
        return [not_analysed(path, too_deep.row, too_deep.column, too_deep.message)]
    label = line_label or (lambda row: f"line {row}")
    hot = HotMap(facts, source_lines(source), label) if facts else HotMap.for_source(source, path, settings, label)
    # Whatever Python says of the text (libcst parsing the statement an edit changed may accept
    # what its whole parse refuses), and before any shortcut: the editor, which always parses, and
    # `perflsp check` must say the same.
    misread = limits.misread_continuation(source)
    if misread is not None:
        return [not_analysed(path, misread.row, misread.column, misread.message)]
    enabled = enabled_rules(settings, path)
    # A rule that reports only per-step code has nothing to report in a file with none.
    rules = [rule for rule in [*enabled, *outranking_rules(settings, path)] if _may_report(rule, hot, settings)]
    if not rules and reparser is None and _python_parsed(hot):
        # Most files with the default rules: Python's own parser accepted the text (for the
        # summary), so nothing is left to report and libcst need not parse it.
        return []
    try:
        module = reparser.parse(source, hot.statement_rows) if reparser is not None else cst.parse_module(source)
        if not _python_parsed(hot):
            # What runs per step is known from Python's own parser: without it, checking would be
            # silence that looks like a clean file.
            return [_refused_by_python(source, path)]
        return _check_module(module, reparser, source, path, settings, label, hot, enabled, rules)
    except PARSE_ERRORS as exc:
        return [_syntax_error(source, path, exc)]
    except RecursionError:  # within the limits, yet deeper than Python's stack allows a walk of the tree
        return [not_analysed(path, 1, 0, "too deeply nested to analyse; perflsp skipped this file")]


def _may_report(rule: Rule, hot: HotMap, settings: Settings) -> bool:
    if rule.scope != "hot" or settings.reports_cold(rule.code):
        return True
    if _limited_to_contexts(rule, settings) and rule.stable_contexts <= {TRAINING_LOOP}:
        return hot.has_training_loop
    return hot.may_be_hot


def _limited_to_contexts(rule: Rule, settings: Settings) -> bool:
    """Outside preview mode, such a rule keeps its findings in other per-step code to itself."""
    return bool(rule.stable_contexts) and not settings.preview


def _shallow(facts: Optional[Dict[str, Any]]) -> bool:
    """The summary parsed the file (so it has no more than `limits.MAX_TOKENS` tokens), and no
    expression or `elif` chain in it is deep enough to reach the other limits."""
    depth = facts["summary"].get("depth") if facts else None
    return depth is not None and depth <= min(limits.MAX_BRACKETS, limits.MAX_CHAIN, limits.MAX_ELIFS)


def _python_parsed(hot: HotMap) -> bool:
    """The summary's `ast` parse accepted the text (the statements' rows are known only then)."""
    return hot.statement_rows is not None


def _check_module(module: cst.Module, reparser: "Optional[Reparser]", source: str, path: str, settings: Settings,
                  label: Callable[[int], str], hot: HotMap, enabled: List[Rule], rules: List[Rule]) -> List[Finding]:
    if not rules:
        return []  # no walk, no context (together a tenth of the parse)
    walk = Walk(module, reparser.walk if reparser is not None else None)
    if reparser is not None:
        reparser.walk = walk
    rows = reparser.rows() if reparser is not None else first_rows(module, hot.statement_rows)
    ctx = ModuleContext(module, settings, hot, path, label, walk, rows)
    candidates = reuse.candidates(ctx, rules, reparser.reuse if reparser is not None else None)
    if not candidates:
        return []
    ctx.locate(_nodes_to_locate(candidates), reparser.positions if reparser is not None else None)
    reports: List[Tuple[Rule, Report, Optional[Hot]]] = []
    for rule, report in candidates:
        position = ctx.range_of(report.node)[0]
        reason = hot.classify(position)
        if _reported(rule, report, reason, settings, lambda: hot.is_one_off(position)):
            reports.append((rule, report, reason if isinstance(reason, Hot) else None))
    findings = [_finding(ctx, rule, report, reason, path, settings) for rule, report, reason in reports]
    # One cost, one finding, decided before selection and suppression (see `precedence`).
    findings = precedence.drop_outranked(findings)
    codes = {rule.code for rule in enabled}
    comments = suppress.comments_by_row(source)  # read only for a file with findings: it may tokenize
    findings = [f for f in findings
                if f.code in codes and not suppress.is_suppressed(f.code, {f.start.row, f.end.row}, comments)]
    findings.sort(key=Finding.sort_key)
    return findings


def _reported(rule: Rule, report: Report, reason: object, settings: Settings, one_off: Callable[[], bool]) -> bool:
    """"hot" rules report in per-step code (rules that need direct evidence only there or on a
    tensor known to be on the accelerator; some, outside preview mode, only in the body of a
    training loop), "any" rules wherever the code is not known to run once
    (a cost paid per execution), "setup" rules everywhere but in tests and one-off work such as
    dataset processing (a DataLoader built once in `__init__` still costs every step)."""
    if settings.reports_cold(rule.code):
        return True
    if _limited_to_contexts(rule, settings) and not (isinstance(reason, Hot) and reason.context in rule.stable_contexts):
        return False
    if isinstance(reason, Hot):
        return reason.direct or report.on_accelerator or not rule.needs_direct_evidence
    if rule.scope == "setup":
        return not one_off()
    return rule.scope == "any" and reason is not COLD_CODE


def _nodes_to_locate(candidates) -> Iterator[cst.CSTNode]:
    for _, report in candidates:
        yield report.node
        if report.fix is not None:
            yield from (old for old, _ in report.fix.replacements)


def syntax_error(path: str, row: int, column: int, message: str) -> Finding:
    return not_analysed(path, row, column, f"SyntaxError: {message}")


def not_analysed(path: str, row: int, column: int, message: str) -> Finding:
    """PFL000: the file was not analysed (it does not parse, or is beyond what the parser can take)."""
    return Finding(
        code=SYNTAX_ERROR, name="syntax-error", message=message, filename=path,
        start=Location(row, column), end=Location(row, column + 1), severity="error", url=None,
    )


def _syntax_error(source: str, path: str, exc: Exception) -> Finding:
    # libcst's native parser often points past the real error; CPython's parser names the
    # exact place and says what is wrong ("'(' was never closed"), so ask it first.
    try:
        ast.parse(source)
    except SyntaxError as py_exc:
        if py_exc.lineno:
            return syntax_error(path, py_exc.lineno, max((py_exc.offset or 1) - 1, 0), py_exc.msg)
    except (ValueError, RecursionError, MemoryError):
        pass
    if isinstance(exc, cst.ParserSyntaxError):
        return syntax_error(path, exc.raw_line, exc.raw_column, _POSITION_IN_MESSAGE.sub("", exc.message))
    return syntax_error(path, 1, 0, str(exc))


def _refused_by_python(source: str, path: str) -> Finding:
    """PFL000 for a text libcst parses and Python's own parser refuses: a NUL character (no Python
    reads one), or the syntax of a newer Python than the one perflsp runs under (`type X = int` on
    3.11), which the message names."""
    nul = source.find("\0")
    if nul >= 0:  # Python's error has no position: the character's
        rows = source_lines(source[:nul])
        return syntax_error(path, len(rows), len(rows[-1]), "source code cannot contain null bytes")
    python = f"Python {sys.version_info.major}.{sys.version_info.minor}, which perflsp runs under"
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return syntax_error(path, exc.lineno or 1, max((exc.offset or 1) - 1, 0),
                            f"{exc.msg}, in {python}: perflsp did not check this file (if it is a newer Python's "
                            "syntax, run perflsp under that Python)")
    except (ValueError, RecursionError, MemoryError):
        pass
    return not_analysed(path, 1, 0, f"{python}, cannot parse this file: perflsp did not check it")


def _finding(ctx: ModuleContext, rule: Rule, report: Report, reason: Optional[Hot], path: str,
             settings: Settings) -> Finding:
    hot = None
    if reason is not None:
        text = ctx.hot.lines[reason.row - 1]  # the loop's or the def's header line, not its body
        start = len(text) - len(text.lstrip())
        hot = HotContext(reason.message, Location(reason.row, start), Location(reason.row, len(text.rstrip())),
                         context=reason.context)
    message = report.message.replace("{where}", hot.message if hot else "outside hot code")
    (r0, c0), (r1, c1) = ctx.range_of(report.node)
    severity = settings.severity_of(rule.code) or ("warning" if hot or rule.scope == "any" else "info")
    return Finding(
        code=rule.code, name=rule.name, message=message, filename=path,
        start=Location(r0, c0), end=Location(r1, c1), severity=severity, hot=hot,
        fix=_fix(ctx, report), url=rule_url(rule.code, settings.rule_docs_url),
    )


def _fix(ctx: ModuleContext, report: Report) -> Optional[Fix]:
    if report.fix is None:
        return None
    edits = []
    for old, new in report.fix.replacements:
        (r0, c0), (r1, c1) = ctx.range_of(old)
        text = new if isinstance(new, str) else ctx.module.code_for_node(new)
        edits.append(Edit(Location(r0, c0), Location(r1, c1), text))
    return Fix(report.fix.applicability, report.fix.message, tuple(sorted(edits, key=lambda e: e.start)))
