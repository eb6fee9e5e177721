"""The engine's positions agree with libcst's PositionProvider (the reference) on real code and on
what makes rows tricky: statements' code is generated alone and placed at the row the summary, or
an open file's reparser, says it starts at (`perflsp.rules.positions`)."""
from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from perflsp.config import Settings
from perflsp.rules import reuse
from perflsp.rules.context import ModuleContext
from perflsp.rules.engine import _nodes_to_locate, check_source
from perflsp.rules.positions import Kept, first_rows, rows_of
from perflsp.rules.project import single_file_facts
from perflsp.rules.registry import all_rules, enabled_rules
from perflsp.rules.reparse import Reparser
from perflsp.rules.summary import summarize_whole
from tests.conftest import ROOT

EVERY_RULE_EVERYWHERE = Settings(preview=True, report_cold=("PFL",))
TRICKY = (
    "# leading comment\n\n"
    "import torch  # trailing\n"
    "@decorator(\n    1)\n"
    "# between\n"
    "def f(x,  # c\n      y):\n"
    "    '''doc ü'''\n"
    "    for a in (  # why\n        x):\n"
    "        z = ((a.item())) + \\\n            (b)\n"
    "    return [v.cpu() for v in (y) if v]\r\n"
    "class C:\r\n    while (x > 0):\r\n        x -= 1\r\n"
)
# What decides which rows a top-level statement owns, between the flagged examples of the rules
# that carry a fix: the module's header, comments and blank rows above a statement, decorators with
# comments between them, statements sharing a row, form feeds, a block indented with tabs, the
# deeper-indented comments that close a block.
BETWEEN = [
    "#!/usr/bin/env python\n# the module's header\n\n",
    "\n\n# above the next statement\n\n",
    "a = 1; b = torch.zeros(3).cuda(); c = b.item()\n",
    "@decorator  # why\n# between decorators\n@other(\n    1)\n\n# after them\ndef decorated(t):\n    return t.item()\n",
    "\x0c\n\x0cclass Tabbed(torch.nn.Module):\n\tdef forward(self, x):\n\t\treturn x.cpu()\n\t\t# closes the block\n",
    "if torch.cuda.is_available(): torch.cuda.synchronize()\n    # deeper than the next statement\n",
]


def _with_fixes() -> str:
    flagged = [example.code for rule in all_rules() for example in rule.invalid if example.fixed]
    return "".join(BETWEEN[i % len(BETWEEN)] + code for i, code in enumerate(flagged)) + "x = torch.ones(2).sum().item()"


FIXES = _with_fixes()
CASES = {
    "tricky": TRICKY,
    "fixes": FIXES + "\n",
    "fixes, no final newline": FIXES,
    "fixes, \\r\\n": (FIXES + "\n").replace("\n", "\r\n"),
    "fixes, \\r, no final newline": FIXES.replace("\n", "\r"),
    "a footer": FIXES + "\n\n# the module's footer\n    # indented\n",
}
CHECKED = (cst.Call, cst.Attribute, cst.Subscript, cst.Name, cst.For, cst.While, cst.FunctionDef, cst.ClassDef,
           cst.Comparison, cst.BinaryOperation, cst.CompFor, cst.If, cst.Assign, cst.ListComp, cst.With)


def _sources():
    yield from CASES.items()
    for path in sorted((ROOT / "examples").glob("*.py")):
        yield path.name, path.read_text()
    torch = pytest.importorskip("torch")
    for name in ("nn/modules/rnn.py", "optim/adam.py"):
        yield name, (Path(torch.__file__).parent / name).read_text()


def _rows(module: cst.Module, source: str):
    return first_rows(module, summarize_whole(source, "m")[0]["statement_rows"])


def _mismatches(module: cst.Module, ctx: ModuleContext, nodes):
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    out = []
    for node in nodes:
        want = reference[node]
        got = ctx.range_of(node)
        # Documented: a compound statement's end may include a comment, a small statement's its `;`.
        if isinstance(node, cst.BaseCompoundStatement) or isinstance(getattr(node, "semicolon", None), cst.Semicolon):
            got, want = got[0], (want.start.line, want.start.column)
        else:
            want = ((want.start.line, want.start.column), (want.end.line, want.end.column))
        if got != want:
            out.append((type(node).__name__, got, want))
    return out


@pytest.mark.parametrize("name, source", list(_sources()), ids=lambda v: v if len(v) < 40 else "")
def test_statement_rows_from_the_summary_are_where_libcst_starts_each_statement(name, source):
    module = cst.parse_module(source)
    assert _rows(module, source) == rows_of(module.body, 1 + len(module.header), module)[:-1]


@pytest.mark.parametrize("rows_from", ["summary", "counted"])
@pytest.mark.parametrize("name, source", list(_sources()), ids=lambda v: v if len(v) < 40 else "")
def test_positions_match_libcst(name, source, rows_from):
    module = cst.parse_module(source)
    ctx = ModuleContext(module, Settings(), rows=_rows(module, source) if rows_from == "summary" else None)
    nodes = [n for t in CHECKED for n, _ in ctx.nodes(t)]
    ctx.locate(nodes)
    assert not _mismatches(module, ctx, nodes)[:5]
    assert len(nodes) > 10


@pytest.mark.parametrize("name", [name for name in CASES if name != "tricky"])
def test_the_nodes_fixes_replace_are_located_as_libcst_has_them(name):
    source = CASES[name]
    module = cst.parse_module(source)
    ctx = ModuleContext(module, EVERY_RULE_EVERYWHERE, path="m.py", rows=_rows(module, source))
    candidates = reuse.candidates(ctx, enabled_rules(EVERY_RULE_EVERYWHERE, "m.py"))
    replaced = [old for _, report in candidates if report.fix is not None for old, _ in report.fix.replacements]
    nodes = list(_nodes_to_locate(candidates))
    ctx.locate(nodes)
    assert len(replaced) >= 9 and not _mismatches(module, ctx, nodes)


def test_rows_that_are_not_where_the_statements_are_fall_back_to_counting_them():
    module = cst.parse_module(FIXES)
    wrong = [row + 1 for row in _rows(module, FIXES)]
    ctx = ModuleContext(module, Settings(), rows=wrong)
    nodes = [n for n, _ in ctx.nodes(cst.Call)]
    ctx.locate(nodes)
    assert not _mismatches(module, ctx, nodes)


def test_statements_sharing_rows_across_a_backslash_are_counted():
    source = "import torch\nx = torch.ones(2); \\\n    y = x.sum().item()\nz = y\n"
    module = cst.parse_module(source)
    assert _rows(module, source) is None  # `ast` sees two statements on two rows, libcst one
    ctx = ModuleContext(module, Settings(), rows=None)
    nodes = [n for n, _ in ctx.nodes(cst.Call)]
    ctx.locate(nodes)
    assert not _mismatches(module, ctx, nodes)


def test_an_open_file_moves_the_positions_of_the_statements_an_edit_left_alone():
    text = CASES["fixes"]
    edited = text.replace("):\n", "):\n    # a row more\n", 1)  # in the first def, above most statements
    reparser = Reparser()
    for version in (text, edited, text):
        facts = single_file_facts(version, "m.py")
        got = check_source(version, "m.py", EVERY_RULE_EVERYWHERE, facts=facts, reparser=reparser)
        assert got == check_source(version, "m.py", EVERY_RULE_EVERYWHERE, facts=facts)
    assert reparser.spliced and reparser.positions.moved > 5


def test_kept_positions_of_a_statement_that_changed_are_not_used():
    source = "import torch\ndef f(t):\n    return t.item()\n"
    module = cst.parse_module(source)
    kept = Kept()
    ctx = ModuleContext(module, Settings(), rows=_rows(module, source))
    ctx.locate([n for n, _ in ctx.nodes(cst.Call)], kept)
    edited = "import torch\ndef f(t):\n\n    return t.item()\n"
    module = cst.parse_module(edited)
    ctx = ModuleContext(module, Settings(), rows=_rows(module, edited))
    nodes = [n for n, _ in ctx.nodes(cst.Call)]
    ctx.locate(nodes, kept)
    assert kept.moved == 0 and not _mismatches(module, ctx, nodes)
