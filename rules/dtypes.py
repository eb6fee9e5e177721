"""What dtype a tensor has, when the code shows it, and what dtype a conversion asks for.

`.float()` of a tensor that is already float32 returns the tensor itself: no allocation, no
kernel. `known_dtype` answers from factories (`torch.randn(n)` is float32 unless the file changes
the default dtype), `dtype=` arguments, casts (`.float()`, `.to(torch.float16)`) and what views,
indexing and moves keep; None when unknown.
"""
from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl301_layout_copy import value_before
from perflsp.rules.walk import Frame

# torch dtype spellings and the dtype they name.
_DTYPES: Dict[str, str] = {
    "torch." + spelling: dtype for spelling, dtype in (
        ("float32", "float32"), ("float", "float32"), ("float16", "float16"), ("half", "float16"),
        ("bfloat16", "bfloat16"), ("float64", "float64"), ("double", "float64"), ("complex64", "complex64"),
        ("cfloat", "complex64"), ("complex128", "complex128"), ("cdouble", "complex128"), ("uint8", "uint8"),
        ("int8", "int8"), ("int16", "int16"), ("short", "int16"), ("int32", "int32"), ("int", "int32"),
        ("int64", "int64"), ("long", "int64"), ("bool", "bool"), ("float8_e4m3fn", "float8_e4m3fn"),
        ("float8_e5m2", "float8_e5m2"),
    )
}
TORCH_DTYPES = frozenset(_DTYPES)
# Double precision: each element is one or two float64 values.
DOUBLE = frozenset({"float64", "complex128"})
# Tensor methods that convert to one dtype.
CASTS: Dict[str, str] = {
    "float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "long": "int64",
    "int": "int32", "short": "int16", "bool": "bool", "byte": "uint8", "char": "int8",
    "cfloat": "complex64", "cdouble": "complex128",
}
# Factories that make default-dtype (float32) tensors when given no `dtype=`.
_FLOAT_FACTORIES = frozenset("torch." + name for name in "rand randn empty zeros ones linspace logspace eye".split())
# Methods whose result has the receiver's dtype.
_SAME_DTYPE = frozenset(
    """view reshape expand expand_as transpose permute contiguous clone detach unsqueeze squeeze
    flatten unflatten repeat tile cuda cpu pin_memory t narrow select flip roll""".split()
)
_MAX_DEPTH = 8


def target_dtype(ctx: ModuleContext, call: cst.Call) -> Optional[cst.BaseExpression]:
    """The dtype that `x.to(...)` / `x.type(...)` converts to, when the call names one:
    `dtype=...`, a `torch.<dtype>`, the second argument of `.to(device, dtype)`, or a name such as
    `dtype` / `x.dtype`."""
    keyword = ctx.keyword(call, "dtype")
    if keyword is not None:
        return keyword.value
    positional = ctx.positional(call)
    for arg in positional:
        if ctx.qualname(arg.value) in TORCH_DTYPES:
            return arg.value
    if ctx.method_name(call) == "to" and len(positional) >= 2:
        return positional[1].value
    if not positional:
        return None
    first = positional[0].value
    if ctx.method_name(call) == "type":
        return first  # `.type()` only ever converts: a dtype, a legacy tensor type or its name
    name = first.attr.value if isinstance(first, cst.Attribute) else first.value if isinstance(first, cst.Name) else ""
    return first if name.endswith("dtype") else None


def dtype_named(ctx: ModuleContext, expr: cst.BaseExpression) -> Optional[str]:
    """"float16" for `torch.half`, `torch.float16` (through import aliases); None for anything else."""
    return _DTYPES.get(ctx.qualname(expr) or "")


def conversion_dtype(ctx: ModuleContext, call: cst.Call) -> Optional[str]:
    """The dtype `x.float()` / `x.to(torch.float16)` / `x.to(dtype=torch.long)` converts to."""
    method = ctx.method_name(call)
    if method in CASTS and not call.args:
        return CASTS[method]  # type: ignore[index]
    if method != "to":
        return None
    target = target_dtype(ctx, call)
    return dtype_named(ctx, target) if target is not None else None


def known_dtype(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, depth: int = 0) -> Optional[str]:
    """The dtype of the tensor `expr` when the code shows it ("float32", "int64", ...), else None."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, cst.Name):
        value = value_before(ctx, expr)
        if value is not None:
            return known_dtype(ctx, value, frame, depth + 1)
        bindings = ctx.bindings_of(expr.value, frame)
        found = {known_dtype(ctx, b.value, b.frame, depth + 1)  # type: ignore[arg-type]
                 if b.how == "assign" and b.index is None and b.value is not None else None for b in bindings}
        return found.pop() if len(found) == 1 else None
    if isinstance(expr, cst.Subscript) and ctx.is_tensor(expr.value, frame):
        return known_dtype(ctx, expr.value, frame, depth + 1)
    if not isinstance(expr, cst.Call):
        return None
    qualname = ctx.qualname(expr.func)
    if qualname is not None:
        return _factory_dtype(ctx, qualname, expr)
    converted = conversion_dtype(ctx, expr)
    if converted is not None:
        return converted
    method = ctx.method_name(expr)
    if method in _SAME_DTYPE or (method == "to" and _device_only(ctx, expr, frame)):
        return known_dtype(ctx, expr.func.value, frame, depth + 1)  # type: ignore[attr-defined]
    return None


def _device_only(ctx: ModuleContext, call: cst.Call, frame: Frame) -> bool:
    """`x.to(device)`, `x.to("cuda")`, `x.to(y.device)`: a move that keeps the dtype."""
    args = [a for a in call.args if a.keyword is None or a.keyword.value in ("device", "non_blocking")]
    if len(args) != len(call.args) or not args or target_dtype(ctx, call) is not None:
        return False
    device = args[0].value
    return ctx.device_type(device, frame) is not None or (ctx.last_name(device) or "").endswith("device")


def _factory_dtype(ctx: ModuleContext, qualname: str, call: cst.Call) -> Optional[str]:
    if not qualname.startswith("torch."):
        return None
    dtype = ctx.keyword(call, "dtype")
    if dtype is not None:
        return dtype_named(ctx, dtype.value)
    if qualname not in _FLOAT_FACTORIES or _changes_default_dtype(ctx):
        return None
    return "float32"


def _changes_default_dtype(ctx: ModuleContext) -> bool:
    return ctx.fact(_default_dtype_set)


def _default_dtype_set(ctx: ModuleContext) -> bool:
    return any(ctx.qualname(call.func) == "torch.set_default_dtype" for call, _ in ctx.calls_named("set_default_dtype"))
