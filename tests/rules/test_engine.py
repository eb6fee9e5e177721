"""The shared engine: hot regions, type inference, aliases, positions, suppression, robustness."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from perflsp.config import Settings
from perflsp.rules import registry
from perflsp.rules.context import MODULE, NUMPY, PYTHON, TENSOR, ModuleContext
from perflsp.rules.engine import check_source
from perflsp.rules.notebook import check_cells


def _check(source, **settings):
    """Every rule, preview ones included, and PFL101 wherever the code is per step (not only where
    the evidence is direct): these tests are about the engine."""
    defaults = {"preview": True, "rule_options": (("PFL101", (("call-chains", True),)),)}
    return check_source(textwrap.dedent(source), "m.py", Settings(**{**defaults, **settings}))


def _codes(source, **settings):
    return [(f.code, f.start.row) for f in _check(source, **settings)]


def _hot(source, code="PFL101"):
    return [f.hot.message for f in _check(source) if f.code == code]


def test_hotness_propagates_through_calls_transitively():
    messages = _hot(
        """
        import torch

        def inner(t):
            return t.item()

        def middle(t):
            return inner(t) + 1

        def train(loader):
            for batch in loader:
                middle(batch)
        """
    )
    assert messages == ["in `inner`, called from `middle` (line 8), called inside a step loop (line 12)"]


def test_markers_comments_and_method_names_make_code_hot():
    source = """
        import perflsp
        import perflsp as pl

        @perflsp.hot
        def a(t):
            return t.item()

        @pl.profile(setup=lambda: ())
        def b(t):
            return t.item()

        # perflsp: hot
        def c(t):
            return t.item()

        def d(t):  # perflsp: hot
            return t.item()

        class Model:  # not a LightningModule: a method name alone is no entry point
            def training_step(self, batch):
                return batch.item()

        def cold(t):
            return t.item()
        """
    messages = _hot(source)
    assert len(messages) == 4
    assert "marked `@perflsp.hot`" in messages[0] and "marked `@perflsp.profile`" in messages[1]
    assert "marked `# perflsp: hot`" in messages[2] and "marked `# perflsp: hot`" in messages[3]
    # `hot-functions` adds entry points: a plain name or `Class.method`
    with_config = [f.hot.message for f in _check(source, hot_functions=("cold", "Model.training_step")) if f.code == "PFL101"]
    assert len(with_config) == 6 and "which `hot-functions` lists (`cold`)" in with_config[5]


def test_comprehensions_and_while_tests_in_per_step_code_are_hot():
    rows = _codes(
        """
        import torch
        x = torch.ones(3, device="cuda")

        # perflsp: hot
        def step(x):
            values = [v.item() for v in x]
            firsts = [c for c in x.cpu()]
            while x.sum().item() > 0:
                x -= 1
        """
    )
    assert ("PFL101", 7) in rows and ("PFL101", 9) in rows
    assert ("PFL102", 8) in rows and len([r for r in rows if r[0] == "PFL102"]) == 1  # evaluated once, hot anyway


def _ctx(source):
    module = cst.parse_module(textwrap.dedent(source))
    return ModuleContext(module, Settings())


def _kind_of(ctx, name):
    """Kind of the last expression statement `name` at module level or in the last function."""
    for node, frame in reversed(ctx.nodes(cst.Expr)):
        if isinstance(node.value, cst.Name) and node.value.value == name:
            return ctx.kind(node.value, frame)
    raise AssertionError(name)


def test_type_inference():
    ctx = _ctx(
        """
        import numpy as np
        import torch as t
        import torch.nn as nn
        from torch import tensor
        from torch.utils.data import DataLoader

        class Net(nn.Module):
            pass

        def f(a: t.Tensor, n: int, model, batch_idx):
            arr = np.random.rand(3)
            x = tensor([1.0])
            y = x.to("cuda") * 2 + arr.sum()
            shape = y.shape
            size = y.size(0)
            net = Net().cuda()
            out = net(y)
            lin = nn.Linear(3, 3)
            count = len(arr)
            loader = DataLoader([])
            for i, (xb, yb) in enumerate(loader):
                xb
            a; n; arr; x; y; shape; size; net; out; lin; count; model; batch_idx
        """
    )
    expected = {
        "a": TENSOR, "n": PYTHON, "arr": NUMPY, "x": TENSOR, "y": TENSOR, "shape": PYTHON,
        "size": PYTHON, "net": MODULE, "out": TENSOR, "lin": MODULE, "count": PYTHON,
        "model": None, "batch_idx": None, "xb": TENSOR,
    }
    assert {name: _kind_of(ctx, name) for name in expected} == expected


def test_forward_parameters_are_tensors_but_not_autograd_function_arguments():
    findings = _check(
        """
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, factor):
                if factor:
                    return x * factor
                return x

        class Net(torch.nn.Module):
            def forward(self, x, mask=None):
                if x.sum():
                    return x
                return -x
        """
    )
    assert [(f.code, f.start.row) for f in findings] == [("PFL103", 13)]


def test_unknown_values_stay_silent_for_rules_that_need_tensors():
    assert _codes(
        """
        def summarise(rows):
            for r in rows:
                if r:
                    print(float(r))
        """
    ) == []


def test_positions_are_exact_across_statements_and_unicode():
    findings = _check(
        """
        import torch
        # ünïcödé comment so columns count code points
        label = "αβγ"

        class Net(torch.nn.Module):
            def forward(self, x):
                s = "ü"; v = x.max().item()
                return v
        """
    )
    [finding] = findings
    assert (finding.start.row, finding.start.column, finding.end.column) == (8, 21, 35)
    assert finding.hot.start.row == 7


def test_syntax_errors_give_one_finding_with_pythons_position():
    findings = _check("import torch\nfor x in y\n    x.item()\n")
    assert [(f.code, f.start.row, f.start.column, f.message) for f in findings] == [
        ("PFL000", 2, 10, "SyntaxError: expected ':'")
    ]


def test_deep_nesting_does_not_crash():
    source = "x = " + "(" * 120 + "1" + ")" * 120 + "\n" + "y = " + " + ".join(["a"] * 3000) + "\n"
    assert all(f.code == "PFL000" for f in check_source(source, "deep.py", Settings()))


def test_a_failing_rule_costs_only_that_rule(monkeypatch, caplog):
    source = "import torch\nfor x in loader:\n    x.item()\n    x.cpu()\n"
    rule_type = registry.rule_by_code("PFL101")

    def boom(self, ctx):
        raise RuntimeError("rule bug")
        yield

    monkeypatch.setattr(rule_type, "check", boom)
    registry.enabled_rules.cache_clear()
    try:
        codes = [f.code for f in check_source(source, "m.py", Settings(preview=True))]
    finally:
        registry.enabled_rules.cache_clear()
    assert codes == ["PFL102"]
    assert "rule PFL101 failed" in caplog.text


@pytest.mark.parametrize("comment, silenced", [
    ("# noqa", True), ("# noqa: PFL101", True), ("# NOQA:PFL101,PFL102", True), ("# noqa: PFL102", False),
    ("# perflsp: ignore[PFL101]", True), ("# perflsp: ignore[PFL1]", False), ("# some note  # noqa: PFL101", True),
])
def test_suppression_comments(comment, silenced):
    source = f"for x in loader:\n    x.item()  {comment}\n"
    assert (check_source(source, "m.py", Settings(preview=True)) == []) == silenced


def test_noqa_inside_a_string_is_not_a_comment():
    source = 'for x in loader:\n    x.item(); s = "# noqa"\n'
    assert [f.code for f in check_source(source, "m.py", Settings(preview=True))] == ["PFL101"]


def test_notebook_cell_that_does_not_parse_leaves_the_others_analysed():
    cells = ["import torch\n", "def f(:\n", "for b in loader:\n    b.item()\n", "!pip install x\n%time y = 1\n"]
    findings = check_cells(cells, "nb.ipynb", Settings(preview=True))
    assert [(f.code, f.cell, f.start.row) for f in findings] == [("PFL000", 2, 1), ("PFL101", 3, 2)]
    assert findings[1].hot.message == "inside the step loop `for b in loader` at line 1 of cell 3"
