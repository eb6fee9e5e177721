"""Where tensors live: what the code shows about a tensor's device and about a device argument.

A sync costs only when the value sits on a GPU (`.item()` of a CPU tensor waits for nothing), and
a `.to(device)` copies from the host only when the tensor is there. `placement` answers from
evidence in the file: factories without `device=` (the CPU, unless a `with torch.device(...)`
block or `torch.set_default_device` says otherwise), `.cpu()`, `torch.from_numpy`, batches of a
`DataLoader` built here, code that DataLoader workers run (`collate_fn`, `Dataset.__getitem__`),
the items a loop leaves where they came while it moves their siblings (`image = image.to(device)`
but not `image_id`), `.to(device)` / `.cuda()`, what tokenizers return, and what operations
keep: an op's result lives where its tensor inputs live. Unknown stays unknown: the rules then
behave as if the tensor may be on the GPU.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from perflsp.rules.context import LOADER, PYTHON, TENSOR, ModuleContext
from perflsp.rules.dtypes import target_dtype
from perflsp.rules.pfl301_layout_copy import value_before
from perflsp.rules.walk import Binding, ClassInfo, Frame, FunctionInfo, Part, last_name

HOST = "cpu"
ACCELERATOR = "accelerator"

# Device types whose host-to-device copies can run asynchronously from pinned memory.
ACCELERATORS = frozenset({"cuda", "xpu"})
# What device-agnostic scripts call the accelerator they were written for.
_DEVICE_NAMES = frozenset({"device", "dev"})
# Factories of sizes and ranges: without `device=` they allocate on the default device.
_SIZE_FACTORIES = frozenset(
    "torch." + name for name in
    """zeros ones empty full arange range linspace logspace eye rand randn randint randperm
    empty_strided tril_indices triu_indices""".split()
)
# Never 0-dim. Only 0-dim CPU tensors mix with GPU ones, so whatever such a CPU tensor is combined
# with, the result stays on the CPU (or the operation fails).
_ARRAY_FACTORIES = frozenset("torch." + name for name in "arange linspace logspace randperm".split())
# Build a tensor from their data: on the data's device when it is a tensor, else on the default device.
_FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray"})
_FROM_HOST_MEMORY = frozenset({"torch.from_numpy", "torch.frombuffer"})
_CREATIONS = _SIZE_FACTORIES | _FROM_DATA | _FROM_HOST_MEMORY | {"torch.sparse_coo_tensor", "torch.sparse_csr_tensor"}
# Legacy constructors name their device: `torch.LongTensor(...)` is on the CPU, `torch.cuda.LongTensor(...)` not.
_LEGACY = {"torch": HOST, "torch.cuda": ACCELERATOR}
_GATHERS = frozenset("torch." + name for name in "cat concat concatenate stack hstack vstack".split())
# Methods whose result is the receiver's data reshaped, viewed or cast: same device, as many dims or more.
_SAME_DATA = frozenset(
    """view view_as reshape reshape_as expand expand_as transpose permute contiguous clone detach
    unsqueeze flatten unflatten repeat tile float half bfloat16 double long int bool short byte
    requires_grad_ t""".split()
)
_DISPLAYS = (cst.List, cst.ListComp, cst.Tuple)  # Python data: at least 1-dim as a tensor
_NEW_ON_RECEIVER = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
_DATASET_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__"})
_MAX_DEPTH = 12
# Tokenizers and processors (Hugging Face's and the like) return their tensors in host memory
# (not `logits_processor`, which works on the model's output).
_TOKENIZER = re.compile(r"^(.*tokeni[sz]er|(image_|text_)?processor)$")
_TOKENIZER_METHODS = frozenset({"encode", "encode_plus", "batch_encode_plus", "apply_chat_template", "pad"})


@dataclass(frozen=True)
class _Place:
    device: str  # HOST or ACCELERATOR
    array: bool  # known not to be 0-dim


def placement(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> Optional[str]:
    """HOST or ACCELERATOR when the code shows where the tensor `expr` lives; None when unknown."""
    place = _facts(ctx).place(expr, frame, 0)
    if place is not None:
        return place.device
    if in_loader_worker(ctx, frame):
        return HOST  # DataLoader workers build batches in host memory
    return None


def on_host(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """The tensor is known to live in host memory: reading it waits for no GPU."""
    return placement(ctx, expr, frame) == HOST


def in_loader_worker(ctx: ModuleContext, frame: Frame) -> bool:
    """Code that DataLoader workers run: a collate function (named so, or passed as `collate_fn=`),
    a collator's `__call__`, a Dataset's `__getitem__`/`__iter__`, or a function nested in one."""
    function = frame.function
    while function is not None:
        if _worker_function(ctx, function):
            return True
        function = function.parent
    return False


def to_device_arg(ctx: ModuleContext, call: cst.Call) -> Optional[cst.Arg]:
    """The device argument of `x.to(device, ...)` / `x.to(device=...)`."""
    return ctx.argument(call, "device", 0)


def is_accelerator(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """`expr` names an accelerator: "cuda:0", `torch.device("cuda")`, `"cuda" if ... else "cpu"`,
    or an otherwise unknown `device`/`dev`/`self.device`. An unknown device that may be unset
    (`device=None`, an optional parameter) or one passed around in DataLoader workers is no such
    evidence: without a device, tensors stay on the CPU."""
    device = ctx.device_type(expr, frame)
    if device is not None:
        return device in ACCELERATORS
    if _may_be_unset(ctx, expr, frame, 0) or in_loader_worker(ctx, frame):
        return False
    if isinstance(expr, cst.Name):
        return expr.value in _DEVICE_NAMES
    return _self_attribute(expr) in _DEVICE_NAMES


def computed(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, depth: int = 0) -> bool:
    """`expr` is the result of tensor operations (a torch function, arithmetic on tensors, a module's
    output, a tensor method that computes), not data as loaded or created: it lives where its
    inputs live, which in per-step code is the device. Views, casts and indexing keep loaded data
    what it is."""
    while True:
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and ctx.method_name(expr) in _SAME_DATA:
            expr = expr.func.value  # type: ignore[attr-defined]
        else:
            break
    if isinstance(expr, cst.Name):
        if depth > 4:
            return False
        value = value_before(ctx, expr)
        if value is not None:
            return computed(ctx, value, frame, depth + 1)
        bindings = ctx.bindings_of(expr.value, frame)
        return bool(bindings) and all(b.how == "assign" and b.index is None and b.value is not None
                                      and computed(ctx, b.value, b.frame, depth + 1) for b in bindings)  # type: ignore[arg-type]
    if isinstance(expr, (cst.BinaryOperation, cst.Comparison)):
        return ctx.is_tensor(expr, frame)
    if not isinstance(expr, cst.Call):
        return False
    qualname = ctx.qualname(expr.func)
    if qualname in _GATHERS:
        # `torch.cat(stored)` gathers data kept somewhere; `torch.cat([a, b])` of computed parts is computed.
        parts = ctx.positional(expr)[:1]
        return bool(parts) and isinstance(parts[0].value, (cst.List, cst.Tuple)) and all(
            computed(ctx, e.value, frame, depth + 1) for e in parts[0].value.elements)  # type: ignore[attr-defined]
    if qualname is not None:
        return (qualname.startswith("torch.") and ctx.kind(expr, frame) == TENSOR
                and qualname not in _CREATIONS and not qualname.endswith("Tensor"))
    if ctx.is_module_like(expr.func, frame):
        return True
    method = ctx.method_name(expr)
    return (method is not None and method not in ("to", "cuda", "cpu", "pin_memory", "type")
            and ctx.is_tensor(expr.func.value, frame))  # type: ignore[attr-defined]


def pinned(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """The tensor is in pinned host memory: `.pin_memory()`, a factory called with
    `pin_memory=True`, or a batch of a `DataLoader(..., pin_memory=True)` built in this file."""
    if isinstance(expr, cst.Subscript):
        return pinned(ctx, expr.value, frame)
    if isinstance(expr, cst.Call):
        if ctx.method_name(expr) == "pin_memory":
            return True
        return ctx.qualname(expr.func) in _SIZE_FACTORIES and _flag(ctx, expr, "pin_memory")
    if not isinstance(expr, cst.Name):
        return False
    value = value_before(ctx, expr)
    if value is not None:
        return pinned(ctx, value, frame)
    # `for x, y in loader:` then `x = x.to(device)`: the loop's items are what is copied.
    loops = [b for b in ctx.bindings_of(expr.value, frame) if b.how == "for"]
    return bool(loops) and all(
        b.value is not None and _pinned_loader(ctx, _iterated(ctx, b.value), b.frame) for b in loops)  # type: ignore[arg-type]


def _pinned_loader(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    loaders = _torch_loaders(ctx, expr, frame)
    return bool(loaders) and all(_flag(ctx, call, "pin_memory") for call in loaders)


def _flag(ctx: ModuleContext, call: cst.Call, name: str) -> bool:
    """`name=True` is passed to `call`."""
    arg = ctx.keyword(call, name)
    return arg is not None and ctx.literal(arg.value) is True


def _torch_loaders(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> List[cst.Call]:
    """The `DataLoader(...)` calls `expr` is, or that a name is only ever bound to; empty when it
    may be anything else, such as a loader wrapped by `accelerator.prepare`, which yields batches
    already on the device."""
    if isinstance(expr, cst.Call):
        return [expr] if ctx.kind(expr, frame) == LOADER else []
    if not isinstance(expr, cst.Name):
        return []
    bindings = ctx.bindings_of(expr.value, frame)
    calls = [b.value for b in bindings if b.how == "assign" and b.index is None and isinstance(b.value, cst.Call)]
    if not bindings or len(calls) != len(bindings) or any(ctx.kind(c, frame) != LOADER for c in calls):
        return []
    return calls


def _moves_the_others(ctx: ModuleContext, binding: Binding) -> bool:
    """`for image, image_id in loader:` whose body moves `image` to the device but never
    `image_id`: the batch arrives in host memory, and what the loop leaves there stays there."""
    loop = ctx.parent(binding.value)  # type: ignore[arg-type]
    if binding.index is None or not isinstance(loop, cst.For) or not isinstance(loop.target, (cst.Tuple, cst.List)):
        return False
    names = [e.value.value for e in loop.target.elements if isinstance(e.value, cst.Name)]
    moved = {target.value for target, value in _rebindings(loop.body)
             if isinstance(target, cst.Name) and target.value in names and _moves(ctx, value, target.value)}
    return bool(moved) and binding.name not in moved


def _rebindings(body: cst.CSTNode) -> Iterator[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of the body's own simple assignments, tuples unpacked pairwise."""
    for stmt in body.body:  # type: ignore[attr-defined]
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
                if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple):
                    yield from ((t.value, v.value) for t, v in zip(target.elements, value.elements))
                else:
                    yield target, value


def _moves(ctx: ModuleContext, value: cst.BaseExpression, name: str) -> bool:
    """`name.to(device)`, `name.cuda()` (`.to(dtype)` alone moves nothing)."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and isinstance(value.func.value, cst.Name) and value.func.value.value == name):
        return False
    method = value.func.attr.value
    return method == "cuda" or (method == "to" and _destination(ctx, value) is not None)


def _destination(ctx: ModuleContext, call: cst.Call) -> Optional[cst.Arg]:
    """Where `x.to(...)` moves `x`: its device argument, unless that is the dtype (`.to(torch.half)`)."""
    target = to_device_arg(ctx, call)
    return None if target is None or target.value is target_dtype(ctx, call) else target


def _iterated(ctx: ModuleContext, iterable: cst.BaseExpression) -> cst.BaseExpression:
    """`loader` for `enumerate(loader)`, `tqdm(loader)`, `iter(loader)` and `loader` itself."""
    while isinstance(iterable, cst.Call) and iterable.args and (
            ctx.builtin(iterable.func) in ("enumerate", "iter")
            or (ctx.qualname(iterable.func) or "").endswith("tqdm")):
        iterable = iterable.args[0].value
    return iterable


# -- the inference behind `placement` ---------------------------------------------------------------

class _Facts:
    """Memo of `placement` answers (one per statement checked, see `ModuleContext.checking`)."""

    def __init__(self, ctx: ModuleContext):
        self.ctx = ctx
        self.memo: Dict[Tuple[int, int], Optional[_Place]] = {}
        self.in_progress: Set[Tuple[int, int]] = set()

    def stored(self, key: str) -> Tuple[Tuple[cst.BaseExpression, Frame], ...]:
        """The values this file assigns under `[key]` (`state["step"] = torch.tensor(0.0)`)."""
        return self.ctx.fact(_stored, key)

    def default_device_set(self) -> bool:
        """`torch.set_default_device(...)` somewhere in the file: factories may allocate anywhere."""
        return self.ctx.fact(_default_device_set)

    def place(self, expr: cst.BaseExpression, frame: Frame, depth: int) -> Optional[_Place]:
        key = (id(expr), id(frame))
        if key in self.memo:
            return self.memo[key]
        if key in self.in_progress or depth > _MAX_DEPTH:
            return None
        self.in_progress.add(key)
        try:
            found = self._place(expr, frame, depth + 1)
        finally:
            self.in_progress.discard(key)
        self.memo[key] = found
        return found

    def _place(self, expr: cst.BaseExpression, frame: Frame, depth: int) -> Optional[_Place]:
        ctx = self.ctx
        if isinstance(expr, cst.Name):
            return self._name(expr, frame, depth)
        if isinstance(expr, cst.Call):
            return self._call(expr, frame, depth)
        key = _constant_key(expr)
        if key is not None:
            # `state["step"]`: optimizer state and the like, placed where every store under the key puts it
            return _same([self.place(value, where, depth) for value, where in self.stored(key)]) if self.stored(key) else None
        if isinstance(expr, (cst.Subscript, cst.Attribute)) and ctx.is_tensor(expr, frame) and ctx.is_tensor(expr.value, frame):
            inner = self.place(expr.value, frame, depth)  # `x[i]`, `x.T`, `x.grad`
            return _Place(inner.device, False) if inner is not None else None
        if isinstance(expr, (cst.Subscript, cst.Attribute)) and ctx.kind(expr.value, frame) is None:
            inner = self.place(expr.value, frame, depth)  # `encoded.input_ids`, `encoded["input_ids"]`
            return inner if inner is not None and inner.device == HOST and inner.array else None
        if isinstance(expr, cst.BinaryOperation):
            return self._join([expr.left, expr.right], frame, depth)
        if isinstance(expr, cst.UnaryOperation):
            return self.place(expr.expression, frame, depth)
        if isinstance(expr, cst.Comparison):
            return self._join([expr.left, *(c.comparator for c in expr.comparisons)], frame, depth)
        return None

    def _name(self, name: cst.Name, frame: Frame, depth: int) -> Optional[_Place]:
        value = value_before(self.ctx, name)
        if value is not None:
            return self.place(value, frame, depth)
        bindings = self.ctx.bindings_of(name.value, frame)
        places = [self._binding(b, depth) for b in bindings if b.how != "augassign"]  # in place: same device
        return _same(places)

    def _binding(self, binding: Binding, depth: int) -> Optional[_Place]:
        value, frame = binding.value, binding.frame
        if binding.how == "param" and in_loader_worker(self.ctx, frame):
            return _Place(HOST, False)
        if value is None or binding.how not in ("assign", "walrus", "for"):
            return None
        if binding.how == "for":
            items = self._items(value, frame, binding.index, depth)  # type: ignore[arg-type]
            if items is None and _moves_the_others(self.ctx, binding):
                return _Place(HOST, False)
            return items
        if binding.index is not None and isinstance(value, (cst.Tuple, cst.List)):
            elements = value.elements
            return self.place(elements[binding.index].value, frame, depth) if binding.index < len(elements) else None
        place = self.place(value, frame, depth)  # type: ignore[arg-type]
        # `a, b = x.chunk(2)`: the parts live with the whole.
        return place if binding.index is None or place is None else _Place(place.device, False)

    def _items(self, iterable: cst.BaseExpression, frame: Frame, index: Optional[int], depth: int) -> Optional[_Place]:
        """Where the items of `for <target> in iterable` live (at tuple position `index`)."""
        ctx = self.ctx
        if isinstance(iterable, cst.Call) and ctx.builtin(iterable.func) == "enumerate" and iterable.args:
            return None if index == 0 else self._items(iterable.args[0].value, frame, None, depth)
        if isinstance(iterable, cst.Call) and ctx.builtin(iterable.func) == "zip":
            zipped = ctx.positional(iterable)
            return self._items(zipped[index].value, frame, None, depth) if index is not None and index < len(zipped) else None
        if _torch_loaders(ctx, _iterated(ctx, iterable), frame):
            return _Place(HOST, False)  # a torch DataLoader yields batches in host memory
        if isinstance(iterable, (cst.List, cst.Tuple)):
            return _same([self.place(e.value, frame, depth) for e in iterable.elements])
        place = self.place(iterable, frame, depth)
        if place is not None and (place.device == HOST or ctx.is_tensor(iterable, frame)):
            return _Place(place.device, False)  # rows, or the parts of `x.split(n)`
        return None

    def _call(self, call: cst.Call, frame: Frame, depth: int) -> Optional[_Place]:
        ctx = self.ctx
        if _tokenizes(ctx, call):
            return _Place(HOST, True)  # token ids: never 0-dim
        qualname = ctx.qualname(call.func)
        if qualname is not None:
            return self._torch_call(qualname, call, frame, depth)
        method = ctx.method_name(call)
        receiver = call.func.value if method is not None else None  # type: ignore[attr-defined]
        if receiver is None or ctx.kind(receiver, frame) not in (TENSOR, None) or _maybe_object(ctx, receiver, frame):
            return None  # a module's `.to(device)` or `.loader()` makes no tensor
        # Moves decide the device whatever the receiver is (`batch["x"].to(device)`); other methods
        # of a tensor keep it where the receiver is.
        if method in ("cpu", "pin_memory"):
            return _Place(HOST, False)
        if method == "cuda":
            return _Place(ACCELERATOR, False)
        if method == "to":
            return self._moved(call, receiver, frame, depth)
        if method in _NEW_ON_RECEIVER:
            device = ctx.keyword(call, "device")
            return self._device(device.value, frame, depth) if device is not None else self._on_device_of(receiver, frame, depth)
        if method == "type":
            return None  # legacy types name a device too
        place = self.place(receiver, frame, depth)
        if place is None or method in _SAME_DATA:
            return place
        # Arguments of unknown kind are taken for sizes and dims here, unlike the operands of `a + b`.
        tensors = [a.value for a in ctx.positional(call) if ctx.is_tensor(a.value, frame)]
        joined = _combine([place, *(self.place(t, frame, depth) for t in tensors)])
        return _Place(joined.device, False) if joined is not None else None

    def _torch_call(self, qualname: str, call: cst.Call, frame: Frame, depth: int) -> Optional[_Place]:
        ctx = self.ctx
        if not qualname.startswith("torch.") or ctx.kind(call, frame) != TENSOR:
            return None
        if qualname in _FROM_HOST_MEMORY:
            return _Place(HOST, False)
        module, _, name = qualname.rpartition(".")
        if name.endswith("Tensor") and module in _LEGACY:
            return _Place(_LEGACY[module], False)
        args = ctx.positional(call)
        device = ctx.keyword(call, "device")
        named = device.value if device is not None and not _unset(device.value) else None
        if qualname in _FROM_DATA:
            data = args[0].value if args else None
            if data is None or not (isinstance(data, _DISPLAYS) or ctx.kind(data, frame) == PYTHON):
                if named is not None:
                    return self._device(named, frame, depth)
                # `torch.tensor(t)` stays where the tensor t is.
                return self.place(data, frame, depth) if data is not None and ctx.is_tensor(data, frame) else None
            array = isinstance(data, _DISPLAYS)
        elif qualname in _SIZE_FACTORIES:
            array = qualname in _ARRAY_FACTORIES
        elif named is not None:
            return self._device(named, frame, depth)
        else:
            operands: List[cst.BaseExpression] = []
            for arg in args:
                if isinstance(arg.value, (cst.List, cst.Tuple)):
                    operands.extend(e.value for e in arg.value.elements)  # `torch.cat([a, b])`
                else:
                    operands.append(arg.value)
            return self._join(operands, frame, depth)
        place = self._default(frame) if named is None else self._device(named, frame, depth)
        return _Place(place.device, array) if place is not None else None

    def _moved(self, call: cst.Call, receiver: cst.BaseExpression, frame: Frame, depth: int) -> Optional[_Place]:
        """`x.to(...)`: the device it names, the device of a tensor it is given, or x's own."""
        ctx = self.ctx
        target = _destination(ctx, call)
        if target is None:
            return self.place(receiver, frame, depth)
        if ctx.is_tensor(target.value, frame):
            return self._on_device_of(target.value, frame, depth)
        return self._device(target.value, frame, depth)

    def _device(self, expr: cst.BaseExpression, frame: Frame, depth: int) -> Optional[_Place]:
        """Where a device argument puts a tensor: `x.device` is x's device."""
        ctx = self.ctx
        if isinstance(expr, cst.Attribute) and expr.attr.value == "device" and ctx.is_tensor(expr.value, frame):
            return self._on_device_of(expr.value, frame, depth)
        if ctx.device_type(expr, frame) == HOST:
            return _Place(HOST, False)
        return _Place(ACCELERATOR, False) if is_accelerator(ctx, expr, frame) else None

    def _on_device_of(self, tensor: cst.BaseExpression, frame: Frame, depth: int) -> Optional[_Place]:
        place = self.place(tensor, frame, depth)
        return _Place(place.device, False) if place is not None else None

    def _default(self, frame: Frame) -> Optional[_Place]:
        """The device factories use without `device=`: the innermost `with torch.device(...)`, else
        the CPU, unless the file changes the default."""
        ctx = self.ctx
        for block in reversed(frame.withs):
            for item in block.items:
                if isinstance(item.item, cst.Call) and ctx.qualname(item.item.func) == "torch.device":
                    return self._device(item.item, frame, 0)
        return None if self.default_device_set() else _Place(HOST, False)

    def _join(self, operands: Iterable[cst.BaseExpression], frame: Frame, depth: int) -> Optional[_Place]:
        """Where an operation on `operands` puts its result; plain Python values do not count."""
        ctx = self.ctx
        return _combine([self.place(o, frame, depth) if ctx.kind(o, frame) in (TENSOR, None) else None
                         for o in operands if ctx.kind(o, frame) != PYTHON])


def _stored(ctx: ModuleContext, key: str) -> Tuple[Tuple[cst.BaseExpression, Frame], ...]:
    return tuple((value, frame) for found, value, frame in ctx.walk.gather(_stores) if found == key)


def _stores(part: Part) -> List[Tuple[str, cst.BaseExpression, Frame]]:
    """(key, value, frame) of a statement's `x[key] = value` with a constant string key."""
    return [(found, node.value, frame) for node, frame in part.by_type.get(cst.Assign, ())
            for found in (_constant_key(t.target) for t in node.targets) if found is not None]


def _collate_fns(ctx: ModuleContext) -> FrozenSet[str]:
    """The names passed as `collate_fn=` anywhere in the file."""
    return frozenset(ctx.walk.gather(_collate_fn_names))


def _collate_fn_names(part: Part) -> List[str]:
    return [last_name(arg.value) or "" for call, _ in part.by_type.get(cst.Call, ()) for arg in call.args
            if arg.keyword is not None and arg.keyword.value == "collate_fn"]


def _default_device_set(ctx: ModuleContext) -> bool:
    return any(ctx.qualname(call.func) == "torch.set_default_device" for call, _ in ctx.calls_named("set_default_device"))


def _constant_key(expr: cst.BaseExpression) -> Optional[str]:
    """`"step"` for `state["step"]` / `self.state["step"]`: a string-keyed slot of a container."""
    if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1:
        return None
    index = expr.slice[0].slice
    if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
        value = index.value.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _combine(places: List[Optional[_Place]]) -> Optional[_Place]:
    """Where the result of an operation on tensors at `places` (None: unknown) lives. Tensors of one
    operation share a device, except 0-dim CPU tensors, which join any device: so one GPU operand
    puts the result on the GPU, one CPU operand that is not 0-dim keeps it on the CPU, and
    otherwise every operand must be a known CPU tensor."""
    known = [p for p in places if p is not None]
    host_array = any(p.device == HOST and p.array for p in known)
    if any(p.device == ACCELERATOR for p in known):
        return None if host_array else _Place(ACCELERATOR, False)
    if host_array:
        return _Place(HOST, True)
    return _Place(HOST, False) if known and len(known) == len(places) else None


def _same(places: List[Optional[_Place]]) -> Optional[_Place]:
    """The one place every binding gives, or None."""
    if not places or any(p is None for p in places):
        return None
    devices = {p.device for p in places}  # type: ignore[union-attr]
    return _Place(devices.pop(), all(p.array for p in places)) if len(devices) == 1 else None  # type: ignore[union-attr]


def _facts(ctx: ModuleContext) -> _Facts:
    return ctx.scoped(_Facts, lambda: _Facts(ctx))


def _worker_function(ctx: ModuleContext, function: FunctionInfo) -> bool:
    name = function.name
    cls = function.class_info
    if "collate" in name.lower() or name in ctx.fact(_collate_fns):
        return True
    if cls is None:
        return False
    if name == "__call__":
        return "collat" in cls.name.lower()
    return name in _DATASET_METHODS and _is_dataset(ctx, cls)


def _is_dataset(ctx: ModuleContext, cls: ClassInfo) -> bool:
    return any((ctx.qualname(base.value) or ctx.last_name(base.value) or "").endswith("Dataset")
               for base in cls.node.bases)


def _tokenizes(ctx: ModuleContext, call: cst.Call) -> bool:
    """`tokenizer(text, return_tensors="pt")`, `self.processor(...)`, `tokenizer.encode(...)`."""
    if _TOKENIZER.match(ctx.last_name(call.func) or ""):
        return True
    method = ctx.method_name(call)
    return method in _TOKENIZER_METHODS and bool(_TOKENIZER.match(ctx.last_name(call.func.value) or ""))  # type: ignore[attr-defined]


def _maybe_object(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> bool:
    """A module, or what an unknown function or class returns (`Node2Vec(...)`): its `.to(device)`
    moves whatever it holds, not one tensor."""
    if ctx.is_module_like(expr, frame):
        return True
    return (isinstance(expr, cst.Call) and ctx.kind(expr, frame) is None
            and (ctx.method_name(expr) is None or ctx.qualname(expr.func) is not None))


def _self_attribute(expr: cst.BaseExpression) -> Optional[str]:
    """`attr` for `self.attr`."""
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return expr.attr.value
    return None


def _may_be_unset(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, depth: int) -> bool:
    """A name or `self.<attr>` that holds no device on some path: assigned `None` or `""`, or a
    parameter that defaults to one (`self.device = device` in `__init__(self, device=None)`)."""
    if depth > 2:
        return False
    if isinstance(expr, cst.Name):
        for binding in ctx.bindings_of(expr.value, frame):
            value = binding.value
            if binding.how == "param" and isinstance(value, cst.Param) and value.default is not None:
                value = value.default
            if _unset(value):
                return True
        return False
    attr = _self_attribute(expr)
    if attr is None or frame.class_info is None:
        return False
    return any(_unset(value) or _may_be_unset(ctx, value, where, depth + 1)
               for value, where in frame.class_info.attr_bindings.get(attr, []))


def _unset(value: Optional[cst.CSTNode]) -> bool:
    return ((isinstance(value, cst.Name) and value.value == "None")
            or (isinstance(value, cst.SimpleString) and value.evaluated_value == ""))
