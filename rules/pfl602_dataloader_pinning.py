from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl601_dataloader_workers import PIN_MEMORY, dataloader_arg, dataloader_calls, dataset_on_device, on_device
from perflsp.rules.rule import Invalid, Report, Rule


class DataloaderPinning(Rule):
    code = "PFL602"
    name = "dataloader-pinning"
    summary = "`DataLoader` without `pin_memory=True` in code that copies batches to the GPU"
    why = (
        "The GPU's copy engine can only read page-locked (pinned) host memory. A batch in ordinary "
        "pageable memory is first copied by the CPU into a pinned staging buffer and only then "
        "transferred, so every host-to-device copy costs an extra pass over the data, and "
        "`.to(device, non_blocking=True)` cannot overlap the transfer with compute: the call "
        "returns only after the staging copy. With `pin_memory=True` the loader's pin thread "
        "places batches in pinned memory while the step runs."
    )
    how_to_fix = (
        "Pass `pin_memory=True` to the `DataLoader` and move batches with "
        "`.to(device, non_blocking=True)` so the copy overlaps with the previous step's kernels."
    )
    scope = "setup"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 1 time in 4 decided findings (10 more were judged minor): "
        "small token batches gain little from pinning, and CUDA-returning datasets cannot be "
        "pinned."
    )
    valid = [
        "import torch\nfrom torch.utils.data import DataLoader\n\n\ndef train(model, dataset, opt):\n"
        "    device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
        "    model.to(device)\n"
        "    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)\n"
        "    for x, y in loader:\n        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        opt.zero_grad()\n"
        "        loss.backward()\n        opt.step()\n",
        # Nothing in the module moves data to an accelerator: pinning would only cost locked memory.
        "from torch.utils.data import DataLoader\n\n\ndef count(dataset):\n"
        "    loader = DataLoader(dataset, batch_size=256, num_workers=4)\n"
        "    return sum(len(batch) for batch in loader)\n",
        "import torch\nfrom torch.utils.data import DataLoader\n\n\ndef make_loader(dataset, args):\n"
        "    return DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=args.cuda)\n\n\n"
        "def step(model, x):\n    return model(x.cuda())\n",
        # CUDA tensors cannot be pinned: the dataset already lives on the GPU.
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "x = torch.randn(4096, 32, device=\"cuda\")\ny = torch.randn(4096, 1).cuda()\n"
        "loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)\n",
        "import torch\nfrom torch.utils.data import DataLoader\n\ndevice = \"cpu\"\n\n\ndef run(model, dataset):\n"
        "    for x in DataLoader(dataset, batch_size=8, num_workers=2):\n        model(x.to(device))\n",
    ]
    example_run = (
        "dataset = torch.utils.data.TensorDataset(torch.randn(128, 8), torch.randint(0, 3, (128,)))\n"
        "model = torch.nn.Linear(8, 3)\n"
        "train(model, dataset, torch.optim.SGD(model.parameters(), lr=0.1))\n"
    )
    invalid = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\n\n\ndef train(model, dataset, opt):\n"
            "    device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "    model.to(device)\n"
            "    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)\n"
            "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n        opt.zero_grad()\n"
            "        loss.backward()\n        opt.step()\n",
            flagged="DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)",
        ),
        Invalid(
            "import torch\n\n\ndef evaluate(model, dataset):\n"
            "    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=8, pin_memory=False)\n"
            "    with torch.no_grad():\n        for images, labels in loader:\n"
            "            logits = model(images.cuda())\n",
            flagged="torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=8, pin_memory=False)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        loaders = [
            (call, frame) for call, frame in dataloader_calls(ctx)
            if _unpinned(ctx, call) and not dataset_on_device(ctx, call, frame)
        ]
        mover = ctx.fact(_first_move_to_accelerator) if loaders else None
        if mover is None:
            return
        for call, frame in loaders:
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` yields batches in pageable memory, and this module copies tensors to "
                f"the GPU (`{ctx.code(mover, 40)}`): a copy from pageable memory goes through a staging "
                "buffer and cannot overlap with compute; if the loader's batches are among them, pass "
                "`pin_memory=True`",
            )


def _unpinned(ctx: ModuleContext, call: cst.Call) -> bool:
    pin = dataloader_arg(ctx, call, "pin_memory", PIN_MEMORY)
    return pin is None or ctx.literal(pin) is False


def _first_move_to_accelerator(ctx: ModuleContext) -> Optional[cst.Call]:
    """The first `.cuda()`, `.to(<device>)` or `device=<cuda>` in the module: batches are probably headed there too."""
    return next((call for call, frame in ctx.walk.nodes(cst.Call) if on_device(ctx, call, frame)), None)  # type: ignore[arg-type]
