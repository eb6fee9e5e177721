from __future__ import annotations

from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, TENSOR, ModuleContext
from perflsp.rules.dtypes import DOUBLE, dtype_named, target_dtype
from perflsp.rules.pfl202_float64_on_device import calls_after
from perflsp.rules.pfl301_layout_copy import value_before
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame, FunctionInfo

_TO_TENSOR = frozenset({"torch.from_numpy", "torch.as_tensor", "torch.tensor"})
# NumPy functions that return float64 unless told otherwise: name -> position of their `dtype`
# parameter (None: they have none).
_FLOAT64_MAKERS: Dict[str, Optional[int]] = {
    **{f"numpy.random.{name}": None for name in "rand randn random random_sample uniform normal standard_normal".split()},
    "numpy.zeros": 1, "numpy.ones": 1, "numpy.empty": 1, "numpy.identity": 1, "numpy.eye": 3,
    "numpy.loadtxt": 1, "numpy.full": 2, "numpy.linspace": 5, "numpy.arange": 3,
    "numpy.array": 1, "numpy.asarray": 1,
}
_FLOAT32_METHODS = frozenset({"float", "half", "bfloat16"})
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)


def _number(expr: cst.BaseExpression) -> Optional[type]:
    """`cst.Float` or `cst.Integer` for a (signed) number literal, else None."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        expr = expr.expression
    return type(expr) if isinstance(expr, (cst.Float, cst.Integer)) else None


def _literal_kinds(expr: cst.BaseExpression) -> Optional[Set[type]]:
    """The literal types in a (nested) list or tuple of number literals; None if anything else is in it."""
    if not isinstance(expr, (cst.List, cst.Tuple)):
        kind = _number(expr)
        return {kind} if kind is not None else None
    kinds: Set[type] = set()
    for element in expr.elements:
        inner = None if isinstance(element, cst.StarredElement) else _literal_kinds(element.value)
        if inner is None:
            return None
        kinds |= inner
    return kinds


def _makes_float64(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, depth: int = 0) -> Optional[cst.Call]:
    """The NumPy call that makes `expr` a float64 array, directly, through arithmetic with plain
    numbers, or through a local name assigned one; None when that is not certain."""
    if isinstance(expr, cst.Name) and depth < 3:
        value = value_before(ctx, expr)
        if value is not None:
            return _makes_float64(ctx, value, frame, depth + 1)
        # A constant of an enclosing scope (`MEAN = np.array([...])` at module level).
        bindings = ctx.bindings_of(expr.value, frame)
        if not bindings or bindings[0].frame.function is frame.function:
            return None
        if any(b.how != "assign" or b.index is not None for b in bindings):
            return None
        makers = [_makes_float64(ctx, b.value, b.frame, depth + 1) for b in bindings]  # type: ignore[arg-type]
        return makers[0] if all(m is not None for m in makers) else None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ARITHMETIC):
        left = _makes_float64(ctx, expr.left, frame, depth)
        right = _makes_float64(ctx, expr.right, frame, depth)
        other = expr.right if left is not None else expr.left
        if (left or right) is not None and (_number(other) is not None or ctx.kind(other, frame) in (NUMPY, PYTHON)):
            return left or right
        return None
    if not isinstance(expr, cst.Call):
        return None
    qualname = ctx.qualname(expr.func) or ""
    if qualname not in _FLOAT64_MAKERS:
        return None
    dtype_at = _FLOAT64_MAKERS[qualname]
    args = ctx.positional(expr)
    if ctx.keyword(expr, "dtype") is not None or any(a.star for a in expr.args):
        return None
    if dtype_at is not None and len(args) > dtype_at:
        return None
    if qualname == "numpy.full":
        fill = ctx.keyword(expr, "fill_value") or (args[1] if len(args) > 1 else None)
        return expr if fill is not None and _number(fill.value) is cst.Float else None
    if qualname == "numpy.arange":
        return expr if any(_number(a.value) is cst.Float for a in args) else None
    if qualname in ("numpy.array", "numpy.asarray"):
        return expr if args and cst.Float in (_literal_kinds(args[0].value) or ()) else None
    if qualname == "numpy.linspace" and any(ctx.kind(a.value, frame) == NUMPY for a in args[:2]):
        return None  # float32 end points give a float32 range
    return expr


def _converts(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """`.float()`, `.half()`, `.to(torch.float16)`, `.to(other)`, `.type(...)`: not to float64."""
    method = ctx.method_name(call)
    if method in _FLOAT32_METHODS:
        return True
    if method not in ("to", "type"):
        return False
    target = target_dtype(ctx, call)
    if target is not None:
        return dtype_named(ctx, target) not in DOUBLE and not (ctx.qualname(target) or "").endswith("DoubleTensor")
    args = ctx.positional(call)
    return len(args) == 1 and ctx.kind(args[0].value, frame) == TENSOR


class NumpyFloat64(Rule):
    code = "PFL201"
    name = "numpy-float64"
    summary = "A tensor made from a default-dtype NumPy array is float64"
    why = (
        "NumPy creates float64 arrays by default (`np.random.rand`, `np.zeros`, `np.array([0.5])`), "
        "and `torch.from_numpy`/`torch.as_tensor`/`torch.tensor` keep that dtype. The tensor then "
        "takes twice the memory and host-to-device transfer time of float32, runs at a fraction of "
        "float32 speed on GPUs, and promotes every float32 tensor it is combined with to float64 "
        "(`images - mean` with a float64 `mean` is float64), so the slowness spreads through the "
        "computation; a model that rejects it invites a `model.double()` that makes everything slow."
    )
    how_to_fix = (
        "Create the array as float32 (`np.random.rand(n).astype(np.float32)`, `np.zeros(n, "
        "dtype=np.float32)`), pass `dtype=torch.float32` to `torch.tensor`/`torch.as_tensor`, or "
        "convert right away with `.float()`, before moving the tensor to the device. The fix appends "
        "`.float()`; it is unsafe because the values lose precision and the tensor no longer shares "
        "memory with the array (`torch.from_numpy`), so writes to one stop showing in the other."
    )
    scope = "any"
    preview = True
    tier_reason = (
        "Too little evidence: no finding in the 45 unseen repositories sampled (judged by hand, "
        "2026-12-01; bench/realworld/) to judge it by."
    )
    fix_safety = "unsafe"
    valid = [
        "import numpy as np\nimport torch\n\nnoise = torch.from_numpy(np.random.randn(64, 128).astype(np.float32))\n",
        "import numpy as np\nimport torch\n\nmean = torch.tensor(np.array([0.485, 0.456, 0.406]), dtype=torch.float32)\n",
        "import numpy as np\nimport torch\n\nx = np.random.rand(16, 3)\nt = torch.from_numpy(x).float().cuda()\n",
        "import numpy as np\nimport torch\n\nlabels = torch.from_numpy(np.arange(10))\n",
        "import numpy as np\nimport torch\n\ngrid = np.zeros((32, 32))\ngrid = grid.astype(np.float32)\nmask = torch.as_tensor(grid)\n",
        "import numpy as np\nimport torch\n\ndef load(device):\n    x = torch.from_numpy(np.ones((4, 4)))\n    return x.to(device, torch.float32)\n",
    ]
    example_run = (
        "normalize(torch.rand(2, 3, 4, 4, device=device))\n"
    )
    invalid = [
        Invalid(
            "import numpy as np\nimport torch\n\nMEAN = np.array([0.485, 0.456, 0.406])\n\ndef normalize(images):\n"
            "    return images - torch.as_tensor(MEAN, device=images.device).view(1, 3, 1, 1)\n",
            flagged="torch.as_tensor(MEAN, device=images.device)",
            fixed="import numpy as np\nimport torch\n\nMEAN = np.array([0.485, 0.456, 0.406])\n\ndef normalize(images):\n"
            "    return images - torch.as_tensor(MEAN, device=images.device).float().view(1, 3, 1, 1)\n",
        ),
        Invalid(
            "import numpy as np\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
            "features = np.random.randn(1000, 20) * 0.1\nlabels = np.random.randint(0, 2, 1000)\n"
            "dataset = TensorDataset(torch.from_numpy(features), torch.from_numpy(labels))\n"
            "loader = DataLoader(dataset, batch_size=32, shuffle=True)\n",
            flagged="torch.from_numpy(features)",
        ),
        Invalid(
            "import numpy as np\nimport torch\n\ndef train(model, opt, steps):\n    for _ in range(steps):\n"
            "        x = torch.tensor(np.random.uniform(-1, 1, size=(64, 2)), device=\"cuda\")\n"
            "        loss = model(x).pow(2).mean()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
            flagged="torch.tensor(np.random.uniform(-1, 1, size=(64, 2)), device=\"cuda\")",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        converted: Dict[Optional[FunctionInfo], FrozenSet[str]] = {}
        for call, frame in ctx.nodes(cst.Call):
            if ctx.qualname(call.func) not in _TO_TENSOR:
                continue
            args = ctx.positional(call)
            if not args or ctx.keyword(call, "dtype") is not None or len(args) > 1:
                continue
            maker = _makes_float64(ctx, args[0].value, frame)
            if maker is None or any(_converts(ctx, c, frame) for c in calls_after(ctx, call)):
                continue
            name = _assigned_name(ctx, call)
            if name is not None:
                if frame.function not in converted:
                    converted[frame.function] = _converted_names(ctx, frame.function)
                if name in converted[frame.function]:
                    continue
            fix = self.replace("Append `.float()`", "unsafe",
                               (call, cst.Call(func=cst.Attribute(value=call, attr=cst.Name("float")))))
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` makes a float64 tensor: `{ctx.code(maker, 40)}` creates a float64 "
                "array, which doubles memory and transfer time and runs at a fraction of float32 speed "
                "on GPUs; create it as float32 or convert with `.float()`",
                fix=fix,
            )


def _assigned_name(ctx: ModuleContext, call: cst.Call) -> Optional[str]:
    """`t` in `t = torch.from_numpy(a)` (also through `.to(device)`-like chained calls)."""
    chain = list(calls_after(ctx, call))
    parent = ctx.parent(chain[-1] if chain else call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        return parent.targets[0].target.value
    return None


def _converted_names(ctx: ModuleContext, function: Optional[FunctionInfo]) -> FrozenSet[str]:
    """The local names of `function` (None: of the module level, across its top-level statements)
    converted to another dtype somewhere in it (`t.float()`, `t.to(device, torch.float32)`): a
    tensor made float64 there is converted before it is used."""
    if function is None:
        return ctx.fact(_converted_at_module_level)
    return _converted_in(ctx, function.calls)


def _converted_at_module_level(ctx: ModuleContext) -> FrozenSet[str]:
    return _converted_in(ctx, ctx.walk.module_calls)


def _converted_in(ctx: ModuleContext, calls: List[Tuple[cst.Call, Frame]]) -> FrozenSet[str]:
    return frozenset(call.func.value.value for call, frame in calls  # type: ignore[attr-defined]
                     if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
                     and _converts(ctx, call, frame))
