from __future__ import annotations

from typing import Iterator, Set

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.devices import in_loader_worker, is_accelerator, on_host, to_device_arg
from perflsp.rules.pfl202_float64_on_device import calls_after
from perflsp.rules.pfl301_layout_copy import value_before
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

_LISTS = (cst.List, cst.ListComp)


class PylistToDevice(Rule):
    code = "PFL107"
    name = "pylist-to-device"
    summary = "`torch.tensor(<python list>)` sent to the GPU in hot code converts on the host, then copies and waits"
    why = (
        "`torch.tensor` reads a Python list one element at a time on the host (type checks and "
        "conversion per element), fills a CPU buffer, then copies it to the device. The buffer is "
        "ordinary pageable memory, so the copy is synchronous: the host waits until the stream has "
        "run everything queued before it. Once per step this serializes the host and the GPU, and "
        "the per-element conversion grows with the list. The same holds whether the device is passed "
        "as `device=` or the tensor (or what is computed from it on the CPU) is moved later with "
        "`.to(device)`."
    )
    how_to_fix = (
        "Keep the data on the device: build it with tensor ops (`torch.arange`, `torch.stack` of device "
        "tensors, indexing). A constant list becomes one tensor created once before the loop. Values "
        "that really come from the host go into a preallocated pinned buffer "
        "(`torch.empty(n, pin_memory=True)`), then `torch.as_tensor(buffer).to(device, non_blocking=True)`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) none of 4 decided findings was a real cost (10 more were judged "
        "minor): the lists are a handful of numbers."
    )
    valid = [
        "import torch\n\n\ndef train(model, loader, opt, device):\n"
        "    class_weights = torch.tensor([1.0, 4.0, 2.5], device=device)\n"
        "    for x, y in loader:\n"
        "        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y, weight=class_weights)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
        # Without a device (the parameter's default) the tensors stay on the CPU.
        "import torch\n\n\ndef batch_offsets(data_list, device=None):\n"
        "    offsets = {}\n"
        "    for key in data_list[0]:\n"
        "        sizes = [len(data[key]) for data in data_list]\n"
        "        offsets[key] = torch.tensor(sizes, device=device).cumsum(0)\n"
        "    return offsets\n",
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
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8), torch.tensor([0, 1, 2, 0]))] * 3\n"
        "train(model, loader, opt, device)\n"
    )
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
            "import torch\n\ndevice = torch.device(\"cuda\")\n\n\n# perflsp: hot\n@torch.no_grad()\ndef evaluate(model, dataset, vocab):\n"
            "    for sample in dataset:\n"
            "        ids = []\n"
            "        for token in sample[\"text\"].split():\n"
            "            ids.append(vocab.get(token, 0))\n"
            "        model(torch.tensor(ids, device=device).unsqueeze(0))\n",
            flagged="torch.tensor(ids, device=device)",
        ),
        Invalid(
            "import torch\n\n\nclass TimestepGuidanceEmbedding(torch.nn.Module):\n"
            "    def forward(self, timestep):\n"
            "        batch_size = timestep.shape[0]\n"
            "        guidance = self.guidance_proj(torch.tensor([0] * batch_size))\n"
            "        return self.time_proj(timestep) + guidance.to(timestep.device)\n",
            flagged="torch.tensor([0] * batch_size)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        reported: Set[cst.Call] = set()
        for call, frame in ctx.nodes(cst.Call):
            if ctx.qualname(call.func) == "torch.tensor":  # type: ignore[attr-defined]
                device = ctx.keyword(call, "device")  # type: ignore[arg-type]
                if device is not None and _names_device(ctx, device.value, frame) and _from_list(ctx, call, frame):  # type: ignore[arg-type]
                    yield self._report(ctx, call, frame, "then makes a blocking copy to the device")  # type: ignore[arg-type]
            elif _moves_to_device(ctx, call, frame):  # type: ignore[arg-type]
                copy = f"`.{ctx.method_name(call)}(...)` then makes a blocking copy of it to the device"  # type: ignore[arg-type]
                for made in _host_lists_in(ctx, call.func.value, frame):  # type: ignore[attr-defined]
                    if made not in reported:
                        reported.add(made)
                        yield self._report(ctx, made, frame, copy)

    def _report(self, ctx: ModuleContext, call: cst.Call, frame: Frame, copy: str) -> Report:
        data = ctx.argument(call, "data", 0).value  # type: ignore[union-attr]
        loop = frame.innermost_loop
        advice = ("the list is the same on every iteration: create the tensor once before the loop"
                  if loop is not None and ctx.is_invariant(data, loop)
                  else "build it on the device with tensor ops (`torch.zeros`, `torch.full`, `torch.arange`), "
                       "or fill a preallocated pinned buffer and copy it with `non_blocking=True`")
        return self.report(
            call, frame,
            f"`{ctx.code(call)}` converts a Python list element by element on the host and {copy} {{where}}; {advice}",
        )


def _names_device(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """An accelerator, or `t.device` of a tensor not known to be on the CPU: data made from a
    Python list is in host memory, so going where another tensor lives is a copy unless that
    tensor is in host memory too."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "device" and ctx.is_tensor(expr.value, frame):
        return not on_host(ctx, expr.value, frame) and not in_loader_worker(ctx, frame)
    return is_accelerator(ctx, expr, frame)


def _moves_to_device(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    method = ctx.method_name(call)
    if method == "cuda":
        return not in_loader_worker(ctx, frame)
    target = to_device_arg(ctx, call) if method == "to" else None
    return target is not None and _names_device(ctx, target.value, frame)


def _from_list(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    data = ctx.argument(call, "data", 0)
    return data is not None and _python_list(ctx, data.value, frame)


def _host_lists_in(ctx: ModuleContext, moved: cst.BaseExpression, frame: Frame, depth: int = 0) -> Iterator[cst.Call]:
    """The `torch.tensor(<list>)` calls without a device whose data flows into `moved`
    (`embed(torch.tensor([0] * n)).to(device)`, also through names assigned just before); one
    moved right away (`torch.tensor([...]).to(device)`) is PFL402's."""
    for node in (moved, *ctx.descendants(moved)):
        if isinstance(node, cst.Name) and depth < 2:
            value = value_before(ctx, node)
            if value is not None:
                yield from _host_lists_in(ctx, value, frame, depth + 1)
        elif (isinstance(node, cst.Call) and ctx.qualname(node.func) == "torch.tensor"
                and ctx.keyword(node, "device") is None and _from_list(ctx, node, frame)):
            first = next(calls_after(ctx, node), None)
            if first is None or not _moves_to_device(ctx, first, frame):
                yield node


def _python_list(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """A list display or comprehension, `[0] * n`, or a name bound only to those (`ids = []` + `ids.append`);
    not a literal `[]`, which has nothing to copy."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return isinstance(expr.left, _LISTS) or isinstance(expr.right, _LISTS)
    if isinstance(expr, _LISTS):
        return not (isinstance(expr, cst.List) and not expr.elements)
    if not isinstance(expr, cst.Name):
        return False
    bindings = ctx.bindings_of(expr.value, frame)
    return bool(bindings) and all(b.how == "assign" and isinstance(b.value, _LISTS) for b in bindings)
