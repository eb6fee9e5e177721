from __future__ import annotations

from bisect import bisect_left
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

_SWAPS = frozenset({"transpose", "swapaxes", "swapdims"})
_LAYOUT_METHODS = _SWAPS | {"permute", "t", "movedim", "moveaxis", "expand"}
_LAYOUT_ATTRS = frozenset({"T", "mT", "mH"})
_MATMULS = frozenset({"torch.matmul", "torch.mm", "torch.bmm"})
_MATMUL_METHODS = frozenset({"matmul", "mm", "bmm"})
_ATTENTION = "torch.nn.functional.scaled_dot_product_attention"
_ATTENTION_INPUTS = ("query", "key", "value")
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
            body, index = ctx.statements(parent)
            # The last statement before this one that binds the name.
            bound_at = ctx.scoped((_bound_at, parent), lambda: _bound_at(ctx, body)).get(name.value, ())
            last = bisect_left(bound_at, index[node]) - 1
            if last >= 0:
                return _bindings(ctx, body[bound_at[last]])[name.value]
            if isinstance(parent, cst.Module):
                return None
            if not isinstance(parent, cst.SimpleStatementLine) and not isinstance(ctx.parent(parent), _STRAIGHT_BLOCKS):
                return None
        node = parent


def _bound_at(ctx: ModuleContext, body: Sequence[cst.CSTNode]) -> Dict[str, List[int]]:
    """Each name the statements of a block bind -> the indexes of the statements that do, in order:
    worked out once per block, as a long body has many reads to look back from."""
    out: Dict[str, List[int]] = {}
    for index, stmt in enumerate(body):
        for name in _bindings(ctx, stmt):
            out.setdefault(name, []).append(index)
    return out


def _bindings(ctx: ModuleContext, stmt: cst.CSTNode) -> Dict[str, Optional[cst.BaseExpression]]:
    """The names `stmt` binds -> the value when it ends with `name = value`, None when it may
    rebind the name in another way."""
    if isinstance(stmt, cst.SimpleStatementLine):
        out: Dict[str, Optional[cst.BaseExpression]] = {}
        for small in stmt.body:  # the last one to bind a name decides
            out.update(_bindings(ctx, small))
        return out
    if isinstance(stmt, cst.Assign):
        out = dict.fromkeys((name for t in stmt.targets for name in ctx.names_in(t.target)), None)
        out.update((t.target.value, stmt.value) for t in stmt.targets if isinstance(t.target, cst.Name))
        return out
    if isinstance(stmt, (cst.AnnAssign, cst.AugAssign)):
        if isinstance(stmt.target, cst.Name):
            return {stmt.target.value: stmt.value if isinstance(stmt, cst.AnnAssign) else None}
        return {}
    if isinstance(stmt, cst.BaseSmallStatement):
        return {}
    # A compound statement that mentions the name at all may rebind it.
    return dict.fromkeys(ctx.names_in(stmt), None)


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


def layout_op(expr: cst.BaseExpression) -> Optional[str]:
    """`permute` for `x.permute(...)`, `T` for `x.T`: the view op that only rearranges strides."""
    if isinstance(expr, cst.Attribute) and expr.attr.value in _LAYOUT_ATTRS:
        return expr.attr.value
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _LAYOUT_METHODS:
        method = expr.func.attr.value
        return None if method == "t" and expr.args else method
    return None


def layout_view(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> Optional[Tuple[str, cst.BaseExpression]]:
    """(op, layout expression) when `expr` is a layout view: written there (`x.permute(0, 2, 1)`),
    or a name that `name = x.permute(0, 2, 1)` assigned just before."""
    layout: Optional[cst.BaseExpression] = expr
    if isinstance(expr, cst.Name):
        # The block scan only for names that some assignment makes a layout view.
        if not any(b.how == "assign" and b.value is not None and layout_op(b.value)  # type: ignore[arg-type]
                   for b in ctx.bindings_of(expr.value, frame)):
            return None
        layout = value_before(ctx, expr)
    op = layout_op(layout) if layout is not None else None
    return (op, layout) if op is not None and layout is not None else None


def _ndim(ctx: ModuleContext, expr: cst.BaseExpression) -> Optional[int]:
    """The number of dims of `x.view(b, t, h, d)` or `x.reshape(...)`, written there or assigned
    to the name `expr` just before; None when unknown."""
    if isinstance(expr, cst.Name):
        expr = value_before(ctx, expr)  # type: ignore[assignment]
    if not (isinstance(expr, cst.Call) and ctx.method_name(expr) in ("view", "reshape")):
        return None
    sizes = _dims(expr)
    return len(sizes) if sizes is not None and len(sizes) > 1 else None  # one argument may be a dtype


def _full_order(ctx: ModuleContext, op: str, layout: cst.BaseExpression) -> Optional[List[int]]:
    """Like `_order`, over every dim of the tensor: known when the arguments name them all
    (`permute`, `.t()`) or the input's dims are (`x.view(b, c, h * w).transpose(1, 2)`)."""
    found = _order(op, layout)
    if found is None:
        return None
    order, from_end = found
    if op in ("permute", "t"):
        return order
    receiver = layout.value if isinstance(layout, cst.Attribute) else layout.func.value  # type: ignore[attr-defined]
    ndim = _ndim(ctx, receiver)
    if ndim is None or ndim < len(order):
        return None
    rest = ndim - len(order)
    return list(range(rest)) + [rest + i for i in order] if from_end else order + list(range(len(order), ndim))


def _in_place_reader(ctx: ModuleContext, op: str, layout: cst.BaseExpression) -> Optional[str]:
    """Which consumer reads the layout op's result as it is: "matmul" when it swaps the last two
    dims of a tensor of at most 3 dims (a GEMM takes it as a transposed operand; with more dims the
    matmul folds the batch dims, which may copy), "attention" when it keeps the last dim in place
    (`scaled_dot_product_attention` takes any strides with a contiguous last dim)."""
    found = _order(op, layout) if op != "expand" else None
    if found is None or found[0] == sorted(found[0]):  # unknown arguments, or `permute(0, 1, 2)`: nothing moves
        return None
    if found[1] and found[0][-1] == len(found[0]) - 1:
        return "attention"  # `transpose(-3, -2)`: the last dim stays, whatever the tensor's dims
    order = _full_order(ctx, op, layout)
    if order is None:
        return None
    n = len(order)
    if order[-2:] == [n - 1, n - 2] and order[:-2] == list(range(n - 2)):
        return "matmul" if n <= 3 else None
    return "attention" if order[-1] == n - 1 else None


def _uses(ctx: ModuleContext, copy: cst.Call, frame: Frame) -> List[cst.CSTNode]:
    """Where the copy's result is read: the call itself, or every read of the name it is assigned
    to after the assignment (anywhere in a loop around it, which runs the reads again). A use
    that is not a read (a rebinding, `del`) is returned too, and no consumer accepts it."""
    assign = ctx.parent(copy)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
        return [copy]
    name = assign.targets[0].target.value
    scope = frame.function.node if frame.function is not None else ctx.whole_module()
    in_order = list(reversed(list(ctx.descendants(scope))))  # `descendants` runs right to left, parents first
    candidates = in_order[in_order.index(assign) + 1:]
    loops = [loop for loop in frame.loops if isinstance(loop, (cst.For, cst.While))]
    if loops:
        candidates += ctx.descendants(loops[0])
    own = set(ctx.descendants(assign))
    return [node for node in dict.fromkeys(candidates) if node not in own and _names(ctx, node, name)]


def _names(ctx: ModuleContext, node: cst.CSTNode, name: str) -> bool:
    """`node` is the variable `name` (not the attribute `.name` or the keyword `name=`)."""
    if not (isinstance(node, cst.Name) and node.value == name):
        return False
    parent = ctx.parent(node)
    return not (isinstance(parent, cst.Attribute) and parent.attr is node) and not (
        isinstance(parent, cst.Arg) and parent.keyword is node)


def _consumer(ctx: ModuleContext, use: cst.CSTNode, reader: str) -> Optional[cst.CSTNode]:
    """The op that reads `use`, when it is of the kind `reader` that takes the view in place."""
    parent = ctx.parent(use)
    if reader == "matmul":
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.MatrixMultiply):
            return parent
        if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in _MATMUL_METHODS:
            call = ctx.parent(parent)
            return call if isinstance(call, cst.Call) and call.func is parent else None
    if not (isinstance(parent, cst.Arg) and not parent.star):
        return None
    call = ctx.parent(parent)
    assert isinstance(call, cst.Call)
    qualname = ctx.qualname(call.func)
    if reader == "matmul":
        is_matmul = qualname in _MATMULS or (qualname is None and ctx.method_name(call) in _MATMUL_METHODS)
        return call if is_matmul and parent.keyword is None else None
    if qualname != _ATTENTION:
        return None
    if parent.keyword is not None:
        return call if parent.keyword.value in _ATTENTION_INPUTS else None
    return call if list(call.args).index(parent) < len(_ATTENTION_INPUTS) else None


_WHY = {
    "matmul": "a matmul of up to 3 dims reads an operand with its last two dims swapped as it is, as a transposed "
              "GEMM operand",
    "attention": "`scaled_dot_product_attention` reads query, key and value in place whatever their strides, "
                 "as long as the last dim is contiguous",
}


class LayoutCopy(Rule):
    code = "PFL301"
    name = "layout-copy"
    summary = ("`.contiguous()` copies a transposed view that the matmul or `scaled_dot_product_attention` "
               "reading it would take as it is")
    why = (
        "`transpose`, `permute` and `.t()` are free: they return a view with rearranged strides. "
        "`.contiguous()` on such a view allocates a new tensor and launches a kernel that reads "
        "and writes every element in the new order. Some consumers read the strided view as it "
        "is: a matmul of matrices, or of one batch of them, takes an operand whose last two dims "
        "are swapped as a transposed GEMM operand, and `F.scaled_dot_product_attention` takes "
        "query, key and value with any strides as long as the last dim is contiguous (its flash "
        "kernel even prefers the `(B, T, H, D)` layout that `.transpose(1, 2)` leaves behind). "
        "Copying for them is a full round trip through memory for nothing. The rule reports only "
        "these: most other copies after a transpose are needed, such as merging attention heads "
        "(`y.transpose(1, 2).contiguous().view(b, t, c)`, free anyway after "
        "`scaled_dot_product_attention`, whose output already has that layout), flattening a "
        "permuted tensor, or a matmul over more batch dims, which folds them and may copy the "
        "view itself. The fix is unsafe: given a strided operand the consumer may pick another "
        "kernel, so results can differ in the last bits."
    )
    how_to_fix = "Drop `.contiguous()` and pass the view itself."
    scope = "hot"
    fix_safety = "unsafe"
    preview = True
    tier_reason = (
        "On real code nearly every copy it used to report after a transpose was needed (merging "
        "attention heads); it now reports only copies that a matmul or `scaled_dot_product_attention` "
        "would read in place, and stays in preview until real code confirms that narrower rule."
    )
    valid = [
        # Merging heads needs the copy (after SDPA it is free: the output already has that layout).
        "import torch\nimport torch.nn.functional as F\n\nclass SelfAttention(torch.nn.Module):\n"
        "    def forward(self, x):\n        b, t, c = x.shape\n"
        "        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)\n"
        "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "        y = y.transpose(1, 2).contiguous().view(b, t, c)\n        return self.proj(y)\n",
        # Flattening a channels-last view has to copy.
        "import torch\n\ndef train(model, loader):\n    for images, labels in loader:\n"
        "        x = images.permute(0, 2, 3, 1)\n        x = x.reshape(x.shape[0], -1)\n        model(x, labels)\n",
        # A matmul over (B, H, T, D) heads made from (B, T, H, D) folds B and H, which copies the view anyway.
        "import torch\n\nclass Scores(torch.nn.Module):\n    def forward(self, q, k):\n"
        "        b, t, c = q.shape\n        q = q.view(b, t, self.heads, -1).transpose(1, 2).contiguous()\n"
        "        return q @ k.transpose(-2, -1)\n",
        # Dims unknown: a matmul over (B, H, T, D) heads folds B and H, which may copy the view anyway.
        "import math\nimport torch\n\nclass Attention(torch.nn.Module):\n    def forward(self, q, k, v):\n"
        "        kt = k.transpose(-2, -1).contiguous()\n        att = (q @ kt) / math.sqrt(q.size(-1))\n"
        "        return att.softmax(dim=-1) @ v\n",
        # Returned: the caller may need a contiguous tensor.
        "import torch\n\nclass Proj(torch.nn.Module):\n    def forward(self, w):\n"
        "        return w.transpose(-2, -1).contiguous()\n",
        # The name is rebound by a branch before the copy: not necessarily the transposed view.
        "import torch\n\nclass Block(torch.nn.Module):\n    def forward(self, x, w):\n        y = x.transpose(-2, -1)\n"
        "        if self.training:\n            y = self.drop(y)\n        return w @ y.contiguous()\n",
    ]
    example_run = (
        "Gram()(torch.randn(2, 3, 4, 4, device=device))\n"
    )
    invalid = [
        Invalid(
            "import torch\n\nclass Gram(torch.nn.Module):\n    def forward(self, x):\n        b, c, h, w = x.shape\n"
            "        feats = x.view(b, c, h * w)\n        gram = feats @ feats.transpose(1, 2).contiguous()\n"
            "        return gram / (c * h * w)\n",
            flagged="feats.transpose(1, 2).contiguous()",
            fixed="import torch\n\nclass Gram(torch.nn.Module):\n    def forward(self, x):\n        b, c, h, w = x.shape\n"
            "        feats = x.view(b, c, h * w)\n        gram = feats @ feats.transpose(1, 2)\n"
            "        return gram / (c * h * w)\n",
        ),
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\nclass SelfAttention(torch.nn.Module):\n"
            "    def forward(self, x):\n        b, t, c = x.shape\n"
            "        q = self.q(x).view(b, t, self.heads, c // self.heads).transpose(1, 2).contiguous()\n"
            "        k = self.k(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)\n"
            "        v = self.v(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)\n"
            "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "        return self.proj(y.transpose(1, 2).reshape(b, t, c))\n",
            flagged="self.q(x).view(b, t, self.heads, c // self.heads).transpose(1, 2).contiguous()",
        ),
        Invalid(
            "import torch\n\ndef project(batches, w):\n    for x in batches:\n"
            "        yield torch.matmul(x, w.t().contiguous())\n",
            flagged="w.t().contiguous()",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            if ctx.method_name(call) != "contiguous" or call.args:
                continue
            receiver = call.func.value
            found = layout_view(ctx, receiver, frame)
            reader = _in_place_reader(ctx, *found) if found is not None else None
            if reader is None:
                continue
            consumers = [_consumer(ctx, use, reader) for use in _uses(ctx, call, frame)]
            if not consumers or None in consumers:
                continue
            op, layout = found  # type: ignore[misc]
            via = f" (`{receiver.value}` is `{ctx.code(layout, 40)}`)" if layout is not receiver else ""
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` copies the whole tensor{via} for `{ctx.code(consumers[0], 40)}` {{where}}, "
                f"but {_WHY[reader]}; drop `.contiguous()` and pass the `.{op}` view",
                fix=self.replace("Remove `.contiguous()`", "unsafe", (call, receiver)),
            )
