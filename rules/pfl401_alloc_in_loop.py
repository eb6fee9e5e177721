from __future__ import annotations

from typing import Dict, Iterator, Optional, Set, Tuple

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

# Factories whose result depends only on their arguments: built from invariant arguments, each
# iteration makes the very same tensor again.
DETERMINISTIC_FACTORIES = frozenset(
    "torch." + name for name in "tensor zeros ones full empty arange eye linspace".split()
)
# Fresh values each call are the point of these, so building them in a loop is intended.
RANDOM_FACTORIES = frozenset("torch." + name for name in "rand randn randint".split())
_WORK = {
    "torch.tensor": "converts the same Python data into a new tensor",
    "torch.empty": "allocates the same tensor",
}
# Calls that keep their argument beyond the iteration.
_KEEPERS = frozenset("Parameter Buffer append extend insert register_buffer register_parameter setdefault".split())
# `x.device` / `x.dtype` do not change between iterations even when `x` is rebound.
_STABLE_ATTRS = frozenset({"device", "dtype"})


def target_key(expr: cst.BaseExpression) -> Optional[str]:
    """`w`, `self.w`, `p.grad`: a dotted name for a plain name or attribute chain, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = target_key(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def mutated_in(ctx: ModuleContext, loop: cst.CSTNode, cache: Dict[cst.CSTNode, Set[str]]) -> Set[str]:
    """Dotted names whose tensor the body of `loop` (a For or While) changes in place, or that it
    rebinds as attributes: `w += 1`, `w[i] = v`, `w.copy_(v)`, `out=w`, `self.w = v`
    (`w.data.copy_(v)` counts for `w` too).

    Plain-name rebinding is `ctx.assigned_in`'s job: rebinding a name does not touch the tensor
    it named before, while these all change the tensor itself.
    """
    found = cache.get(loop)
    if found is not None:
        return found
    keys = []
    for node in ctx.descendants(loop.body):  # type: ignore[attr-defined]
        if isinstance(node, cst.AugAssign):
            keys.append(target_key(node.target))
        elif isinstance(node, cst.AssignTarget):
            target = node.target
            if isinstance(target, cst.Subscript):
                keys.append(target_key(target.value))
            elif isinstance(target, cst.Attribute):
                keys.append(target_key(target))
        elif isinstance(node, cst.Call):
            func = node.func
            last = ctx.last_name(func) or ""
            if last.endswith("_") and not last.startswith("_"):
                if ctx.qualname(func) is None and isinstance(func, cst.Attribute):
                    keys.append(target_key(func.value))  # `w.add_(v)`
                elif node.args:
                    keys.append(target_key(node.args[0].value))  # `nn.init.zeros_(w)`
            out = ctx.keyword(node, "out")
            if out is not None:
                keys.append(target_key(out.value))
    found = set()
    for key in keys:
        while key:
            found.add(key)
            key = key.rpartition(".")[0]
    cache[loop] = found
    return found


def calls_in_loops(ctx: ModuleContext) -> Iterator[Tuple[cst.Call, Frame, cst.CSTNode]]:
    """(call, frame, innermost loop) for each call in the body of a `for`/`while` statement;
    comprehensions are left out: their items are rarely hoistable."""
    for call, frame in ctx.nodes(cst.Call):
        loop = frame.innermost_loop
        if loop is not None and not isinstance(loop, cst.CompFor):
            yield call, frame, loop


def runs_every_iteration(ctx: ModuleContext, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
    """False when `node` sits under a condition that changes between iterations of `loop`
    (`if buf is None:` lazy initialisation, `if step % 100 == 0:` periodic work)."""
    current = ctx.parent(node)
    while current is not None and current is not loop:
        if isinstance(current, (cst.If, cst.IfExp)) and not ctx.is_invariant(current.test, loop):
            return False
        current = ctx.parent(current)
    return True


def call_is_invariant(ctx: ModuleContext, call: cst.Call, loop: cst.CSTNode) -> bool:
    """Every argument of `call` (and the callee) reads nothing that `loop` rebinds; a keyword
    given as `x.device` or `x.dtype` counts as invariant."""
    if not ctx.is_invariant(call.func, loop):
        return False
    for arg in call.args:
        value = arg.value
        if arg.keyword is not None and isinstance(value, cst.Attribute) and value.attr.value in _STABLE_ATTRS:
            continue
        if not ctx.is_invariant(value, loop):
            return False
    return True


def _keeps(ctx: ModuleContext, call: cst.Call) -> bool:
    """`Parameter(x)`, `bufs.append(x)`, `self.register_buffer(name, x)`, ...: keeps its argument."""
    return ctx.last_name(call.func) in _KEEPERS


def _stores(ctx: ModuleContext, target: cst.BaseExpression, frame: Frame) -> bool:
    """Assigning to `target` keeps the value: `self.a = v`, `d[k] = v` (but `t[i] = v` copies into `t`)."""
    if isinstance(target, cst.Subscript):
        return not ctx.is_tensor(target.value, frame)
    return isinstance(target, cst.Attribute)


def _kept_per_iteration(ctx: ModuleContext, call: cst.Call, frame: Frame, loop: cst.CSTNode,
                        mutated: Dict[cst.CSTNode, Set[str]]) -> bool:
    """The loop fills or keeps each iteration's tensor, so hoisting it would share one tensor:
    filled in place, wrapped in a Parameter, appended, or stored in an attribute or container."""
    parent = ctx.parent(call)
    if isinstance(parent, cst.Arg):
        outer = ctx.parent(parent)
        return isinstance(outer, cst.Call) and _keeps(ctx, outer)
    if not isinstance(parent, cst.Assign):
        return False
    if any(_stores(ctx, t.target, frame) for t in parent.targets):
        return True
    names = {t.target.value for t in parent.targets if isinstance(t.target, cst.Name)}
    if names & mutated_in(ctx, loop, mutated):
        return True
    for node in ctx.descendants(loop.body):  # type: ignore[attr-defined]
        if isinstance(node, cst.Call) and _keeps(ctx, node):
            if any(isinstance(a.value, cst.Name) and a.value.value in names for a in node.args):
                return True
        elif isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value in names:
            if any(_stores(ctx, t.target, frame) for t in node.targets):
                return True
    return False


def _starts_accumulator(ctx: ModuleContext, call: cst.Call, loop: cst.CSTNode) -> bool:
    """`acc = torch.empty(0)` that a loop nested in `loop` then grows by rebinding it from itself
    (`acc = torch.cat([acc, x])`, `acc = acc + x`): a reset per iteration, not a rebuilt constant."""
    parent = ctx.parent(call)
    if not isinstance(parent, cst.Assign):
        return False
    names = {t.target.value for t in parent.targets if isinstance(t.target, cst.Name)}
    for inner in ctx.descendants(loop.body):  # type: ignore[attr-defined]
        if not isinstance(inner, (cst.For, cst.While)):
            continue
        for node in ctx.descendants(inner.body):
            if (isinstance(node, cst.Assign) and names & {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
                    and names & ctx.names_in(node.value)):
                return True
    return False


class AllocInLoop(Rule):
    code = "PFL401"
    name = "alloc-in-loop"
    summary = "A tensor factory with loop-invariant arguments rebuilds the same tensor on every iteration"
    why = (
        "Each call allocates a new tensor and launches a kernel to fill it; `torch.tensor(data)` "
        "also converts a Python sequence element by element and, with `device=`, copies it from "
        "the host to the GPU. When every argument is the same on every iteration the result is "
        "the same tensor every time, so all of that work after the first iteration is wasted, "
        "and the host-side cost delays the queueing of the step's real kernels."
    )
    how_to_fix = (
        "Create the tensor once before the loop and reuse it. A buffer that the loop fills in "
        "place is left alone by this rule; if you hoist one, reset it with `.zero_()`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) none of 3 decided findings was a real cost (3 more were judged minor): "
        "the tensors are tiny or must be fresh on each iteration."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "@torch.no_grad()\n"
        "def generate(model, tokens, steps, block):\n"
        "    mask = torch.ones(block, block, dtype=torch.bool, device=tokens.device).tril()\n"
        "    for _ in range(steps):\n"
        "        logits = model(tokens[:, -block:], mask)\n"
        "        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)\n"
        "    return tokens\n",
        "import torch\nimport torch.nn.functional as F\n\ndef train(model, loader, opt, device):\n"
        "    weight = torch.tensor([1.0, 2.0, 0.5], device=device)\n"
        "    for x, y in loader:\n"
        "        loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=weight)\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        # Fresh random values on every iteration are the point.
        "import torch\n\ndef augment(loader):\n    for x, _ in loader:\n"
        "        noise = torch.randn(3, 32, 32)\n        yield x + 0.1 * noise\n",
        # The shape follows the batch.
        "import torch\n\ndef predict(model, loader):\n    for x in loader:\n"
        "        out = torch.zeros(x.shape[0], 10)\n        out += model(x)\n        yield out\n",
        # An accumulator reset per epoch and filled in place.
        "import torch\n\ndef fit(model, loader, epochs, device):\n    for epoch in range(epochs):\n"
        "        total = torch.zeros((), device=device)\n        for x, y in loader:\n"
        "            total += model(x).sum()\n        print(epoch, total.item())\n",
        # Restarted on every iteration for the inner loop to grow.
        "import torch\n\ndef gather(groups, device):\n    for group in groups:\n"
        "        seen = torch.empty(0, dtype=torch.long, device=device)\n        for ids in group:\n"
        "            seen = torch.cat([seen, ids])\n        yield seen\n",
        # Lazy initialisation runs once.
        "import torch\n\ndef run(model, loader, device):\n    cache = None\n    for x in loader:\n"
        "        if cache is None:\n            cache = torch.zeros(1024, device=device)\n"
        "        model(x, cache)\n",
        # Each iteration keeps its tensor: one parameter per expert.
        "import torch\nfrom torch import nn\n\nclass Experts(nn.Module):\n    def __init__(self, n, d):\n"
        "        super().__init__()\n        self.weights = nn.ParameterList()\n        for _ in range(n):\n"
        "            self.weights.append(nn.Parameter(torch.empty(d, d)))\n",
        # One distinct tensor per element of the comprehension is intended.
        "import torch\n\ndef init_states(layers, hidden):\n"
        "    return [torch.zeros(1, hidden) for _ in range(layers)]\n",
    ]
    example_run = (
        "class LM(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embed = torch.nn.Embedding(10, 10)\n"
        "\n"
        "    def forward(self, tokens, *masks, **more_masks):\n"
        "        return self.embed(tokens)\n"
        "\n"
        "\n"
        "generate(LM().to(device), torch.zeros(2, 4, dtype=torch.long, device=device), steps=3, block=4)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef generate(model, tokens, steps, block):\n"
            "    for _ in range(steps):\n"
            "        mask = torch.ones(block, block, dtype=torch.bool, device=tokens.device).tril()\n"
            "        logits = model(tokens[:, -block:], mask)\n"
            "        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)\n"
            "    return tokens\n",
            flagged="torch.ones(block, block, dtype=torch.bool, device=tokens.device)",
        ),
        Invalid(
            "import torch\n\ndef normalize(loader):\n    for images, _ in loader:\n"
            "        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)\n        yield images - mean\n",
            flagged="torch.tensor([0.485, 0.456, 0.406])",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        mutated: Dict[cst.CSTNode, Set[str]] = {}
        for call, frame, loop in calls_in_loops(ctx):
            qualname = ctx.qualname(call.func)
            if qualname not in DETERMINISTIC_FACTORIES or not call.args:
                continue
            if not call_is_invariant(ctx, call, loop) or not runs_every_iteration(ctx, call, loop):
                continue
            if _kept_per_iteration(ctx, call, frame, loop, mutated) or _starts_accumulator(ctx, call, loop):
                continue
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` {_WORK.get(qualname, 'allocates and fills the same tensor')} on every "
                "iteration, {where}; its arguments do not change, so create it once before the loop",
            )
