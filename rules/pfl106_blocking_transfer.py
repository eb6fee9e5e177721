from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

# Device types whose host-to-device copies can run asynchronously from pinned memory.
ACCELERATORS = frozenset({"cuda", "xpu"})
# What device-agnostic scripts call the accelerator they were written for.
_DEVICE_NAMES = frozenset({"device", "dev"})


def is_accelerator(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """`expr` names an accelerator: "cuda:0", `torch.device("cuda")`, `"cuda" if ... else "cpu"`,
    or an otherwise unknown `device`/`dev`/`self.device`."""
    device = ctx.device_type(expr, frame)
    if device is not None:
        return device in ACCELERATORS
    if isinstance(expr, cst.Name):
        return expr.value in _DEVICE_NAMES
    return (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
            and expr.value.value == "self" and expr.attr.value in _DEVICE_NAMES)


def to_device_arg(ctx: ModuleContext, call: cst.Call) -> Optional[cst.Arg]:
    """The device argument of `x.to(device, ...)` / `x.to(device=...)`."""
    return ctx.argument(call, "device", 0)


class BlockingTransfer(Rule):
    code = "PFL106"
    name = "blocking-transfer"
    summary = "`.to(device)` / `.cuda()` without `non_blocking=True` in hot code waits for the copy"
    why = (
        "A host-to-device copy without `non_blocking=True` is synchronous: PyTorch queues the copy "
        "and then blocks the Python thread until the stream has executed it, which means until every "
        "kernel queued before it has finished too. The host cannot prepare the next step while the "
        "GPU works, so loading, copying and computing run one after another instead of overlapping. "
        "With `non_blocking=True` the call returns at once and the copy is ordered on the stream like "
        "any kernel. It only becomes truly asynchronous when the source tensor is in pinned (page-"
        "locked) memory, e.g. from `DataLoader(..., pin_memory=True)`; from pageable memory it is "
        "staged through a pinned buffer first, which is still correct but overlaps less."
    )
    how_to_fix = (
        "Pass `non_blocking=True` to `.to(device)` / `.cuda()` for host-to-device copies and load the "
        "batches from pinned memory (`DataLoader(..., pin_memory=True)` or `tensor.pin_memory()`). "
        "Do not reuse or modify the pinned source buffer until the copy has run."
    )
    scope = "hot"
    fix_safety = "safe"
    valid = [
        "import torch\nfrom torch.utils.data import DataLoader\n\n\n"
        "def train(model, dataset, opt, device):\n"
        "    loader = DataLoader(dataset, batch_size=64, pin_memory=True, num_workers=4)\n"
        "    for x, y in loader:\n"
        "        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        # Moving the model is a one-time setup step, even when written inside a loop over models.
        "import torch\n\ndevice = torch.device(\"cuda\")\n\n\n"
        "def evaluate_all(models, x):\n"
        "    for model in models:\n        model.to(device)\n        model.eval()\n        model(x)\n",
        # Dtype-only conversions and copies to the CPU are not host-to-device transfers.
        "import torch\n\n\ndef train(model, loader, opt, losses):\n"
        "    for x, y in loader:\n"
        "        x = x.to(torch.float16)\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        loss.backward()\n        opt.step()\n"
        "        losses.append(loss.detach().to(\"cpu\"))\n",
        # Outside hot code a blocking copy happens once.
        "import torch\n\nweights = torch.load(\"w.pt\").cuda()\n",
    ]
    invalid = [
        Invalid(
            "import torch\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n\n\n"
            "def train(model, loader, opt):\n"
            "    for images, labels in loader:\n"
            "        images = images.to(device)\n"
            "        labels = labels.to(device, non_blocking=True)\n"
            "        loss = torch.nn.functional.cross_entropy(model(images), labels)\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
            flagged="images.to(device)",
            fixed="import torch\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n\n\n"
            "def train(model, loader, opt):\n"
            "    for images, labels in loader:\n"
            "        images = images.to(device, non_blocking=True)\n"
            "        labels = labels.to(device, non_blocking=True)\n"
            "        loss = torch.nn.functional.cross_entropy(model(images), labels)\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        ),
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef evaluate(model, loader):\n"
            "    correct = torch.zeros((), device=\"cuda\")\n"
            "    for x, y in loader:\n"
            "        logits = model(x.cuda())\n"
            "        correct += (logits.argmax(1) == y.cuda(non_blocking=True)).sum()\n"
            "    return correct\n",
            flagged="x.cuda()",
            fixed="import torch\n\n\n@torch.no_grad()\ndef evaluate(model, loader):\n"
            "    correct = torch.zeros((), device=\"cuda\")\n"
            "    for x, y in loader:\n"
            "        logits = model(x.cuda(non_blocking=True))\n"
            "        correct += (logits.argmax(1) == y.cuda(non_blocking=True)).sum()\n"
            "    return correct\n",
        ),
        Invalid(
            "import lightning.pytorch as pl\nimport torch\n\n\nclass Model(pl.LightningModule):\n    def training_step(self, batch):\n"
            "        tokens = batch[\"input_ids\"].to(\"cuda:0\", non_blocking=False)\n"
            "        return self.model(tokens).loss\n",
            flagged="batch[\"input_ids\"].to(\"cuda:0\", non_blocking=False)",
            fixed="import lightning.pytorch as pl\nimport torch\n\n\nclass Model(pl.LightningModule):\n    def training_step(self, batch):\n"
            "        tokens = batch[\"input_ids\"].to(\"cuda:0\", non_blocking=True)\n"
            "        return self.model(tokens).loss\n",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            method = ctx.method_name(call)
            if method == "cuda":
                # `.cuda(device, non_blocking)` positionally already decides.
                if len(ctx.positional(call)) > 1:
                    continue
            elif method == "to":
                # `.to(device, dtype, non_blocking)` positionally already decides.
                target = to_device_arg(ctx, call)
                if len(ctx.positional(call)) > 2 or target is None or not is_accelerator(ctx, target.value, frame):
                    continue
            else:
                continue
            flag = ctx.keyword(call, "non_blocking")
            if (flag is not None and ctx.literal(flag.value) is not False) or any(a.star == "**" for a in call.args):
                continue  # `non_blocking=True`, a deliberate `non_blocking=<expr>`, or maybe in `**kwargs`
            receiver = call.func.value  # type: ignore[attr-defined]
            if ctx.kind(receiver, frame) in (NUMPY, PYTHON) or ctx.is_module_like(receiver, frame):
                continue
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` is a blocking host-to-device copy {{where}}: the host waits until the "
                "GPU has run everything queued before it; pass `non_blocking=True` (with pinned memory) "
                "so the copy overlaps with compute",
                fix=self.replace("Add `non_blocking=True`", "safe", (call, _non_blocking(call, flag))),
            )


def _non_blocking(call: cst.Call, flag: Optional[cst.Arg]) -> cst.Call:
    true = cst.Name("True")
    if flag is not None:
        return call.with_changes(args=[a.with_changes(value=true) if a is flag else a for a in call.args])
    no_space = cst.SimpleWhitespace("")
    arg = cst.Arg(value=true, keyword=cst.Name("non_blocking"),
                  equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space))
    if not call.args:
        return call.with_changes(args=[arg])
    # A trailing comma (and the line break after it) moves to the new last argument.
    *head, last = call.args
    return call.with_changes(args=[*head, last.with_changes(comma=cst.MaybeSentinel.DEFAULT), arg.with_changes(comma=last.comma)])
