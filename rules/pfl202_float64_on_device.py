from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import MODULE, NUMPY, PYTHON, ModuleContext
from perflsp.rules.devices import HOST, placement
from perflsp.rules.dtypes import DOUBLE, dtype_named, target_dtype
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

# Results consumed on the host: float64 there is ordinary CPU arithmetic, not device work.
_HOST_METHODS = frozenset({"cpu", "numpy", "tolist", "item"})


def calls_after(ctx: ModuleContext, expr: cst.BaseExpression) -> Iterator[cst.Call]:
    """The method calls chained on `expr`'s value, nearest first: `.cuda()`, then `.float()` for
    `expr.cuda().float()`."""
    node = expr
    while True:
        attr = ctx.parent(node)
        call = ctx.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is node else None
        if not isinstance(call, cst.Call) or call.func is not attr:
            return
        yield call
        node = call


def calls_before(ctx: ModuleContext, expr: cst.BaseExpression) -> Iterator[cst.Call]:
    """The method calls that produced `expr`, nearest first: `.detach()`, then `.cpu()` for
    `x.cpu().detach()`; a call of a qualified function (`torch.ones(...)`) ends the chain."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and ctx.qualname(expr.func) is None:
        yield expr
        expr = expr.func.value


def _on_host(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """Made on or moved to the CPU, or read back by it (`device="cpu"` to any function,
    `.cpu().double()`, `torch.arange(n, dtype=torch.float64)`, `.double().item()`)."""
    device = ctx.keyword(call, "device")
    if device is not None and ctx.device_type(device.value, frame) == HOST:
        return True
    return placement(ctx, call, frame) == HOST or any(ctx.method_name(c) in _HOST_METHODS for c in calls_after(ctx, call))


class Float64OnDevice(Rule):
    code = "PFL202"
    name = "float64-on-device"
    summary = "float64 tensors and models run at a fraction of float32 speed on GPUs"
    why = (
        "GPUs have far fewer float64 units than float32 ones: consumer and workstation cards run "
        "float64 at 1/32 to 1/64 of their float32 rate, and even data-centre parts at half of it. "
        "Matrix multiplies and convolutions in float64 cannot use the TF32, float16 or bfloat16 "
        "Tensor Core paths either, and autocast leaves float64 alone. Each element also takes twice "
        "the memory, bandwidth and host-to-device transfer time of float32, and one float64 "
        "operand promotes every operation it meets (`x_fp32 * w_fp64` is computed in float64)."
    )
    how_to_fix = (
        "Keep tensors and models in float32 (or lower precision under `torch.autocast`). Where a "
        "computation really needs the precision, do only that part in float64, or do it on the "
        "CPU (`.cpu().double()`)."
    )
    scope = "any"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) none of 8 decided findings was a real cost: float64 there was "
        "deliberate, on tiny tensors, or in one-off statistics."
    )
    valid = [
        "import torch\n\nmodel = torch.nn.Linear(16, 4).cuda()\nx = torch.randn(8, 16, device=\"cuda\")\ny = model(x)\n",
        # Precise metrics computed on the host.
        "import torch\n\ndef pearson(pred, target):\n    p, t = pred.detach().cpu().double(), target.detach().cpu().double()\n"
        "    p, t = p - p.mean(), t - t.mean()\n    return (p * t).sum() / (p.norm() * t.norm())\n",
        "import torch\n\nhist = torch.zeros(256, dtype=torch.float64, device=\"cpu\")\n",
        "import numpy as np\n\nweights = np.ones(10).astype(np.float64)\n",
        "import torch\n\ndef summarize(losses):\n    return torch.stack(losses).double().mean().item()\n",
        # Precomputed in float64 on the CPU, converted before it reaches the device.
        "import torch\n\n\ndef precompute_freqs(dim, end, theta=256.0):\n"
        "    with torch.device(\"cpu\"):\n"
        "        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=\"cpu\") / dim))\n"
        "        steps = torch.arange(end, device=freqs.device, dtype=torch.float64)\n"
        "        return torch.polar(torch.ones(end, dim // 2), torch.outer(steps, freqs).float())\n",
        # Made without a device: on the CPU.
        "import torch\n\n\ndef choice_weights(batch_sizes):\n"
        "    return torch.full((len(batch_sizes),), 1.0 / len(batch_sizes), dtype=torch.float64)\n",
    ]
    invalid = [
        Invalid(
            "import torch\n\nmodel = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).cuda().double()\n",
            flagged="torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).cuda().double()",
        ),
        Invalid(
            "import torch\n\ndef make_batch(features, device):\n"
            "    return torch.tensor(features, dtype=torch.float64, device=device)\n",
            flagged="torch.tensor(features, dtype=torch.float64, device=device)",
        ),
        Invalid(
            "import torch\n\ntorch.set_default_dtype(torch.float64)\nmodel = torch.nn.Linear(8, 8)\n",
            flagged="torch.set_default_dtype(torch.float64)",
        ),
        Invalid(
            "import torch\n\ndef train_step(model, x, y):\n    x = x.to(\"cuda\", torch.double)\n    return model(x) - y\n",
            flagged="x.to(\"cuda\", torch.double)",
        ),
        Invalid(
            "import torch\n\n\nclass Rope(torch.nn.Module):\n"
            "    def forward(self, x, angles):\n"
            "        rotation = torch.polar(torch.ones_like(angles), angles).to(torch.complex128)\n"
            "        return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rotation)\n",
            flagged="torch.polar(torch.ones_like(angles), angles).to(torch.complex128)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            message = self._message(ctx, call, frame)
            if message is not None:
                yield self.report(call, frame, message)

    def _message(self, ctx: ModuleContext, call: cst.Call, frame: Frame) -> Optional[str]:
        method = ctx.method_name(call)
        if ctx.qualname(call.func) == "torch.set_default_dtype":
            args = ctx.positional(call)
            if args and dtype_named(ctx, args[0].value) in DOUBLE:
                return (f"`{ctx.code(call)}` makes every floating-point tensor created afterwards float64, which "
                        "GPUs process at a fraction of float32 speed and twice the memory traffic")
            return None
        if method == "double" and not call.args:
            kind = ctx.kind(call.func.value, frame)
            if kind in (NUMPY, PYTHON) or _on_host(ctx, call, frame):
                return None
            what = "every parameter and buffer of the model" if kind == MODULE else "the tensor"
            return (f"`{ctx.code(call)}` converts {what} to float64: GPUs run float64 math at a fraction of "
                    "float32 speed, without Tensor Cores, and move twice the bytes")
        dtype = ctx.keyword(call, "dtype")
        if dtype is None and method in ("to", "type"):
            target = target_dtype(ctx, call)
            dtype = next((a for a in call.args if a.value is target), None)
        named = dtype_named(ctx, dtype.value) if dtype is not None else None
        if named not in DOUBLE:
            return None
        if method in ("to", "type") and ctx.kind(call.func.value, frame) in (NUMPY, PYTHON):
            return None
        if _on_host(ctx, call, frame):
            return None
        single = "complex64" if named == "complex128" else "float32"
        return (f"`{ctx.code(call)}` produces {named} data: GPUs run float64 math at a fraction of float32 "
                f"speed, without Tensor Cores, and move twice the bytes; use {single}, or compute it on the CPU "
                "and convert it before moving it")
