from __future__ import annotations

from typing import Iterator, Optional, Set

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, ModuleContext
from perflsp.rules.devices import on_host
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

_FIXED_SHAPE = "keep the shape fixed: `torch.where(mask, x, 0)`, `x.masked_fill(~mask, 0)` or multiply by the mask"
_MASKED_WRITE = ("write with a fixed shape: `x.masked_fill_(mask, t)` for one value (a 0-dim tensor too), "
                 "`x = torch.where(mask, t, x)` when `t` has x's shape, `x.masked_scatter_(mask, t)` when it "
                 "holds one value per selected element")
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
        "breaks CUDA graph capture and forces a graph break (or recompilation) under `torch.compile`. "
        "Writing through a mask counts too: `x[mask] = t` with a tensor `t` and `x[mask] += v` turn the "
        "mask into indices first; only `x[mask] = <Python number>` becomes a `masked_fill_` that needs no "
        "count. Tensors known to live on the CPU wait for no GPU and are not reported."
    )
    how_to_fix = (
        "Keep shapes static: replace `x[mask]` by `torch.where(mask, x, 0)`, `x.masked_fill(~mask, 0)` "
        "or `x * mask` followed by a reduction; use `torch.nonzero_static(x, size=k)` when an upper "
        "bound is known; pass `output_size=` to `repeat_interleave` and `num_classes=` to `one_hot`. "
        "Write with `x.masked_fill_(mask, v)`, `x = torch.where(mask, t, x)` or "
        "`x.masked_scatter_(mask, t)` instead of `x[mask] = t`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 2 times in 7 decided findings: many data-dependent shapes "
        "are the function's contract (variable-length matches, per-image box lists)."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "\n"
        "def train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        logits = model(x)\n"
        "        loss = torch.nn.functional.cross_entropy(logits, y, ignore_index=-100)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
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
        # Writing a scalar through a mask becomes `masked_fill_`: no count needed.
        "import torch\n\n\nclass Scores(torch.nn.Module):\n"
        "    def forward(self, logits, mask):\n"
        "        logits[mask == 0] = -1e4\n"
        "        return logits.softmax(-1)\n",
        # On the CPU there is no GPU to wait for.
        "import torch\n\n\ndef collate_fn(samples):\n"
        "    lengths = torch.tensor([len(s) for s in samples])\n"
        "    for s in samples:\n"
        "        s[s < 0] = s.max()\n"
        "    return torch.stack(samples)[lengths > 0]\n",
        "import numpy as np\n\n\ndef clean(rows):\n"
        "    for row in rows:\n"
        "        arr = np.asarray(row)\n"
        "        yield arr[arr > 0], np.unique(arr), arr.nonzero()\n",
    ]
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8, device=device), torch.tensor([0, -100, 2, 0], device=device))] * 3\n"
        "train(model, loader, opt)\n"
    )
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
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    for x, y in loader:\n"
            "        out = model(x)\n"
            "        missing = torch.isnan(out)\n"
            "        out[missing] = out.detach().nanmean()\n"
            "        loss = torch.nn.functional.mse_loss(out, y)\n"
            "        loss.backward()\n"
            "        opt.step()\n",
            flagged="out[missing]",
        ),
        Invalid(
            "import torch\n\n\nclass Histogram(torch.nn.Module):\n"
            "    def forward(self, counts, labels):\n"
            "        counts[labels > 0] += 1\n"
            "        return counts\n",
            flagged="counts[labels > 0]",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            hint = _call_hint(ctx, call, frame)  # type: ignore[arg-type]
            if hint is not None and not on_host(ctx, _input(ctx, call), frame):  # type: ignore[arg-type]
                yield self._report(ctx, call, frame, hint)
        masked = [(sub, frame) for sub, frame in ctx.nodes(cst.Subscript) if _is_masked(ctx, sub, frame)]  # type: ignore[arg-type]
        for sub, frame in masked:
            tensor = sub.value  # type: ignore[attr-defined]
            if ctx.kind(tensor, frame) in (NUMPY, PYTHON) or on_host(ctx, tensor, frame):
                continue
            parent = ctx.parent(sub)
            if isinstance(parent, cst.AugAssign) and parent.target is sub:
                yield self._report(ctx, sub, frame, "update with a fixed shape: `x = torch.where(mask, <new value>, x)`")
            elif not isinstance(parent, (cst.AssignTarget, cst.Del)):
                yield self._report(ctx, sub, frame, _FIXED_SHAPE)
            elif _stores_tensor(ctx, parent, frame, {s for s, _ in masked}):
                yield self.report(
                    sub, frame,
                    f"`{ctx.code(sub)} = ...` writes a tensor through a boolean mask {{where}}: PyTorch turns the "
                    "mask into indices first, and their number depends on the data, so the host waits for the "
                    f"GPU to count them; {_MASKED_WRITE}",
                )

    def _report(self, ctx: ModuleContext, node: cst.CSTNode, frame: Frame, hint: str) -> Report:
        return self.report(
            node, frame,
            f"the size of `{ctx.code(node)}` depends on the data, so the host waits for the GPU to learn "
            f"it {{where}}; it also breaks CUDA graphs and `torch.compile`; {hint}",
        )


def _input(ctx: ModuleContext, call: cst.Call) -> cst.BaseExpression:
    """The tensor a data-dependent op reads: `x` in `x.nonzero()`, `torch.nonzero(x)`."""
    if ctx.qualname(call.func) is None and isinstance(call.func, cst.Attribute):
        return call.func.value
    args = ctx.positional(call)
    return args[0].value if args else call


def _is_masked(ctx: ModuleContext, sub: cst.Subscript, frame: Frame) -> bool:
    return any(isinstance(e.slice, cst.Index) and _is_bool_tensor(ctx, e.slice.value, frame, 0) for e in sub.slice)


def _stores_tensor(ctx: ModuleContext, target: cst.CSTNode, frame: Frame, reads: Set[cst.CSTNode]) -> bool:
    """`x[mask] = t` with a tensor `t` (a scalar becomes `masked_fill_`, which needs no count),
    unless `t` itself holds a masked read, which is reported."""
    assign = ctx.parent(target)
    if not isinstance(assign, cst.Assign):
        return False
    value = assign.value
    if not ctx.is_tensor(value, frame) or on_host(ctx, value, frame):
        return False
    return not any(node in reads for node in (value, *ctx.descendants(value)))


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
