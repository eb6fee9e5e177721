from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.rule import FixSpec, Invalid, Report, Rule
from perflsp.rules.walk import Frame

_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


def _is_one(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and expr.evaluated_value == 1


def _unary(ctx: ModuleContext, expr: cst.BaseExpression, name: str, frame: Frame) -> Optional[cst.BaseExpression]:
    """`x` when `expr` is `torch.<name>(x)` or the tensor method `x.<name>()`."""
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, (cst.Attribute, cst.Name)):
        return None
    if isinstance(expr.func, cst.Attribute) and expr.func.attr.value != name:
        return None
    qualname = ctx.qualname(expr.func)
    if qualname == f"torch.{name}":
        args = expr.args
        return args[0].value if len(args) == 1 and args[0].keyword is None and not args[0].star else None
    if qualname is None and ctx.method_name(expr) == name and not expr.args:
        receiver = expr.func.value  # type: ignore[union-attr]
        return receiver if ctx.kind(receiver, frame) not in (NUMPY, PYTHON) else None
    return None


def _renamed(call: cst.Call, name: str, operand: cst.BaseExpression) -> Optional[cst.Call]:
    """`call` as `<alias>.<name>(operand)` or `operand.<name>()`, in the form it was written."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None  # `from torch import log`: the fused op is not imported under any name
    if call.args:
        return call.with_changes(func=func.with_changes(attr=cst.Name(name)),
                                 args=[call.args[0].with_changes(value=operand.with_changes(lpar=[], rpar=[]))])
    receiver = operand if isinstance(operand, _ATOMS) or operand.lpar else operand.with_changes(
        lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return call.with_changes(func=func.with_changes(value=receiver, attr=cst.Name(name)))


def _plus_one(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`x` for `1 + x` or `x + 1`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        if _is_one(expr.left):
            return expr.right
        if _is_one(expr.right):
            return expr.left
    return None


class FusableMath(Rule):
    code = "PFL502"
    name = "fusable-math"
    summary = "A composite like `torch.log(1 + x)` has a fused, more accurate single op (`torch.log1p(x)`)"
    why = (
        "Each op in `torch.log(1 + x)`, `torch.exp(x) - 1`, `1 / torch.sqrt(x)` or "
        "`torch.log(torch.sum(torch.exp(x), dim))` launches its own kernel and writes a full "
        "temporary tensor, so the composite reads and writes memory two or three times where the "
        "fused op does it once. The composites are also less accurate: `1 + x` and `exp(x) - 1` "
        "lose the low bits of a small `x` (in float32, `log(1 + 1e-8)` is 0), and `exp(x)` overflows "
        "to inf above about 88 in float32 (11 in float16), while `logsumexp` subtracts the maximum first. "
        "The fix is unsafe only in that results change in the last bits (towards the exact value "
        "for `log1p`, `expm1` and `logsumexp`; `rsqrt` may be an ulp off), which bit-exact tests notice."
    )
    how_to_fix = (
        "Use the fused op: `torch.log1p(x)`, `torch.expm1(x)`, `torch.rsqrt(x)`, "
        "`torch.logsumexp(x, dim)` (or the tensor methods of the same names)."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On unseen real code (judged by hand, 2026-12-01; bench/realworld/) none of 11 findings was "
        "worth a change: the fused op saves one small kernel on a handful of elements."
    )
    fix_safety = "unsafe"
    valid = [
        "import torch\n\n# perflsp: hot\ndef log_partition(scores: torch.Tensor):\n    return torch.logsumexp(scores, dim=-1)\n",
        "import math\n\n# perflsp: hot\ndef softplus(x: float):\n    return math.log(1 + math.exp(x))\n",
        "import torch\n\n# perflsp: hot\ndef log_odds(p: torch.Tensor):\n    return torch.log(p) - torch.log1p(-p)\n",
    ]
    example_run = (
        "log_partition(torch.randn(4, 8, device=device))\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n# perflsp: hot\ndef log_partition(scores: torch.Tensor):\n    return torch.log(torch.sum(torch.exp(scores), dim=-1))\n",
            flagged="torch.log(torch.sum(torch.exp(scores), dim=-1))",
            fixed="import torch\n\n# perflsp: hot\ndef log_partition(scores: torch.Tensor):\n    return torch.logsumexp(scores, dim=-1)\n",
        ),
        Invalid(
            "import torch as th\n\n# perflsp: hot\ndef softplus(x: th.Tensor):\n    return th.log(1 + th.exp(x))\n",
            flagged="th.log(1 + th.exp(x))",
            fixed="import torch as th\n\n# perflsp: hot\ndef softplus(x: th.Tensor):\n    return th.log1p(th.exp(x))\n",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef elu(x: torch.Tensor, alpha: float = 1.0):\n"
            "    return torch.where(x > 0, x, alpha * (x.exp() - 1))\n",
            flagged="x.exp() - 1",
            fixed="import torch\n\n# perflsp: hot\ndef elu(x: torch.Tensor, alpha: float = 1.0):\n"
            "    return torch.where(x > 0, x, alpha * (x.expm1()))\n",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef rms_norm(x: torch.Tensor, eps: float = 1e-6):\n"
            "    inv_rms = 1 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)\n    return x * inv_rms\n",
            flagged="1 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)",
            fixed="import torch\n\n# perflsp: hot\ndef rms_norm(x: torch.Tensor, eps: float = 1e-6):\n"
            "    inv_rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)\n    return x * inv_rms\n",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef log_prob(counts: torch.Tensor):\n    return (counts + 1).log()\n",
            flagged="(counts + 1).log()",
            fixed="import torch\n\n# perflsp: hot\ndef log_prob(counts: torch.Tensor):\n    return counts.log1p()\n",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            inner = _unary(ctx, call, "log", frame)
            if inner is None:
                continue
            found = self._log1p(ctx, call, inner) or self._logsumexp(ctx, call, inner, frame)
            if found is not None:
                yield self.report(call, frame, found[0], fix=found[1])
        for binop, frame in ctx.nodes(cst.BinaryOperation):
            if isinstance(binop.operator, cst.Subtract) and _is_one(binop.right):
                fused, composite, inner = "expm1", "exp", binop.left
            elif isinstance(binop.operator, cst.Divide) and _is_one(binop.left):
                fused, composite, inner = "rsqrt", "sqrt", binop.right
            else:
                continue
            operand = _unary(ctx, inner, composite, frame)
            if operand is None:
                continue
            new = _renamed(inner, fused, operand)  # type: ignore[arg-type]
            accuracy = ", and subtracting 1 cancels the low bits of a small result" if fused == "expm1" else ""
            yield self.report(
                binop, frame,
                f"`{ctx.code(binop)}` runs two kernels with a temporary in between{accuracy}; "
                f"`{fused}` computes it in one",
                fix=self._fix(fused, binop, new),
            )

    def _log1p(self, ctx: ModuleContext, call: cst.Call,
               inner: cst.BaseExpression) -> Optional[Tuple[str, Optional[FixSpec]]]:
        operand = _plus_one(inner)
        if operand is None:
            return None
        message = (f"`{ctx.code(call)}` runs two kernels, and rounding `1 + x` loses the low bits of a "
                   "small `x`; `log1p` computes it in one kernel and stays accurate near 0")
        return message, self._fix("log1p", call, _renamed(call, "log1p", operand))

    def _logsumexp(self, ctx: ModuleContext, call: cst.Call, inner: cst.BaseExpression,
                   frame: Frame) -> Optional[Tuple[str, Optional[FixSpec]]]:
        """`log(sum(exp(x), dim))`: `torch.sum` or `.sum` in either spelling, with a `dim`."""
        if not isinstance(inner, cst.Call):
            return None
        qualname = ctx.qualname(inner.func)
        if qualname == "torch.sum":
            if not inner.args:
                return None
            exp, dims = inner.args[0].value, list(inner.args[1:])
        elif qualname is None and ctx.method_name(inner) == "sum":
            exp, dims = inner.func.value, list(inner.args)  # type: ignore[attr-defined]
        else:
            return None
        operand = _unary(ctx, exp, "exp", frame)
        named = {a.keyword.value for a in dims if a.keyword is not None}
        has_dim = "dim" in named or len(named) < len(dims)  # by keyword or by position
        if operand is None or not has_dim or named - {"dim", "keepdim"}:
            return None  # logsumexp needs a `dim` and takes no `dtype=`
        message = (f"`{ctx.code(call)}` runs three kernels with two temporaries, and `exp` overflows to "
                   "inf for large inputs; `logsumexp` subtracts the maximum first and fuses them")
        return message, self._fix("logsumexp", call, _logsumexp_call(call, operand, dims))

    def _fix(self, fused: str, old: cst.CSTNode, new: Optional[cst.CSTNode]) -> Optional[FixSpec]:
        if new is None:
            return None
        return self.replace(f"Use `{fused}` (results differ in the last bits)", "unsafe", (old, new))


def _logsumexp_call(log: cst.Call, operand: cst.BaseExpression, dims: List[cst.Arg]) -> Optional[cst.Call]:
    func = log.func
    if not isinstance(func, cst.Attribute):
        return None
    if log.args:  # torch.log(...) -> torch.logsumexp(x, dim)
        first = cst.Arg(value=operand.with_changes(lpar=[], rpar=[]))
        return log.with_changes(func=func.with_changes(attr=cst.Name("logsumexp")), args=[first, *dims])
    plain = _renamed(log, "logsumexp", operand)
    return plain.with_changes(args=dims) if plain is not None else None
