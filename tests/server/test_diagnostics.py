"""Diagnostics end to end: push and pull, debounce, stale results, lint on save, syntax errors, UTF-16."""
from __future__ import annotations

import asyncio
import time

import pytest
from lsprotocol import types as T

from tests.server.conftest import EMACS, NEOVIM, TRAIN, VSCODE, apply_edits, text_edits

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")


def codes(diagnostics):
    return sorted(d.code for d in diagnostics)


def by_code(diagnostics, code):
    found = [d for d in diagnostics if d.code == code]
    assert len(found) == 1, f"expected one {code}, got {diagnostics}"
    return found[0]


@pytest.mark.parametrize("spec", [NEOVIM, VSCODE])
async def test_push_diagnostics_carry_code_link_range_and_hot_loop(shared, spec):
    session = await shared(spec)
    uri = session.open("train.py", TRAIN)
    diagnostics = await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    assert codes(diagnostics) == ["PFL101", "PFL106", "PFL502"]
    item = by_code(diagnostics, "PFL101")
    assert item.source == "perflsp"
    assert item.severity == T.DiagnosticSeverity.Warning  # hot code: a warning, not a hint
    assert item.range == T.Range(T.Position(6, 14), T.Position(6, 25))  # exactly `loss.item()`
    assert "loss.item()" in item.message
    # What makes it hot: the `for` header, four lines up, in the same file.
    [related] = item.related_information
    assert related.location.uri == uri
    assert related.location.range.start == T.Position(4, 4)
    assert "`for x, y in loader`" in related.message  # the engine's words for why it is hot
    assert item.code_description is None  # no published rule pages unless `ruleDocsUrl` names them
    # Pushing to a client that pulls would show everything twice; this one pushes, never asks.
    assert session.result.capabilities.diagnostic_provider is not None


@pytest.mark.parametrize("spec", [NEOVIM, VSCODE])
async def test_rule_docs_url_links_each_diagnostic_to_its_rule_page(start, spec):
    session = await start(spec, init_options={"settings": {"ruleDocsUrl": "https://docs.example.org/rules/{code}.html"}})
    uri = session.open("train.py", TRAIN)
    item = by_code(await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3), "PFL101")
    if spec == VSCODE:  # declares codeDescriptionSupport; Neovim 0.7 does not, so it gets no link
        assert item.code_description.href == "https://docs.example.org/rules/PFL101.html"
    else:
        assert item.code_description is None
    hover = await session.client.text_document_hover_async(
        T.HoverParams(T.TextDocumentIdentifier(uri=uri), T.Position(6, 20)))  # on `item`
    assert "[PFL101 documentation](https://docs.example.org/rules/PFL101.html)" in hover.contents.value


async def test_pull_diagnostics_when_the_client_supports_them(shared):
    session = await shared(VSCODE, pull=True)
    uri = session.open("train.py", TRAIN)
    report = await session.pull(uri)
    assert report.kind == "full"
    assert codes(report.items) == ["PFL101", "PFL106", "PFL502"]
    assert report.result_id
    # Same text, same diagnostics: the client is told nothing changed.
    again = await session.pull(uri, previous=report.result_id)
    assert again.kind == "unchanged" and again.result_id == report.result_id
    # After an edit the pull waits for the new version: the `.item()` line is gone.
    session.replace(uri, TRAIN.replace("        print(loss.item())\n", ""))
    changed = await session.pull(uri, previous=report.result_id)
    assert changed.kind == "full"
    assert codes(changed.items) == ["PFL106", "PFL502"]
    await asyncio.sleep(0.3)
    assert session.published(uri) == []  # a pulling client is never pushed document diagnostics


def one_statement(count: int) -> str:
    """A file whose every edit parses it (nearly) whole: `count` hot loops inside one `if` statement."""
    return "import torch\n\nif True:\n" + "".join(f"    def step{i}(model, loader):\n        for x in loader:\n"
                                                   f"            print(model(x).item())\n\n" for i in range(count))


async def test_edits_of_an_expensive_file_are_debounced_into_one_analysis(start):
    session = await start(NEOVIM, init_options={"settings": {"debounceMs": 400, "logLevel": "debug"}})
    uri = session.open("big.py", one_statement(200))
    await session.diagnostics(uri, version=1, timeout=60)
    # The analysis of the opened file may have shared the CPU with the server's warm-up, which
    # measures nothing: the first change is analysed at once, and its cost is the one that counts.
    await session.diagnostics(uri, version=session.edit(uri, (3, 0), (3, 0), "# a large file\n"), timeout=60)
    last_edit = 0.0
    for _ in range(5):  # typing `#` five times at the start of the first `.item()` line, 50 ms apart
        version = session.edit(uri, (6, 12), (6, 12), "#")
        last_edit = time.monotonic()
        await asyncio.sleep(0.05)
    diagnostics = await session.diagnostics(uri, version=version, timeout=60)
    arrived = next(t for t, p in session.client.published if p.uri == uri and p.version == version)
    assert len([d for d in diagnostics if d.code == "PFL101"]) == 199  # the commented-out `.item()` is gone
    assert arrived - last_edit >= 0.35  # nothing before the quiet period ended
    versions = [p.version for p in session.published(uri)]
    assert versions == [1, 2, version]  # one analysis for five edits


async def test_a_cheap_file_is_analysed_at_once_on_every_change(start):
    # A debounce far longer than the test may wait: a small file's analysis costs a few
    # milliseconds, so its changes are analysed at once, never after the debounce.
    session = await start(NEOVIM, init_options={"settings": {"debounceMs": 5000}})
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    delays = []
    steps = [((9, 0), (9, 0), "# note\n", ["PFL101", "PFL106", "PFL502"]),  # nothing changes: published all the same
             ((6, 8), (6, 8), "#", ["PFL106", "PFL502"]),  # the `.item()` line commented out
             ((10, 0), (10, 0), "# more\n", ["PFL106", "PFL502"]),
             ((6, 8), (6, 9), "", ["PFL101", "PFL106", "PFL502"])]  # and back
    for start_at, end_at, text, expected in steps:
        version = session.edit(uri, start_at, end_at, text)
        sent = time.monotonic()
        diagnostics = await session.diagnostics(uri, version=version, timeout=4)
        delays.append(next(t for t, p in session.client.published if p.uri == uri and p.version == version) - sent)
        assert codes(diagnostics) == expected
    assert [p.version for p in session.published(uri)] == [1, 2, 3, 4, 5]  # every version, each with its own
    assert max(delays) < 2.0, delays  # not the 5 s debounce (a few ms on a quiet machine)


async def test_a_newer_edit_cancels_the_analysis_of_the_older_version(start):
    body = "".join(f"def step{i}(model, loader):\n    for x in loader:\n        print(model(x).item())\n\n"
                   for i in range(100))
    session = await start(NEOVIM, init_options={"settings": {"debounceMs": 0, "logLevel": "debug"}})
    uri = session.open("big.py", "import torch\n\n" + body)
    # Edit while version 1 is being analysed (the server says when it starts; 400 lines take
    # the engine far longer than this round trip).
    deadline = time.monotonic() + 15
    while "analysing " + uri not in session.log_text():
        assert time.monotonic() < deadline, session.log_text()
        await asyncio.sleep(0.005)
    version = session.replace(uri, "import torch\n\n" + body.replace("step0(", "first("))
    diagnostics = await session.diagnostics(uri, version=version, timeout=60)
    assert len([d for d in diagnostics if d.code == "PFL101"]) == 100
    await asyncio.sleep(0.2)
    assert [p.version for p in session.published(uri)] == [version]  # version 1 never reached the client
    # Stopped at the next step of its analysis, or, when the edit came during its last step, dropped.
    log = session.log_text()
    assert f"stopped analysing {uri} generation 1" in log or f"dropped the result of {uri} generation 1" in log


async def test_lint_on_save_only(start):
    session = await start(NEOVIM, init_options={"settings": {"run": "onSave", "debounceMs": 0}})
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    version = session.replace(uri, TRAIN.replace("        print(loss.item())\n", ""))
    await asyncio.sleep(0.5)
    assert [p.version for p in session.published(uri)] == [1]  # typing alone analyses nothing
    session.save(uri)
    diagnostics = await session.diagnostics(uri, version=version)
    assert codes(diagnostics) == ["PFL106", "PFL502"]


async def test_a_half_typed_line_keeps_the_other_findings_and_adds_one_hint(shared):
    session = await shared(NEOVIM)
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    # Two new lines above the loop, the second one half typed: the file does not parse.
    broken = session.edit(uri, (3, 0), (3, 0), "log = []\nlog.append(\n")
    diagnostics = await session.diagnostics(uri, version=broken)
    assert codes(diagnostics) == ["PFL000", "PFL101", "PFL106", "PFL502"]
    hint = by_code(diagnostics, "PFL000")
    assert hint.severity == T.DiagnosticSeverity.Hint
    assert hint.range.start.line == 4
    assert "last version that parsed" in hint.message
    # The kept findings moved down with their lines (two lines were inserted above them).
    assert by_code(diagnostics, "PFL101").range == T.Range(T.Position(8, 14), T.Position(8, 25))
    assert by_code(diagnostics, "PFL101").related_information[0].location.range.start.line == 6
    # Editing a flagged line while broken drops that finding (its code changed), keeps the others.
    broken = session.edit(uri, (10, 12), (10, 33), "x.cpu()")
    diagnostics = await session.diagnostics(uri, version=broken)
    assert codes(diagnostics) == ["PFL000", "PFL101", "PFL502"]
    fixed = session.edit(uri, (4, 11), (4, 11), "1)")
    diagnostics = await session.diagnostics(uri, version=fixed)
    assert "PFL000" not in codes(diagnostics) and "PFL101" in codes(diagnostics)


@pytest.mark.parametrize("spec, encoding", [(VSCODE, "utf-16"), (EMACS, "utf-32")])
async def test_columns_follow_the_negotiated_encoding_with_non_ascii_text(shared, spec, encoding):
    session = await shared(spec)
    assert session.result.capabilities.position_encoding == encoding  # eglot offers UTF-32 first
    line = '        print("é😀", loss.item())'  # 😀 is two UTF-16 units but one code point
    text = TRAIN.replace("        print(loss.item())", line).replace("w = x.pin_memory().cuda()", 's = "😀😀"; w = x.pin_memory().cuda()')
    uri = session.open("train.py", text)
    diagnostics = await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    item = by_code(diagnostics, "PFL101")
    start_column = line.index("loss")
    expected = start_column + 1 if encoding == "utf-16" else start_column
    assert item.range.start == T.Position(6, expected)
    assert item.range.end.character - item.range.start.character == len("loss.item()")
    # A fix after non-ASCII text on its line lands on the call, in the client's units.
    [safe] = [a for a in await session.actions(uri, 8) if a.title.startswith("PFL106")]
    fixed = apply_edits(text, text_edits(await session.edit_of(safe), uri), encoding)
    assert 's = "😀😀"; w = x.pin_memory().cuda(non_blocking=True)\n' in fixed
