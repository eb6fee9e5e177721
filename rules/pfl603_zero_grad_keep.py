from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule


class ZeroGradKeep(Rule):
    code = "PFL603"
    name = "zero-grad-keep"
    summary = "`zero_grad(set_to_none=False)` fills every gradient with zeros instead of dropping it"
    why = (
        "With `set_to_none=False` every step launches fill kernels that write zeros over all "
        "gradient buffers, and the next backward then accumulates into them (`grad += g`: read, "
        "add, write) instead of simply storing its result. The gradient memory also stays "
        "allocated between steps, raising the peak by one copy of the parameters during the "
        "forward pass. `set_to_none=True` (the default since PyTorch 2.0) skips the fill and lets "
        "backward assign fresh gradients. The fix is unsafe: code that reads `.grad` after "
        "zeroing and expects a zero tensor (`p.grad.add_(...)`, hand-written accumulation, "
        "logging gradient norms) finds `None` instead."
    )
    how_to_fix = "Call `zero_grad()` with `set_to_none=True` (or no argument on PyTorch 2.0 and later)."
    scope = "setup"
    preview = True
    tier_reason = (
        "Too little evidence: 2 findings on unseen real code (judged by hand, 2026-12-01; "
        "bench/realworld/), one right, one where a parameter server adds into the zeroed gradients."
    )
    fix_safety = "unsafe"
    valid = [
        "import torch\n\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
        "        opt.zero_grad(set_to_none=True)\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n",
        "import torch\n\n\ndef train(model, loader, opt):\n    for x, y in loader:\n        opt.zero_grad()\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n",
        "def reset(model, keep):\n    model.zero_grad(set_to_none=not keep)\n",
    ]
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8, device=device), torch.tensor([0, 1, 2, 0], device=device))] * 3\n"
        "train(model, loader, opt)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n\ndef train(model, loader, optimizer):\n    for x, y in loader:\n"
            "        optimizer.zero_grad(set_to_none=False)\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        loss.backward()\n"
            "        optimizer.step()\n",
            flagged="optimizer.zero_grad(set_to_none=False)",
            fixed="import torch\n\n\ndef train(model, loader, optimizer):\n    for x, y in loader:\n"
            "        optimizer.zero_grad(set_to_none=True)\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        loss.backward()\n"
            "        optimizer.step()\n",
        ),
        Invalid(
            "import torch\n\nmodel = torch.nn.Linear(8, 1)\nmodel.zero_grad(False)\n",
            flagged="model.zero_grad(False)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            if ctx.method_name(call) != "zero_grad":  # type: ignore[arg-type]
                continue
            arg = ctx.argument(call, "set_to_none", 0)  # type: ignore[arg-type]
            if arg is None or ctx.literal(arg.value) is not False:
                continue
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` writes zeros over every gradient each step and makes the next "
                "backward accumulate into them; `set_to_none=True` skips the fill and frees the "
                "gradients between steps",
                fix=self.replace("Set `set_to_none=True`", "unsafe", (arg.value, "True")),
            )
