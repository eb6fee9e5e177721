from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.pfl301_layout_copy import layout_view, must_copy_to_view
from perflsp.rules.rule import Invalid, Report, Rule


class ContiguousThenView(Rule):
    code = "PFL303"
    name = "contiguous-then-view"
    summary = "`.contiguous().view(...)` copies even when `.reshape(...)` would not need to"
    why = (
        "`.contiguous()` materialises a full copy whenever the tensor is not already contiguous, "
        "and `.view()` then only reinterprets it. `.reshape()` does the same thing in one call: it "
        "returns a view when the strides allow one and copies only when they do not, and it states "
        "the intent instead of spelling out the mechanism. Where the input is a transposed or "
        "permuted view and the new shape merges dims it has separated (merging attention heads), "
        "`.reshape()` has to copy too, and the rule says nothing. The fix is unsafe: where "
        "`.reshape()` returns a view of a non-contiguous input, the result shares memory with the "
        "input (in-place writes to either now reach both) and is not contiguous (a later `.view()` "
        "of it can fail), neither of which `.contiguous().view()` allowed."
    )
    how_to_fix = "Replace `x.contiguous().view(shape)` with `x.reshape(shape)`."
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) none of 8 decided findings could save a copy: after a permute "
        "`.reshape()` must copy too, and on a fresh tensor neither copies."
    )
    fix_safety = "unsafe"
    valid = [
        "import torch\n\nx = torch.randn(4, 6)\ny = x.reshape(2, 12)\n",
        "import torch\n\nx = torch.randn(4, 6)\ny = x.contiguous()\nz = y.view(24)\n",
        # Merging heads must copy: `.reshape()` would copy as well.
        "import torch\n\nclass Merge(torch.nn.Module):\n    def forward(self, y):\n"
        "        b, h, t, d = y.shape\n        return y.transpose(1, 2).contiguous().view(b, t, h * d)\n",
        "import torch\n\nx = torch.randn(4, 6).t()\ny = x.contiguous().view(2, 12)\n",
    ]
    example_run = (
        "head = Head()\n"
        "head.fc = torch.nn.Linear(48, 2)\n"
        "head.to(device)(torch.randn(2, 3, 4, 4, device=device))\n"
    )
    invalid = [
        Invalid(
            "import torch\n\nclass Head(torch.nn.Module):\n    def forward(self, features):\n"
            "        return self.fc(features.contiguous().view(features.size(0), -1))\n",
            flagged="features.contiguous().view(features.size(0), -1)",
            fixed="import torch\n\nclass Head(torch.nn.Module):\n    def forward(self, features):\n"
            "        return self.fc(features.reshape(features.size(0), -1))\n",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            if ctx.method_name(call) != "view" or not call.args:
                continue
            inner = call.func.value
            if not (isinstance(inner, cst.Call) and ctx.method_name(inner) == "contiguous" and not inner.args):
                continue
            base = inner.func.value
            if ctx.kind(base, frame) in (NUMPY, PYTHON):
                continue
            # `.view(dtype)` reinterprets bits and has no reshape equivalent.
            if len(call.args) == 1 and (ctx.qualname(call.args[0].value) or "").startswith("torch."):
                continue
            layout = layout_view(ctx, base, frame)
            if layout is not None and must_copy_to_view(*layout, call):
                continue  # `.reshape()` would have to copy as well
            fixed = call.with_changes(func=cst.Attribute(value=base, attr=cst.Name("reshape")))
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` copies whenever the input is not contiguous; `.reshape(...)` "
                "copies only when it must",
                fix=self.replace("Replace `.contiguous().view(...)` with `.reshape(...)`", "unsafe", (call, fixed)),
            )
