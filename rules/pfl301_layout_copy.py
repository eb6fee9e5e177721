from __future__ import annotations

from typing import Iterator, List, Optional, Set, Tuple

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, TENSOR, ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule

_SWAPS = frozenset({"transpose", "swapaxes", "swapdims"})
_LAYOUT_METHODS = _SWAPS | {"permute", "t", "movedim", "moveaxis", "expand"}
_LAYOUT_ATTRS = frozenset({"T", "mT", "mH"})
_COPIES = frozenset({"contiguous", "reshape", "flatten"})
# NumPy arrays have `.T`, `.transpose`, `.swapaxes`, `.reshape` and `.flatten` too; a pair that
# involves one of these is reported on values not known to be tensors.
_TENSOR_ONLY = frozenset({"permute", "t", "movedim", "moveaxis", "swapdims", "expand", "mT", "mH", "contiguous"})
# Blocks that run at most once, in order, when the code around them does: a binding made before
# them still holds inside them.
_STRAIGHT_BLOCKS = (cst.If, cst.Else, cst.With)


def value_before(ctx: ModuleContext, name: cst.Name) -> Optional[cst.BaseExpression]:
    """The value a plain `name = value` gave `name` last, searching the statements before this use
    of it in the same block, then before the `if`/`else`/`with` holding that block. None when no
    such assignment is found, or a statement on the way may rebind `name` in another way."""
    node: cst.CSTNode = name
    while True:
        parent = ctx.parent(node)
        if parent is None or isinstance(parent, (cst.While, cst.Lambda, cst.CompFor, cst.ListComp, cst.SetComp,
                                                 cst.DictComp, cst.GeneratorExp)):
            return None
        if isinstance(parent, (cst.Module, cst.IndentedBlock, cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            body = list(parent.body)
            index = next(i for i, stmt in enumerate(body) if stmt is node)
            for stmt in reversed(body[:index]):
                found, value = _binds(ctx, stmt, name.value)
                if found:
                    return value
            if isinstance(parent, cst.Module):
                return None
            if not isinstance(parent, cst.SimpleStatementLine) and not isinstance(ctx.parent(parent), _STRAIGHT_BLOCKS):
                return None
        node = parent


def _binds(ctx: ModuleContext, stmt: cst.CSTNode, name: str) -> Tuple[bool, Optional[cst.BaseExpression]]:
    """(True, value) when `stmt` ends with `name = value`; (True, None) when it may rebind `name` otherwise."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in reversed(stmt.body):
            found, value = _binds(ctx, small, name)
            if found:
                return found, value
        return False, None
    if isinstance(stmt, cst.Assign):
        if any(isinstance(t.target, cst.Name) and t.target.value == name for t in stmt.targets):
            return True, stmt.value
        return any(name in ctx.names_in(t.target) for t in stmt.targets), None
    if isinstance(stmt, (cst.AnnAssign, cst.AugAssign)):
        if isinstance(stmt.target, cst.Name) and stmt.target.value == name:
            return True, stmt.value if isinstance(stmt, cst.AnnAssign) else None
        return False, None
    if isinstance(stmt, cst.BaseSmallStatement):
        return False, None
    # A compound statement that mentions the name at all may rebind it.
    return name in ctx.names_in(stmt), None


def _int(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.value, 0)
    return None


def _dims(call: cst.Call) -> Optional[List[cst.BaseExpression]]:
    """The dimension arguments of `permute(0, 2, 1)`, `permute((0, 2, 1))`, `reshape(b, -1)`, ..."""
    if any(a.star or a.keyword is not None for a in call.args):
        return None
    values = [a.value for a in call.args]
    if len(values) == 1 and isinstance(values[0], (cst.Tuple, cst.List)):
        elements = values[0].elements
        if any(isinstance(e, cst.StarredElement) for e in elements):
            return None
        values = [e.value for e in elements]
    return values


def _order(op: str, layout: cst.BaseExpression) -> Optional[Tuple[List[int], bool]]:
    """Where each dim of the layout op's result comes from, over the dims its arguments name, and
    whether those are the last dims (True) or the first; None when the arguments are not literal."""
    if op in _LAYOUT_ATTRS:
        return [1, 0], True  # `.T`, `.mT`, `.mH` swap the last two dims (at least)
    if op == "t":
        return [1, 0], False
    assert isinstance(layout, cst.Call)
    args = _dims(layout) or []
    dims = [d for d in (_int(a) for a in args) if d is not None]
    if not dims or len(dims) != len(args):
        return None
    if op == "permute":
        return [d % len(dims) for d in dims], False
    if len(dims) != 2 or (dims[0] < 0) != (dims[1] < 0):
        return None
    a, b = dims
    from_end = a < 0
    if from_end and op not in _SWAPS:
        return None
    order = list(range(max(-a, -b) if from_end else max(a, b) + 1))
    if op in _SWAPS:
        order[a], order[b] = order[b], order[a]
    else:
        order.insert(b, order.pop(a))
    return order, from_end


def _breaks(op: str, layout: cst.BaseExpression) -> Optional[Set[int]]:
    """Positions i (negative: counted from the end) where dims i and i+1 of the layout op's result
    are not neighbours in memory, for a contiguous input, so that no view can merge them. A lower
    bound where the tensor may have more dims than the arguments name; None when unknown."""
    if op == "expand":
        assert isinstance(layout, cst.Call)
        sizes = _dims(layout)
        if sizes is None:
            return None
        # A size other than -1 is taken to expand a dim: stride 0 cannot merge with a real stride.
        kept = [_int(size) == -1 for size in sizes]
        return {i for i in range(len(kept) - 1) if kept[i] != kept[i + 1]}
    found = _order(op, layout)
    if found is None:
        return None
    order, from_end = found
    n = len(order)
    breaks = {i for i in range(n - 1) if order[i + 1] != order[i] + 1}
    if len(breaks) == n - 1 and (order[0] != 0 if from_end else order[-1] != n - 1):
        # Every dim is cut off from its neighbours, so a reshape to as many dims keeps the shape
        # (pointless) or copies: count the cut at the open end too, which is real as soon as the
        # tensor has one more dim, as in `(B, H, T, D).transpose(1, 2)`.
        breaks.add(-1 if from_end else n - 1)
    return {i - n for i in breaks} if from_end else breaks


def _copies(ctx: ModuleContext, copy: cst.Call, op: str, layout: cst.BaseExpression) -> bool:
    """Whether `copy` (`.contiguous()`, `.reshape(...)`, `.flatten(...)`) must copy the layout op's result."""
    breaks = _breaks(op, layout)
    method = ctx.method_name(copy)
    if method == "contiguous":
        return not copy.args and breaks != set()  # `permute(0, 1, 2)` changes nothing
    if not breaks:
        return False
    if method == "reshape":
        shape = _dims(copy)
        # Fewer dims than runs of mergeable dims: two runs must merge, which only a copy can do.
        return shape is not None and len(shape) <= len(breaks)
    positional = ctx.positional(copy)
    start_arg = ctx.keyword(copy, "start_dim") or (positional[0] if positional else None)
    end_arg = ctx.keyword(copy, "end_dim") or (positional[1] if len(positional) > 1 else None)
    start = _int(start_arg.value) if start_arg is not None else 0
    end = _int(end_arg.value) if end_arg is not None else -1
    if start is None or start < 0 or end != -1:
        return False
    # Breaks counted from the end lie inside `start..-1` for sure only when `start` is 0.
    return any(i >= start for i in breaks) if start else True


def layout_op(expr: cst.BaseExpression) -> Optional[str]:
    """`permute` for `x.permute(...)`, `T` for `x.T`: the view op that only rearranges strides."""
    if isinstance(expr, cst.Attribute) and expr.attr.value in _LAYOUT_ATTRS:
        return expr.attr.value
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _LAYOUT_METHODS:
        method = expr.func.attr.value
        return None if method == "t" and expr.args else method
    return None


class LayoutCopy(Rule):
    code = "PFL301"
    name = "layout-copy"
    summary = "`transpose`/`permute` followed by `.contiguous()`/`.reshape()` copies the whole tensor in hot code"
    why = (
        "`transpose`, `permute`, `.T`, `movedim` and `expand` are free: they return a view with "
        "rearranged strides. `.contiguous()` on such a view, and a `.reshape()` or `.flatten()` that "
        "merges dimensions the view has separated, cannot be expressed with strides, so they allocate "
        "a new tensor and launch a kernel that reads and writes every element in the new order: a "
        "full round trip through memory on every call, for data that is usually consumed once."
    )
    how_to_fix = (
        "Check whether the copy is needed: matmul, `einsum`, `nn.Linear`, elementwise ops and "
        "`F.scaled_dot_product_attention` accept strided inputs. Fold the permutation into the "
        "consumer (`torch.einsum('bhtd,hdc->btc', y, w)` instead of `y.transpose(1, 2).reshape(b, t, c) @ w`), "
        "produce the data in the layout the consumer wants, or permute the smaller tensor. When the "
        "copy is unavoidable, make it once, outside the loop."
    )
    scope = "hot"
    valid = [
        "import torch\n\nclass Merge(torch.nn.Module):\n    def forward(self, y, w):\n"
        "        return torch.einsum('bhtd,hdc->btc', y, w)\n",
        # Splitting a dim of the view needs no copy.
        "import torch\n\nclass ToMap(torch.nn.Module):\n    def forward(self, x, h, w):\n"
        "        b, n, c = x.shape\n        return x.transpose(1, 2).reshape(b, c, h, w)\n",
        # Merging dims that stay neighbours (H and W of NHWC) needs no copy either.
        "import torch\n\nclass Tokens(torch.nn.Module):\n    def forward(self, x):\n"
        "        b, c, h, w = x.shape\n        return x.permute(0, 2, 3, 1).reshape(b, h * w, c)\n",
        "import numpy as np\n\nfor batch in np.split(np.arange(24).reshape(6, 4), 3):\n    flat = batch.T.reshape(-1)\n",
        # The name is rebound by a branch before the copy: not necessarily the transposed view.
        "import torch\n\nclass Block(torch.nn.Module):\n    def forward(self, x):\n        y = x.transpose(1, 2)\n"
        "        if self.training:\n            y = self.drop(y)\n        return y.contiguous()\n",
    ]
    invalid = [
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\nclass SelfAttention(torch.nn.Module):\n"
            "    def forward(self, x):\n        b, t, c = x.shape\n"
            "        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)\n"
            "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "        y = y.transpose(1, 2).contiguous().view(b, t, c)\n        return self.proj(y)\n",
            flagged="y.transpose(1, 2).contiguous()",
        ),
        Invalid(
            "import torch\n\ndef train(model, loader):\n    for images, labels in loader:\n"
            "        x = images.permute(0, 2, 3, 1)\n        x = x.reshape(x.shape[0], -1)\n        model(x, labels)\n",
            flagged="x.reshape(x.shape[0], -1)",
        ),
        Invalid(
            "import torch\n\nclass Heads(torch.nn.Module):\n    def forward(self, out):\n"
            "        b, h, t, d = out.shape\n        return out.transpose(1, 2).flatten(2)\n",
            flagged="out.transpose(1, 2).flatten(2)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            copy = ctx.method_name(call)
            if copy not in _COPIES:
                continue
            receiver = call.func.value
            layout: Optional[cst.BaseExpression] = receiver
            if isinstance(receiver, cst.Name):
                # The block scan only for names that some assignment makes a layout view.
                bindings = ctx.bindings_of(receiver.value, frame)
                if not any(b.how == "assign" and layout_op(b.value) for b in bindings):  # type: ignore[arg-type]
                    continue
                layout = value_before(ctx, receiver)
            op = layout_op(layout) if layout is not None else None
            if op is None or not _copies(ctx, call, op, layout):
                continue
            base = layout.value if isinstance(layout, cst.Attribute) else layout.func.value
            kind = ctx.kind(base, frame)
            if kind in (NUMPY, PYTHON) or (kind != TENSOR and not {op, copy} & _TENSOR_ONLY):
                continue
            via = f" (`{receiver.value}` is `{ctx.code(layout, 40)}`)" if layout is not receiver else ""
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` copies the whole tensor {{where}}{via}: `.{op}` only rearranged its "
                f"strides, so `.{copy}()` has to move every element into the new order; check whether "
                "the consumer accepts the strided view or can absorb the permutation",
            )
