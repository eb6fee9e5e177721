from __future__ import annotations

from typing import Dict, Iterator, Set

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.pfl401_alloc_in_loop import call_is_invariant, calls_in_loops, mutated_in, runs_every_iteration, target_key
from perflsp.rules.pfl402_create_then_move import moves_to_device
from perflsp.rules.pfl601_dataloader_workers import on_device
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame


def _is_name_or_self_attr(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) or (
        isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self")


def _trained(ctx: ModuleContext, receiver: cst.BaseExpression, frame: Frame) -> bool:
    """`receiver` was made a `Parameter` or given `requires_grad=True`: an optimizer may update it
    in place on every step, and then each step's copy carries new values."""
    if isinstance(receiver, cst.Name):
        values = [b.value for b in ctx.bindings_of(receiver.value, frame) if b.value is not None]
    else:
        attrs = frame.class_info.attr_bindings if frame.class_info is not None else {}
        values = [v for v, _ in attrs.get(receiver.attr.value, [])]  # type: ignore[attr-defined]
    return any(isinstance(v, cst.Call) and (ctx.last_name(v.func) in ("Parameter", "requires_grad_")
                                            or ctx.keyword(v, "requires_grad") is not None)
               for v in values)


class InvariantTransfer(Rule):
    code = "PFL403"
    name = "invariant-transfer"
    summary = "`.to(device)` / `.cuda()` on a tensor the loop never changes copies it again on every iteration"
    why = (
        "When `w` lives in host memory, `w.to(device)` allocates device memory and copies all of "
        "`w` over PCIe each time it runs; from pageable memory the copy also blocks the host until "
        "it is done. If the loop never changes `w`, every copy after the first one moves the same "
        "bytes again, and the step waits on the bus instead of computing."
    )
    how_to_fix = "Move the tensor once before the loop (`w = w.to(device)`) and use the device copy inside it."
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) none of 6 decided findings was a real copy: the tensor was already on "
        "the device or changed on every iteration."
    )
    valid = [
        "import torch\nimport torch.nn.functional as F\n\ndef train(model, loader, opt, class_weights, device):\n"
        "    class_weights = class_weights.to(device)\n"
        "    for x, y in loader:\n"
        "        x, y = x.to(device), y.to(device)\n"
        "        loss = F.cross_entropy(model(x), y, weight=class_weights)\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        # Modules: `.to()` is a no-op once they are on the device.
        "import torch\n\ndef fit(loader, epochs, device):\n    model = torch.nn.Linear(8, 2)\n"
        "    for epoch in range(epochs):\n        model.to(device)\n        for x in loader:\n            model(x.to(device))\n",
        # A pinned staging buffer refilled on every iteration has to be copied every time.
        "import torch\n\ndef stream(chunks, device):\n    staging = torch.empty(1 << 20, pin_memory=True)\n"
        "    for chunk in chunks:\n        staging.copy_(chunk)\n        yield staging.to(device, non_blocking=True)\n",
        # A parameter the optimizer updates on the host: every step's copy is new.
        "import torch\n\ndef train(model, loader, opt, device):\n    scale = torch.nn.Parameter(torch.ones(1))\n"
        "    opt.add_param_group({\"params\": [scale]})\n    for x in loader:\n"
        "        loss = (model(x.to(device)) * scale.to(device)).sum()\n        loss.backward()\n        opt.step()\n",
        # Only the dtype changes.
        "import torch\n\ndef run(model, loader, bias):\n    for x in loader:\n        yield model(x) + bias.to(torch.float16)\n",
        # Already on the device: `.to(device)` returns the tensor itself, no copy.
        "import torch\n\ndef run(model, loader, device):\n    bias = torch.zeros(10, device=\"cuda\")\n"
        "    for x in loader:\n        yield model(x.to(device)) + bias.to(device)\n",
    ]
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8), torch.tensor([0, 1, 2, 0]))] * 3\n"
        "train(model, loader, opt, torch.tensor([1.0, 2.0, 0.5]), device)\n"
    )
    invalid = [
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\ndef train(model, loader, opt, class_weights, device):\n"
            "    for x, y in loader:\n"
            "        x, y = x.to(device), y.to(device)\n"
            "        loss = F.cross_entropy(model(x), y, weight=class_weights.to(device))\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
            flagged="class_weights.to(device)",
        ),
        Invalid(
            "import numpy as np\nimport torch\n\nclass Sampler:\n    def __init__(self, path):\n        self.codebook = torch.from_numpy(np.load(path))\n\n"
            "    def decode(self, model, z, steps):\n        for _ in range(steps):\n"
            "            z = model(z, self.codebook.cuda())\n        return z\n",
            flagged="self.codebook.cuda()",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        mutated: Dict[cst.CSTNode, Set[str]] = {}
        for call, frame, loop in calls_in_loops(ctx):
            if ctx.method_name(call) not in ("to", "cuda"):
                continue
            receiver = call.func.value
            if not _is_name_or_self_attr(receiver) or not moves_to_device(ctx, call, frame):
                continue
            if not call_is_invariant(ctx, call, loop) or not runs_every_iteration(ctx, call, loop):
                continue
            if ctx.kind(receiver, frame) in (PYTHON, NUMPY) or ctx.is_module_like(receiver, frame):
                continue  # `model.to(device)` is a no-op once the model is there
            if target_key(receiver) in mutated_in(ctx, loop, mutated) or _trained(ctx, receiver, frame):
                continue
            if on_device(ctx, receiver, frame):
                continue  # created on or moved to the GPU already: `.to()` returns it unchanged
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` copies `{ctx.code(receiver)}` to the device again on every "
                "iteration, {where}, though the loop never changes it; move it once before the loop",
            )
