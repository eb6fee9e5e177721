from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule

_ANOMALY = (
    "turns on anomaly detection: every forward op records its Python stack trace and every "
    "backward op checks its outputs for NaN, which waits for the GPU after each op"
)
_PROFILER = "records every op with its timing and inputs, adding host work and memory to every operator"
_NVTX = "pushes and pops an NVTX range around every op, adding host work to every operator"
_GRADCHECK = (
    "runs in training code: it evaluates the function twice per input element, in float64, to "
    "build a numerical Jacobian"
)
_LAUNCH_BLOCKING = (
    "makes every kernel launch wait until the kernel has finished: the host can no longer queue "
    "work ahead of the GPU, and every launch becomes a synchronization"
)
# qualname -> (what it costs, the parameter that switches it on and its position, or None if always on)
_CALLS = {
    "torch.autograd.set_detect_anomaly": (_ANOMALY, ("mode", 0)),
    "torch.autograd.anomaly_mode.set_detect_anomaly": (_ANOMALY, ("mode", 0)),
    "torch.set_anomaly_enabled": (_ANOMALY, ("enabled", 0)),
    "torch.autograd.detect_anomaly": (_ANOMALY, None),
    "torch.autograd.anomaly_mode.detect_anomaly": (_ANOMALY, None),
    "torch.autograd.profiler.profile": (_PROFILER, ("enabled", 0)),
    "torch.autograd.profiler.emit_nvtx": (_NVTX, ("enabled", 0)),
    "torch.autograd.gradcheck": (_GRADCHECK, None),
    "torch.autograd.gradgradcheck": (_GRADCHECK, None),
    "torch.autograd.gradcheck.gradcheck": (_GRADCHECK, None),
    "torch.autograd.gradcheck.gradgradcheck": (_GRADCHECK, None),
}
_LAST_NAMES = frozenset(q.rsplit(".", 1)[1] for q in _CALLS)


def is_gradient_call(ctx: ModuleContext, call: cst.Call) -> bool:
    """A backward pass or an optimizer step: the code around it trains, it wants gradients."""
    method = ctx.method_name(call)
    if method == "backward":
        return True
    if method == "step":  # `opt.step()`, `self.optimizer.step()`, `scaler.step(opt)`
        receiver = ctx.code(call.func.value).lower()  # type: ignore[attr-defined]
        return "opt" in receiver or "scaler" in receiver
    return (method == "grad" or isinstance(call.func, cst.Name)) and ctx.qualname(call.func) in (
        "torch.autograd.grad", "torch.autograd.backward")


class DebugApiLeftOn(Rule):
    code = "PFL604"
    name = "debug-api-left-on"
    summary = "Anomaly detection, the autograd profiler, `gradcheck` or `CUDA_LAUNCH_BLOCKING=1` left on"
    why = (
        "These switches exist for debugging and they make every step slower: anomaly detection "
        "records a stack trace for every forward op and checks every backward output for NaN "
        "(a device synchronization per op); the autograd profiler and `emit_nvtx` wrap every op "
        "in timing or NVTX calls; `gradcheck` evaluates the function twice per input element in "
        "float64; `CUDA_LAUNCH_BLOCKING=1` makes every kernel launch synchronous, so the CPU can "
        "never run ahead of the GPU. Left on by accident they cost from tens of percent to "
        "several times the step time."
    )
    how_to_fix = (
        "Remove the call, or tie it to a flag that is off by default "
        "(`torch.autograd.set_detect_anomaly(args.debug)`, `profile(enabled=args.profile)`); "
        "move `gradcheck` to the tests; set `CUDA_LAUNCH_BLOCKING=1` in the shell only while "
        "debugging a CUDA error."
    )
    scope = "setup"
    preview = True
    tier_reason = (
        "Too little evidence: 2 findings on unseen real code (judged by hand, 2026-12-01; "
        "bench/realworld/), both profiler demos that profile on purpose."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import os\n"
        "\n"
        "import torch\n"
        "\n"
        'torch.autograd.set_detect_anomaly(os.environ.get("DEBUG_ANOMALY") == "1")\n'
        "\n"
        "\n"
        "def train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n",
        "import torch\n\n\ndef train(model, loader, opt, args):\n"
        "    torch.autograd.set_detect_anomaly(args.debug)\n    for x, y in loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n        opt.zero_grad()\n"
        "        loss.backward()\n        opt.step()\n",
        "import torch\nfrom torch.autograd import gradcheck\n\n\nclass Square(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n        return x * x\n\n"
        "    @staticmethod\n    def backward(ctx, grad):\n        (x,) = ctx.saved_tensors\n        return 2 * x * grad\n\n\n"
        "x = torch.randn(4, dtype=torch.double, requires_grad=True)\nassert gradcheck(Square.apply, (x,))\n",
        "import torch\n\n\ndef test_square_grad():\n    x = torch.randn(3, dtype=torch.double, requires_grad=True)\n"
        "    (x * x).sum().backward()\n    assert torch.autograd.gradcheck(lambda t: t * t, (x,))\n",
        "import os\n\nos.environ[\"CUDA_LAUNCH_BLOCKING\"] = \"0\"\nos.environ[\"CUDA_VISIBLE_DEVICES\"] = \"1\"\n",
        "import argparse\nimport torch\n\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument(\"--detect-anomaly\", action=\"store_true\")\nargs = parser.parse_args()\n"
        "if args.detect_anomaly:\n    torch.autograd.set_detect_anomaly(True)\n",
        "import torch\n\n\ndef train_step(model, x, opt, profiling):\n"
        "    with torch.autograd.profiler.profile(enabled=profiling) as prof:\n"
        "        model(x).sum().backward()\n        opt.step()\n    return prof\n",
    ]
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8, device=device), torch.tensor([0, 1, 2, 0], device=device))] * 3\n"
        "train(model, loader, opt)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\ntorch.autograd.set_detect_anomaly(True)\n\n\ndef train(model, loader, opt):\n"
            "    for x, y in loader:\n        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
            flagged="torch.autograd.set_detect_anomaly(True)",
        ),
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
            "        with torch.autograd.detect_anomaly():\n"
            "            loss = torch.nn.functional.cross_entropy(model(x), y)\n            loss.backward()\n"
            "        opt.step()\n",
            flagged="torch.autograd.detect_anomaly()",
        ),
        Invalid(
            "import os\nimport torch\n\nos.environ[\"CUDA_LAUNCH_BLOCKING\"] = \"1\"\n\n\n"
            "def train(model, loader, opt):\n    for x, y in loader:\n"
            "        model(x.cuda()).sum().backward()\n        opt.step()\n",
            flagged="os.environ[\"CUDA_LAUNCH_BLOCKING\"]",
        ),
        Invalid(
            "import torch\nfrom torch.autograd import gradcheck\n\n\ndef train(model, loader, opt):\n"
            "    for x, y in loader:\n        loss = torch.nn.functional.mse_loss(model(x), y)\n"
            "        assert gradcheck(model, (x.double().requires_grad_(),))\n"
            "        loss.backward()\n        opt.step()\n",
            flagged="gradcheck(model, (x.double().requires_grad_(),))",
        ),
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    with torch.autograd.profiler.emit_nvtx():\n        for x, y in loader:\n"
            "            model(x).sum().backward()\n            opt.step()\n",
            flagged="torch.autograd.profiler.emit_nvtx()",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            cost = self._call_cost(ctx, call)  # type: ignore[arg-type]
            if cost is None:
                continue
            if cost is _GRADCHECK:
                # A gradcheck in a test, or in a module that never trains, is what gradcheck is for.
                if frame.function is not None and frame.function.name.startswith("test"):
                    continue
                if not ctx.fact(_trains):
                    continue
            if _behind_flag(ctx, call):
                continue
            yield self.report(call, frame, f"`{ctx.code(call)}` {cost}; remove it or put it behind a debug flag")
        for assign, frame in ctx.nodes(cst.Assign):
            value = ctx.literal(assign.value)  # type: ignore[attr-defined]
            for target in assign.targets:  # type: ignore[attr-defined]
                if value == "1" and _is_launch_blocking(ctx, target.target) and not _behind_flag(ctx, assign):
                    yield self.report(
                        target.target, frame,
                        f"`{ctx.code(target.target)} = {ctx.code(assign.value)}` {_LAUNCH_BLOCKING}; "
                        "set it in the shell only while debugging a CUDA error",
                    )

    @staticmethod
    def _call_cost(ctx: ModuleContext, call: cst.Call) -> Optional[str]:
        last = ctx.last_name(call.func)
        if last not in _LAST_NAMES:
            return None
        entry = _CALLS.get(ctx.qualname(call.func) or "")
        if entry is None:
            return None
        cost, switch = entry
        if switch is not None:
            # Only a literal `True` (or the default) is certainly on; a flag is the recommended fix.
            arg = ctx.argument(call, *switch)
            if arg is None:
                if any(a.star for a in call.args) or last in ("set_detect_anomaly", "set_anomaly_enabled"):
                    return None
            elif ctx.literal(arg.value) is not True:
                return None
        return cost


def _trains(ctx: ModuleContext) -> bool:
    """The module runs a backward pass or an optimizer step somewhere."""
    return any(is_gradient_call(ctx, c) for c, _ in ctx.calls_named("backward", "step", "grad"))


def _is_launch_blocking(ctx: ModuleContext, target: cst.BaseExpression) -> bool:
    if not (isinstance(target, cst.Subscript) and len(target.slice) == 1):
        return False
    index = target.slice[0].slice
    return (isinstance(index, cst.Index) and ctx.literal(index.value) == "CUDA_LAUNCH_BLOCKING"
            and ctx.qualname(target.value) == "os.environ")


def _behind_flag(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    """Inside an `if` of its function or module (`if args.debug:`), other than `if __name__ == "__main__":`."""
    parent = ctx.parent(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(parent, cst.If) and not _is_main_guard(ctx, parent.test):
            return True
        parent = ctx.parent(parent)
    return False


def _is_main_guard(ctx: ModuleContext, test: cst.BaseExpression) -> bool:
    return (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == "__name__"
            and len(test.comparisons) == 1 and ctx.literal(test.comparisons[0].comparator) == "__main__")
