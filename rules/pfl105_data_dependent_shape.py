from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

_FIXED_SHAPE = "keep the shape fixed: `torch.where(mask, x, 0)`, `x.masked_fill(~mask, 0)` or multiply by the mask"
# Operations whose output size is the number of matching elements, with what to use instead.
_STATIC_INDICES = "with a known upper bound use `torch.nonzero_static(x, size=k)`, or " + _FIXED_SHAPE
_OPS = {
    "nonzero": _STATIC_INDICES,
    "argwhere": _STATIC_INDICES,
    "masked_select": _FIXED_SHAPE,
    "unique": "when the values are bounded, count them with `torch.bincount(x, minlength=n)`",
    "unique_consecutive": "when the values are bounded, count them with `torch.bincount(x, minlength=n)`",
}
# Methods that also exist on NumPy arrays or pandas objects: only known tensors count.
_SHARED_METHODS = frozenset({"nonzero", "unique"})
# Calls that return a bool tensor (method on a tensor, or `torch.<name>`).
_BOOL_OPS = frozenset(
    """bool isnan isinf isfinite isneginf isposinf isreal signbit isclose isin logical_and logical_or
    logical_xor logical_not eq ne lt le gt ge greater less greater_equal less_equal not_equal""".split()
)


class DataDependentShape(Rule):
    code = "PFL105"
    name = "data-dependent-shape"
    summary = "An op whose output size depends on the data (`nonzero`, `x[mask]`, `unique`, ...) synchronizes in hot code"
    why = (
        "The size of the result of `nonzero`, `argwhere`, `masked_select`, `unique`, one-argument "
        "`torch.where`, boolean-mask indexing `x[mask]`, `repeat_interleave` with tensor repeats and "
        "`one_hot` without `num_classes` depends on the values in the tensor. PyTorch must allocate the "
        "output before launching the kernels that fill it, so the host waits until the GPU has computed "
        "the count and copied it back: a full synchronization on every call. The same dynamic shape "
        "breaks CUDA graph capture and forces a graph break (or recompilation) under `torch.compile`."
    )
    how_to_fix = (
        "Keep shapes static: replace `x[mask]` by `torch.where(mask, x, 0)`, `x.masked_fill(~mask, 0)` "
        "or `x * mask` followed by a reduction; use `torch.nonzero_static(x, size=k)` when an upper "
        "bound is known; pass `output_size=` to `repeat_interleave` and `num_classes=` to `one_hot`."
    )
    scope = "hot"
    valid = [
        "import torch\n\n\ndef masked_mean_loss(model, loader, opt):\n"
        "    for x, y, mask in loader:\n"
        "        err = (model(x) - y).pow(2)\n"
        "        valid = mask > 0\n"
        "        loss = torch.where(valid, err, 0).sum() / valid.sum().clamp(min=1)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
        "import torch\nimport torch.nn.functional as F\n\n\nclass Classifier(torch.nn.Module):\n"
        "    def forward(self, x, labels):\n"
        "        target = F.one_hot(labels, num_classes=10).float()\n"
        "        first = x[labels]\n"
        "        return F.mse_loss(x, target) + first.mean()\n",
        "import numpy as np\n\n\ndef clean(rows):\n"
        "    for row in rows:\n"
        "        arr = np.asarray(row)\n"
        "        yield arr[arr > 0], np.unique(arr), arr.nonzero()\n",
    ]
    invalid = [
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    for x, y in loader:\n"
            "        logits = model(x)\n"
            "        keep = y != -100\n"
            "        loss = torch.nn.functional.cross_entropy(logits[keep], y[keep])\n"
            "        loss.backward()\n"
            "        opt.step()\n",
            flagged="logits[keep]",
        ),
        Invalid(
            "import torch\n\n\n@torch.no_grad()\ndef postprocess(model, loader, threshold=0.5):\n"
            "    detections = []\n"
            "    for images in loader:\n"
            "        scores = model(images).sigmoid()\n"
            "        idx = torch.nonzero(scores > threshold)\n"
            "        detections.append(idx)\n"
            "    return detections\n",
            flagged="torch.nonzero(scores > threshold)",
        ),
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\n\nclass Classifier(torch.nn.Module):\n"
            "    def forward(self, x, labels):\n"
            "        target = F.one_hot(labels).float()\n"
            "        return F.mse_loss(x, target)\n",
            flagged="F.one_hot(labels)",
        ),
        Invalid(
            "import torch\n\n\nclass Pool(torch.nn.Module):\n"
            "    def forward(self, tokens, lengths):\n"
            "        segment = torch.arange(lengths.numel(), device=tokens.device).repeat_interleave(lengths)\n"
            "        return tokens.new_zeros(lengths.numel(), tokens.size(-1)).index_add_(0, segment, tokens)\n",
            flagged="torch.arange(lengths.numel(), device=tokens.device).repeat_interleave(lengths)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            hint = _call_hint(ctx, call, frame)  # type: ignore[arg-type]
            if hint is not None:
                yield self._report(ctx, call, frame, hint)
        for sub, frame in ctx.nodes(cst.Subscript):
            if not any(isinstance(e.slice, cst.Index) and _is_bool_tensor(ctx, e.slice.value, frame, 0)
                       for e in sub.slice):  # type: ignore[attr-defined]
                continue
            if not _is_store(ctx, sub) and ctx.kind(sub.value, frame) not in (NUMPY, PYTHON):  # type: ignore[attr-defined]
                yield self._report(ctx, sub, frame, _FIXED_SHAPE)

    def _report(self, ctx: ModuleContext, node: cst.CSTNode, frame: Frame, hint: str) -> Report:
        return self.report(
            node, frame,
            f"the size of `{ctx.code(node)}` depends on the data, so the host waits for the GPU to learn "
            f"it {{where}}; it also breaks CUDA graphs and `torch.compile`; {hint}",
        )


def _call_hint(ctx: ModuleContext, call: cst.Call, frame: Frame) -> Optional[str]:
    """What to use instead, when `call` has a data-dependent output size."""
    qualname = ctx.qualname(call.func) or ""
    method = ctx.method_name(call)
    if qualname == "torch.nn.functional.one_hot":
        classes = ctx.argument(call, "num_classes", 1)
        return "pass `num_classes=`" if classes is None or ctx.literal(classes.value) == -1 else None
    if qualname == "torch.where":
        return "use the three-argument `torch.where(cond, x, y)`" if len(call.args) == 1 else None
    if qualname == "torch.repeat_interleave" or (method == "repeat_interleave" and not qualname):
        # `torch.repeat_interleave(repeats)` / `torch.repeat_interleave(x, repeats)` / `x.repeat_interleave(repeats)`
        position = 1 if qualname and len(ctx.positional(call)) > 1 else 0
        repeats = ctx.argument(call, "repeats", position)
        if repeats is None or ctx.keyword(call, "output_size") is not None or not ctx.is_tensor(repeats.value, frame):
            return None
        return "pass `output_size=` (the total, when known without reading the tensor)"
    if qualname.startswith("torch.") and qualname.count(".") == 1:
        return _OPS.get(qualname[6:])
    if method in _OPS and not qualname:
        receiver = call.func.value  # type: ignore[attr-defined]
        known = ctx.is_tensor(receiver, frame) if method in _SHARED_METHODS else ctx.kind(receiver, frame) not in (NUMPY, PYTHON)
        return _OPS[method] if known else None
    return None


def _is_store(ctx: ModuleContext, sub: cst.CSTNode) -> bool:
    """`x[mask] = v`, `x[mask] += v`, `del x[mask]`: writes keep the shape."""
    parent = ctx.parent(sub)
    return isinstance(parent, (cst.AssignTarget, cst.Del)) or (isinstance(parent, cst.AugAssign) and parent.target is sub)


def _is_bool_tensor(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, depth: int) -> bool:
    """`x > 0`, `~mask`, `a & b`, `torch.isnan(x)`, `x.bool()`, or a name bound only to such values."""
    if depth > 4:
        return False
    if isinstance(expr, cst.Comparison):
        return ctx.is_tensor(expr, frame)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.BitInvert):
        return _is_bool_tensor(ctx, expr.expression, frame, depth + 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
        return _is_bool_tensor(ctx, expr.left, frame, depth + 1) or _is_bool_tensor(ctx, expr.right, frame, depth + 1)
    if isinstance(expr, cst.Call):
        qualname = ctx.qualname(expr.func)
        if qualname is not None:
            return qualname.startswith("torch.") and qualname[6:] in _BOOL_OPS
        method = ctx.method_name(expr)
        return method in _BOOL_OPS and ctx.is_tensor(expr.func.value, frame)  # type: ignore[attr-defined]
    if isinstance(expr, cst.Name):
        bindings = ctx.bindings_of(expr.value, frame)
        return bool(bindings) and all(
            b.how == "assign" and b.index is None and b.value is not None
            and _is_bool_tensor(ctx, b.value, b.frame, depth + 1) for b in bindings)  # type: ignore[arg-type]
    return False
