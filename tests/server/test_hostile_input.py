"""The server analyses in its own process: a document past what the parser takes is one PFL000,
never a crash that takes the editor's server down."""
from __future__ import annotations

import pytest

from tests.server.conftest import NEOVIM, TRAIN, apply_edits, text_edits

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")

DEEP = "x = " + "(" * 3000 + "1" + ")" * 3000 + "\n"
LONG = "x = " + " + ".join(["a"] * 20_000) + "\n"


async def test_documents_too_deep_or_too_long_for_the_parser_leave_the_server_running(shared):
    session = await shared(NEOVIM)
    deep = session.open("deep.py", DEEP)
    [too_deep] = await session.diagnostics(deep, version=1, where=lambda ds: len(ds) == 1)
    assert too_deep.code == "PFL000" and "too deeply nested to analyse" in too_deep.message
    long = session.open("long.py", LONG)
    [too_long] = await session.diagnostics(long, version=1, where=lambda ds: len(ds) == 1)
    assert too_long.code == "PFL000" and "expression too long to analyse" in too_long.message
    train = session.open("train.py", TRAIN)
    assert len(await session.diagnostics(train, version=1, where=lambda ds: len(ds) == 3)) == 3


# --- round 3, input and output: text as clients send it ---------------------------------------------

# A finding with a safe fix on the first row too, where a byte order mark is the first character.
FIRST_ROW = "for x in loader: x.pin_memory().cuda()\n" + TRAIN


def _seen(diagnostics):
    return [(d.code, d.message, d.range.start.line, d.range.start.character, d.range.end.character) for d in diagnostics]


async def test_a_byte_order_mark_gives_the_findings_and_fixes_of_the_text_without_it(shared):
    session = await shared(NEOVIM)
    texts = {"plain.py": FIRST_ROW, "marked.py": "\ufeff" + FIRST_ROW}
    plain, marked = (session.open(name, text) for name, text in texts.items())
    expected = _seen(await session.diagnostics(plain, version=1, where=lambda ds: len(ds) == 4))
    got = _seen(await session.diagnostics(marked, version=1, where=lambda ds: len(ds) == 4))
    # The mark is one UTF-16 unit of the first row, as the client counts it: the rest is the same.
    assert got == [(code, message, line, start + (line == 0), end + (line == 0))
                   for code, message, line, start, end in expected]
    assert got[0][:3] == ("PFL106", expected[0][1], 0)
    fixed = {}
    for name, text in texts.items():
        [fix_all] = await session.actions(session.uri(name), 0, only=["source.fixAll"])
        fixed[name] = apply_edits(text, text_edits(await session.edit_of(fix_all), session.uri(name)))
    assert fixed["plain.py"].startswith("for x in loader: x.pin_memory().cuda(non_blocking=True)\n")
    assert fixed["marked.py"] == "\ufeff" + fixed["plain.py"]


async def test_a_lone_surrogate_gives_the_findings_and_a_warning_where_it_is(shared):
    session = await shared(NEOVIM)
    uri = session.open("lone.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    # Half of a UTF-16 pair, as a client that counts in UTF-16 can send (no file can hold it).
    text = TRAIN.replace("print(loss.item())", 'print(loss.item(), "\ud800")')
    version = session.replace(uri, text)
    got = await session.diagnostics(uri, version=version, where=lambda ds: len(ds) == 4)
    assert sorted(d.code for d in got) == ["PFL000", "PFL101", "PFL106", "PFL502"]
    [warning] = [d for d in got if d.code == "PFL000"]
    row = text.split("\n")[6]
    assert (warning.range.start.line, warning.range.start.character) == (6, row.index("\ud800"))
    assert warning.severity == 2  # a warning: the findings stand
    assert warning.message == ("U+D800 is half of a UTF-16 surrogate pair, not a character: no file can hold it; "
                               "perflsp read it as U+FFFD")


TEMPLATE = 'x = t"{' + "(" * 1500 + "1" + ")" * 1500 + '}"\n'  # PEP 750: libcst parses its fields as code
ELIFS = "if a:\n    pass\n" + "".join(f"elif a == {i}:\n    pass\n" for i in range(10_000))
AFTERWARDS = " (perflsp analyses the file again once it parses)"


@pytest.mark.parametrize("name, text, where, message", [
    ("template.py", TEMPLATE, (0, 4),
     "too deeply nested to analyse: more than 100 brackets open at once here; perflsp skipped this file"),
    ("chain.py", ELIFS, (602, 0),
     "`if` statement too long to analyse: more than 300 `elif` branches (the parser nests each one in the one "
     "before); perflsp skipped this file"),
])
async def test_text_past_the_parser_in_native_code_leaves_the_server_running(shared, name, text, where, message):
    session = await shared(NEOVIM)  # each killed the server's process (SIGSEGV in libcst's parser)
    uri = session.open(name, text)
    [skipped] = await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 1)
    assert (skipped.code, skipped.range.start.line, skipped.range.start.character) == ("PFL000", *where)
    assert skipped.message == message + AFTERWARDS
    train = session.open("train.py", TRAIN)
    assert len(await session.diagnostics(train, version=1, where=lambda ds: len(ds) == 3)) == 3
