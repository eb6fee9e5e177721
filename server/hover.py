"""Hover over a flagged expression: what perflsp found there, why it is hot, and the rule's page.

The page is the one `perflsp rule PFL101` prints (`perflsp.rules.docs.render_rule`): why the
pattern is slow, an example, what to write instead and whether the fix is safe.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Optional

from lsprotocol import types as T

from perflsp.findings import Finding
from perflsp.server import convert
from perflsp.server.analysis import SYNTAX_ERROR
from perflsp.server.markdown import prose as markdown_prose

if TYPE_CHECKING:
    from perflsp.server.app import PerflspServer


async def hover(server: "PerflspServer", params: T.HoverParams) -> Optional[T.Hover]:
    found = server.unit_for(params.text_document.uri)
    if found is None:
        return None
    unit, uri = found
    result = await server.docs.fresh(unit)
    part = result.part(uri) if result is not None else None
    if part is None:
        return None
    enc = server.encoder
    hits = [(f, enc.range(part.lines, f.start, f.end)) for f in part.findings]
    hits = [(f, r) for f, r in hits if convert.contains(r, params.position)]
    if not hits:
        return None
    formats = server.capability("text_document.hover.content_format")
    markdown = not formats or T.MarkupKind.Markdown in formats
    text = "\n\n---\n\n".join(explain(f, markdown) for f, _ in hits)
    return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown if markdown else T.MarkupKind.PlainText,
                                            value=text),
                   range=hits[0][1])


def explain(finding: Finding, markdown: bool = True) -> str:
    from perflsp.rules.docs import render_rule
    from perflsp.rules.registry import rule_by_code

    # Messages quote the user's code: as markdown, each part is escaped (`markdown.prose`).
    shown = markdown_prose if markdown else str
    lines: List[str] = [f"**{finding.code} {finding.name}**: {shown(finding.message)}" if markdown
                        else f"{finding.code} {finding.name}: {finding.message}"]
    if finding.hot is not None:
        where = finding.hot.message + (f" (cell {finding.hot.cell})" if finding.hot.cell else "")
        lines.append(f"Hot because it runs {shown(where)}.")
    if finding.fix is not None:
        lines.append(f"Fix ({finding.fix.applicability}): {shown(finding.fix.message)}; see the code actions.")
    rule = rule_by_code(finding.code) if finding.code != SYNTAX_ERROR else None
    if rule is not None:
        page = render_rule(rule)
        page = page.split("\n", 1)[1].lstrip() if page.startswith("# ") else page  # the title is above
        if markdown:
            page = re.sub(r"^## ", "#### ", page, flags=re.MULTILINE)  # below the finding, not beside it
        lines.append(page.rstrip())
    if finding.url and markdown:
        lines.append(f"[{finding.code} documentation]({finding.url})")
    return "\n\n".join(lines)
