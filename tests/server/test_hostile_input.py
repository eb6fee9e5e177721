"""The server analyses in its own process: a document past what the parser takes is one PFL000,
never a crash that takes the editor's server down."""
from __future__ import annotations

import pytest

from tests.server.conftest import NEOVIM, TRAIN

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



TEMPLATE = 'x = t"{' + "(" * 1500 + "1" + ")" * 1500 + '}"\n'  # PEP 750: libcst parses its fields as code
ELIFS = "if a:\n    pass\n" + "".join(f"elif a == {i}:\n    pass\n" for i in range(10_000))
AFTERWARDS = " (perflsp analyses the file again once it parses)"


async def test_a_t_string_too_deep_for_the_parser_leaves_the_server_running(shared):
    session = await shared(NEOVIM)  # it killed the server's process (SIGSEGV in libcst's parser)
    template = session.open("template.py", TEMPLATE)
    [too_deep] = await session.diagnostics(template, version=1, where=lambda ds: len(ds) == 1)
    assert (too_deep.code, too_deep.range.start.line, too_deep.range.start.character) == ("PFL000", 0, 4)
    assert too_deep.message == ("too deeply nested to analyse: more than 100 brackets open at once here; perflsp "
                                "skipped this file" + AFTERWARDS)
    train = session.open("train.py", TRAIN)
    assert len(await session.diagnostics(train, version=1, where=lambda ds: len(ds) == 3)) == 3


async def test_an_elif_chain_too_long_for_the_parser_leaves_the_server_running(shared):
    session = await shared(NEOVIM)  # it killed the server's process (SIGSEGV in libcst's parser)
    chain = session.open("chain.py", ELIFS)
    [too_long] = await session.diagnostics(chain, version=1, where=lambda ds: len(ds) == 1)
    assert (too_long.code, too_long.range.start.line, too_long.range.start.character) == ("PFL000", 602, 0)
    assert too_long.message == ("`if` statement too long to analyse: more than 300 `elif` branches (the parser nests "
                                "each one in the one before); perflsp skipped this file" + AFTERWARDS)
    train = session.open("train.py", TRAIN)
    assert len(await session.diagnostics(train, version=1, where=lambda ds: len(ds) == 3)) == 3
