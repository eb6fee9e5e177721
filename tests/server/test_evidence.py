"""The language server reads `.perflsp/evidence.json` like `perflsp check`: confirmed findings stay
(with what was recorded), refuted ones go, per-step reads no rule flagged are PFL108, and a new
record is read at the next analysis."""
from __future__ import annotations

import json
import re

import pytest

from perflsp.evidence_file import EVIDENCE_VERSION
from tests.rules.test_evidence import BOUND, DEBUG_ITEM, LOOP_ITEM, SOURCE, _line
from tests.server.conftest import NEOVIM

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

READ_ROW = 12  # `total = loss.detach()`: no rule looks there


def _record(session, lines):
    document = {"version": EVIDENCE_VERSION, "steps": 5, "warmup_steps": 2, "step_source": "optimizer.step",
                "command": "python train.py", "measured_at": "2026-12-02T10:00:00Z", "recorder": "sys.settrace",
                "ended": "stopped", "accelerator": None, "step_ms": 3.0, "lines": lines}
    session.write(".perflsp/evidence.json", json.dumps(document))


async def test_open_files_are_judged_with_the_record(start):
    session = await start(NEOVIM, init_options={"settings": {"select": ["PFL1"], "preview": False}})
    session.write("perflsp.toml", "")
    _record(session, [
        _line(LOOP_ITEM, runs=5, steps=5, tensor_ops=5, operands=BOUND, host_reads={"item": 5}, host_read_steps=5),
        _line(DEBUG_ITEM),
        _line(READ_ROW, candidate=False, operands=BOUND, host_reads={"bool": 5}, host_read_steps=5),
    ])
    uri = session.open("train.py", SOURCE)
    diagnostics = await session.diagnostics(uri, version=1, where=lambda ds: any(d.code == "PFL108" for d in ds))
    rows = {(d.range.start.line + 1, d.code): d for d in diagnostics}
    assert (DEBUG_ITEM, "PFL101") not in rows  # never ran: refuted
    assert "recorded on this line: 1 host read per step [item ×1]" in rows[(LOOP_ITEM, "PFL101")].message
    assert (READ_ROW, "PFL108") in rows

    # A new record (the debug line ran on every step after all) is read at the next analysis.
    _record(session, [_line(DEBUG_ITEM, runs=5, steps=5, tensor_ops=5, operands=BOUND, host_reads={"item": 5},
                            host_read_steps=5)])
    version = session.replace(uri, SOURCE + "\n")
    diagnostics = await session.diagnostics(uri, version=version)
    rows = {(d.range.start.line + 1, d.code) for d in diagnostics}
    assert (DEBUG_ITEM, "PFL101") in rows and (READ_ROW, "PFL108") not in rows


async def test_a_committed_record_never_makes_links_or_markup_in_a_hover(start):
    """A cloned repository may hold `.perflsp/evidence.json`: its text is shown, never as markup."""
    from lsprotocol import types as T
    from markdown_it import MarkdownIt

    session = await start(NEOVIM, init_options={"settings": {"select": ["PFL1"], "preview": False}})
    session.write("perflsp.toml", "")
    hostile = [{"device": "[cuda](https://e.vil/a)", "bound": True, "dtype": "<img src=x>", "numel": 1}]
    document = {"version": EVIDENCE_VERSION, "steps": 5, "warmup_steps": 2, "step_source": "optimizer.step",
                "command": "python train.py`[Fix](https://e.vil/b)`", "measured_at": "**now** e.vil/c",
                "recorder": "sys.settrace", "ended": "stopped", "accelerator": "# <b>GPU</b>", "step_ms": 3.0,
                "lines": [_line(LOOP_ITEM, runs=5, steps=5, tensor_ops=5, operands=hostile,
                                host_reads={"[item](https://e.vil/d)": 5}, host_read_steps=5)]}
    session.write(".perflsp/evidence.json", json.dumps(document))
    uri = session.open("train.py", SOURCE)
    await session.diagnostics(uri, version=1, where=lambda ds: any(d.code == "PFL101" for d in ds))
    hover = await session.client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri),
                                                                         T.Position(LOOP_ITEM - 1, 8)))
    rendered = MarkdownIt("gfm-like").render(hover.contents.value)
    assert "**Recorded** by `perflsp record`" in hover.contents.value
    assert "e.vil/a" in rendered and "e.vil/b" in rendered and "e.vil/d" in rendered  # shown ...
    assert "e.vil" not in "".join(re.findall(r"<a [^>]*>", rendered))  # ... never as links
    assert "<img" not in rendered and "<b>" not in rendered and "<h1>" not in rendered and "<strong>now" not in rendered
