"""The engine's own position pass agrees with libcst's PositionProvider (the reference) on real code."""
from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from perflsp.config import Settings
from perflsp.rules.context import ModuleContext
from tests.conftest import ROOT

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
CHECKED = (cst.Call, cst.Attribute, cst.Subscript, cst.Name, cst.For, cst.While, cst.FunctionDef, cst.ClassDef,
           cst.Comparison, cst.BinaryOperation, cst.CompFor, cst.If, cst.Assign, cst.ListComp, cst.With)


def _sources():
    yield "tricky", TRICKY
    for path in sorted((ROOT / "examples").glob("*.py")):
        yield path.name, path.read_text()
    torch = pytest.importorskip("torch")
    for name in ("nn/modules/rnn.py", "optim/adam.py"):
        yield name, (Path(torch.__file__).parent / name).read_text()


@pytest.mark.parametrize("name, source", list(_sources()), ids=lambda v: v if len(v) < 40 else "")
def test_positions_match_libcst(name, source):
    module = cst.parse_module(source)
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    ctx = ModuleContext(module, Settings())
    nodes = [n for t in CHECKED for n, _ in ctx.nodes(t)]
    ctx.locate(nodes)
    mismatches = []
    for node in nodes:
        want = reference[node]
        got = ctx.range_of(node)
        if isinstance(node, cst.BaseCompoundStatement):  # documented: its end may include a comment
            got, want = got[0], (want.start.line, want.start.column)
        else:
            want = ((want.start.line, want.start.column), (want.end.line, want.end.column))
        if got != want:
            mismatches.append((type(node).__name__, got, want))
    assert not mismatches, mismatches[:5]
    assert len(nodes) > 10
