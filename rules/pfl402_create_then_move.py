from __future__ import annotations

from typing import Iterator, List, Optional

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl401_alloc_in_loop import DETERMINISTIC_FACTORIES, RANDOM_FACTORIES
from perflsp.rules.rule import FixSpec, Invalid, Report, Rule
from perflsp.rules.walk import Frame

# What code calls the device it moves to when the value itself is unknown.
_DEVICE_WORDS = ("device", "dev", "gpu", "rank")
_NO_SPACE = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def _names_device(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """`expr` names a device other than the CPU: one `ctx.device_type` knows ("cuda:0",
    `torch.device(...)`, an index), `x.device`, or an unknown value named like one (`device`,
    `self.device`, `local_rank`). A dtype (`torch.float16`, `dtype`) is not a device."""
    device = ctx.device_type(expr, frame)
    if device is not None:
        return device != "cpu"
    name = (ctx.last_name(expr) or "").lower()
    return bool(name) and ctx.qualname(expr) is None and (name.endswith(_DEVICE_WORDS) or name.startswith(_DEVICE_WORDS))


def moves_to_device(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """`.cuda(...)`, or a `.to(...)` that names a device (not one that only changes the dtype)."""
    method = ctx.method_name(call)
    if method == "cuda":
        return True
    device = ctx.argument(call, "device", 0) if method == "to" else None
    return device is not None and _names_device(ctx, device.value, frame)


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(name), value=value, equal=_NO_SPACE)


def _with_kwarg(args: List[cst.Arg], name: str, value: cst.BaseExpression) -> List[cst.Arg]:
    """`args` with keyword `name` set to `value`, replacing an existing one in place."""
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            return args[:i] + [arg.with_changes(value=value)] + args[i + 1:]
    return args + [_kwarg(name, value)]


class CreateThenMove(Rule):
    code = "PFL402"
    name = "create-then-move"
    summary = "A tensor built on the CPU and then moved with `.cuda()` / `.to(device)` is built twice"
    why = (
        "`torch.zeros(n).cuda()` allocates and fills the tensor in host memory, then allocates it "
        "again on the GPU and copies it over: a host allocation, a CPU fill and a host-to-device "
        "copy that a factory called with `device=` skips entirely, because it allocates and fills "
        "the tensor on the GPU directly. The copy from pageable memory also blocks the host. "
        "Passing `device=` is unsafe for `torch.rand*` (the GPU's random number generator yields "
        "other values than the CPU's for the same seed), when a dtype moves into the factory too "
        "(`arange`/`linspace` then compute in that dtype) and with `requires_grad=True` (the result "
        "becomes a leaf that gets its own `.grad` instead of passing gradients back to the CPU tensor)."
    )
    how_to_fix = "Pass the device to the factory: `torch.zeros(n, device=device)`."
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 3 times in 6 decided findings: host-side creation was "
        "sometimes required (a CPU random generator, numpy output)."
    )
    fix_safety = "safe/unsafe"
    valid = [
        "import torch\n\ndevice = torch.device(\"cuda\")\nmask = torch.ones(8, 8, dtype=torch.bool, device=device)\n",
        # Only the dtype changes.
        "import torch\n\nscale = torch.tensor([0.5, 2.0]).to(torch.float16)\n",
        "import torch\n\n# perflsp: hot\ndef embed(ids, dtype):\n    return torch.arange(ids.shape[-1]).to(dtype)\n",
    ]
    example_run = (
        "causal_mask(4, device)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n# perflsp: hot\ndef causal_mask(seq_len, device):\n"
            "    return torch.ones(seq_len, seq_len, dtype=torch.bool).to(device).tril()\n",
            flagged="torch.ones(seq_len, seq_len, dtype=torch.bool).to(device)",
            fixed="import torch\n\n# perflsp: hot\ndef causal_mask(seq_len, device):\n"
            "    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()\n",
        ),
        Invalid(
            "import torch as th\n\nfor batch in loader:\n    positions = th.arange(512).cuda(non_blocking=True)\n",
            flagged="th.arange(512).cuda(non_blocking=True)",
            fixed="import torch as th\n\nfor batch in loader:\n    positions = th.arange(512, device=\"cuda\")\n",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef sample_noise(batch, dim, rank):\n    return torch.randn(batch, dim).to(f\"cuda:{rank}\")\n",
            flagged="torch.randn(batch, dim).to(f\"cuda:{rank}\")",
            fixed="import torch\n\n# perflsp: hot\ndef sample_noise(batch, dim, rank):\n    return torch.randn(batch, dim, device=f\"cuda:{rank}\")\n",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            method = ctx.method_name(call)
            if method not in ("to", "cuda"):
                continue
            factory = call.func.value
            if not isinstance(factory, cst.Call):
                continue
            qualname = ctx.qualname(factory.func)
            if qualname not in DETERMINISTIC_FACTORIES and qualname not in RANDOM_FACTORIES:
                continue
            if not moves_to_device(ctx, call, frame):
                continue
            yield self.report(
                call, frame,
                f"`{ctx.code(factory)}` is built in host memory and then copied to the device by "
                f"`.{method}(...)`; pass `device=` to the factory to create it there directly",
                fix=self._fix(ctx, call, factory, qualname in RANDOM_FACTORIES),
            )

    def _fix(self, ctx: ModuleContext, call: cst.Call, factory: cst.Call, random: bool) -> Optional[FixSpec]:
        args = list(factory.args)
        unsafe = random or ctx.keyword(factory, "requires_grad") is not None
        if ctx.method_name(call) == "cuda":
            if any(a.keyword is None or a.keyword.value != "non_blocking" for a in call.args):
                return None  # `.cuda(index)`: leave the spelling of the device to the user
            args = _with_kwarg(args, "device", cst.SimpleString('"cuda"'))
        else:
            positional = ctx.positional(call)
            named = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            if len(positional) > 2 or len(positional) + len(named) < len(call.args) or set(named) - {"device", "dtype", "non_blocking"}:
                return None  # `copy=`, `memory_format=`, `*args`: no factory equivalent
            device = positional[0].value if positional else named.get("device")
            dtype = positional[1].value if len(positional) == 2 else named.get("dtype")
            args = _with_kwarg(args, "device", device)  # type: ignore[arg-type]
            if dtype is not None:
                args = _with_kwarg(args, "dtype", dtype)
                unsafe = True
        new = factory.with_changes(args=args)
        applicability = "unsafe" if unsafe else "safe"
        return self.replace("Pass `device=` to the factory", applicability, (call, new))
