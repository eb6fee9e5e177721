"""The engine's single pass over a libcst tree.

libcst's visitor rebuilds every node it visits (`_visit_and_replace_children`), which costs about
twice the parse on real code; its Scope/QualifiedName providers cost thirteen times. This walk
reads the dataclass fields directly, skips whitespace and punctuation, and records for every node
its parent and the `Frame` it runs in (enclosing function, loops, `with` blocks), which is all the
rules need to find hot code and resolve names.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple, Type

import libcst as cst

# Fields that only ever hold whitespace, punctuation or operator tokens.
_TRIVIA = frozenset(
    {
        "lpar", "rpar", "comma", "semicolon", "colon", "equal", "dot", "lbracket", "rbracket",
        "lbrace", "rbrace", "leading_lines", "lines_after_decorators", "header", "footer",
        "trailing_whitespace", "operator", "asynchronous", "star", "arrow", "newline",
        "whitespace_before_params", "first_line", "default_indent", "default_newline", "encoding",
        "indent", "star_tok", "whitespace_after_at",
    }
)
_FIELDS: Dict[type, Tuple[str, ...]] = {}


def child_fields(node_type: type) -> Tuple[str, ...]:
    fields = _FIELDS.get(node_type)
    if fields is None:
        fields = tuple(
            f.name
            for f in dataclasses.fields(node_type)
            if f.name not in _TRIVIA and not f.name.startswith("whitespace")
        )
        _FIELDS[node_type] = fields
    return fields


_NODE, _SEQUENCE, _OTHER = "node", "sequence", "other"
_VALUE_KINDS: Dict[type, str] = {}  # the type of a field's value -> what it holds
_BACKWARD_FIELDS: Dict[type, Tuple[str, ...]] = {}  # `child_fields`, last first


def _value_kind(value_type: type) -> str:
    """A node, a sequence of nodes, or neither (a name's text, a flag, None, a sentinel)."""
    kind = _VALUE_KINDS[value_type] = (_NODE if issubclass(value_type, cst.CSTNode)
                                       else _SEQUENCE if issubclass(value_type, (list, tuple)) else _OTHER)
    return kind


def iter_children(node: cst.CSTNode):
    for name in child_fields(type(node)):
        value = getattr(node, name)
        kind = _VALUE_KINDS.get(type(value)) or _value_kind(type(value))
        if kind is _NODE:
            yield value
        elif kind is _SEQUENCE:
            yield from value  # libcst's sequences hold nodes only


class FunctionInfo:
    """A `def` and what the engine learned about it."""

    __slots__ = ("node", "name", "class_info", "parent", "frame", "calls", "scope")

    def __init__(self, node: cst.FunctionDef, class_info: Optional["ClassInfo"], parent: Optional["FunctionInfo"], frame: "Frame"):
        self.node = node
        self.name = node.name.value
        self.class_info = class_info
        self.parent = parent
        self.frame = frame  # where the def statement itself sits
        self.calls: List[Tuple[cst.Call, "Frame"]] = []
        self.scope: Dict[str, List["Binding"]] = {}  # the names it binds itself -> their bindings, in source order

    @property
    def qualname(self) -> str:
        if self.class_info is not None:
            return f"{self.class_info.name}.{self.name}"
        return self.name


class ClassInfo:
    __slots__ = ("node", "name", "methods", "attr_bindings")

    def __init__(self, node: cst.ClassDef):
        self.node = node
        self.name = node.name.value
        self.methods: Dict[str, FunctionInfo] = {}
        # `self.<attr> = value` anywhere in the class's methods: attr -> [(value, frame)]
        self.attr_bindings: Dict[str, List[Tuple[cst.BaseExpression, "Frame"]]] = {}


class Frame:
    """Where a node runs: innermost function, class, the loops and `with` blocks around it."""

    __slots__ = ("function", "class_info", "loops", "withs")

    def __init__(self, function: Optional[FunctionInfo], class_info: Optional[ClassInfo],
                 loops: Tuple[cst.CSTNode, ...], withs: Tuple[cst.With, ...]):
        self.function = function
        self.class_info = class_info
        self.loops = loops  # For, While, or comprehension (CompFor) nodes; innermost last
        self.withs = withs

    def with_loop(self, loop: cst.CSTNode) -> "Frame":
        return Frame(self.function, self.class_info, self.loops + (loop,), self.withs)

    def with_with(self, node: cst.With) -> "Frame":
        return Frame(self.function, self.class_info, self.loops, self.withs + (node,))

    @property
    def innermost_loop(self) -> Optional[cst.CSTNode]:
        return self.loops[-1] if self.loops else None


class Binding:
    """`name = value` (or a loop/with target) as seen in source order."""

    __slots__ = ("name", "value", "frame", "how", "index")

    def __init__(self, name: str, value: Optional[cst.CSTNode], frame: Frame, how: str, index: Optional[int] = None):
        self.name = name
        self.value = value  # the bound expression, or the iterable for how == "for"
        self.frame = frame
        self.how = how  # "assign", "augassign", "for", "with", "param", "import", "def", "walrus"
        self.index = index  # position inside a tuple target, when unpacking


class Walk:
    """Everything the single pass collects; `ModuleContext` builds its queries on top.

    What a top-level statement yields depends on that statement alone (its nodes, frames,
    functions, classes and bindings; imports are merged in order), so a walk of the next version
    of a file (`previous`) takes the parts of the statements that are the very same nodes (the
    ones `Reparser` kept) and walks only the others. It takes over the previous walk's map of
    parents too (a walk given as `previous` is used up), changing it only where statements came
    and went: what a new version costs is its new statements plus a pass over the top-level
    ones. Nodes by type are merged on demand (`nodes`); the rules read a statement's own
    (`part_of`).
    """

    _into: "Part"  # the part being walked

    def __init__(self, module: cst.Module, previous: Optional["Walk"] = None):
        self.module = module
        self.root = previous.root if previous is not None else Frame(None, None, (), ())
        known = previous.parts if previous is not None else {}
        # id of a top-level statement -> (the statement, what walking it found)
        self.parts: Dict[int, Tuple[cst.CSTNode, Part]] = {}
        self.added: List[Part] = []  # the parts walked now, in source order
        for stmt in module.body:
            found = known.get(id(stmt))
            if found is not None and found[0] is stmt:
                part = found[1]
            else:
                part = self._part(stmt)
                self.added.append(part)
            self.parts[id(stmt)] = (stmt, part)
        # the previous walk's parts that this version no longer has
        self.removed: List[Part] = [part for key, (stmt, part) in known.items()
                                     if self.parts.get(key, (None,))[0] is not stmt]
        self.parents = self._parents(previous)
        self.functions: List[FunctionInfo] = []
        self.classes: List[ClassInfo] = []
        self.imports: Dict[str, str] = {}  # local name -> qualified name
        self.module_calls: List[Tuple[cst.Call, Frame]] = []  # calls outside any function
        # Names bound outside any function (the module's, and class bodies') -> their bindings.
        self.module_scope: Dict[str, List[Binding]] = {}
        for stmt in module.body:
            self._merge(self.parts[id(stmt)][1])
        self._by_type: Dict[Type[cst.CSTNode], List[Tuple[cst.CSTNode, Frame]]] = {}
        self._names: Optional[FrozenSet[str]] = None

    def nodes(self, node_type: Type[cst.CSTNode]) -> List[Tuple[cst.CSTNode, Frame]]:
        """Every node of the type in the module, in source order."""
        found = self._by_type.get(node_type)
        if found is None:
            found = self._by_type[node_type] = [pair for stmt in self.module.body
                                                for pair in self.parts[id(stmt)][1].by_type.get(node_type, ())]
        return found

    def part_of(self, stmt: cst.CSTNode) -> "Part":
        """What walking the top-level statement `stmt` found."""
        return self.parts[id(stmt)][1]

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The top-level statement holding `node` (None for a node not in this tree)."""
        parent = self.parents.get(node)
        while parent is not None and parent is not self.module:
            node, parent = parent, self.parents.get(parent)
        return node if parent is self.module else None

    @property
    def names(self) -> FrozenSet[str]:
        """Every name bound anywhere in the module, in any scope."""
        if self._names is None:
            self._names = frozenset().union(*(part.names for _, part in self.parts.values()))
        return self._names

    def gather(self, collect: Callable[["Part"], List[Any]]) -> List[Any]:
        """What `collect` finds in each top-level statement, in source order. `collect` must depend
        on the part alone: its answer is kept with the part, which the next versions share."""
        out: List[Any] = []
        for stmt in self.module.body:
            part = self.parts[id(stmt)][1]
            found = part.gathered.get(collect)
            if found is None:
                found = part.gathered[collect] = collect(part)
            out.extend(found)
        return out

    def _parents(self, previous: Optional["Walk"]) -> Dict[cst.CSTNode, cst.CSTNode]:
        if previous is None:
            parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        else:
            parents, previous.parents, previous.parts = previous.parents, {}, {}
        # Removed first: a statement parsed again shares its unchanged inner nodes with the old one.
        for part in self.removed:
            for node in part.parents:
                parents.pop(node, None)
        for part in self.added:
            parents.update(part.parents)
        for stmt in self.module.body:
            parents[stmt] = self.module
        return parents

    def _merge(self, part: "Part") -> None:
        self.functions.extend(part.functions)
        self.classes.extend(part.classes)
        self.imports.update(part.imports)
        self.module_calls.extend(part.module_calls)
        for name, found in part.module_scope.items():
            self.module_scope.setdefault(name, []).extend(found)

    # -- traversal ------------------------------------------------------------------------------

    def _part(self, stmt: cst.CSTNode) -> "Part":
        """Walk one top-level statement into a part of its own (the handlers write to `self._into`)."""
        part = self._into = Part()
        self._run(stmt)
        for binding in part.bindings:
            function = binding.frame.function
            scope = function.scope if function is not None else part.module_scope
            scope.setdefault(binding.name, []).append(binding)
        part.names = frozenset(b.name for b in part.bindings)
        return part

    def _run(self, stmt: cst.CSTNode) -> None:
        # An explicit stack instead of recursion: deeply nested expressions must not hit the
        # interpreter's recursion limit (the `_SPECIAL` handlers take the few nodes that change
        # the frame). Children are pushed last field first, so they pop in source order. The kind
        # of a field's value is looked up by its type (`_value_kind`): `isinstance(value,
        # cst.CSTNode)` goes through `ABC.__instancecheck__`, and this loop sees every node.
        stack: List[Tuple[cst.CSTNode, cst.CSTNode, Frame]] = [(stmt, self.module, self.root)]
        push, pop = stack.append, stack.pop
        parents = self._into.parents
        by_type = self._into.by_type
        special = _SPECIAL
        backward = _BACKWARD_FIELDS
        kinds = _VALUE_KINDS
        while stack:
            node, parent, frame = pop()
            parents[node] = parent
            node_type = type(node)
            bucket = by_type.get(node_type)
            if bucket is None:
                bucket = by_type[node_type] = []
            bucket.append((node, frame))
            handler = special.get(node_type)
            if handler is not None:
                for child, child_frame in reversed(handler(self, node, frame)):
                    push((child, node, child_frame))
                continue
            fields = backward.get(node_type)
            if fields is None:
                fields = backward[node_type] = child_fields(node_type)[::-1]
            for name in fields:
                value = getattr(node, name)
                kind = kinds.get(type(value))
                if kind is None:
                    kind = _value_kind(type(value))
                if kind is _NODE:
                    push((value, node, frame))
                elif kind is _SEQUENCE:
                    for item in reversed(value):  # libcst's sequences hold nodes only
                        push((item, node, frame))

    # -- frame-changing nodes ---------------------------------------------------------------------

    def _function(self, node: cst.FunctionDef, frame: Frame):
        info = FunctionInfo(node, frame.class_info if frame.function is None else None, frame.function, frame)
        self._into.functions.append(info)
        if info.class_info is not None:
            info.class_info.methods[info.name] = info
        self._into.bindings.append(Binding(info.name, node, frame, "def"))
        inner = Frame(info, info.class_info or (frame.class_info if frame.function else None), (), ())
        out: List[Tuple[cst.CSTNode, Frame]] = [(d, frame) for d in node.decorators]
        out.append((node.params, frame))  # annotations and defaults run where the def runs
        if node.returns is not None:
            out.append((node.returns, frame))
        out.append((node.body, inner))
        for param in _all_params(node.params):
            self._into.bindings.append(Binding(param.name.value, param, inner, "param"))
        return out

    def _class(self, node: cst.ClassDef, frame: Frame):
        info = ClassInfo(node)
        self._into.classes.append(info)
        self._into.bindings.append(Binding(info.name, node, frame, "def"))
        inner = Frame(None, info, (), ())
        out: List[Tuple[cst.CSTNode, Frame]] = [(d, frame) for d in node.decorators]
        out.extend((a, frame) for a in node.bases)
        out.extend((a, frame) for a in node.keywords)
        out.append((node.body, inner))
        return out

    def _for(self, node: cst.For, frame: Frame):
        body = frame.with_loop(node)
        self._bind_target(node.target, node.iter, body, "for")
        out: List[Tuple[cst.CSTNode, Frame]] = [(node.target, body), (node.iter, frame), (node.body, body)]
        if node.orelse is not None:
            out.append((node.orelse, frame))
        return out

    def _while(self, node: cst.While, frame: Frame):
        body = frame.with_loop(node)
        out: List[Tuple[cst.CSTNode, Frame]] = [(node.test, body), (node.body, body)]
        if node.orelse is not None:
            out.append((node.orelse, frame))
        return out

    def _comprehension(self, node: cst.CSTNode, frame: Frame):
        # The first iterable is evaluated once; everything else runs once per item.
        comp_for = node.for_in
        out: List[Tuple[cst.CSTNode, Frame]] = []
        inner = frame
        owner: cst.CSTNode = node
        while comp_for is not None:
            # CompFor nodes are not walked themselves (their parts are, in different frames), but
            # hot reasons point at them, so they need a parent for positions.
            self._into.parents[comp_for] = owner
            owner = comp_for
            out.append((comp_for.iter, inner))
            inner = inner.with_loop(comp_for)
            self._bind_target(comp_for.target, comp_for.iter, inner, "for")
            out.append((comp_for.target, inner))
            out.extend((cond, inner) for cond in comp_for.ifs)
            comp_for = comp_for.inner_for_in
        if isinstance(node, cst.DictComp):
            out.extend([(node.key, inner), (node.value, inner)])
        else:
            out.append((node.elt, inner))
        return out

    def _with(self, node: cst.With, frame: Frame):
        for item in node.items:
            if item.asname is not None:
                self._bind_target(item.asname.name, item.item, frame, "with")
        body = frame.with_with(node)
        return [(item, frame) for item in node.items] + [(node.body, body)]

    def _assign(self, node: cst.Assign, frame: Frame):
        for target in node.targets:
            self._bind_target(target.target, node.value, frame, "assign")
        return [(t, frame) for t in node.targets] + [(node.value, frame)]

    def _ann_assign(self, node: cst.AnnAssign, frame: Frame):
        if node.value is not None:
            self._bind_target(node.target, node.value, frame, "assign")
        out = [(node.target, frame), (node.annotation, frame)]
        if node.value is not None:
            out.append((node.value, frame))
        return out

    def _aug_assign(self, node: cst.AugAssign, frame: Frame):
        self._bind_target(node.target, node, frame, "augassign")
        return [(node.target, frame), (node.value, frame)]

    def _walrus(self, node: cst.NamedExpr, frame: Frame):
        self._bind_target(node.target, node.value, frame, "walrus")
        return [(node.target, frame), (node.value, frame)]

    def _call(self, node: cst.Call, frame: Frame):
        if frame.function is not None:
            frame.function.calls.append((node, frame))
        else:
            self._into.module_calls.append((node, frame))
        return [(node.func, frame)] + [(a, frame) for a in node.args]

    def _import(self, node: cst.Import, frame: Frame):
        for alias in node.names:
            dotted = _dotted(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._into.imports[alias.asname.name.value] = dotted
            else:
                head = dotted.split(".")[0]
                self._into.imports[head] = head
        return []

    def _import_from(self, node: cst.ImportFrom, frame: Frame):
        if node.module is None or node.relative:
            return []
        base = _dotted(node.module)
        if isinstance(node.names, cst.ImportStar):
            return []
        for alias in node.names:
            name = _dotted(alias.name)
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            self._into.imports[local] = f"{base}.{name}"
        return []

    # -- bindings -------------------------------------------------------------------------------

    def _bind_target(self, target: cst.BaseExpression, value: Optional[cst.CSTNode], frame: Frame, how: str, index: Optional[int] = None) -> None:
        if isinstance(target, cst.Name):
            self._into.bindings.append(Binding(target.value, value, frame, how, index))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                inner = element.value
                self._bind_target(inner, value, frame, how, i if index is None else index)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            cls = frame.class_info
            if cls is not None and value is not None and how == "assign":
                cls.attr_bindings.setdefault(target.attr.value, []).append((value, frame))


class Part:
    """What walking one top-level statement found, in the order the walk found it."""

    __slots__ = ("parents", "by_type", "functions", "classes", "bindings", "imports", "module_calls",
                 "module_scope", "names", "gathered")

    def __init__(self) -> None:
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        self.by_type: Dict[Type[cst.CSTNode], List[Tuple[cst.CSTNode, Frame]]] = {}
        self.functions: List[FunctionInfo] = []
        self.classes: List[ClassInfo] = []
        self.bindings: List[Binding] = []
        self.imports: Dict[str, str] = {}
        self.module_calls: List[Tuple[cst.Call, Frame]] = []
        self.module_scope: Dict[str, List[Binding]] = {}  # names bound outside any function -> bindings
        self.names: FrozenSet[str] = frozenset()  # every name it binds, in any scope
        self.gathered: Dict[Callable[["Part"], List[Any]], List[Any]] = {}  # see `Walk.gather`


def _all_params(params: cst.Parameters):
    yield from params.posonly_params
    yield from params.params
    if isinstance(params.star_arg, cst.Param):
        yield params.star_arg
    yield from params.kwonly_params
    if params.star_kwarg is not None:
        yield params.star_kwarg


def last_name(expr: cst.BaseExpression) -> Optional[str]:
    """`Conv2d` for `nn.Conv2d` and for `Conv2d`."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


@lru_cache(maxsize=None)
def calls_named(names: FrozenSet[str]) -> Callable[[Part], List[Tuple[cst.Call, Frame]]]:
    """A collector for `Walk.gather`: a part's calls of a callee written with a last name in
    `names` (one object per set of names: `gather` keeps answers by collector)."""
    def collect(part: Part) -> List[Tuple[cst.Call, Frame]]:
        return [(call, frame) for call, frame in part.by_type.get(cst.Call, ())
                if last_name(call.func) in names]  # type: ignore[attr-defined]
    return collect


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


_SPECIAL = {
    cst.FunctionDef: Walk._function,
    cst.ClassDef: Walk._class,
    cst.For: Walk._for,
    cst.While: Walk._while,
    cst.ListComp: Walk._comprehension,
    cst.SetComp: Walk._comprehension,
    cst.GeneratorExp: Walk._comprehension,
    cst.DictComp: Walk._comprehension,
    cst.With: Walk._with,
    cst.Assign: Walk._assign,
    cst.AnnAssign: Walk._ann_assign,
    cst.AugAssign: Walk._aug_assign,
    cst.NamedExpr: Walk._walrus,
    cst.Call: Walk._call,
    cst.Import: Walk._import,
    cst.ImportFrom: Walk._import_from,
}
