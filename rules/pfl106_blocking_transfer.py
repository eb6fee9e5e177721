from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.devices import ACCELERATOR, HOST, computed, is_accelerator, pinned, placement, to_device_arg
from perflsp.rules.rule import Invalid, Report, Rule


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
        "staged through a pinned buffer first, which is still correct but overlaps less. Tensors "
        "already on the device (moved there earlier, or computed from tensors there) copy nothing "
        "and are not reported, nor are moves to a device that may be unset (`device=None`). Transfers "
        "back to back (in one statement or in statements that follow each other) wait once: they are "
        "one finding, at the first, naming the others, whose fix makes those from pinned memory "
        "non-blocking."
    )
    how_to_fix = (
        "Load the batches into pinned memory (`DataLoader(..., pin_memory=True)` or "
        "`tensor.pin_memory()`) and pass `non_blocking=True` to `.to(device)` / `.cuda()`; the fix "
        "does that where the source is known to be pinned. Do not reuse or modify the pinned source "
        "buffer until the copy has run. Device-to-host copies are left alone: made non-blocking, a "
        "copy that the host reads right after may be read before it has landed."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 2 times in 9 decided findings: most `.to(device)` calls "
        "it reported move parameters or buffers already on the device."
    )
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
        # An EMA kept on an optional other device (often the CPU): a device-to-host copy, where
        # `non_blocking=True` would let the host read the copy before it arrives.
        "import copy\n\n\nclass ModelEma:\n"
        "    def __init__(self, model, decay=0.999, device=None):\n"
        "        self.module = copy.deepcopy(model)\n"
        "        self.decay = decay\n"
        "        self.device = device\n\n"
        "    def update(self, model):\n"
        "        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):\n"
        "            if self.device is not None:\n"
        "                model_v = model_v.to(device=self.device)\n"
        "            ema_v.copy_(self.decay * ema_v + (1 - self.decay) * model_v)\n",
        # Already on the device, `.to(device)` copies nothing.
        "import torch\n\n\ndef train(model, loader, opt, device):\n"
        "    for batch in loader:\n"
        "        tokens = batch[\"input_ids\"].to(device, non_blocking=True)\n"
        "        lengths = (tokens != 0).sum(dim=1).to(device)\n"
        "        model(tokens, lengths).loss.backward()\n        opt.step()\n",
        # Computed by tensor operations, so it lives where the inputs do: on the device.
        "import torch\nfrom transformers import Trainer\n\n\nclass PairTrainer(Trainer):\n"
        "    def compute_loss(self, model, inputs):\n"
        "        device = self.accelerator.device\n"
        "        chosen, rejected = inputs[\"completion_mask\"].sum(dim=1).chunk(2)\n"
        "        shared = torch.minimum(chosen, rejected)\n"
        "        return model(**inputs, shared=torch.cat([shared, shared]).to(device)).loss\n",
        # Outside hot code a blocking copy happens once.
        "import torch\n\nweights = torch.load(\"w.pt\").cuda()\n",
    ]
    example_run = (
        "dataset = torch.utils.data.TensorDataset(torch.randn(128, 8), torch.randint(0, 3, (128,)))\n"
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "train(model, dataset, torch.optim.SGD(model.parameters(), lr=0.1), device)\n"
    )
    invalid = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\n\n\n"
            "def train(model, dataset, opt, device):\n"
            "    loader = DataLoader(dataset, batch_size=64, pin_memory=True, num_workers=4)\n"
            "    for images, labels in loader:\n"
            "        images = images.to(device)\n"
            "        labels = labels.to(device, non_blocking=True)\n"
            "        loss = torch.nn.functional.cross_entropy(model(images), labels)\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
            flagged="images.to(device)",
            fixed="import torch\nfrom torch.utils.data import DataLoader\n\n\n"
            "def train(model, dataset, opt, device):\n"
            "    loader = DataLoader(dataset, batch_size=64, pin_memory=True, num_workers=4)\n"
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
        ),
        Invalid(
            "import lightning.pytorch as pl\nimport torch\n\n\nclass Model(pl.LightningModule):\n    def training_step(self, batch):\n"
            "        tokens = batch[\"input_ids\"].to(\"cuda:0\", non_blocking=False)\n"
            "        return self.model(tokens).loss\n",
            flagged="batch[\"input_ids\"].to(\"cuda:0\", non_blocking=False)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        transfers = {}  # call -> (frame, message, the fix's replacement or None)
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
            where = placement(ctx, receiver, frame)
            if where == ACCELERATOR or (where != HOST and computed(ctx, receiver, frame)):
                continue  # already on the device (a no-op), or a device-to-device copy
            fixed = None
            if pinned(ctx, receiver, frame):
                where = HOST
                advice = (f"`{ctx.code(receiver, 40)}` is in pinned memory, so `non_blocking=True` lets the copy "
                          "overlap with compute")
                fixed = _non_blocking(call, flag)
            else:
                advice = ("load the data into pinned memory (`DataLoader(..., pin_memory=True)`, `.pin_memory()`) "
                          "and pass `non_blocking=True`")
            copy = ("a blocking host-to-device copy {where}: the host" if where == HOST
                    else "a blocking copy to the device {where}: from host memory, the host")
            transfers[call] = (frame, f"`{ctx.code(call)}` is {copy} waits until the GPU has run everything queued "
                                      f"before it; {advice}", fixed)
        # Transfers back to back wait once: one finding at the first, naming the others; its fix
        # makes those from pinned memory non-blocking (a copy left blocking is then the wait, and
        # is reported on its own by the next check).
        for run in ctx.back_to_back(list(transfers)):
            first, *rest = run
            frame, message, _ = transfers[first]
            pairs = [(call, transfers[call][2]) for call in run if transfers[call][2] is not None]
            fix = self.replace("Add `non_blocking=True`", "safe", *pairs) if pairs else None
            yield self.report(first, frame, message + ctx.waiting_after(rest), fix=fix)


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
