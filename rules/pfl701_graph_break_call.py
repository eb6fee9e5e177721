from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule

# Calls torch.compile cannot trace (checked with torch._dynamo.explain on torch 2.13): qualname -> what it is.
_SKIPPED = {
    "time.time": "`time.time()` is a C function dynamo does not trace",
    "time.perf_counter": "`time.perf_counter()` is a C function dynamo does not trace",
    "warnings.warn": "`warnings.warn` is a builtin dynamo does not trace",
}


def _captures_scalars(ctx: ModuleContext) -> bool:
    """The module sets `torch._dynamo.config.capture_scalar_outputs = True`: `.item()` traces."""
    for assign, _ in ctx.walk.nodes(cst.Assign):
        for target in assign.targets:
            if (isinstance(target.target, cst.Attribute) and target.target.attr.value == "capture_scalar_outputs"
                    and ctx.literal(assign.value) is True):
                return True
    return False


class GraphBreakCall(Rule):
    code = "PFL701"
    name = "graph-break-call"
    summary = ("A call torch.compile cannot trace (`print`, `.item()`, `.tolist()`, `time.time()`, "
               "`warnings.warn`) in compiled code breaks the graph")
    why = (
        "torch.compile turns a function into one graph it can fuse and optimise. A call it cannot "
        "trace ends the graph there: the code before it runs as one compiled graph, the call runs in "
        "plain Python, and a new graph starts after it (or the rest runs eagerly). Every break costs "
        "a round trip through Python per call, splits the fusion that made compiling worth it, and "
        "for `.item()` and `.tolist()` also copies the value to the host, waiting for the GPU. "
        "Checked on torch 2.13 with `torch._dynamo.explain`: `print`, `.item()` (unless "
        "`torch._dynamo.config.capture_scalar_outputs = True`), `.tolist()`, `time.time()`, "
        "`time.perf_counter()` and `warnings.warn` each break the graph; numpy calls on tensors "
        "(`np.sin(x.numpy())`) do not, they are traced. Reported in functions decorated with "
        "`@torch.compile`, functions passed to `torch.compile(fn)`, and the `forward` of a module "
        "of this file passed to `torch.compile(model)`."
    )
    how_to_fix = (
        "Move printing, timing and warnings out of the compiled function (into the caller, every N "
        "steps). Keep values as tensors instead of `.item()`/`.tolist()`, or set "
        "`torch._dynamo.config.capture_scalar_outputs = True` so `.item()` is traced. "
        "`perflsp profile FILE:FN --graph-breaks` lists the breaks torch itself finds."
    )
    scope = "any"
    preview = True
    tier_reason = (
        "New in the torch.compile group (PFL7xx): each construct was checked against torch 2.13 "
        "(`torch._dynamo.explain`, and the test suite re-checks every example), but its precision on "
        "real compiled code has not been judged yet."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "\n"
        "@torch.compile\n"
        "def step(x):\n"
        "    y = x * 2\n"
        "    return y + 1\n"
        "\n"
        "\n"
        "def train(batches):\n"
        "    for i, x in enumerate(batches):\n"
        "        y = step(x)\n"
        "        if i % 100 == 0:\n"
        '            print("step", y.shape)\n',
        # Traced: numpy on a tensor, shapes, and printing outside the compiled function.
        "import numpy as np\nimport torch\n\n\n@torch.compile\ndef step(x):\n"
        "    y = np.sin(x.numpy())\n    return torch.from_numpy(y) * x.shape[0]\n",
        "import torch\n\n\ndef step(x):\n    return (x * 2).sin()\n\n\n"
        "compiled = torch.compile(step)\n\n\ndef log(x):\n    print(compiled(x).sum().item())\n",
        # capture_scalar_outputs: `.item()` is traced.
        "import torch\n\ntorch._dynamo.config.capture_scalar_outputs = True\n\n\n@torch.compile\ndef step(x):\n"
        "    return x * x.abs().max().item()\n",
        # `torch.compile(model)` of a model from elsewhere: which forward runs is unknown here.
        "import torch\n\n\ndef build(model):\n    return torch.compile(model)\n\n\n"
        "def log(x):\n    print(x.sum().item())\n",
    ]
    example_run = (
        "step(torch.randn(8, device=device))\n"
    )
    invalid = [
        Invalid("import torch\n\n\n@torch.compile\ndef step(x):\n    y = x * 2\n    print(\"step\", y.shape)\n"
                "    return y + 1\n", flagged="print(\"step\", y.shape)"),
        Invalid("import torch\n\n\ndef step(x):\n    y = x * 2\n    scale = y.abs().max().item()\n"
                "    return y / scale\n\n\nfast = torch.compile(step)\n", flagged="y.abs().max().item()"),
        Invalid("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        y = x.relu()\n"
                "        counts = y.argmax(1).tolist()\n        return y * len(counts)\n\n\n"
                "model = torch.compile(Net())\n", flagged="y.argmax(1).tolist()"),
        Invalid("import time\n\nimport torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                "        y = x.sin()\n        started = time.perf_counter()\n        return y * 2\n\n\n"
                "model = Net()\nmodel = torch.compile(model)\n", flagged="time.perf_counter()"),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            what = _untraceable(ctx, call, frame) if frame.function is not None else None
            how = ctx.compiled_by(frame.function) if what is not None else None
            if how is None:
                continue
            if ctx.method_name(call) == "item":
                if ctx.fact(_captures_scalars):
                    continue
            yield self.report(call, frame, f"{what}: the graph breaks here (`{frame.function.qualname}` is {how})")


def _untraceable(ctx: ModuleContext, call: cst.Call, frame) -> Optional[str]:
    """What torch.compile cannot trace about this call, or None."""
    if ctx.builtin(call.func) == "print":
        return "`print` is not traced by torch.compile"
    method = ctx.method_name(call)
    if method in _METHODS and not call.args and ctx.kind(call.func.value, frame) not in (NUMPY, PYTHON):  # type: ignore[attr-defined]
        return _METHODS[method]
    return _SKIPPED.get(ctx.qualname(call.func) or "")


_METHODS = {
    "item": "`.item()` turns a tensor into a Python number, which torch.compile does not trace "
            "(unless `capture_scalar_outputs`)",
    "tolist": "`.tolist()` copies a tensor into a Python list, which torch.compile does not trace",
}
