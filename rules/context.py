"""`ModuleContext`: what every rule reads about one parsed file.

Built on the single `Walk`: qualified names through import aliases, a small type inference
(tensor / nn.Module / numpy / plain Python / unknown), hot regions with the reason they are hot,
loop-invariance, and source positions computed only for the statements that hold findings.
Rules ask questions; nothing here knows about any particular rule.

The engine checks one top-level statement at a time (`checking`): the rules then see that
statement's nodes, the answers worked out for it are kept for it alone (memos start empty), and
whatever it reads outside itself is recorded in its `Reads`, so that its findings can be kept
while a later version reads the same (`perflsp.rules.reuse`): the bindings of a module-level
name, whether the module binds a name anywhere, facts about the whole module (`fact`), and the
top-level statements themselves (`top_level`).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from perflsp.config import Settings
from perflsp.rules import positions
from perflsp.rules.hotness import HotMap
from perflsp.rules.positions import Kept, Span
from perflsp.rules.walk import Binding, ClassInfo, Frame, FunctionInfo, Part, Walk, calls_named, iter_children, last_name

# Kinds of values the inference tells apart. `None` means unknown: rules that need a tensor
# stay silent on unknown values, because false positives kill linters.
TENSOR = "tensor"
MODULE = "module"  # an nn.Module instance
NUMPY = "numpy"
PYTHON = "python"  # a known non-tensor Python value (int, list, dtype, device, ...)
LOADER = "loader"  # a DataLoader: iterating it yields tensors
PARAMS = "params"  # model.parameters(): iterating it yields tensors
NAMED_PARAMS = "named-params"  # model.named_parameters(): yields (name, tensor)

# torch.<name> callables that do not return tensors.
# `torch.cuda.synchronize()` and its siblings for other backends (`torch.cpu.synchronize` is a no-op).
_DEVICE_SYNC = re.compile(r"^torch\.(cuda|xpu|mps|accelerator)\.synchronize$")
# Host clocks: code that reads one is measuring, and must synchronize to measure the GPU's work.
CLOCKS = frozenset({
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "timeit.default_timer",
})
_TORCH_NON_TENSOR = frozenset(
    """device dtype no_grad enable_grad inference_mode set_grad_enabled is_grad_enabled manual_seed
    seed initial_seed is_tensor is_storage is_floating_point is_complex numel compile save load
    get_default_dtype set_default_dtype set_default_device set_printoptions Size Generator autocast
    use_deterministic_algorithms set_float32_matmul_precision get_float32_matmul_precision
    set_num_threads get_num_threads finfo iinfo typename is_nonzero set_anomaly_enabled
    is_anomaly_enabled vmap cond""".split()
)
_TORCH_NON_TENSOR_PREFIXES = (
    "torch.cuda.", "torch.backends.", "torch.optim.", "torch.utils.", "torch.distributed.",
    "torch.jit.", "torch.autograd.", "torch.profiler.", "torch.onnx.", "torch.testing.", "torch.amp.",
    "torch.compiler.", "torch.multiprocessing.", "torch.mps.", "torch.xpu.", "torch.hub.",
)
_TORCH_TENSOR_PREFIXES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.", "torch.nn.init.")
_TENSOR_NON_TENSOR_METHODS = frozenset(
    """item tolist size dim ndimension numel nelement element_size data_ptr stride is_contiguous
    is_floating_point is_complex get_device backward storage untyped_storage equal is_pinned
    register_hook is_set_to has_names storage_offset""".split()
)
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "grad", "data", "real", "imag"})
_TENSOR_PYTHON_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "names", "itemsize", "nbytes"})
_MODULE_SELF_METHODS = frozenset(
    "to cuda cpu eval train half float double bfloat16 requires_grad_ apply share_memory to_empty compile".split()
)
_PY_RESULT_BUILTINS = frozenset(
    "len int float bool str range list dict tuple set sorted enumerate zip isinstance print repr "
    "hasattr getattr type id hash round format".split()
)
_LITERALS = (
    cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
    cst.FormattedString, cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.DictComp,
    cst.SetComp, cst.Lambda,
)
_INDEX_LIKE = frozenset({"idx", "i", "step", "epoch", "batch_idx", "dataloader_idx", "batch_nb", "optimizer_idx"})


class Reads:
    """What checking one top-level statement read outside it (see `perflsp.rules.reuse`)."""

    __slots__ = ("scope", "bound", "facts", "top_level")

    def __init__(self) -> None:
        self.scope: Dict[str, Tuple[object, ...]] = {}  # a module-level name -> `signature` of its bindings
        self.bound: Dict[str, bool] = {}  # a name -> whether the module binds it anywhere
        self.facts: Dict[Tuple[Callable[..., Any], Tuple[Any, ...]], Any] = {}  # (fact, arguments) -> value
        self.top_level = False  # read the top-level statements themselves: holds for this version only


def signature(bindings: Sequence[Binding]) -> Tuple[object, ...]:
    """What the readers of module-level bindings see of them. A `def` binds a function, whose body
    only its own statement reads, or a class, whose bases decide its kind (`_is_module_class`): the
    bases (kept as the very same nodes while its body is edited) stand for it. Any other binding
    stands for itself: its statement walked again, it is another binding."""
    return tuple(b if b.how != "def" else ("class", tuple(b.value.bases)) if isinstance(b.value, cst.ClassDef)
                 else "def" for b in bindings)


class ModuleContext:
    def __init__(self, module: cst.Module, settings: Settings, hot: Optional[HotMap] = None, path: str = "<stdin>",
                 line_label: Callable[[int], str] = lambda row: f"line {row}", walk: Optional[Walk] = None,
                 rows: Optional[Sequence[int]] = None):
        self.module = module
        self.hot = hot or HotMap.for_source(module.code, path, settings, line_label)
        self.line_label = line_label  # notebooks name rows as "line 2 of cell 3"
        self.settings = settings
        self.path = path
        self.walk = walk or Walk(module)
        self._assigned: Dict[cst.CSTNode, Set[str]] = {}
        self._facts: Dict[Tuple[Callable[..., Any], Tuple[Any, ...]], Any] = {}
        self.rows = rows  # the first row of each top-level statement, when known (`positions.first_rows`)
        self._spans: Dict[int, Span] = {}
        # What the rules are checking now (`checking`): None for the whole module.
        self._part: Optional[Part] = None
        self._recording: Optional[Reads] = None
        self._kind_memo: Dict[Tuple[int, int], Optional[str]] = {}
        self._in_progress: Set[Tuple[int, int]] = set()
        self._scoped: Dict[object, Any] = {}

    # -- one statement at a time ------------------------------------------------------------------

    @contextmanager
    def checking(self, stmt: cst.CSTNode) -> Iterator[Reads]:
        """Within it, the rules check the top-level statement `stmt`: `nodes`, `functions` and
        `classes` are its own, memos start empty, and what it reads outside itself is recorded."""
        reads = Reads()
        saved = self._enter(self.walk.part_of(stmt), reads)
        try:
            yield reads
        finally:
            self._leave(saved)

    def fact(self, compute: Callable[..., Any], *args: Any) -> Any:
        """`compute(self, *args)`, a fact about the whole module: worked out once per version and
        apart from the statement being checked (with memos of its own, so that it never depends on
        which statement asked first), and recorded as read by that statement."""
        key = (compute, args)
        if key in self._facts:
            value = self._facts[key]
        else:
            saved = self._enter(None, None)
            try:
                value = compute(self, *args)
            finally:
                self._leave(saved)
            self._facts[key] = value
        if self._recording is not None:
            self._recording.facts[key] = value
        return value

    def scoped(self, key: object, make: Callable[[], Any]) -> Any:
        """Helpers' memos (`key` names one): kept while one statement, or one fact, is worked out."""
        found = self._scoped.get(key)
        if found is None:
            found = self._scoped[key] = make()
        return found

    def checked(self, node: cst.CSTNode) -> bool:
        """`node` is in what the rules check now (the statement, or the whole module)."""
        return self._part is None or node in self._part.parents

    def whole_module(self) -> cst.Module:
        """The module, to read across its top-level statements: a statement whose check reads them
        depends on them all."""
        if self._recording is not None:
            self._recording.top_level = True
        return self.module

    def top_level(self) -> Sequence[cst.CSTNode]:
        """The module's top-level statements (see `whole_module`)."""
        return self.whole_module().body

    def _enter(self, part: Optional[Part], reads: Optional[Reads]) -> Tuple[Any, ...]:
        saved = (self._part, self._recording, self._kind_memo, self._in_progress, self._scoped)
        self._part, self._recording, self._kind_memo, self._in_progress, self._scoped = part, reads, {}, set(), {}
        return saved

    def _leave(self, saved: Tuple[Any, ...]) -> None:
        self._part, self._recording, self._kind_memo, self._in_progress, self._scoped = saved

    # -- traversal helpers ------------------------------------------------------------------------

    def nodes(self, node_type: type) -> List[Tuple[cst.CSTNode, Frame]]:
        """The nodes of the type in what the rules check now, in source order."""
        if self._part is None:
            return self.walk.nodes(node_type)
        return self._part.by_type.get(node_type, [])

    def calls_named(self, *names: str) -> List[Tuple[cst.Call, Frame]]:
        """Every call in the module of a callee written or imported under one of `names` (`load`
        finds `torch.load(...)`, `model.load(...)` and, after `from torch import load as tl`, `tl(...)`)."""
        wanted = set(names)
        wanted.update(local for local, qualname in self.walk.imports.items() if qualname.rsplit(".", 1)[-1] in names)
        return self.walk.gather(calls_named(frozenset(wanted)))

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.walk.parents.get(node)

    def descendants(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        stack = list(iter_children(node))
        while stack:
            current = stack.pop()
            yield current
            stack.extend(iter_children(current))

    def waits_anyway(self, node: cst.CSTNode) -> bool:
        """The code around `node` already waits for the GPU on purpose: a statement of the same
        block, or of a block around it up to the loop's body or the function's, synchronizes the
        device (`torch.cuda.synchronize()`, or a project's own `synchronize()`), or the next
        statement reads a host clock (a sync there, `loss.item()` then `t1 = time.perf_counter()`,
        is what makes the time right). A sync at `node` then adds no stall: the queue is drained on
        every pass anyway."""
        for depth, (block, body, index) in enumerate(self._blocks_around(node)):
            if depth == 0 and any(self._clock(call) for stmt in body[index + 1:index + 2] for call in self._calls(stmt)):
                return True
            # Worked out once per block: every read in a body of thousands of statements asks.
            syncs = self.scoped((_synchronizes, block),
                                lambda: [i for i, stmt in enumerate(body) if _synchronizes(self, stmt)])
            if any(i != index for i in syncs):
                return True
            if not isinstance(self.parent(block), (cst.If, cst.Else, cst.With, cst.Try, cst.Finally)):
                return False  # a loop's or a function's body: the pass it makes ends here
        return False

    def back_to_back(self, nodes: List[cst.CSTNode]) -> List[List[cst.CSTNode]]:
        """`nodes` (in source order) in runs that follow one another: in the same statement, in
        the statement right after the last one's (a loop whose last statement holds one counts as
        ending with it), or first in the body of the `if` or `while` whose test holds one. Syncs in
        such a run wait once: the first drains the queue, and the next ones find only the little
        work queued since."""
        runs: List[List[cst.CSTNode]] = []
        run_at: Dict[cst.CSTNode, List[cst.CSTNode]] = {}  # statement -> the run it holds
        for node in nodes:
            block, body, index = next(self._blocks_around(node), (None, [], -1))
            if block is None:
                runs.append([node])
                continue
            run = run_at.get(body[index])
            # (a `while` test runs again after the loop's body, which may queue work)
            if run is None and index > 0 and not isinstance(body[index], cst.While):
                run = run_at.get(_last_statement(body[index - 1]))
            if run is None and index == 0 and isinstance(self.parent(block), (cst.If, cst.While)):
                run = run_at.get(self.parent(block))
            if run is None:
                run = []
                runs.append(run)
            run.append(node)
            run_at[body[index]] = run
        return runs

    def waiting_after(self, rest: List[cst.CSTNode]) -> str:
        """Words for a finding at the first sync of a `back_to_back` run that names the `rest`."""
        if not rest:
            return ""
        named = ", ".join(f"`{self.code(node, 40)}`" for node in rest[:3]) + (" …" if len(rest) > 3 else "")
        verb = "waits" if len(rest) == 1 else "wait"
        return f" (with {named} right after it, which then {verb} only for the work queued since)"

    def _blocks_around(self, node: cst.CSTNode) -> Iterator[Tuple[cst.CSTNode, List[cst.CSTNode], int]]:
        """From the innermost out: each block (an indented body, or the module) that holds `node`,
        its statements, and the index of the one holding `node`."""
        child, parent = node, self.parent(node)
        while parent is not None:
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                body, index = self.statements(parent)
                yield parent, body, index[child]
            child, parent = parent, self.parent(parent)

    def statements(self, block: cst.CSTNode) -> Tuple[Sequence[cst.CSTNode], Dict[cst.CSTNode, int]]:
        """The statements of `block` (the module's top-level ones, an indented body's, or the small
        statements of a line) and the index of each. The index is worked out once per block: the
        rules ask where each of a body's statements is, and a body can hold thousands."""
        body = self.top_level() if block is self.module else block.body  # type: ignore[attr-defined]
        return body, self.scoped((ModuleContext.statements, block), lambda: {stmt: i for i, stmt in enumerate(body)})

    def is_synchronize(self, call: cst.Call) -> bool:
        """`torch.cuda.synchronize()` (and its siblings for other backends), or `stream.synchronize()`,
        `event.synchronize()`, `torch.cuda.current_stream().synchronize()`."""
        qualname = self.qualname(call.func)
        if qualname is not None:
            return bool(_DEVICE_SYNC.match(qualname))
        return self.method_name(call) == "synchronize" and not call.args

    def _calls(self, statement: cst.CSTNode) -> List[cst.Call]:
        return [n for n in self.descendants(statement) if isinstance(n, cst.Call)]

    def _clock(self, call: cst.Call) -> bool:
        return self.qualname(call.func) in CLOCKS

    def code(self, node: cst.CSTNode, limit: int = 60) -> str:
        """The node's source on one line, shortened for messages."""
        text = " ".join(self.module.code_for_node(node).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    @property
    def functions(self) -> List[FunctionInfo]:
        """The functions in what the rules check now."""
        return self.walk.functions if self._part is None else self._part.functions

    @property
    def classes(self) -> List[ClassInfo]:
        """The classes in what the rules check now."""
        return self.walk.classes if self._part is None else self._part.classes

    # -- names ------------------------------------------------------------------------------------

    def qualname(self, expr: cst.BaseExpression) -> Optional[str]:
        """`torch.nn.functional.relu` for `F.relu` after `import torch.nn.functional as F`."""
        if isinstance(expr, cst.Name):
            return self.walk.imports.get(expr.value)
        if isinstance(expr, cst.Attribute):
            base = self.qualname(expr.value)
            return f"{base}.{expr.attr.value}" if base else None
        return None

    def builtin(self, expr: cst.BaseExpression) -> Optional[str]:
        """The builtin's name when `expr` names a builtin that the module does not shadow."""
        if isinstance(expr, cst.Name) and not self._bound(expr.value) and expr.value not in self.walk.imports:
            return expr.value
        return None

    def _bound(self, name: str) -> bool:
        """The module binds `name` somewhere, in any scope."""
        bound = name in self.walk.names
        if self._recording is not None:
            self._recording.bound[name] = bound
        return bound

    def method_name(self, call: cst.Call) -> Optional[str]:
        func = call.func
        return func.attr.value if isinstance(func, cst.Attribute) else None

    def keyword(self, call: cst.Call, name: str) -> Optional[cst.Arg]:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    def positional(self, call: cst.Call) -> List[cst.Arg]:
        return [a for a in call.args if a.keyword is None and not a.star]

    def argument(self, call: cst.Call, name: str, position: int) -> Optional[cst.Arg]:
        """The argument for parameter `name`, passed by keyword or at `position` (0-based).
        None when absent; with `*args`/`**kwargs` in the call, absent only means unknown."""
        found = self.keyword(call, name)
        if found is None:
            args = self.positional(call)
            found = args[position] if position < len(args) else None
        return found

    def literal(self, expr: cst.BaseExpression) -> object:
        """The value of a constant (`True`, `0`, `-1`, `"cuda:0"`); None for `None` and anything else."""
        if isinstance(expr, cst.Name):
            return {"True": True, "False": False}.get(expr.value)
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return expr.evaluated_value
        if (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
                and isinstance(expr.expression, (cst.Integer, cst.Float))):
            return -expr.expression.evaluated_value
        return None

    def last_name(self, expr: cst.BaseExpression) -> Optional[str]:
        """`Conv2d` for `nn.Conv2d` and for `Conv2d`: a cheap filter before `qualname`."""
        return last_name(expr)

    # -- type inference ---------------------------------------------------------------------------

    def is_tensor(self, expr: cst.BaseExpression, frame: Frame) -> bool:
        return self.kind(expr, frame) == TENSOR

    def kind(self, expr: cst.BaseExpression, frame: Frame) -> Optional[str]:
        key = (id(expr), id(frame))  # a pair: XOR-ing the two ids collided and returned other nodes' kinds
        if key in self._kind_memo:
            return self._kind_memo[key]
        if key in self._in_progress:
            return None
        self._in_progress.add(key)
        try:
            result = self._kind(expr, frame)
        finally:
            self._in_progress.discard(key)
        self._kind_memo[key] = result
        return result

    def _kind(self, expr: cst.BaseExpression, frame: Frame) -> Optional[str]:
        if isinstance(expr, cst.Name):
            return self._name_kind(expr.value, frame)
        if isinstance(expr, cst.Call):
            return self._call_kind(expr, frame)
        if isinstance(expr, cst.Attribute):
            return self._attribute_kind(expr, frame)
        if isinstance(expr, cst.Subscript):
            value = self.kind(expr.value, frame)
            if value in (TENSOR, NUMPY):
                return value
            return PYTHON if self._is_shape(expr.value, frame) else None
        if isinstance(expr, cst.BinaryOperation):
            return _join_arith(self.kind(expr.left, frame), self.kind(expr.right, frame))
        if isinstance(expr, cst.UnaryOperation):
            return PYTHON if isinstance(expr.operator, cst.Not) else self.kind(expr.expression, frame)
        if isinstance(expr, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return PYTHON
            kinds = [self.kind(expr.left, frame)] + [self.kind(c.comparator, frame) for c in expr.comparisons]
            if TENSOR in kinds:
                return TENSOR
            return PYTHON if all(k == PYTHON for k in kinds) else None
        if isinstance(expr, (cst.BooleanOperation, cst.IfExp)):
            if isinstance(expr, cst.IfExp):
                a, b = self.kind(expr.body, frame), self.kind(expr.orelse, frame)
            else:
                a, b = self.kind(expr.left, frame), self.kind(expr.right, frame)
            return a if a == b else None
        if isinstance(expr, _LITERALS):
            return PYTHON
        return None

    def _is_shape(self, expr: cst.BaseExpression, frame: Frame) -> bool:
        if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
            return True
        return isinstance(expr, cst.Call) and self.method_name(expr) == "size" and self.is_tensor(expr.func.value, frame)  # type: ignore[union-attr]

    def bindings_of(self, name: str, frame: Frame) -> List[Binding]:
        function = frame.function
        while function is not None:
            found = function.scope.get(name)
            if found:
                return found
            function = function.parent
        return self._module_bindings(name)

    def _module_bindings(self, name: str) -> List[Binding]:
        """The bindings of `name` outside any function (the module's and class bodies')."""
        found = self.walk.module_scope.get(name, [])
        if self._recording is not None and name not in self._recording.scope:
            self._recording.scope[name] = signature(found)
        return found

    def _name_kind(self, name: str, frame: Frame) -> Optional[str]:
        bindings = self.bindings_of(name, frame)
        if not bindings:
            qualname = self.walk.imports.get(name)
            return PYTHON if qualname is not None else None
        return _join_all(self._binding_kind(b) for b in bindings)

    def _binding_kind(self, binding: Binding) -> Optional[str]:
        value, frame = binding.value, binding.frame
        if binding.how == "param":
            return self._param_kind(binding)
        if binding.how == "def":
            if isinstance(value, cst.ClassDef) and self._is_module_class(value):
                return "class:module"
            return PYTHON
        if binding.how in ("assign", "walrus") and value is not None:
            if isinstance(value, cst.Name) and value.value == "None":
                return "none"
            if binding.index is not None:
                if isinstance(value, (cst.Tuple, cst.List)) and binding.index < len(value.elements):
                    return self.kind(value.elements[binding.index].value, frame)
                return TENSOR if self.kind(value, frame) == TENSOR else None
            return self.kind(value, frame)  # type: ignore[arg-type]
        if binding.how == "for" and value is not None:
            return self._item_kind(value, frame, binding.index)  # type: ignore[arg-type]
        if binding.how == "augassign" and isinstance(value, cst.AugAssign):
            return TENSOR if self.kind(value.value, frame) == TENSOR else None
        return None

    def _item_kind(self, iterable: cst.BaseExpression, frame: Frame, index: Optional[int]) -> Optional[str]:
        """Kind of the items bound by `for <target> in iterable` (at tuple position `index`)."""
        if isinstance(iterable, cst.Call):
            wrapped = self.builtin(iterable.func)
            args = self.positional(iterable)
            if wrapped == "enumerate" and args:
                return PYTHON if index == 0 else self._item_kind(args[0].value, frame, None)
            if wrapped in ("range",):
                return PYTHON
            if args and (wrapped == "iter" or (self.qualname(iterable.func) or wrapped or "").endswith("tqdm")):
                return self._item_kind(args[0].value, frame, index)
        kind = self.kind(iterable, frame)
        if kind in (LOADER, PARAMS, TENSOR):
            return TENSOR
        if kind == NAMED_PARAMS:
            return PYTHON if index == 0 else TENSOR
        if kind is None and _looks_like_loader(iterable):
            return TENSOR
        return None

    def _param_kind(self, binding: Binding) -> Optional[str]:
        param = binding.value
        assert isinstance(param, cst.Param)
        name = binding.name
        if param.annotation is not None:
            annotation = param.annotation.annotation
            qualname = self.qualname(annotation) or (annotation.value if isinstance(annotation, cst.Name) else "")
            if qualname.endswith("Tensor"):
                return TENSOR
            if qualname.endswith("Module"):
                return MODULE
            if qualname in ("int", "float", "bool", "str"):
                return PYTHON
            return None
        function = binding.frame.function
        if function is None or name in ("self", "cls") or name in _INDEX_LIKE or name.endswith("_idx"):
            return None
        # Required inputs of a `forward` / `*_step` are tensors by convention; optional ones
        # (`mask=None`, `reduction_override=None`) are as often strings, lists or flags.
        if param.star or param.default is not None:
            return None
        if (function.name == "forward" or function.name.endswith("_step")) and not _is_autograd_function(function):
            return TENSOR
        return None

    def _is_module_class(self, node: cst.ClassDef) -> bool:
        for base in node.bases:
            name = self.qualname(base.value) or (base.value.value if isinstance(base.value, cst.Name) else "")
            if name.endswith("Module") or name.startswith("torch.nn."):
                return True
            local = [b for b in self._module_bindings(name) if isinstance(b.value, cst.ClassDef)]
            if local and local[0].value is not node and self._is_module_class(local[0].value):  # type: ignore[arg-type]
                return True
        return False

    def _attribute_kind(self, expr: cst.Attribute, frame: Frame) -> Optional[str]:
        attr = expr.attr.value
        if isinstance(expr.value, cst.Name) and expr.value.value == "self" and frame.class_info is not None:
            values = frame.class_info.attr_bindings.get(attr)
            if values:
                return _join_all(self.kind(v, f) for v, f in values)
            return None
        if self.qualname(expr) is not None:
            return PYTHON  # torch.float32, np.pi, torch.cuda, ...
        receiver = self.kind(expr.value, frame)
        if receiver == TENSOR:
            if attr in _TENSOR_ATTRS:
                return TENSOR
            if attr in _TENSOR_PYTHON_ATTRS:
                return PYTHON
        return None

    def _call_kind(self, call: cst.Call, frame: Frame) -> Optional[str]:
        func = call.func
        qualname = self.qualname(func)
        if qualname is not None:
            return self._qualified_call_kind(qualname, call, frame)
        builtin = self.builtin(func)
        if builtin is not None:
            return PYTHON if builtin in _PY_RESULT_BUILTINS else None
        callee = self.kind(func, frame)
        if callee == MODULE:
            return TENSOR
        if callee == "class:module":
            return MODULE
        if callee is None and _looks_like_model(func):
            return TENSOR  # `model(x)`, `self.encoder(h)`, `criterion(out, y)`
        if not isinstance(func, cst.Attribute):
            return None
        method = func.attr.value
        receiver = self.kind(func.value, frame)
        if receiver == TENSOR:
            if method == "numpy":
                return NUMPY
            return PYTHON if method in _TENSOR_NON_TENSOR_METHODS else TENSOR
        if receiver == MODULE:
            if method in _MODULE_SELF_METHODS:
                return MODULE
            if method in ("parameters", "buffers"):
                return PARAMS
            if method in ("named_parameters", "named_buffers"):
                return NAMED_PARAMS
            return TENSOR if method == "forward" else None
        if receiver == NUMPY:
            return PYTHON if method in ("tolist", "item") else NUMPY
        if receiver is None and method in ("to", "cuda") and not _looks_like_model(func.value):
            return TENSOR
        return None

    def _qualified_call_kind(self, qualname: str, call: cst.Call, frame: Frame) -> Optional[str]:
        if qualname.startswith("numpy."):
            return NUMPY
        if qualname.endswith(".DataLoader"):
            return LOADER
        if not qualname.startswith("torch."):
            return None
        last = qualname.rsplit(".", 1)[1]
        if qualname == "torch.compile":
            args = self.positional(call)
            return self.kind(args[0].value, frame) if args else None
        if qualname.startswith(_TORCH_TENSOR_PREFIXES):
            return TENSOR
        if qualname.startswith("torch.nn."):
            if last in ("Parameter", "Buffer"):
                return TENSOR
            if last[:1].isupper():
                return MODULE
            return TENSOR if qualname.startswith("torch.nn.utils.clip_grad") else None
        if qualname.startswith(_TORCH_NON_TENSOR_PREFIXES):
            return PYTHON
        if qualname.count(".") == 1:
            if last in _TORCH_NON_TENSOR or last.startswith(("is_", "are_", "get_", "set_", "use_")):
                return PYTHON
            if last[:1].isupper():
                return TENSOR if last.endswith("Tensor") else PYTHON
            return TENSOR
        return None

    def is_module_like(self, expr: cst.BaseExpression, frame: Frame) -> bool:
        """An nn.Module instance, or an unknown value named like one (`model`, `self.encoder`)."""
        kind = self.kind(expr, frame)
        return kind == MODULE or (kind is None and _looks_like_model(expr))

    def device_type(self, expr: cst.BaseExpression, frame: Frame, _depth: int = 0) -> Optional[str]:
        """The device type `expr` names: "cuda" for "cuda:1", `torch.device("cuda", 1)`,
        f"cuda:{rank}", an index, or a name or `self.<attr>` bound only to such values; None when
        unknown. `"cuda" if ... else "cpu"` is the non-CPU branch: the device the code is written for."""
        if _depth > 8:
            return None
        value = self.literal(expr)
        if isinstance(value, str) or isinstance(expr, cst.FormattedString):
            text = value if isinstance(value, str) else next(
                (p.value for p in expr.parts[:1] if isinstance(p, cst.FormattedStringText) and ":" in p.value), "")  # type: ignore[union-attr]
            head = text.split(":", 1)[0].strip()
            return head if head.isidentifier() else None
        if isinstance(value, int) and not isinstance(value, bool):
            return "cuda"  # `.to(0)`, `.cuda(1)`: a bare index names a CUDA device
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Modulo, cst.Add)):
            return self.device_type(expr.left, frame, _depth + 1)  # "cuda:%d" % rank, "cuda:" + str(rank)
        if isinstance(expr, cst.IfExp):
            kinds = {self.device_type(expr.body, frame, _depth + 1), self.device_type(expr.orelse, frame, _depth + 1)}
            accelerators = kinds - {None, "cpu"}
            if len(accelerators) == 1:
                return accelerators.pop()
            return "cpu" if kinds == {"cpu"} else None
        if isinstance(expr, cst.Call):
            qualname = self.qualname(expr.func)
            if qualname == "torch.device":
                arg = self.argument(expr, "type", 0)
                return self.device_type(arg.value, frame, _depth + 1) if arg is not None else None
            return "cuda" if qualname == "torch.cuda.current_device" else None
        values: List[Tuple[cst.CSTNode, Frame]] = []
        if isinstance(expr, cst.Name):
            bindings = self.bindings_of(expr.value, frame)
            if any(b.how not in ("assign", "walrus") or b.index is not None for b in bindings):
                return None  # a parameter, loop target or unpacked value: set elsewhere
            values = [(b.value, b.frame) for b in bindings if b.value is not None]
        elif (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"
              and frame.class_info is not None):
            values = frame.class_info.attr_bindings.get(expr.attr.value, [])  # type: ignore[assignment]
        kinds = {self.device_type(v, f, _depth + 1) for v, f in values  # type: ignore[arg-type]
                 if not (isinstance(v, cst.Name) and v.value == "None")}
        return kinds.pop() if len(kinds) == 1 else None

    # -- hot code ---------------------------------------------------------------------------------

    def runs_per_step(self, function: FunctionInfo) -> bool:
        """The project's per-step model says `function` runs on every step (see `perflsp.rules.hotness`)."""
        return self.fact(_runs_per_step, function.name, function.class_info.name if function.class_info else None)

    def is_compiled(self, function: FunctionInfo) -> bool:
        """Decorated with `torch.compile` or passed to `torch.compile(...)` in this module."""
        for decorator in function.node.decorators:
            target = decorator.decorator
            if isinstance(target, cst.Call):
                target = target.func
            if self.qualname(target) == "torch.compile":
                return True
        names = self.fact(_compiled_names)
        return function.name in names or "self" in names or (
            function.class_info is not None and function.class_info.name in names)

    def compiled_by(self, function: FunctionInfo) -> Optional[str]:
        """How `function` comes to run under torch.compile, as a phrase for messages, or None.

        Stricter than `is_compiled` (which only keeps a rule quiet): a function decorated with
        `@torch.compile`, a module-level function passed to `torch.compile(fn)`, or the `forward`
        of a class of this module whose instance is passed (`torch.compile(Net())`, or a name bound
        to `Net(...)`). `torch.compile(model)` of a model made elsewhere says nothing about which
        class's `forward` runs, so nothing is reported there.
        """
        for decorator in function.node.decorators:
            target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if self.qualname(target) == "torch.compile":
                return "decorated with `@torch.compile`"
        return self.fact(_compiled_by, function)

    # -- loops ------------------------------------------------------------------------------------

    def assigned_in(self, loop: cst.CSTNode) -> Set[str]:
        """Names (re)bound in each iteration of `loop`, its own target included."""
        found = self._assigned.get(loop)
        if found is None:
            stmt = self.walk.statement_of(loop)  # a loop's bindings are its statement's
            bindings = self.walk.part_of(stmt).bindings if stmt is not None else []
            found = self._assigned[loop] = {b.name for b in bindings if loop in b.frame.loops}
        return found

    def names_in(self, node: cst.CSTNode) -> Set[str]:
        names = {node.value} if isinstance(node, cst.Name) else set()
        names.update(n.value for n in self.descendants(node) if isinstance(n, cst.Name))
        return names

    def is_invariant(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """`node` reads no name that `loop` rebinds (attribute names are not reads)."""
        reads = {n.value for n in self._reads(node)}
        return not (reads & self.assigned_in(loop))

    def _reads(self, node: cst.CSTNode) -> Iterator[cst.Name]:
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Name):
                yield current
            elif isinstance(current, cst.Attribute):
                stack.append(current.value)
            elif isinstance(current, cst.Arg):
                stack.append(current.value)
            else:
                stack.extend(iter_children(current))

    # -- positions ----------------------------------------------------------------------------------

    def locate(self, nodes: Iterable[cst.CSTNode], kept: Optional[Kept] = None) -> None:
        """Compute the positions of `nodes` from the code of the top-level statements that hold them
        (`perflsp.rules.positions`); `kept`: an open file's positions of its last version."""
        self._spans.update(positions.locate(self.module, self.walk, self.hot.lines, nodes, self.rows, kept))

    def range_of(self, node: cst.CSTNode) -> Span:
        """((row, col), (row, col)) of `node`: rows 1-based, columns 0-based code points, as libcst's
        PositionProvider has them (without the blank lines, comments, whitespace and parentheses
        the node owns around its code), except that a compound statement's end includes a trailing
        comment on its last line, and a small statement's the `;` after it. Call `locate` first
        with every node you need."""
        found = self._spans.get(id(node))
        if found is None:
            self.locate([node])
            found = self._spans[id(node)]
        return found


def _runs_per_step(ctx: ModuleContext, name: str, class_name: Optional[str]) -> bool:
    return ctx.hot.function_runs_per_step(name, class_name)


def _compile_calls(ctx: ModuleContext) -> List[Tuple[cst.Call, Frame]]:
    return [(call, frame) for call, frame in ctx.calls_named("compile") if ctx.qualname(call.func) == "torch.compile"]


def _compiled_names(ctx: ModuleContext) -> FrozenSet[Optional[str]]:
    """Last names of everything passed to `torch.compile(...)` in this module."""
    return frozenset(last_name(arg.value) for call, _ in _compile_calls(ctx) for arg in call.args)


def _compiled_by(ctx: ModuleContext, function: FunctionInfo) -> Optional[str]:
    compiled = ctx.fact(_strictly_compiled).get(function)
    return f"compiled by `{ctx.code(compiled, 40)}`" if compiled is not None else None


def _strictly_compiled(ctx: ModuleContext) -> Dict[FunctionInfo, cst.Call]:
    """Function -> the `torch.compile(...)` call that compiles it (see `compiled_by`)."""
    found: Dict[FunctionInfo, cst.Call] = {}
    module_functions = {f.name: f for f in ctx.walk.functions if f.class_info is None and f.parent is None}
    forwards = {c.name: c.methods["forward"] for c in ctx.walk.classes if "forward" in c.methods}
    for call, frame in _compile_calls(ctx):
        if not call.args or call.args[0].keyword is not None:
            continue
        target = call.args[0].value
        made = [b.value for b in ctx.bindings_of(target.value, frame) if b.how == "assign"] \
            if isinstance(target, cst.Name) else []
        if isinstance(target, cst.Name) and not made and target.value in module_functions:
            found.setdefault(module_functions[target.value], call)
        for value in [target] + made:
            if isinstance(value, cst.Call) and last_name(value.func) in forwards:
                found.setdefault(forwards[last_name(value.func)], call)  # type: ignore[index]
    return found


def _last_statement(statement: cst.CSTNode) -> cst.CSTNode:
    """The statement a loop or `with` runs last (a loop's body runs to its end on every pass; an
    `if` or `try` may skip it)."""
    while isinstance(statement, (cst.For, cst.While, cst.With)) and isinstance(statement.body, cst.IndentedBlock):
        statement = statement.body.body[-1]
    return statement


def _synchronizes(ctx: "ModuleContext", statement: cst.CSTNode) -> bool:
    """A statement that is only a synchronize call: `torch.cuda.synchronize()`, a project's own
    wrapper of it (`synchronize()`), `stream.synchronize()`."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call)):
        return False
    call = statement.body[0].value
    return ctx.is_synchronize(call) or (ctx.last_name(call.func) == "synchronize" and not call.args)


def _is_autograd_function(function: FunctionInfo) -> bool:
    """`torch.autograd.Function.forward(ctx, ...)`: its arguments are anything, not only tensors."""
    params = function.node.params.params
    static = any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in function.node.decorators)
    return static or bool(params and params[0].name.value == "ctx")


def _join_all(kinds) -> Optional[str]:
    seen = {k for k in kinds if k not in (None, "none")}
    return seen.pop() if len(seen) == 1 else None


def _join_arith(a: Optional[str], b: Optional[str]) -> Optional[str]:
    if TENSOR in (a, b):
        return TENSOR
    if NUMPY in (a, b):
        return NUMPY
    return PYTHON if a == b == PYTHON else None


def _looks_like_loader(expr: cst.BaseExpression) -> bool:
    name = last_name(expr)
    return name is not None and "loader" in name.lower()


_MODEL_NAME = re.compile(r"(^|_)(model|module|encoder|decoder|criterion|loss_fn|head|layer|backbone|block)s?$|net$")


def _looks_like_model(expr: cst.BaseExpression) -> bool:
    """`model`, `teacher_model`, `resnet`, `self.encoder`: a name that ends like a module's."""
    return bool(_MODEL_NAME.search((last_name(expr) or "").lower()))
