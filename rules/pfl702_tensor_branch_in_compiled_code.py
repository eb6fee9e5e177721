from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule

_BRANCHES = {cst.If: "`if`", cst.While: "`while`", cst.IfExp: "a conditional expression"}


class TensorBranchInCompiledCode(Rule):
    code = "PFL702"
    name = "tensor-branch-in-compiled-code"
    summary = "An `if`, `while` or `a if t else b` on a tensor's value in compiled code breaks the graph"
    why = (
        "torch.compile traces one path through the function. A branch on a tensor's value (`if "
        "loss > 0:`, `if torch.isnan(x).any():`, `while err > tol:`) depends on data the trace does "
        "not have, so the graph ends at the branch: the value is copied to the host (a GPU "
        "synchronization), Python picks the branch, and compiled code resumes in a new graph. Each "
        "call pays the break, and the ops on either side can no longer be fused. Checked on torch "
        "2.13 with `torch._dynamo.explain`: `if`, `while`, conditional expressions and `and`/`or` of "
        "tensor comparisons break the graph; branches on shapes (`x.shape[0] > 1`, `x.numel()`), on "
        "Python flags (`self.training`) and `assert` on a tensor do not. Reported in functions "
        "decorated with `@torch.compile`, functions passed to `torch.compile(fn)`, and the `forward` of "
        "a module of this file passed to `torch.compile(model)`, where the condition is known to be a "
        "tensor."
    )
    how_to_fix = (
        "Compute both sides and select on the device: `torch.where(cond, a, b)`; for branches with "
        "different work, `torch.cond(pred, true_fn, false_fn, operands)`; move data-dependent loops "
        "out of the compiled function. `perflsp profile FILE:FN --graph-breaks` lists the breaks "
        "torch itself finds."
    )
    scope = "any"
    preview = True
    tier_reason = (
        "New in the torch.compile group (PFL7xx): the premise was checked against torch 2.13 "
        "(`torch._dynamo.explain`, and the test suite re-checks every example), but its precision on "
        "real compiled code has not been judged yet."
    )
    valid = [
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
        "        if x.shape[0] > 1 and self.training:\n            x = x * 2\n"
        "        assert (x > -1e9).all()\n        return torch.where(x.sum() > 0, x.tanh(), x)\n\n\n"
        "model = torch.compile(Net())\n",
        # Not compiled: the branch costs a sync (PFL103), not a graph break.
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
        "        if x.sum() > 0:\n            x = x.tanh()\n        return x\n",
    ]
    example_run = (
        "model(torch.randn(4, device=device))\n"
    )
    invalid = [
        Invalid("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        y = x * 2\n"
                "        if y.sum() > 0:\n            y = y.tanh()\n        return y\n\n\n"
                "model = torch.compile(Net())\n", flagged="y.sum() > 0"),
        Invalid("import torch\n\n\n@torch.compile\ndef step(x: torch.Tensor):\n"
                "    return x.tanh() if torch.isnan(x).any() else x.sin()\n", flagged="torch.isnan(x).any()"),
        Invalid("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                "        while x.abs().max() > 1:\n            x = x / 2\n        return x\n\n\n"
                "model = Net()\nmodel = torch.compile(model)\n", flagged="x.abs().max() > 1"),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for kind, words in _BRANCHES.items():
            for node, frame in ctx.nodes(kind):
                if frame.function is None or not ctx.is_tensor(node.test, frame):
                    continue
                how = ctx.compiled_by(frame.function)
                if how is not None:
                    yield self.report(node.test, frame,
                                      f"{words} on a tensor's value (`{ctx.code(node.test)}`): the graph breaks "
                                      f"here; use `torch.where` or `torch.cond` (`{frame.function.qualname}` is {how})")
