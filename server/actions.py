"""Code actions: a finding's fix, "Ignore PFLxxx on this line", and `source.fixAll.perflsp`.

The edits come from the engine: a fix's own edits, `add_noqa` (which knows where a `# noqa` goes
and merges it into an existing one) and `fix_text` (safe fixes to a fixed point, never a round that
breaks the file). When the client can resolve actions lazily (`dataSupport` + `resolveSupport` for
"edit"), the list carries no edits and `codeAction/resolve` computes the chosen one.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from lsprotocol import types as T

from perflsp.findings import Finding
from perflsp.server import convert
from perflsp.server.analysis import SYNTAX_ERROR, PartResult, Result, file_source

if TYPE_CHECKING:
    from perflsp.rules.runner import FactsOf
    from perflsp.server.app import PerflspServer

QUICKFIX = T.CodeActionKind.QuickFix.value
FIX_ALL = "source.fixAll.perflsp"
KINDS = [T.CodeActionKind.QuickFix, FIX_ALL]


def wanted(kind: str, only: Optional[Sequence[str]]) -> bool:
    """LSP's rule for `context.only`: a kind matches itself and its sub-kinds (`source` ⊇ `source.fixAll.perflsp`)."""
    return not only or any(kind == o or kind.startswith(f"{o}.") for o in only)


def fix_title(finding: Finding) -> str:
    fix = finding.fix
    assert fix is not None
    if fix.applicability == "safe":
        return f"{finding.code}: {fix.message}"
    return f"{finding.code}: {fix.message} (unsafe fix: may change behaviour, review it)"


async def code_actions(server: "PerflspServer", params: T.CodeActionParams) -> List[T.CodeAction]:
    found = server.unit_for(params.text_document.uri)
    if found is None:
        return []
    unit, uri = found
    result = await server.docs.fresh(unit)
    part = result.part(uri) if result is not None else None
    if result is None or part is None:
        return []
    enc = server.encoder
    only = params.context.only
    fixes: List[T.CodeAction] = []
    ignores: List[T.CodeAction] = []
    ignored = set()
    for finding in part.findings:
        rng = enc.range(part.lines, finding.start, finding.end)
        if not convert.overlaps(rng, params.range):
            continue
        diag = _diagnostic_for(part, finding, rng)
        if finding.fix is not None and finding.fix.edits and wanted(QUICKFIX, only):
            fixes.append(T.CodeAction(
                title=fix_title(finding), kind=T.CodeActionKind.QuickFix, diagnostics=[diag],
                is_preferred=finding.fix.applicability == "safe", data=_data("fix", uri, result, finding)))
        row_code = (finding.start.row, finding.code)
        if finding.code != SYNTAX_ERROR and row_code not in ignored and wanted(QUICKFIX, only):
            ignored.add(row_code)
            ignores.append(T.CodeAction(
                title=f"Ignore {finding.code} on this line", kind=T.CodeActionKind.QuickFix,
                diagnostics=[diag], data=_data("noqa", uri, result, finding)))
    fixes.sort(key=lambda a: not a.is_preferred)  # safe fixes first: they are the ones to take
    actions = fixes + ignores
    if wanted(FIX_ALL, only) and _has_safe_fix(result):
        actions.append(T.CodeAction(title="perflsp: fix all safe fixes", kind=FIX_ALL,
                                    data=_data("fixAll", uri, result, None)))
    if not server.lazy_edits():
        # This client cannot resolve lazily: every action carries its edit now.
        edits = await asyncio.gather(*(_edit(server, result, a.data) for a in actions))
        for action, edit in zip(actions, edits):
            action.edit = edit
            action.data = None
    return actions


async def resolve(server: "PerflspServer", action: T.CodeAction) -> T.CodeAction:
    data = action.data
    if not isinstance(data, dict) or "uri" not in data:
        return action
    found = server.unit_for(data["uri"])
    if found is None:
        return action
    result = await server.docs.fresh(found[0])
    if result is not None:
        action.edit = await _edit(server, result, data)
    return action


def _data(kind: str, uri: str, result: Result, finding: Optional[Finding]) -> Dict[str, Any]:
    data: Dict[str, Any] = {"kind": kind, "uri": uri, "generation": result.generation}
    if finding is not None:
        data.update(code=finding.code, start=[finding.start.row, finding.start.column],
                    end=[finding.end.row, finding.end.column])
    return data


def _diagnostic_for(part: PartResult, finding: Finding, rng: T.Range) -> T.Diagnostic:
    # The very diagnostic the client holds, so it can tie the action to the squiggle.
    for diag in part.diagnostics:
        if diag.code == finding.code and diag.range == rng:
            return diag
    return T.Diagnostic(range=rng, message=finding.message, code=finding.code, source=convert.SOURCE)


def _has_safe_fix(result: Result) -> bool:
    # Parts that do not parse are left out: `fix_text` cannot fix them, their findings are carried over.
    return any(f.fix is not None and f.fix.applicability == "safe"
               for p in result.parts.values() if p.parsed for f in p.findings)


def _find(part: PartResult, data: Dict[str, Any]) -> Optional[Finding]:
    for finding in part.findings:
        if (finding.code == data.get("code") and [finding.start.row, finding.start.column] == data.get("start")
                and [finding.end.row, finding.end.column] == data.get("end")):
            return finding
    return None


async def _edit(server: "PerflspServer", result: Result, data: Dict[str, Any]) -> Optional[T.WorkspaceEdit]:
    """The workspace edit of an action, computed in a worker thread (fix-all re-checks the file)."""
    loop = asyncio.get_running_loop()
    changes = await loop.run_in_executor(server.docs.pool, _text_edits, result, data, server.encoder,
                                         server.projects.facts)
    if changes is None:
        return None
    return server.workspace_edit({uri: (result.parts[uri].part.version, edits) for uri, edits in changes.items()})


def _text_edits(result: Result, data: Dict[str, Any], enc: convert.Encoder,
                facts_of: "FactsOf") -> Optional[Dict[str, List[T.TextEdit]]]:
    kind = data["kind"]
    if kind == "fixAll":
        return _fix_all(result, enc, facts_of)
    part = result.part(data["uri"])
    finding = _find(part, data) if part is not None else None
    if part is None or finding is None:
        return None  # the finding is gone (the text changed): nothing to apply
    if kind == "fix" and finding.fix is not None:
        return {part.part.uri: convert.text_edits(part.part.lines, finding.fix.edits, enc)}
    if kind == "noqa":
        from perflsp.rules.fixes import add_noqa

        return {part.part.uri: convert.diff_edits(part.part.text, add_noqa(part.part.text, [finding])[0], enc)}
    return None


def _fix_all(result: Result, enc: convert.Encoder, facts_of: "FactsOf") -> Optional[Dict[str, List[T.TextEdit]]]:
    from perflsp.rules.fixes import fix_text

    snap = result.snapshot
    if snap is None or result.resolved is None:
        return None
    settings = result.resolved.settings
    if snap.cells is None:
        part = snap.parts[0]
        source = file_source(part)
        # Each round is judged by the workspace's graph, as the diagnostics were: a finding per
        # step only because of a caller in another file is fixed too (as `perflsp check --fix` does).
        fixed, _, _ = fix_text(source, str(snap.path), settings, unsafe=False,
                               facts_of=lambda text: facts_of(snap.path, text))
        mark = part.readable[:len(part.readable) - len(source)]
        # Edits between the text as read and its fixed version, the byte order mark put back on
        # both: places in the client's text (a lone surrogate and U+FFFD are as wide).
        return {part.uri: convert.diff_edits(part.readable, mark + fixed, enc)}
    from perflsp.server.notebooks import cell_texts, notebook_json

    fixed = cell_texts(snap, fix_text(notebook_json(snap), str(snap.path), settings, unsafe=False)[0])
    out: Dict[str, List[T.TextEdit]] = {}
    for part in snap.parts:
        new_text = fixed.get(part.uri, part.text)
        if new_text != part.text:
            out[part.uri] = convert.diff_edits(part.text, new_text, enc)
    return out
