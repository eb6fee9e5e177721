"""Tensors the context's inference does not see, from evidence some code gives.

An optional tensor parameter (`index: Optional[Tensor] = None`, `Union[Tensor, None]`,
`Tensor | None`, and the same as strings) is as common in per-step code as a plain `Tensor` one.
A counter registered as a buffer by a base class (`self.num_batches_tracked` of a BatchNorm) shows
itself as a tensor by the in-place updates the code makes (`self.num_batches_tracked.add_(1)`).
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.walk import Frame

# In-place tensor methods: nothing but a tensor updates itself this way.
_IN_PLACE = frozenset("add_ sub_ mul_ div_ zero_ fill_ copy_ clamp_ lerp_ addcmul_ addcdiv_".split())


def optional_tensor_param(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """`expr` is a name bound only to a parameter annotated as an optional tensor."""
    if not isinstance(expr, cst.Name):
        return False
    bindings = ctx.bindings_of(expr.value, frame)
    return bool(bindings) and all(
        b.how == "param" and isinstance(b.value, cst.Param) and b.value.annotation is not None
        and _optional_tensor(ctx, b.value.annotation.annotation) for b in bindings)


def updated_in_place(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """`expr` (a name or `self.<attr>`) gets a PyTorch in-place update (`.add_(1)`, `.zero_()`)
    in the function that reads it."""
    if frame.function is None or not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    text = ctx.code(expr, 200)
    return any(ctx.method_name(call) in _IN_PLACE and ctx.code(call.func.value, 200) == text  # type: ignore[attr-defined]
               for call, _ in frame.function.calls)


def _optional_tensor(ctx: ModuleContext, annotation: cst.BaseExpression) -> bool:
    if isinstance(annotation, cst.SimpleString):
        text = str(annotation.evaluated_value)
        try:
            annotation = cst.parse_expression(text)
        except cst.ParserSyntaxError:
            return False
    if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
        parts = [annotation.left, annotation.right]  # `Tensor | None`
    elif isinstance(annotation, cst.Subscript) and _name(ctx, annotation.value) in ("Optional", "Union"):
        parts = [e.slice.value for e in annotation.slice if isinstance(e.slice, cst.Index)]
    else:
        return False
    kinds = {"None" if isinstance(p, cst.Name) and p.value == "None" else _name(ctx, p) for p in parts}
    return "Tensor" in kinds and kinds <= {"Tensor", "None"}


def _name(ctx: ModuleContext, expr: cst.BaseExpression) -> Optional[str]:
    """The last part of an annotation's name (`Tensor` for `torch.Tensor`, `Optional` for
    `typing.Optional`)."""
    qualname = ctx.qualname(expr)
    if qualname is not None:
        return qualname.rsplit(".", 1)[-1]
    return ctx.last_name(expr)
