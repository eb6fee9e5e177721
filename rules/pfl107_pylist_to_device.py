from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl106_blocking_transfer import is_accelerator
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

_LISTS = (cst.List, cst.ListComp)


class PylistToDevice(Rule):
    code = "PFL107"
    name = "pylist-to-device"
    summary = "`torch.tensor(<python list>, device=<gpu>)` in hot code converts on the host, then copies and waits"
    why = (
        "`torch.tensor` reads a Python list one element at a time on the host (type checks and "
        "conversion per element), fills a CPU buffer, then copies it to the device. The buffer is "
        "ordinary pageable memory, so the copy is synchronous: the host waits until the stream has "
        "run everything queued before it. Once per step this serializes the host and the GPU, and "
        "the per-element conversion grows with the list."
    )
    how_to_fix = (
        "Keep the data on the device: build it with tensor ops (`torch.arange`, `torch.stack` of device "
        "tensors, indexing). A constant list becomes one tensor created once before the loop. Values "
        "that really come from the host go into a preallocated pinned buffer "
        "(`torch.empty(n, pin_memory=True)`), then `torch.as_tensor(buffer).to(device, non_blocking=True)`."
    )
    scope = "hot"
    valid = [
        "import torch\n\n\ndef train(model, loader, opt, device):\n"
        "    class_weights = torch.tensor([1.0, 4.0, 2.5], device=device)\n"
        "    for x, y in loader:\n"
        "        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y, weight=class_weights)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
        # Built on the CPU in the DataLoader workers, then copied asynchronously from pinned memory.
        "import torch\nfrom torch.utils.data import DataLoader\n\n\ndef collate(samples):\n"
        "    tokens = torch.nn.utils.rnn.pad_sequence([s[\"tokens\"] for s in samples], batch_first=True)\n"
        "    lengths = torch.tensor([len(s[\"tokens\"]) for s in samples])\n"
        "    return tokens, lengths\n\n\n"
        "def train(model, dataset, opt, device):\n"
        "    loader = DataLoader(dataset, batch_size=32, collate_fn=collate, pin_memory=True)\n"
        "    for tokens, lengths in loader:\n"
        "        loss = model(tokens.to(device, non_blocking=True), lengths.to(device, non_blocking=True))\n"
        "        loss.backward()\n"
        "        opt.step()\n",
    ]
    invalid = [
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt, device):\n"
            "    for x, y in loader:\n"
            "        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n"
            "        class_weights = torch.tensor([1.0, 4.0, 2.5], device=device)\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y, weight=class_weights)\n"
            "        loss.backward()\n"
            "        opt.step()\n",
            flagged="torch.tensor([1.0, 4.0, 2.5], device=device)",
        ),
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    for batch in loader:\n"
            "        lengths = torch.tensor([len(seq) for seq in batch[\"tokens\"]], device=\"cuda\")\n"
            "        loss = model(batch, lengths)\n"
            "        loss.backward()\n"
            "        opt.step()\n",
            flagged="torch.tensor([len(seq) for seq in batch[\"tokens\"]], device=\"cuda\")",
        ),
        Invalid(
            "import torch\n\ndevice = torch.device(\"cuda\")\n\n\n@torch.no_grad()\ndef evaluate(model, dataset, vocab):\n"
            "    for sample in dataset:\n"
            "        ids = []\n"
            "        for token in sample[\"text\"].split():\n"
            "            ids.append(vocab.get(token, 0))\n"
            "        model(torch.tensor(ids, device=device).unsqueeze(0))\n",
            flagged="torch.tensor(ids, device=device)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            if ctx.qualname(call.func) != "torch.tensor":  # type: ignore[attr-defined]
                continue
            data, device = ctx.argument(call, "data", 0), ctx.keyword(call, "device")  # type: ignore[arg-type]
            if data is None or device is None or not _python_list(ctx, data.value, frame):
                continue
            if not is_accelerator(ctx, device.value, frame):
                continue
            loop = frame.innermost_loop
            advice = ("the list is the same on every iteration: create the tensor once before the loop"
                      if loop is not None and ctx.is_invariant(data.value, loop)
                      else "keep the data on the device, or fill a preallocated pinned buffer and copy it "
                           "with `non_blocking=True`")
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` converts a Python list element by element on the host and then makes "
                f"a blocking copy to the device {{where}}; {advice}",
            )


def _python_list(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """A list display or comprehension, or a name bound only to those (`ids = []` + `ids.append`)."""
    if isinstance(expr, _LISTS):
        return True
    if not isinstance(expr, cst.Name):
        return False
    bindings = ctx.bindings_of(expr.value, frame)
    return bool(bindings) and all(b.how == "assign" and isinstance(b.value, _LISTS) for b in bindings)
