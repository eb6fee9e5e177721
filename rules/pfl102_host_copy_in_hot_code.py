from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.devices import on_host, to_device_arg
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

# Conversions that consume a host copy: `.cpu()` right before them is reported with them, once.
_TO_PYTHON = frozenset({"numpy", "tolist"})


class HostCopyInHotCode(Rule):
    code = "PFL102"
    name = "host-copy-in-hot-code"
    summary = "`.cpu()`, `.numpy()`, `.tolist()` or `.to(\"cpu\")` in hot code synchronizes with the GPU"
    why = (
        "Copying a CUDA tensor to the host is a blocking device-to-host copy: the Python thread waits "
        "until every kernel queued before the copy has finished, then for the transfer itself. Done "
        "on every step, it drains the GPU's queue each time, so the host can no longer run ahead and "
        "queue the next step's kernels while the current ones execute. `.tolist()` and `.numpy()` "
        "add a conversion of every element into Python or NumPy objects on top. Tensors known to live "
        "on the CPU already (made there, or built by DataLoader workers) copy nothing and are not reported. "
        "Copies back to back (in one statement, in statements that follow each other, or in an `if` "
        "test and first in its body) wait once: they are one finding, at the first, naming the others."
    )
    how_to_fix = (
        "Keep results on the device inside the loop (accumulate with `torch.cat`/`+=` on device tensors, "
        "or preallocate a device buffer and write into it) and copy to the host once, after the loop or "
        "every N steps. When the value must reach the host each step, copy it with "
        "`.to(\"cpu\", non_blocking=True)` into pinned memory and read it only after a later "
        "synchronization point."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 1 time in 8 decided findings: most host copies it "
        "reported are required (decoding generated tokens, numpy or scipy APIs, hashing, MPS "
        "workarounds)."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "\n"
        "@torch.no_grad()\n"
        "def predict(model, loader):\n"
        "    preds = []\n"
        "    for x, _ in loader:\n"
        "        logits = model(x.cuda(non_blocking=True))\n"
        "        preds.append(logits.argmax(dim=1))\n"
        "    return torch.cat(preds).cpu().numpy()\n",
        "import torch\n\n\n@torch.no_grad()\ndef predict(model, loader):\n"
        "    preds = []\n"
        "    for x, _ in loader:\n"
        "        preds.append(model(x).argmax(dim=1))\n"
        "    return torch.cat(preds).cpu().numpy()\n",
        "import numpy as np\n\n\ndef summarize(batches):\n"
        "    rows = []\n"
        "    for batch in batches:\n"
        "        arr = np.asarray(batch, dtype=np.float32)\n"
        "        rows.append(arr.mean(axis=0).tolist())\n"
        "    return rows\n",
        # `.numpy()` only works on host tensors: these batches have not been to the GPU yet.
        "import torch\n\n\ndef log_inputs(loader, writer):\n"
        "    for step, (images, _) in enumerate(loader):\n"
        "        writer.add_images(\"inputs\", images.numpy(), step)\n",
        # A schedule made on the CPU: converting it waits for no GPU.
        "import torch\n\n\ndef stage_drop_rates(depths, rate):\n"
        "    total = torch.linspace(0, rate, sum(depths), device=\"cpu\")\n"
        "    return [x.tolist() for x in total.split(depths)]\n",
        # An asynchronous copy into pinned memory does not wait for the GPU.
        "import torch\n\n\ndef train(model, loader, opt, losses):\n"
        "    for x, y in loader:\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        loss.backward()\n        opt.step()\n"
        "        losses.append(loss.detach().to(\"cpu\", non_blocking=True))\n",
    ]
    example_run = (
        "predict(torch.nn.Linear(8, 3).cuda(), [(torch.randn(4, 8), None)] * 3)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef predict(model, loader):\n"
            "    preds = []\n"
            "    for x, _ in loader:\n"
            "        logits = model(x.cuda(non_blocking=True))\n"
            "        preds.extend(logits.argmax(dim=1).cpu().numpy())\n"
            "    return preds\n",
            flagged="logits.argmax(dim=1).cpu().numpy()",
        ),
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt, history):\n"
            "    for x, y in loader:\n"
            "        out = model(x)\n"
            "        loss = torch.nn.functional.mse_loss(out, y)\n"
            "        loss.backward()\n        opt.step()\n"
            "        history.append(out.detach().to(\"cpu\"))\n",
            flagged="out.detach().to(\"cpu\")",
        ),
        Invalid(
            "import torch\n\n\nclass Tagger(torch.nn.Module):\n"
            "    def __init__(self, vocab, dim):\n"
            "        super().__init__()\n"
            "        self.vocab = vocab\n"
            "        self.proj = torch.nn.Linear(dim, len(vocab))\n\n"
            "    def forward(self, tokens):\n"
            "        scores = self.proj(tokens)\n"
            "        return [self.vocab[i] for i in scores.argmax(-1).tolist()]\n",
            flagged="scores.argmax(-1).tolist()",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        copies = {}
        for call, frame in ctx.nodes(cst.Call):
            method = ctx.method_name(call)
            if method not in ("cpu", "numpy", "tolist", "to"):
                continue
            if method in _TO_PYTHON:
                if not _converts_tensor(ctx, call, frame):
                    continue
            elif not _host_copy(ctx, call, frame) or _consumed_by_conversion(ctx, call):
                continue
            copies[call] = frame
        # Copies back to back wait once: one finding at the first, naming the others.
        for first, *rest in ctx.back_to_back(list(copies)):
            yield self.report(
                first, copies[first],
                f"`{ctx.code(first)}` copies to the host {{where}}: the host waits until the GPU has run "
                "everything queued before it; keep the values on the device and copy them once after the "
                f"loop or every N steps{ctx.waiting_after(rest)}",
            )


def _host_copy(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """`x.cpu()` or a blocking `x.to("cpu")` on something that may be a tensor."""
    if ctx.method_name(call) == "to":
        target = to_device_arg(ctx, call)
        if target is None or ctx.device_type(target.value, frame) != "cpu":
            return False
        flag = ctx.keyword(call, "non_blocking")
        if flag is not None and ctx.literal(flag.value) is not False:
            return False  # an asynchronous copy, read after a later synchronization point
    receiver = call.func.value  # type: ignore[attr-defined]
    # `.cpu()` exists only on tensors and modules, so unknown receivers count.
    return (ctx.kind(receiver, frame) not in (NUMPY, PYTHON) and not ctx.is_module_like(receiver, frame)
            and not on_host(ctx, receiver, frame))


def _converts_tensor(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """`.numpy()` / `.tolist()` that reads device memory: right after a host copy, `.tolist()` on a
    tensor, or `.numpy(force=True)`. A plain `.numpy()` only works on host tensors (it raises on
    CUDA ones), so the copy it needs happened elsewhere and is reported there."""
    receiver = call.func.value  # type: ignore[attr-defined]
    if isinstance(receiver, cst.Call) and ctx.method_name(receiver) in ("cpu", "to") and _host_copy(ctx, receiver, frame):
        return True
    if ctx.method_name(call) == "numpy":
        force = ctx.keyword(call, "force")
        return (force is not None and ctx.literal(force.value) is True and ctx.kind(receiver, frame) not in (NUMPY, PYTHON)
                and not on_host(ctx, receiver, frame))
    # Lists, arrays and Series have `.tolist()` too; a host copy made earlier was reported there.
    return ctx.is_tensor(receiver, frame) and not on_host(ctx, receiver, frame)


def _consumed_by_conversion(ctx: ModuleContext, call: cst.Call) -> bool:
    """`x.cpu()` in `x.cpu().numpy()`: the conversion's finding covers the copy."""
    attribute = ctx.parent(call)
    outer = ctx.parent(attribute) if isinstance(attribute, cst.Attribute) else None
    return isinstance(outer, cst.Call) and outer.func is attribute and ctx.method_name(outer) in _TO_PYTHON
