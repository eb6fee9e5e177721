from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.pfl301_layout_copy import layout_op
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

# Factories whose result is always a fresh contiguous tensor (not `*_like`, `from_numpy`,
# `as_tensor` or `empty_strided`, which can carry strides over).
_FACTORIES = frozenset(
    "torch." + name for name in
    "zeros ones empty full rand randn randint randperm arange linspace logspace eye".split()
)
# `torch.tensor(data)` is contiguous for Python data, but copies a tensor with its strides.
_FROM_DATA = "torch.tensor"
# Contiguous when their input was: a view keeps the input's layout where it can.
_VIEWS = frozenset({"view", "reshape", "flatten", "clone"})


def _already_contiguous(ctx: ModuleContext, inner: cst.Call, frame: Frame) -> Optional[str]:
    """"safe" when `inner` always returns a contiguous tensor, "unsafe" when it does for a
    contiguous input only, None otherwise."""
    qualname = ctx.qualname(inner.func)
    method = ctx.method_name(inner) if qualname is None else None
    layout = ctx.keyword(inner, "memory_format")
    if layout is not None:
        makes = qualname in _FACTORIES or (qualname or "").endswith("_like") or method in ("clone", "contiguous")
        return "safe" if makes and ctx.qualname(layout.value) == "torch.contiguous_format" else None
    if qualname in _FACTORIES or (method == "contiguous" and not inner.args):
        return "safe"
    if qualname == _FROM_DATA and inner.args:
        source = inner.args[0].value
        if isinstance(source, (cst.List, cst.Tuple, cst.Integer, cst.Float)) or ctx.kind(source, frame) == PYTHON:
            return "safe"
    elif method in _VIEWS:
        source = inner.func.value  # type: ignore[attr-defined]
    else:
        return None
    # On a transposed or permuted input the result may well be non-contiguous and the copy needed.
    return None if layout_op(source) else "unsafe"


def _callee(ctx: ModuleContext, call: cst.Call) -> str:
    """`.view()` for a method, `torch.tensor()` for a function."""
    method = ctx.method_name(call)
    return f".{method}()" if ctx.qualname(call.func) is None and method else f"{ctx.qualname(call.func)}()"


class ReshapeThenContiguous(Rule):
    code = "PFL302"
    name = "reshape-then-contiguous"
    summary = "`.contiguous()` on a result that is already contiguous does nothing"
    why = (
        "`.contiguous()` returns its input unchanged when it is already contiguous, which the "
        "result of a tensor factory or of `.contiguous()` always is, and that of `.view()`, "
        "`.reshape()`, `.flatten()`, `.clone()` and `torch.tensor(t)` of a tensor is whenever their "
        "input was. The call then only costs a dispatch and a stride check on every run, suggests "
        "a layout copy that never happens, and hides where the real copies are. The fix is safe "
        "after factories (`torch.tensor` of Python data included) and "
        "`.contiguous()`, unsafe after the others: on a non-contiguous input, `.reshape()` and "
        "`.flatten()` copy into a contiguous tensor only when no view can express the result and "
        "otherwise return a non-contiguous view, as `.view()` always does, and `.clone()` keeps the "
        "input's strides, as does `torch.tensor(t)`. There `.contiguous()` does copy, and the code "
        "after it may rely on that."
    )
    how_to_fix = (
        "Drop the `.contiguous()`. Where the input may be non-contiguous and a contiguous result "
        "is required, keep it, or say so with `.clone(memory_format=torch.contiguous_format)`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 11 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/judged3-2026-12-01.jsonl) none of 13 findings was worth a change: where the "
        "call does nothing it costs one dispatch, and after `.reshape()` of a split or sliced view "
        "it does copy, into the layout the kernels after it need."
    )
    fix_safety = "safe/unsafe"
    valid = [
        "import torch\n\nclass Embed(torch.nn.Module):\n    def forward(self, x):\n"
        "        b, c, h, w = x.shape\n        return self.proj(x).flatten(2)\n",
        # A layout change before it: the copy is real (PFL301's business).
        "import torch\n\nclass Heads(torch.nn.Module):\n    def forward(self, y):\n"
        "        return y.transpose(1, 2).contiguous()\n",
        "import torch\n\nbuf = torch.empty(8, 3, 32, 32, memory_format=torch.channels_last).contiguous()\n",
        "import torch\n\nx = torch.randn(4, 6)\nrows = torch.zeros_like(x.t()).contiguous()\n",
        # `torch.tensor` of a transposed tensor keeps its strides: the copy is real.
        "import torch\n\nx = torch.randn(4, 6)\nrows = torch.tensor(x.t()).contiguous()\n",
    ]
    example_run = (
        "patchify = Patchify()\n"
        "patchify.proj = torch.nn.Conv2d(3, 8, 2, stride=2)\n"
        "patchify.to(device)(torch.randn(2, 3, 8, 8, device=device))\n"
    )
    invalid = [
        Invalid(
            "import torch\n\nclass Patchify(torch.nn.Module):\n    def forward(self, x):\n"
            "        b, c, h, w = x.shape\n        return self.proj(x).reshape(b, -1, h * w).contiguous()\n",
            flagged="self.proj(x).reshape(b, -1, h * w).contiguous()",
            fixed="import torch\n\nclass Patchify(torch.nn.Module):\n    def forward(self, x):\n"
            "        b, c, h, w = x.shape\n        return self.proj(x).reshape(b, -1, h * w)\n",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef zero_state(batch, hidden, device):\n"
            "    return torch.zeros(2, batch, hidden, device=device).contiguous()\n",
            flagged="torch.zeros(2, batch, hidden, device=device).contiguous()",
            fixed="import torch\n\n# perflsp: hot\ndef zero_state(batch, hidden, device):\n"
            "    return torch.zeros(2, batch, hidden, device=device)\n",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            if ctx.method_name(call) != "contiguous" or call.args:
                continue
            inner = call.func.value
            if not isinstance(inner, cst.Call):
                continue
            safety = _already_contiguous(ctx, inner, frame)
            if safety is None or ctx.kind(inner, frame) in (NUMPY, PYTHON):
                continue
            if safety == "safe":
                message = f"`.contiguous()` on `{ctx.code(inner, 50)}` does nothing: that result is always contiguous"
            else:
                message = (f"`.contiguous()` on `{ctx.code(inner, 50)}` does nothing unless its input is "
                           f"non-contiguous: `{_callee(ctx, inner)}` keeps a contiguous layout contiguous")
            yield self.report(
                call, frame, message,
                fix=self.replace("Remove `.contiguous()`", safety, (call, inner)),
            )
