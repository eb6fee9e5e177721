from __future__ import annotations

from typing import Iterator, Optional, Tuple

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

# Names that hold a CUDA device or device index in training scripts (`.to(local_rank)`).
_DEVICE_WORDS = ("device", "rank", "gpu")
# Positions in `DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
# collate_fn, pin_memory, ...)`.
NUM_WORKERS = 5
PIN_MEMORY = 7


def dataloader_calls(ctx: ModuleContext) -> Iterator[Tuple[cst.Call, Frame]]:
    """`DataLoader(...)` calls whose arguments are all visible (no `*args`/`**kwargs`)."""
    for call, frame in ctx.nodes(cst.Call):
        if ctx.last_name(call.func) != "DataLoader" or not (ctx.qualname(call.func) or "").endswith(".DataLoader"):
            continue
        if any(arg.star for arg in call.args):
            continue
        yield call, frame


def dataloader_arg(ctx: ModuleContext, call: cst.Call, name: str, position: int) -> Optional[cst.BaseExpression]:
    arg = ctx.argument(call, name, position)
    return arg.value if arg is not None else None


def _tensor_dataset(ctx: ModuleContext, call: cst.Call, frame: Frame) -> Optional[cst.Call]:
    """The `TensorDataset(...)` call the loader reads, directly or through a name bound once."""
    dataset = dataloader_arg(ctx, call, "dataset", 0)
    if isinstance(dataset, cst.Name):
        bindings = ctx.bindings_of(dataset.value, frame)
        dataset = bindings[0].value if len(bindings) == 1 and bindings[0].how == "assign" else None
    if isinstance(dataset, cst.Call) and (ctx.qualname(dataset.func) or "").endswith(".TensorDataset"):
        return dataset
    return None


def dataset_on_device(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """The loader reads a `TensorDataset` of tensors already on the GPU (they cannot be pinned or
    shared with worker processes)."""
    dataset = _tensor_dataset(ctx, call, frame)
    return dataset is not None and any(on_device(ctx, arg.value, frame) for arg in dataset.args)


def on_device(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """`expr` is moved to or created on the GPU (`t.cuda()`, `t.to(device)`, `torch.randn(..., device="cuda")`)."""
    if isinstance(expr, cst.Name):
        return any(b.how == "assign" and isinstance(b.value, cst.Call) and on_device(ctx, b.value, b.frame)
                   for b in ctx.bindings_of(expr.value, frame))
    if not isinstance(expr, cst.Call):
        return False
    method = ctx.method_name(expr)
    if method == "cuda":
        return True
    if method == "to":
        target = ctx.argument(expr, "device", 0)
        return target is not None and _device_like(ctx, target.value, frame)
    device = ctx.keyword(expr, "device")
    return device is not None and _cuda(ctx, device.value, frame)


def _cuda(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, depth: int = 0) -> bool:
    """Certainly a CUDA device: `"cuda:0"`, `torch.device("cuda" if ok else "cpu")`, or a name bound to one."""
    value = ctx.literal(expr)
    if isinstance(value, str):
        return value.startswith("cuda")
    if depth > 3:  # names bound to each other in a cycle
        return False
    if isinstance(expr, cst.IfExp):
        return _cuda(ctx, expr.body, frame, depth + 1) or _cuda(ctx, expr.orelse, frame, depth + 1)
    if isinstance(expr, cst.Call):
        args = ctx.positional(expr)
        return ctx.qualname(expr.func) == "torch.device" and bool(args) and _cuda(ctx, args[0].value, frame, depth + 1)
    if isinstance(expr, cst.Name):
        return any(b.how == "assign" and b.value is not None and _cuda(ctx, b.value, b.frame, depth + 1)  # type: ignore[arg-type]
                   for b in ctx.bindings_of(expr.value, frame))
    return False


def _device_like(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """A target of `.to(...)` that names the training device: `"cuda"`, `device`, `args.device`, `local_rank`."""
    if _cuda(ctx, expr, frame):
        return True
    # `.to(x.device)` follows another tensor (device-agnostic code), it does not pick the GPU.
    if isinstance(expr, cst.Attribute) and ctx.is_tensor(expr.value, frame):
        return False
    name = (ctx.last_name(expr) or "").lower()
    if not any(word in name for word in _DEVICE_WORDS):
        return False
    if isinstance(expr, cst.Name):
        # `device = "cpu"` wherever it is bound: a CPU-only script.
        literals = [ctx.literal(b.value) for b in ctx.bindings_of(expr.value, frame)  # type: ignore[arg-type]
                    if b.how == "assign" and b.value is not None]
        if literals and all(isinstance(v, str) for v in literals):
            return False
    return True


class DataloaderWorkers(Rule):
    code = "PFL601"
    name = "dataloader-workers"
    summary = "`DataLoader` without worker processes loads and collates batches in the training loop"
    why = (
        "With `num_workers=0` (the default) the `DataLoader` runs `__getitem__`, decoding, "
        "augmentation and `collate_fn` in the process that iterates it, when the loop asks for the "
        "next batch. Nothing is prepared ahead: in a training loop every step first spends that CPU "
        "time while the GPU sits idle, and only then queues its kernels. Worker processes load the next batches in "
        "parallel with the step (`prefetch_factor` batches each), so the GPU finds one ready."
    )
    how_to_fix = (
        "Pass `num_workers=N` (start near the number of CPU cores per GPU, e.g. 4-8) and "
        "`persistent_workers=True` so the workers survive between epochs; make it configurable "
        "(`num_workers=args.workers`) if the code also runs on small machines."
    )
    scope = "setup"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) none of 10 decided findings was a real cost (12 more were judged "
        "minor): pre-tokenized data, loaders read once, datasets that return CUDA tensors (where "
        "workers would break)."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed (the page runs it: no torchvision).
        "import torch\n\n\ndef build(dataset, workers=8):\n"
        "    return torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=workers,\n"
        "                                       persistent_workers=True, drop_last=True)\n",
        "import torch\nfrom torch.utils.data import DataLoader\nfrom torchvision import datasets, transforms\n\n"
        "train_set = datasets.ImageFolder(\"data/train\", transform=transforms.ToTensor())\n"
        "loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8, persistent_workers=True)\n",
        "import torch.utils.data as data\n\n\ndef make_loader(dataset, args):\n"
        "    return data.DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)\n",
        "from torch.utils.data import DataLoader\n\n\ndef make_loader(dataset, **loader_kwargs):\n"
        "    return DataLoader(dataset, shuffle=True, **loader_kwargs)\n",
        # Worker processes cannot use CUDA tensors: a dataset already on the GPU stays in-process.
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "x = torch.randn(1024, 16, device=\"cuda\")\ny = torch.randint(0, 2, (1024,)).cuda()\n"
        "loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)\n",
        "class DataLoader:\n    def __init__(self, items):\n        self.items = items\n\n\nloader = DataLoader([1, 2, 3])\n",
    ]
    example_run = "build(torch.utils.data.TensorDataset(torch.randn(64, 8)))\n"
    invalid = [
        Invalid(
            "import torch\n\n\ndef build(dataset):\n"
            "    return torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=0, drop_last=True)\n",
            flagged="torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=0, drop_last=True)",
        ),
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\nfrom torchvision import datasets, transforms\n\n"
            "train_set = datasets.ImageFolder(\"data/train\", transform=transforms.ToTensor())\n"
            "loader = DataLoader(train_set, batch_size=64, shuffle=True)\n",
            flagged="DataLoader(train_set, batch_size=64, shuffle=True)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in dataloader_calls(ctx):
            workers = dataloader_arg(ctx, call, "num_workers", NUM_WORKERS)
            if workers is not None and ctx.literal(workers) != 0:
                continue
            if dataset_on_device(ctx, call, frame):
                continue
            how = "with `num_workers=0`" if workers is not None else "without `num_workers`"
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` {how} loads and collates each batch in this process when the loop "
                "asks for it, so the loop waits for every batch; pass `num_workers=N` so worker "
                "processes prepare the next batches while the loop runs",
            )
