from __future__ import annotations

from typing import Iterator, Set

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.devices import on_host
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.tensor_hints import optional_tensor_param, updated_in_place
from perflsp.rules.walk import Frame

_CONVERSIONS = frozenset({"float", "int", "bool"})
_REDUCTIONS = frozenset({"max", "min", "sum"})
# Tensor methods that reduce to a scalar tensor: `int(index.max())` reads one from the device.
_SCALAR_METHODS = frozenset("max min amax amin sum mean prod norm count_nonzero argmax argmin any all".split())
_SYNC = "the host waits until the GPU has run everything queued before it, then copies the value back"


class TensorToPython(Rule):
    code = "PFL103"
    name = "tensor-to-python"
    summary = "Using a tensor as a Python value (`if t:`, `float(t)`, `print(t)`, `max(a, b)`) in hot code synchronizes with the GPU"
    why = (
        "Python needs a real number to branch on, convert or print, so `if t:`, `while t:`, `assert t`, "
        "`t and x`, `float(t)`, `int(t)`, `bool(t)`, `print(t)` and f-strings of a tensor each copy "
        "the value from the device to the host. That copy waits until every kernel queued before it "
        "has finished: the GPU's queue drains, and the host cannot queue the next step's work while "
        "the current one runs. Builtin `max`/`min` compare tensors the same way, and `max(t)`, "
        "`sum(t)` over one tensor iterate it element by element in Python, one tiny kernel (and for "
        "`max`/`min` one synchronization) per element. `if mask.any():` and `int(index.max()) + 1` "
        "(a size read from the data) are the same copy. Tensors known to live on the CPU (made there, "
        "moved there, or built by DataLoader workers) are not reported: reading them waits for no GPU."
    )
    how_to_fix = (
        "Keep the logic on the device: `torch.where(cond, a, b)` instead of branching, "
        "`torch.maximum`/`clamp` instead of builtin `max`/`min`, `t.sum()`/`t.max()` instead of the "
        "builtins, `torch._assert_async` or checks every N steps instead of `assert`. Accumulate values "
        "for logging on the device and print them every N steps. Pass sizes the caller knows "
        "(`dim_size=`) instead of reading them with `int(index.max()) + 1`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 2 times in 4 decided findings: Python values taken for "
        "tensors and checks on CPU parameters remain."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "\n"
        "def train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        loss = torch.where(torch.isfinite(loss), loss, 0.0)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
        # Tensors made on the CPU: reading them waits for no GPU.
        "import torch\n\n\ndef sample_batch_sizes(sizes, steps):\n"
        "    weights = torch.tensor([float(s) for s in sizes])\n"
        "    for _ in range(steps):\n"
        "        choice = int(torch.multinomial(weights, 1))\n"
        "        if weights[choice] > 0:\n"
        "            yield sizes[choice]\n",
        "import torch\n\n\nclass Rope(torch.nn.Module):\n"
        "    def forward(self, x, positions):\n"
        "        with torch.device(\"cpu\"):\n"
        "            steps = torch.arange(positions.shape[-1])\n"
        "            if (steps % 2).any():\n"
        "                steps = steps // 2\n"
        "        return x * steps.to(x.device)\n",
        "import torch\n\n\ndef train(model, loader, opt, log_every=100):\n"
        "    running = torch.zeros((), device=\"cuda\")\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n"
        "        opt.step()\n"
        "        running += loss.detach()\n"
        "    print(f\"mean loss {running.item() / (step + 1):.4f}\")\n",
        "import torch\n\n\ndef train(model, loader, opt, sched):\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        lr = sched.get_last_lr()[0]\n"
        "        print(f\"step {step} lr {float(lr):.2e} batch {int(x.shape[0])}\")\n"
        "        if x.shape[0] < 2 or y is None:\n"
        "            continue\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
        "import torch\n\n\nclass Head(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.dim() != 2:\n"
        "            raise ValueError(f\"expected a 2-D input, got {x}\")\n"
        "        return torch.maximum(x, torch.zeros_like(x)).sum(dim=1)\n",
    ]
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8, device=device), torch.tensor([0, 1, 2, 0], device=device))] * 3\n"
        "train(model, loader, opt)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    for x, y in loader:\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
            "        if not torch.isfinite(loss):\n"
            "            continue\n"
            "        loss.backward()\n"
            "        opt.step()\n",
            flagged="not torch.isfinite(loss)",
        ),
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt, history):\n"
            "    for x, y in loader:\n"
            "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
            "        loss.backward()\n"
            "        opt.step()\n"
            "        history.append(float(loss))\n",
            flagged="float(loss)",
        ),
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    for step, (x, y) in enumerate(loader):\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
            "        loss.backward()\n"
            "        opt.step()\n"
            "        print(f\"step {step}: loss {loss:.4f}\")\n",
            flagged="loss",
        ),
        Invalid(
            "import torch\n\n\nclass Attention(torch.nn.Module):\n"
            "    def forward(self, scores):\n"
            "        scale = max(scores.abs().amax(), 1e-6)\n"
            "        return torch.softmax(scores / scale, dim=-1)\n",
            flagged="max(scores.abs().amax(), 1e-6)",
        ),
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef evaluate(model, loader):\n"
            "    for x, y in loader:\n"
            "        out = model(x)\n"
            "        assert (out >= 0).all() and (out <= 1).all()\n",
            flagged="(out >= 0).all()",
        ),
        Invalid(
            "import torch\nfrom typing import Optional\n\n\nclass SumAggregation(torch.nn.Module):\n"
            "    def forward(self, x: torch.Tensor, index: Optional[torch.Tensor] = None, dim_size: Optional[int] = None):\n"
            "        if dim_size is None:\n"
            "            dim_size = int(index.max()) + 1\n"
            "        return x.new_zeros(dim_size, x.size(-1)).index_add_(0, index, x)\n",
            flagged="int(index.max())",
        ),
        # A counter kept as a tensor buffer lives on the module's device.
        Invalid(
            "import torch\n\n\nclass RunningNorm(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.register_buffer(\"num_batches_tracked\", torch.tensor(0))\n\n"
            "    def forward(self, x):\n"
            "        self.num_batches_tracked.add_(1)\n"
            "        momentum = 1.0 / float(self.num_batches_tracked)\n"
            "        return x * momentum\n",
            flagged="float(self.num_batches_tracked)",
        ),
        Invalid(
            "import torch\n\n\nclass Solver(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        assert not x.isnan().any()\n"
            "        while (x.abs() > 1).any():\n"
            "            x = x / 2\n"
            "        return x\n",
            flagged="not x.isnan().any()",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        reported: Set[cst.CSTNode] = set()
        for node_type in (cst.If, cst.While, cst.Assert, cst.IfExp):
            for node, frame in ctx.nodes(node_type):
                for operand in _truth_tested(node.test):  # type: ignore[attr-defined]
                    if _on_device(ctx, _strip_not(operand), frame):
                        reported.add(operand)
                        yield self._truth_report(ctx, operand, frame)
        # `t and x` / `t or x` tests `t` even when the result is not a condition.
        for node, frame in ctx.nodes(cst.BooleanOperation):
            operand = node.left  # type: ignore[attr-defined]
            if operand not in reported and not isinstance(operand, cst.BooleanOperation) and _on_device(ctx, operand, frame):
                yield self._truth_report(ctx, operand, frame)
        for call, frame in ctx.nodes(cst.Call):
            name = ctx.builtin(call.func)  # type: ignore[attr-defined]
            if name in _CONVERSIONS or name == "print" or name in _REDUCTIONS:
                report = self._builtin_report(ctx, call, frame, name)  # type: ignore[arg-type]
                if report is not None:
                    yield report
        for part, frame in ctx.nodes(cst.FormattedStringExpression):
            expr = part.expression  # type: ignore[attr-defined]
            if _on_device(ctx, expr, frame) and not _only_on_failure(ctx, part):
                yield self.report(
                    expr, frame,
                    f"formatting tensor `{ctx.code(expr)}` into a string {{where}}: {_SYNC}; "
                    "accumulate it on the device and format it every N steps",
                )

    def _truth_report(self, ctx: ModuleContext, operand: cst.BaseExpression, frame: Frame) -> Report:
        return self.report(
            operand, frame,
            f"`{ctx.code(operand)}` tests the truth of a tensor {{where}}: {_SYNC}; keep the decision on "
            "the device (`torch.where`, masking) or check it every N steps",
        )

    def _builtin_report(self, ctx: ModuleContext, call: cst.Call, frame: Frame, name: str):
        args = [a.value for a in ctx.positional(call)]
        if name in _CONVERSIONS:
            if len(args) != 1 or not _converts_device_value(ctx, args[0], frame):
                return None
            return self.report(call, frame, _conversion_message(ctx, call, args[0], name))
        tensors = [a for a in args if _on_device(ctx, a, frame)]
        if not tensors:
            return None
        if name == "print":
            what = f"prints a tensor {{where}}: {_SYNC}; accumulate on the device and print every N steps"
        elif name == "sum" or len(args) == 1:
            if args[0] not in tensors:
                return None  # `sum(losses, torch.zeros(()))` adds tensors on the device
            per_element = "one kernel" if name == "sum" else "one comparison and synchronization"
            what = (f"iterates a tensor element by element in Python {{where}}, {per_element} per element; "
                    f"use `{ctx.code(args[0], 30)}.{name}()`")
        else:
            replacement = "torch.maximum" if name == "max" else "torch.minimum"
            what = (f"compares tensors in Python {{where}}, and each comparison is a `bool(tensor)`: {_SYNC}; "
                    f"use `{replacement}` or `clamp`")
        return self.report(call, frame, f"`{ctx.code(call)}` {what}")


def _conversion_message(ctx: ModuleContext, call: cst.Call, arg: cst.BaseExpression, name: str) -> str:
    if name == "int" and isinstance(arg, cst.Call) and ctx.method_name(arg) in _SCALAR_METHODS:
        return (f"`{ctx.code(call)}` copies a reduction of a device tensor to the host {{where}}: {_SYNC}; "
                "when it is a size the caller knows (`dim_size`, `num_nodes`), pass it in, else keep the "
                "computation on the device")
    return f"`{ctx.code(call)}` turns a tensor into a Python `{name}` {{where}}: {_SYNC}; keep it as a tensor"


def _on_device(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """A tensor not known to live in host memory (reading a CPU tensor waits for no GPU)."""
    return ctx.is_tensor(expr, frame) and not on_host(ctx, expr, frame)


def _converts_device_value(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """The argument of `float(...)`/`int(...)`/`bool(...)` is a tensor not known to be on the host:
    one the inference knows, a reduction of an optional tensor parameter (`int(index.max())`), or
    one updated in place (`self.num_batches_tracked.add_(1)`)."""
    if _on_device(ctx, expr, frame):
        return True
    if isinstance(expr, cst.Call) and ctx.method_name(expr) in _SCALAR_METHODS:
        return optional_tensor_param(ctx, expr.func.value, frame)  # type: ignore[attr-defined]
    return updated_in_place(ctx, expr, frame) and not on_host(ctx, expr, frame)


def _truth_tested(test: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The operands whose truth a condition tests: `a` and `b` in `if a and not b:`; a plain test
    (negated or not) is tested whole."""
    if isinstance(test, cst.BooleanOperation):
        yield from _truth_tested(test.left)
        yield from _truth_tested(test.right)
    elif isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and isinstance(
            _strip_not(test), cst.BooleanOperation):
        yield from _truth_tested(_strip_not(test))
    else:
        yield test


def _strip_not(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        expr = expr.expression
    return expr


def _only_on_failure(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    """Inside a `raise` or an `assert` message: evaluated only when things already went wrong."""
    child, parent = node, ctx.parent(node)
    while parent is not None and not isinstance(parent, (cst.SimpleStatementLine, cst.Module)):
        if isinstance(parent, cst.Raise) or (isinstance(parent, cst.Assert) and child is parent.msg):
            return True
        child, parent = parent, ctx.parent(parent)
    return False
