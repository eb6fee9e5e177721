from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl604_debug_api_left_on import is_gradient_call
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame, FunctionInfo

_GRAD_FREE = frozenset({
    "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
})
_SET_GRAD = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                       "torch.autograd.grad_mode.set_grad_enabled"})
# Calls that return the module itself: `model.to(device).eval()` puts `model` in eval mode.
_CHAINED = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "requires_grad_"})


class _State:
    """What one function (or the module body) has done so far, in source order."""

    __slots__ = ("evaluating", "frozen", "grad_off", "segment", "training_segments", "eval_seen")

    def __init__(self) -> None:
        self.evaluating: Set[str] = set()  # receivers whose latest mode switch was `.eval()`
        self.frozen: Set[str] = set()  # `model.requires_grad_(False)`: nothing to record
        self.grad_off = False  # `torch.set_grad_enabled(False)` as a statement
        self.segment = 0  # bumped at every mode switch
        self.training_segments: Set[int] = set()  # segments that run backward / optimizer steps
        self.eval_seen = False


class EvalWithGrad(Rule):
    code = "PFL605"
    name = "eval-with-grad"
    summary = "Model called in an evaluation loop without `torch.no_grad()` / `torch.inference_mode()`"
    why = (
        "`model.eval()` only switches dropout and batch norm to their inference behaviour; it does "
        "not turn autograd off. Every forward pass in the loop still builds the backward graph and "
        "keeps every intermediate activation that backward would need alive until the output is "
        "dropped, and creates a `grad_fn` node for every op on the way: evaluation takes roughly "
        "two to three times the memory it needs (so smaller batches fit) and more time."
    )
    how_to_fix = (
        "Run the evaluation loop under `with torch.inference_mode():` (or `torch.no_grad()` when "
        "the outputs are later used in autograd), or decorate the function with "
        "`@torch.inference_mode()`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "Too little evidence: no finding in the 45 unseen repositories sampled (judged by hand, 2026-12-01; "
        "bench/realworld/) to judge it by."
    )
    valid = [
        "import torch\n\n\n@torch.inference_mode()\ndef evaluate(model, loader, device):\n    model.eval()\n    correct = 0\n"
        "    for images, labels in loader:\n        images, labels = images.to(device), labels.to(device)\n"
        "        logits = model(images)\n        correct += (logits.argmax(1) == labels).sum().item()\n"
        "    return correct / len(loader.dataset)\n",
        "import torch\n\n\ndef evaluate(model, loader):\n    model.eval()\n    total = 0.0\n"
        "    with torch.no_grad():\n        for x, y in loader:\n"
        "            total += torch.nn.functional.mse_loss(model(x), y)\n    return total\n",
        # Fine-tuning with frozen batch-norm statistics: eval mode, but gradients are wanted.
        "import torch\n\n\ndef finetune(model, loader, opt):\n    model.eval()\n    for x, y in loader:\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        opt.zero_grad()\n"
        "        loss.backward()\n        opt.step()\n",
        "import torch\n\n\ndef fit(model, train_loader, opt):\n    model.eval()\n    model.train()\n"
        "    for x, y in train_loader:\n        torch.nn.functional.mse_loss(model(x), y).backward()\n",
        "import torch\n\n\ndef predict(model, batches):\n    torch.set_grad_enabled(False)\n    model.eval()\n"
        "    return [model(x) for x in batches]\n",
    ]
    example_run = (
        "dataset = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,)))\n"
        "evaluate(torch.nn.Linear(8, 3).to(device), torch.utils.data.DataLoader(dataset, batch_size=4), device)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n\ndef evaluate(model, loader, device):\n    model.eval()\n    correct = 0\n"
            "    for images, labels in loader:\n        images, labels = images.to(device), labels.to(device)\n"
            "        logits = model(images)\n        correct += (logits.argmax(1) == labels).sum().item()\n"
            "    return correct / len(loader.dataset)\n",
            flagged="model(images)",
        ),
        Invalid(
            "import torch\n\n\ndef run(model, opt, train_loader, val_loader, epochs):\n"
            "    for epoch in range(epochs):\n        model.train()\n        for x, y in train_loader:\n"
            "            loss = torch.nn.functional.cross_entropy(model(x), y)\n            opt.zero_grad()\n"
            "            loss.backward()\n            opt.step()\n        model.eval()\n"
            "        val_loss = sum(torch.nn.functional.cross_entropy(model(x), y) for x, y in val_loader)\n"
            "        print(epoch, val_loss / len(val_loader))\n",
            flagged="model(x)",
        ),
        Invalid(
            "import torch\n\n\nclass Trainer:\n    def validate(self, loader):\n        self.model.eval()\n"
            "        losses = []\n        for batch in loader:\n            out = self.model(batch[\"input\"])\n"
            "            losses.append(self.criterion(out, batch[\"target\"]))\n"
            "        return torch.stack(losses).mean()\n",
            flagged="self.model(batch[\"input\"])",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        calls = ctx.nodes(cst.Call)
        found = self._candidates(ctx, [(c, f) for c, f in calls if f.function is not None])
        if any(frame.function is None for _, frame in calls):
            found.update(ctx.fact(_module_level_candidates, self))
        for call, _ in calls:
            if call in found:
                frame, model = found[call]
                yield self.report(
                    call, frame,
                    f"`{ctx.code(call)}` builds the autograd graph {{where}}: `{model}` is in eval mode, but "
                    "`.eval()` does not disable autograd, so the forward keeps the activations a backward "
                    "would need, for a backward that never comes; run the loop under "
                    "`torch.inference_mode()` or `torch.no_grad()`",
                )

    def _candidates(self, ctx: ModuleContext, calls: List[Tuple[cst.Call, Frame]]) -> Dict[cst.Call, Tuple[Frame, str]]:
        """The calls of an eval-mode model in a loop with autograd on, among `calls` (in source
        order), each with its frame and the model: what each function (or the module level)
        does, in order, decides."""
        states: Dict[Optional[FunctionInfo], _State] = {}
        candidates: List[Tuple[cst.Call, Frame, str, _State, int]] = []
        for call, frame in calls:
            state = states.get(frame.function)
            if state is None:
                state = states[frame.function] = _State()
            if self._track(ctx, call, state):  # type: ignore[arg-type]
                continue
            if is_gradient_call(ctx, call):  # type: ignore[arg-type]
                state.training_segments.add(state.segment)
            elif frame.loops and not state.grad_off:
                model = self._evaluated_model(ctx, call, frame, state)  # type: ignore[arg-type]
                if model is not None and not _under_grad_free(ctx, frame):
                    candidates.append((call, frame, model, state, state.segment))  # type: ignore[arg-type]
        # Backward or an optimizer step after the same `.eval()`: gradients are wanted (frozen
        # batch-norm fine-tuning, adversarial examples).
        return {call: (frame, model) for call, frame, model, state, segment in candidates
                if segment not in state.training_segments}

    @staticmethod
    def _track(ctx: ModuleContext, call: cst.Call, state: _State) -> bool:
        """Update `state` for mode switches; True when `call` was one."""
        method = ctx.method_name(call)
        # `model.eval()` takes no argument; `df.eval("a + b")` is something else.
        if method in ("eval", "train", "requires_grad_") and not (method == "eval" and call.args):
            target = _switched_model(ctx, call)
            if target is None:
                return True
            flag = ctx.literal(call.args[0].value) if call.args else None
            if method == "requires_grad_":
                if flag is False:
                    state.frozen.add(target)
                return True
            state.segment += 1
            if method == "eval" or flag is False:
                state.evaluating.add(target)
                state.eval_seen = True
            else:
                state.evaluating.discard(target)
            return True
        if (method == "set_grad_enabled" or isinstance(call.func, cst.Name)) and ctx.qualname(call.func) in _SET_GRAD:
            if not isinstance(ctx.parent(call), cst.WithItem) and call.args:
                state.grad_off = ctx.literal(call.args[0].value) is False
            return True
        return False

    @staticmethod
    def _evaluated_model(ctx: ModuleContext, call: cst.Call, frame: Frame, state: _State) -> Optional[str]:
        """The eval-mode model that `call` runs (`model(x)`, `model.forward(x)`), if any."""
        if not state.eval_seen:
            return None
        func = call.func
        if ctx.method_name(call) == "forward":
            func = func.value  # type: ignore[attr-defined]
        name = _dotted(func)
        if name is None or name in state.frozen:
            return None
        if name in state.evaluating:
            return name
        # In an evaluation function, `.eval()` may have been called on a wrapper (`model.module`)
        # or an alias; only names that say "model" count, never a loss module.
        function = frame.function
        if function is None or not _evaluation_name(function.name):
            return None
        last = name.rsplit(".", 1)[-1].lower()
        return name if "model" in last or "net" in last else None


def _module_level_candidates(ctx: ModuleContext, rule: EvalWithGrad) -> Dict[cst.Call, Tuple[Frame, str]]:
    """`EvalWithGrad._candidates` of the code outside functions, whose state runs across the
    top-level statements (`model.eval()` in one, the loop in a later one). Outside functions a
    model is taken for evaluated only after an `.eval()` or `.train(False)` there."""
    if not any(frame.function is None for _, frame in ctx.calls_named("eval", "train")):
        return {}
    return rule._candidates(ctx, ctx.walk.module_calls)


def _switched_model(ctx: ModuleContext, call: cst.Call) -> Optional[str]:
    """The model that `x.eval()` / `x.train(...)` switches: `model` in `model = Net().to(d).eval()`."""
    node: cst.CSTNode = call
    parent = ctx.parent(node)
    while isinstance(parent, cst.Attribute) and parent.value is node:
        outer = ctx.parent(parent)
        if not (isinstance(outer, cst.Call) and outer.func is parent):
            break
        node, parent = outer, ctx.parent(outer)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return _dotted(parent.targets[0].target)
    receiver = call.func.value  # type: ignore[attr-defined]
    while isinstance(receiver, cst.Call) and ctx.method_name(receiver) in _CHAINED:
        receiver = receiver.func.value  # type: ignore[attr-defined]
    return _dotted(receiver)


def _under_grad_free(ctx: ModuleContext, frame: Frame) -> bool:
    if any(_grad_free(ctx, item.item) for with_node in frame.withs for item in with_node.items):
        return True
    function = frame.function
    while function is not None:
        if any(_grad_free(ctx, d.decorator) for d in function.node.decorators):
            return True
        function = function.parent
    return False


def _grad_free(ctx: ModuleContext, expr: cst.BaseExpression) -> bool:
    """`torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)`, or the bare decorator."""
    call = expr if isinstance(expr, cst.Call) else None
    qualname = ctx.qualname(call.func if call is not None else expr)
    if qualname in _GRAD_FREE:
        mode = ctx.argument(call, "mode", 0) if call is not None else None
        return mode is None or ctx.literal(mode.value) is not False  # `inference_mode(False)` records
    if qualname in _SET_GRAD and call is not None:
        mode = ctx.argument(call, "mode", 0)
        return mode is not None and ctx.literal(mode.value) is False
    return False


def _evaluation_name(name: str) -> bool:
    lower = name.lower()
    return "eval" in lower or "valid" in lower or lower.startswith("test")


def _dotted(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None
