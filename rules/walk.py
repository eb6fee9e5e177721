"""The engine's single pass over a libcst tree.

libcst's visitor rebuilds every node it visits (`_visit_and_replace_children`), which costs about
twice the parse on real code; its Scope/QualifiedName providers cost thirteen times. This walk
reads the dataclass fields directly, skips whitespace and punctuation, and records for every node
its parent and the `Frame` it runs in (enclosing function, loops, `with` blocks), which is all the
rules need to find hot code and resolve names.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple, Type

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

    __slots__ = ("node", "name", "class_info", "parent", "frame", "marker", "calls")

    def __init__(self, node: cst.FunctionDef, class_info: Optional["ClassInfo"], parent: Optional["FunctionInfo"], frame: "Frame"):
        self.node = node
        self.name = node.name.value
        self.class_info = class_info
        self.parent = parent
        self.frame = frame  # where the def statement itself sits
        self.marker: Optional[str] = None  # "@perflsp.hot", "# perflsp: hot", ...
        self.calls: List[Tuple[cst.Call, "Frame"]] = []

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
    ones `Reparser` kept) and walks only the others.
    """

    def __init__(self, module: cst.Module, previous: Optional["Walk"] = None):
        self.module = module
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        self.by_type: Dict[Type[cst.CSTNode], List[Tuple[cst.CSTNode, Frame]]] = {}
        self.functions: List[FunctionInfo] = []
        self.classes: List[ClassInfo] = []
        self.bindings: List[Binding] = []
        self.imports: Dict[str, str] = {}  # local name -> qualified name
        self.module_calls: List[Tuple[cst.Call, Frame]] = []  # calls outside any function
        self.root = previous.root if previous is not None else Frame(None, None, (), ())
        # id of a top-level statement -> (the statement, what walking it found)
        self.parts: Dict[int, Tuple[cst.CSTNode, _Part]] = {}
        known = previous.parts if previous is not None else {}
        for stmt in module.body:
            found = known.get(id(stmt))
            part = found[1] if found is not None and found[0] is stmt else self._part(stmt)
            self.parts[id(stmt)] = (stmt, part)
            self._merge(part)
        for stmt in module.body:
            self.parents[stmt] = module

    def nodes(self, node_type: Type[cst.CSTNode]) -> List[Tuple[cst.CSTNode, Frame]]:
        return self.by_type.get(node_type, [])

    def _merge(self, part: "_Part") -> None:
        self.parents.update(part.parents)
        by_type = self.by_type
        for node_type, found in part.by_type.items():
            bucket = by_type.get(node_type)
            if bucket is None:
                by_type[node_type] = list(found)
            else:
                bucket.extend(found)
        self.functions.extend(part.functions)
        self.classes.extend(part.classes)
        self.bindings.extend(part.bindings)
        self.imports.update(part.imports)
        self.module_calls.extend(part.module_calls)

    # -- traversal ------------------------------------------------------------------------------

    def _part(self, stmt: cst.CSTNode) -> "_Part":
        """Walk one top-level statement into a part of its own (the handlers write to `self`)."""
        part = _Part()
        whole = (self.parents, self.by_type, self.functions, self.classes, self.bindings, self.imports, self.module_calls)
        (self.parents, self.by_type, self.functions, self.classes, self.bindings, self.imports,
         self.module_calls) = (part.parents, part.by_type, part.functions, part.classes, part.bindings, part.imports,
                               part.module_calls)
        try:
            self._run(stmt)
        finally:
            (self.parents, self.by_type, self.functions, self.classes, self.bindings, self.imports,
             self.module_calls) = whole
        return part

    def _run(self, stmt: cst.CSTNode) -> None:
        # An explicit stack instead of recursion: deeply nested expressions must not hit the
        # interpreter's recursion limit (the `_SPECIAL` handlers take the few nodes that change
        # the frame). Children are pushed last field first, so they pop in source order. The kind
        # of a field's value is looked up by its type (`_value_kind`): `isinstance(value,
        # cst.CSTNode)` goes through `ABC.__instancecheck__`, and this loop sees every node.
        stack: List[Tuple[cst.CSTNode, cst.CSTNode, Frame]] = [(stmt, self.module, self.root)]
        push, pop = stack.append, stack.pop
        parents = self.parents
        by_type = self.by_type
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
        self.functions.append(info)
        if info.class_info is not None:
            info.class_info.methods[info.name] = info
        self.bindings.append(Binding(info.name, node, frame, "def"))
        inner = Frame(info, info.class_info or (frame.class_info if frame.function else None), (), ())
        out: List[Tuple[cst.CSTNode, Frame]] = [(d, frame) for d in node.decorators]
        out.append((node.params, frame))  # annotations and defaults run where the def runs
        if node.returns is not None:
            out.append((node.returns, frame))
        out.append((node.body, inner))
        for param in _all_params(node.params):
            self.bindings.append(Binding(param.name.value, param, inner, "param"))
        return out

    def _class(self, node: cst.ClassDef, frame: Frame):
        info = ClassInfo(node)
        self.classes.append(info)
        self.bindings.append(Binding(info.name, node, frame, "def"))
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
            self.parents[comp_for] = owner
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
            self.module_calls.append((node, frame))
        return [(node.func, frame)] + [(a, frame) for a in node.args]

    def _import(self, node: cst.Import, frame: Frame):
        for alias in node.names:
            dotted = _dotted(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.imports[alias.asname.name.value] = dotted
            else:
                head = dotted.split(".")[0]
                self.imports[head] = head
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
            self.imports[local] = f"{base}.{name}"
        return []

    # -- bindings -------------------------------------------------------------------------------

    def _bind_target(self, target: cst.BaseExpression, value: Optional[cst.CSTNode], frame: Frame, how: str, index: Optional[int] = None) -> None:
        if isinstance(target, cst.Name):
            self.bindings.append(Binding(target.value, value, frame, how, index))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                inner = element.value
                self._bind_target(inner, value, frame, how, i if index is None else index)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            cls = frame.class_info
            if cls is not None and value is not None and how == "assign":
                cls.attr_bindings.setdefault(target.attr.value, []).append((value, frame))


class _Part:
    """What walking one top-level statement found, in the order the walk found it."""

    __slots__ = ("parents", "by_type", "functions", "classes", "bindings", "imports", "module_calls")

    def __init__(self) -> None:
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        self.by_type: Dict[Type[cst.CSTNode], List[Tuple[cst.CSTNode, Frame]]] = {}
        self.functions: List[FunctionInfo] = []
        self.classes: List[ClassInfo] = []
        self.bindings: List[Binding] = []
        self.imports: Dict[str, str] = {}
        self.module_calls: List[Tuple[cst.Call, Frame]] = []


def _all_params(params: cst.Parameters):
    yield from params.posonly_params
    yield from params.params
    if isinstance(params.star_arg, cst.Param):
        yield params.star_arg
    yield from params.kwonly_params
    if params.star_kwarg is not None:
        yield params.star_kwarg


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
