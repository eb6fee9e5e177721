from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from perflsp.rules.context import NUMPY, PYTHON, TENSOR, ModuleContext
from perflsp.rules.devices import HOST, placement
from perflsp.rules.rule import FixSpec, Invalid, Report, Rule
from perflsp.rules.walk import Frame

_DTYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "ByteTensor": "uint8", "CharTensor": "int8", "ShortTensor": "int16", "IntTensor": "int32",
    "LongTensor": "int64", "BoolTensor": "bool",
}
_FLOATING = frozenset({"float32", "float64", "float16", "bfloat16"})


def _legacy(qualname: Optional[str]) -> Optional[Tuple[str, str]]:
    """(device, dtype) for `torch.FloatTensor` ("cpu", "float32"), `torch.cuda.LongTensor`, ..."""
    if not qualname:
        return None
    module, _, name = qualname.rpartition(".")
    dtype = _DTYPES.get(name)
    if dtype is None or module not in ("torch", "torch.cuda"):
        return None
    return ("cuda" if module == "torch.cuda" else "cpu"), dtype


def _legacy_type(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> Tuple[bool, Optional[Tuple[str, str]]]:
    """(is a legacy type, its (device, dtype) when named directly): `torch.cuda.FloatTensor`,
    `'torch.cuda.FloatTensor'`, or a name only ever assigned legacy types (`Tensor =
    torch.cuda.FloatTensor if cuda else torch.FloatTensor`), whose device and dtype are not known."""
    if isinstance(expr, cst.SimpleString):
        found = _legacy(str(expr.evaluated_value))
        return found is not None, found
    found = _legacy(ctx.qualname(expr))
    if found is not None:
        return True, found
    if not isinstance(expr, cst.Name):
        return False, None
    values = [b.value for b in ctx.bindings_of(expr.value, frame) if b.how == "assign" and b.index is None]
    options: List[cst.BaseExpression] = []
    for value in values:
        options.extend([value.body, value.orelse] if isinstance(value, cst.IfExp) else [value])  # type: ignore[list-item]
    complete = bool(options) and len(values) == len(ctx.bindings_of(expr.value, frame))
    return complete and all(_legacy(ctx.qualname(o)) is not None for o in options), None


def _torch_name(ctx: ModuleContext, expr: cst.BaseExpression) -> Optional[str]:
    """How this module spells `torch`: the head of `expr` when it is an alias of torch, else any
    name the module imports torch as."""
    head = expr
    while isinstance(head, cst.Attribute):
        head = head.value
    if isinstance(head, cst.Name) and ctx.qualname(head) == "torch":
        return head.value
    return next((local for local, qualname in ctx.walk.imports.items() if qualname == "torch"), None)


def _keywords(torch: str, device: str, dtype: str) -> List[cst.Arg]:
    return list(cst.parse_expression(f'f(dtype={torch}.{dtype}, device="{device}")').args)  # type: ignore[attr-defined]


def _literal_data(expr: cst.BaseExpression, floating: bool) -> bool:
    """A (nested) list or tuple of int literals, or of number literals for a floating type."""
    if isinstance(expr, (cst.List, cst.Tuple)):
        return all(not isinstance(e, cst.StarredElement) and _literal_data(e.value, floating) for e in expr.elements)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    return isinstance(expr, cst.Integer) or (floating and isinstance(expr, cst.Float))


class LegacyTensorType(Rule):
    code = "PFL204"
    name = "legacy-tensor-type"
    summary = "Legacy tensor types (`torch.cuda.FloatTensor`, ...) hide a device transfer in a dtype conversion"
    why = (
        "A legacy type names a dtype *and* a device. `x.type(torch.FloatTensor)`, usually meant as a "
        "cast to float32, also copies a GPU tensor back to host memory, and the host then waits for "
        "every queued kernel to finish before it can continue; `x.type(torch.cuda.FloatTensor)` is "
        "a synchronous copy from pageable host memory. The CUDA constructors return uninitialised "
        "memory (`torch.cuda.FloatTensor(2, 3)`) or build their data from a Python list element by "
        "element on the host and copy it to the GPU synchronously (`torch.cuda.LongTensor([1, 2])`); "
        "CPU constructors (`torch.LongTensor(...)`) hide no transfer and are left alone. Code "
        "written against these types hard-codes one device per type and tends to allocate on one "
        "device and copy to the other; the API has been deprecated since PyTorch 0.4."
    )
    how_to_fix = (
        "Say what you mean with `.to(dtype)` / `.to(device, dtype)` (or `.float()`), and create "
        "tensors with factories that take `dtype=` and `device=` (`torch.empty(2, 3, "
        "dtype=torch.float32, device=\"cuda\")`, `torch.tensor(data, dtype=..., device=...)`). The "
        "fix for `.type(torch.cuda.X)` is unsafe: `.type` keeps a tensor that is already on some "
        "GPU where it is, while `.to(device=\"cuda\")` moves it to the current GPU."
    )
    scope = "any"
    preview = True
    tier_reason = (
        "On unseen real code (judged by hand, 2026-12-01; bench/realworld/) none of 8 findings was "
        "worth a change: 5 were minor, 3 were casts of CPU tensors in offline tools."
    )
    fix_safety = "safe/unsafe"
    valid = [
        "import torch\n\ndef prepare(batch, device):\n    return batch.to(device, torch.float32, non_blocking=True)\n",
        "import torch\n\nbuf = torch.empty(2, 3, dtype=torch.float32, device=\"cuda\")\n",
        "import torch\n\ndef is_half(x):\n    return x.type() == \"torch.cuda.HalfTensor\"\n",
        "import numpy as np\n\nmask = np.zeros(4).astype(np.float32)\n",
        # CPU constructors and casts of CPU tensors hide no transfer.
        "import torch\n\ndef to_meta(sizes, rank, device):\n"
        "    meta = [len(sizes), *sizes, rank]\n"
        "    return torch.LongTensor(data=meta).to(device)\n",
        "import torch\n\nweights = torch.ones(10).type(torch.DoubleTensor)\n",
    ]
    example_run = (
        "accuracy(torch.randn(4, 3, device=device), torch.tensor([0, 1, 2, 0], device=device))\n"
    )
    invalid = [
        Invalid(
            "import torch\n\ndef accuracy(logits: torch.Tensor, labels: torch.Tensor):\n"
            "    correct = (logits.argmax(1) == labels).type(torch.FloatTensor)\n    return correct.mean()\n",
            flagged="(logits.argmax(1) == labels).type(torch.FloatTensor)",
            fixed="import torch\n\ndef accuracy(logits: torch.Tensor, labels: torch.Tensor):\n"
            "    correct = (logits.argmax(1) == labels).to(dtype=torch.float32, device=\"cpu\")\n    return correct.mean()\n",
        ),
        Invalid(
            "import torch as th\n\ndef fresh_hidden(batch, size):\n    return th.cuda.FloatTensor(batch, size).zero_()\n",
            flagged="th.cuda.FloatTensor(batch, size)",
            fixed="import torch as th\n\ndef fresh_hidden(batch, size):\n"
            "    return th.empty(batch, size, dtype=th.float32, device=\"cuda\").zero_()\n",
        ),
        Invalid(
            "import torch\n\ndef class_weights():\n    return torch.cuda.LongTensor([1, 5, 2])\n",
            flagged="torch.cuda.LongTensor([1, 5, 2])",
            fixed="import torch\n\ndef class_weights():\n"
            "    return torch.tensor([1, 5, 2], dtype=torch.int64, device=\"cuda\")\n",
        ),
        Invalid(
            "import torch\n\ndef train(model, loader):\n    for images, labels in loader:\n"
            "        out = model(images.type(torch.cuda.FloatTensor))\n",
            flagged="images.type(torch.cuda.FloatTensor)",
            fixed="import torch\n\ndef train(model, loader):\n    for images, labels in loader:\n"
            "        out = model(images.to(dtype=torch.float32, device=\"cuda\"))\n",
        ),
        Invalid(
            "import torch\n\ncuda = torch.cuda.is_available()\nTensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n\n"
            "def train(generator, loader):\n    for imgs, _ in loader:\n        valid = Tensor(imgs.size(0), 1).fill_(1.0)\n",
            flagged="Tensor(imgs.size(0), 1)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for call, frame in ctx.nodes(cst.Call):
            keyword = call.args[0].keyword if len(call.args) == 1 else None
            if ctx.method_name(call) == "type" and len(call.args) == 1 and (keyword is None or keyword.value == "dtype"):
                legacy, named = _legacy_type(ctx, call.args[0].value, frame)
                receiver = call.func.value  # type: ignore[attr-defined]
                kind = ctx.kind(receiver, frame)
                if legacy and kind not in (NUMPY, PYTHON) and not _only_casts(ctx, receiver, frame, named):
                    yield self.report(call, frame, _cast_message(ctx, call, named),
                                      self._cast_fix(ctx, call, named, kind == TENSOR))
                continue
            legacy, named = _legacy_type(ctx, call.func, frame)
            if legacy and (named is None or named[0] != "cpu"):
                detail = f" ({named[1]} on {named[0]})" if named else ""
                yield self.report(
                    call, frame,
                    f"`{ctx.code(call)}` is a deprecated legacy constructor that hides dtype and device{detail} "
                    "in a type name; create tensors with `torch.empty`/`torch.tensor` and explicit `dtype=` "
                    "and `device=`",
                    self._constructor_fix(ctx, call, named),
                )

    def _cast_fix(self, ctx: ModuleContext, call: cst.Call, named: Optional[Tuple[str, str]],
                  tensor: bool) -> Optional[FixSpec]:
        torch = _torch_name(ctx, call.args[0].value)
        if named is None or torch is None:
            return None
        device, dtype = named
        new = call.with_changes(func=call.func.with_changes(attr=cst.Name("to")),  # type: ignore[attr-defined]
                                args=_keywords(torch, device, dtype))
        # `.type(torch.cuda.X)` leaves a tensor on a non-current GPU there; `.to("cuda")` does not.
        # `Module.type` converts every parameter and buffer, `Module.to(dtype)` floating ones only.
        safety = "safe" if device == "cpu" and tensor else "unsafe"
        return self.replace(f"Replace `.type(...)` with `.to(dtype={torch}.{dtype}, device=\"{device}\")`",
                            safety, (call, new))

    def _constructor_fix(self, ctx: ModuleContext, call: cst.Call,
                         named: Optional[Tuple[str, str]]) -> Optional[FixSpec]:
        torch = _torch_name(ctx, call.func)
        args = list(call.args)
        if named is None or torch is None or not args or any(a.keyword is not None or a.star for a in args):
            return None
        device, dtype = named
        if len(args) == 1 and isinstance(args[0].value, (cst.List, cst.Tuple)):
            if not _literal_data(args[0].value, dtype in _FLOATING):
                return None
            factory = "tensor"  # legacy constructors treat a sequence as data
        elif len(args) == 1 and not isinstance(args[0].value, cst.Integer):
            return None  # one argument may be data (an array, a tensor) or a `torch.Size`
        else:
            factory = "empty"  # sizes: uninitialised memory either way
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new = call.with_changes(func=cst.parse_expression(f"{torch}.{factory}"),
                                args=args + _keywords(torch, device, dtype))
        return self.replace(f"Replace with `{torch}.{factory}(..., dtype={torch}.{dtype}, device=\"{device}\")`",
                            "safe", (call, new))


def _only_casts(ctx: ModuleContext, tensor: cst.BaseExpression, frame: Frame,
                named: Optional[Tuple[str, str]]) -> bool:
    """`.type(torch.FloatTensor)` of a tensor known to be on the CPU: only a cast."""
    return named is not None and named[0] == "cpu" and placement(ctx, tensor, frame) == HOST


def _cast_message(ctx: ModuleContext, call: cst.Call, named: Optional[Tuple[str, str]]) -> str:
    code = ctx.code(call)
    if named is None:
        return (f"`{code}` converts to a legacy tensor type, which moves the tensor between devices as "
                "well as casting it; use `.to(device, dtype)`")
    device, dtype = named
    if device == "cpu":
        return (f"`{code}` casts to {dtype} *and* copies the tensor to host memory, a blocking "
                f"device-to-host copy when it is on the GPU; use `.to(torch.{dtype})` if you only meant the cast")
    return (f"`{code}` casts to {dtype} and copies the tensor to the GPU, synchronously when it is on the "
            "CPU; use `.to(device, dtype)`")
