"""A file's summary for the project-wide per-step model: definitions, base classes, calls, and the
regions of code that repeat (loops) or run rarely (lazy-init and periodic blocks); and for the
engine's positions, the row where each top-level statement starts.

Built with the stdlib `ast` (its parse costs a tenth of libcst's), JSON-able so the cache can keep
it by content, and independent of settings. The project graph (`perflsp.rules.project`) is built
from summaries alone; rules never read them.
"""
from __future__ import annotations

import ast
import fnmatch
import re
import warnings
from functools import lru_cache
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from perflsp.rules import limits
from perflsp.rules.hot_table import (
    ACCUMULATION, COLD_FUNCTIONS, COLD_PREFIXES, HOT_COMMENT, HOT_MARKERS, IGNITE_PER_ITERATION, LAZY_READY,
    LOADER_ITERABLE,
    ONE_OFF_FUNCTIONS, PERIODIC_PREDICATE, SETTING_GRIDS, STEP_ITERABLE, STEP_RANGE_BOUND, TEST_FILE,
)

VERSION = 11  # bump when the shape or meaning of a summary changes (the cache keys on it)
MODULE_LEVEL = "<module>"

# Region kinds, innermost region decides: a step loop makes its body and callees per step,
# lazy-init and periodic blocks run rarely, a plain loop or comprehension repeats only as often as
# the code around it (named in the reason when that code is per step).
STEP_LOOP, LOOP, COMPREHENSION, LAZY, PERIODIC = "step-loop", "loop", "comprehension", "lazy-init", "periodic"
# A `raise` statement, an `assert`'s message and an `if` block that ends raising or exiting run
# only when the step fails.
FAILURE = "failure-path"
# A branch a CUDA run does not take: `if x.device.type == "mps":`, the `else:` of `if x.is_cuda:`.
OFF_ACCELERATOR = "off-accelerator"
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
_WARNINGS = frozenset({"warnings.warn"})
# `loss.backward()`, `scaler.scale(loss).backward()`, `accelerator.backward(loss)`,
# `torch.autograd.backward(...)`, Lightning's `self.manual_backward(loss)`.
_BACKWARD = frozenset({"backward", "manual_backward"})
RARE_REGIONS = (LAZY, PERIODIC, FAILURE, OFF_ACCELERATOR)
# Call sites: what a call passes on to its callee. STEP: inside a step loop (per step whatever
# the caller); COLD: inside a lazy-init, periodic or failure block (nothing); LOOP: inside another loop;
# PLAIN: the caller's own status.
STEP, COLD, LOOP_SITE, PLAIN = "step", "cold", "loop", "plain"

Span = Tuple[int, int, int, int]  # start row, start column, end row, end column (code points)
# A region: [kind, *span, header row, owner function key, span left out (a comprehension's first
# iterable) or None, trains]. `trains`: a step loop whose own body calls `backward()` (a training
# loop: the strongest evidence that the tensors in it live on the accelerator).


def source_lines(source: str) -> List[str]:
    """Rows as Python counts them (`ast` line numbers): only \\n, \\r\\n and \\r end a line, not the
    form feeds and U+2028 that `str.splitlines` also splits at."""
    return _NEWLINE.split(source)


def summarize(source: str, module: str, is_package: bool = False, path: str = "") -> Dict[str, Any]:
    """The summary of one file's source; a file `ast` cannot parse, or that has more tokens than
    the parser takes (`limits.MAX_TOKENS`), gets an empty one.

    The summaries of the last few texts are remembered: the same text again costs nothing, and a
    text that differs from a remembered one inside one top-level statement is summarised again
    for that statement only (`perflsp.rules.summary_delta`). Treat the result as read-only.
    """
    from perflsp.rules import summary_delta

    return summary_delta.summarize_reusing(source, module, is_package, path)


def summarize_whole(source: str, module: str, is_package: bool = False, path: str = ""
                    ) -> Tuple[Dict[str, Any], Optional["Table"]]:
    """The summary of the whole text, and what each group of top-level statements added to it
    (None when the groups cannot be told apart: the text did not parse, or a top-level
    `if step % n: return` makes the rest of the module one periodic region)."""
    summary: Dict[str, Any] = {
        "version": VERSION, "module": module, "test": bool(TEST_FILE.search(path.replace("\\", "/"))),
        "imports": {}, "classes": {}, "functions": [], "calls": [], "regions": [],
        # The deepest expression or `elif` chain (each `elif` nests in the one before), in AST levels;
        # None: the file did not parse, or has more tokens than the parser takes (`limits.MAX_TOKENS`).
        "depth": None,
        # The row where each top-level statement's code starts, one per libcst statement (statements
        # that share rows count once, decorators count): the engine's positions start there.
        "statement_rows": None,
    }
    tokens = limits.tokens_in(source)
    if tokens is not None and tokens > limits.MAX_TOKENS:
        return summary, None  # the engine will not parse it either, and its `ast` takes 0.5 KiB a token
    try:
        with warnings.catch_warnings():  # invalid escapes and the like are the user's linter's business
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return summary, None
    summary["statement_rows"] = [_first_row(stmts[0]) for stmts in statement_groups(tree.body)]
    table = None
    try:
        summarizer = _Summarizer(summary, source, module, is_package)
        table = summarizer.visit_module(tree)
        summary["depth"] = summarizer.depth
    except RecursionError:  # absurdly nested code: what was summarised so far stands, its depth unknown
        table = None
    return summary, table._replace(tokens=tokens) if table is not None else None


class ModuleState(NamedTuple):
    """What summarising a top-level statement reads of the statements before it."""

    imports: Dict[str, str]
    names: Dict[str, str]  # module-level defs and classes seen so far: name -> key
    periodic: frozenset  # module-level names bound to "is this a logging step"
    instances: Dict[str, str]  # module-level names bound to an object of a class: name -> class reference


class Group:
    """Top-level statements that share rows (`a = 1; b = 2`), and what summarising them added."""

    __slots__ = ("first", "last", "before", "top", "functions", "calls", "regions", "classes", "depth")

    def __init__(self, first: int, last: int, before: ModuleState, top: frozenset):
        self.first, self.last = first, last  # rows of its code, decorators included
        self.before = before
        self.top = top  # the module-level names it defines (`_top_level`)
        self.functions: List[Dict[str, Any]] = []
        self.calls: List[list] = []
        self.regions: List[list] = []
        self.classes: Dict[str, Dict[str, Any]] = {}
        self.depth = 0


class Table(NamedTuple):
    groups: List[Group]
    after: ModuleState  # the state after the last group
    tokens: Optional[int] = None  # the text's `limits.tokens_in`


def statement_groups(body: List[ast.stmt]) -> List[List[ast.stmt]]:
    """Top-level statements grouped by the rows they share: one group per libcst statement."""
    groups: List[List[ast.stmt]] = []
    last = 0
    for node in body:
        first = _first_row(node)
        if groups and first <= last:
            groups[-1].append(node)
        else:
            groups.append([node])
        last = max(last, node.end_lineno or node.lineno)
    return groups


def summarize_group(stmts: List[ast.stmt], source: str, module: str, is_package: bool, before: ModuleState,
                    top: frozenset) -> Optional[Tuple[Group, ModuleState]]:
    """One group of top-level statements of `source` summarised alone, as `summarize_whole` would
    with the module-level state `before` and the module-level names `top`, and the state after
    it; None when it cannot be (a `if step % n: return` at the top level, absurd nesting)."""
    if any(_skips_unless_periodic(stmt) for stmt in stmts):
        return None
    scratch: Dict[str, Any] = {"imports": dict(before.imports), "functions": [], "calls": [], "regions": [],
                               "classes": {}}
    summarizer = _Summarizer(scratch, source, module, is_package)
    summarizer.top = {name: f"{module}.{name}" for name in top}
    scope = _Scope(f"{module}.{MODULE_LEVEL}", None)
    scope.locals, scope.periodic, scope.instances = dict(before.names), set(before.periodic), dict(before.instances)
    try:
        group = summarizer.group(stmts, scope, before)
    except RecursionError:
        return None
    return group, summarizer.state(scope, None)


def _first_row(node: ast.stmt) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


class _Scope:
    __slots__ = ("key", "class_key", "locals", "regions", "conditions", "periodic", "instances")

    def __init__(self, key: str, class_key: Optional[str]):
        self.key = key
        self.class_key = class_key  # the class whose method this is (for `self.m()`)
        self.locals: Dict[str, str] = {}  # nested defs: name -> key
        self.regions: List[Tuple[str, Span]] = []  # enclosing regions, innermost last
        self.conditions = 0  # enclosing `if`/`except` blocks: calls there may not run every time
        self.periodic: set = set()  # names bound to "is this a logging step" (`log_now = step % n == 0`)
        # Names bound to an object of a class (`compute_loss = ComputeLoss(model)`, a parameter
        # annotated `unit: TrainUnit`): calling one runs its class's `__call__`.
        self.instances: Dict[str, str] = {}


class _Summarizer:
    def __init__(self, summary: Dict[str, Any], source: str, module: str, is_package: bool):
        self.out = summary
        self.lines = source_lines(source)
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.imports: Dict[str, str] = summary["imports"]
        self.top: Dict[str, str] = {}  # module-level defs and classes: name -> key
        self.depth = 0  # the deepest expression seen: the engine skips its own limit scan below one

    # -- statements -------------------------------------------------------------------------------

    def visit_module(self, tree: ast.Module) -> Optional["Table"]:
        for node in _top_level(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.top[node.name] = f"{self.module}.{node.name}"
        scope = _Scope(f"{self.module}.{MODULE_LEVEL}", None)
        if any(_skips_unless_periodic(stmt) for stmt in tree.body):
            self.block(tree.body, scope)
            return None
        groups: List[Group] = []
        for stmts in statement_groups(tree.body):
            groups.append(self.group(stmts, scope, self.state(scope, groups[-1].before if groups else None)))
        return Table(groups, self.state(scope, groups[-1].before if groups else None))

    def state(self, scope: "_Scope", last: Optional[ModuleState]) -> ModuleState:
        """The module-level state now; the last one itself when nothing changed (most statements)."""
        if (last is not None and last.imports == self.imports and last.names == scope.locals
                and last.periodic == scope.periodic and last.instances == scope.instances):
            return last
        return ModuleState(dict(self.imports), dict(scope.locals), frozenset(scope.periodic), dict(scope.instances))

    def group(self, stmts: List[ast.stmt], scope: "_Scope", before: ModuleState) -> Group:
        """Summarise one group of top-level statements into lists of its own (joined by the caller)."""
        group = Group(_first_row(stmts[0]), max(s.end_lineno or s.lineno for s in stmts), before,
                      frozenset(n.name for n in _top_level(stmts)
                                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))))
        whole = self.out
        self.out = {"functions": group.functions, "calls": group.calls, "regions": group.regions,
                    "classes": group.classes}
        depth, self.depth = self.depth, 0
        try:
            for stmt in stmts:
                self.statement(stmt, scope)
        finally:
            self.out = whole
            group.depth, self.depth = self.depth, max(depth, self.depth)
        whole["functions"].extend(group.functions)
        whole["calls"].extend(group.calls)
        whole["regions"].extend(group.regions)
        whole["classes"].update(group.classes)
        return group

    def block(self, body: List[ast.stmt], scope: _Scope) -> None:
        for index, stmt in enumerate(body):
            self.statement(stmt, scope)
            if _skips_unless_periodic(stmt) and index + 1 < len(body):
                # `if step % every != 0: return` guards the rest of the block: it runs every N steps
                rest = body[index + 1:]
                span = self.span(rest[0])[:2] + self.span(rest[-1])[2:]
                self.enter(PERIODIC, span, stmt.lineno, scope, lambda: self.block(rest, scope))
                return

    def statement(self, node: ast.stmt, scope: _Scope) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(node, scope)
        elif isinstance(node, ast.ClassDef):
            self.klass(node, scope)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.import_(node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.exprs([node.iter], scope)
            trains = _backpropagates(node.body)
            kind = STEP_LOOP if trains or _is_step_iterable(node.iter) else LOOP
            self.region(kind, node, scope, lambda: (self.exprs([node.target], scope), self.block(node.body, scope)), trains)
            self.block(node.orelse, scope)
        elif isinstance(node, ast.While):
            # `while True:` at a script's top level is its main loop; elsewhere, one that ends at a
            # step count (`if step >= max_steps: break`) is a training or decoding loop
            forever = (isinstance(node.test, ast.Constant) and node.test.value is True
                       and (scope.key.endswith(MODULE_LEVEL) or _breaks_at_step_count(node.body)))
            trains = _backpropagates(node.body)
            kind = STEP_LOOP if trains or forever or _is_step_condition(node.test) else LOOP
            self.region(kind, node, scope, lambda: (self.exprs([node.test], scope), self.block(node.body, scope)), trains)
            self.block(node.orelse, scope)
        elif isinstance(node, ast.If):
            self.if_chain(node, scope)
        elif isinstance(node, ast.Raise):
            self.region(FAILURE, node, scope, lambda: self.exprs([node.exc, node.cause], scope))
        elif isinstance(node, ast.Assert) and node.msg is not None:
            self.exprs([node.test], scope)
            self.enter(FAILURE, self.span(node.msg), node.lineno, scope, lambda: self.exprs([node.msg], scope))
        else:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and _is_periodic(node.value, scope.periodic)):
                scope.periodic.add(node.targets[0].id)
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                self.bind(node, scope)
            nested = [getattr(node, f, None) for f in ("body", "orelse", "finalbody", "handlers", "cases")]
            blocks = [b for b in nested if isinstance(b, list) and b and isinstance(b[0], _BLOCK_ITEMS)]
            heads = [v for f, v in ast.iter_fields(node) if f not in ("body", "orelse", "finalbody", "handlers", "cases")]
            self.exprs([n for v in heads for n in (v if isinstance(v, list) else [v]) if isinstance(n, ast.AST)], scope)
            for items in blocks:
                for item in items:
                    if isinstance(item, ast.stmt):
                        self.statement(item, scope)
                    else:  # an except handler or a match case: runs only sometimes
                        self.exprs([getattr(item, "type", None), getattr(item, "guard", None)], scope)
                        scope.conditions += 1
                        self.block(item.body, scope)
                        scope.conditions -= 1

    def if_chain(self, node: ast.If, scope: _Scope) -> None:
        """An `if` and its `elif`s, one after the other: `ast` nests each `elif` in the `else` of
        the one before, and a visit that recursed there would run out of Python's stack on a long
        chain (at about 450 `elif`s), losing the whole file's summary. The parsers recurse there:
        the chain counts for the depth."""
        self.exprs([node.test], scope)
        scope.conditions += 1  # the tests after the first, and every branch, run only sometimes
        links = 1
        on_accelerator = None
        while True:
            on_accelerator = _accelerator_test(node.test)
            kind = (FAILURE if _fails(node.body) or _tests_for_nan(node.test) else OFF_ACCELERATOR
                    if on_accelerator is False else _rare_block(node, scope.periodic))
            if kind is None:
                self.block(node.body, scope)
            else:  # the `if` up to the end of its body: an `else` runs on the other steps
                # (a failure's test runs on every step: only its body is rare)
                start = self.span(node.body[0] if kind == FAILURE else node)[:2]
                span = start + self.span(node.body[-1])[2:]
                self.enter(kind, span, node.lineno, scope, lambda: self.block(node.body, scope))
            if not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                break
            node = node.orelse[0]
            links += 1
            self.exprs([node.test], scope)
        self.depth = max(self.depth, links)
        if on_accelerator and node.orelse:  # `else:` of `if x.is_cuda:`
            span = self.span(node.orelse[0])[:2] + self.span(node.orelse[-1])[2:]
            self.enter(OFF_ACCELERATOR, span, node.orelse[0].lineno, scope, lambda: self.block(node.orelse, scope))
        else:
            self.block(node.orelse, scope)
        scope.conditions -= 1

    def function(self, node, scope: _Scope) -> None:
        in_class = scope.class_key is not None and scope.key == scope.class_key
        key = _child(scope.key, node.name)
        if not in_class:
            scope.locals[node.name] = key
        self.exprs([*node.decorator_list, node.args], scope)
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        self.out["functions"].append({
            "key": key, "name": node.name, "cls": scope.class_key if in_class else None,
            "parent": None if in_class or scope.key.endswith(MODULE_LEVEL) else scope.key,
            "start": first, "end": node.end_lineno or node.lineno, "row": node.lineno,
            "marker": self.marker(node, first), "cold": _cold_name(node.name),
        })
        inner = _Scope(key, scope.class_key)  # a closure in a method still sees `self`
        arguments = node.args
        for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            cls = self.annotated_class(argument.annotation, scope)
            if cls is not None:
                inner.instances[argument.arg] = cls
        self.block(node.body, inner)

    def klass(self, node: ast.ClassDef, scope: _Scope) -> None:
        key = _child(scope.key, node.name)
        scope.locals[node.name] = key
        self.exprs([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)], scope)
        bases = [r for r in (self.ref(b, scope) for b in node.bases) if r]
        # attrs: attributes bound to an object of a class (`self.loss = Loss()`, `loss: Loss`)
        self.out["classes"][key] = {"bases": bases, "row": node.lineno, "attrs": {}}
        self.block(node.body, _Scope(key, key))

    def import_(self, node) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.imports.setdefault(head, head)
            return
        base = node.module or ""
        if node.level:
            package = self.package.split(".") if self.package else []
            package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            base = ".".join([*package, *([base] if base else [])])
        for alias in node.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name

    # -- objects of project classes ----------------------------------------------------------------

    def bind(self, node, scope: _Scope) -> None:
        """Note which names and `self` attributes an assignment binds to an object of a class."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        cls = None
        if isinstance(node, ast.AnnAssign):
            cls = self.annotated_class(node.annotation, scope)
        if cls is None and node.value is not None:
            cls = self.constructed_class(node.value, scope)
        for target in targets:
            if isinstance(target, ast.Name):
                if scope.key == scope.class_key:  # `loss: Loss` in a class body
                    if cls is not None:
                        self.out["classes"][scope.class_key]["attrs"][target.id] = cls
                elif cls is not None:
                    scope.instances[target.id] = cls
                else:
                    scope.instances.pop(target.id, None)
            elif (cls is not None and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                  and target.value.id == "self" and scope.class_key in self.out["classes"]):
                self.out["classes"][scope.class_key]["attrs"][target.attr] = cls

    def constructed_class(self, value: ast.expr, scope: _Scope) -> Optional[str]:
        """The class `Loss(...)` constructs, or the class of a name bound to an object (`self.loss = loss`)."""
        if isinstance(value, ast.Name):
            return scope.instances.get(value.id)
        if isinstance(value, ast.Call) and _class_like(value.func):
            return self.ref(value.func, scope)
        return None

    def annotated_class(self, annotation: Optional[ast.expr], scope: _Scope) -> Optional[str]:
        """The class an annotation names: `Loss`, `nn.Module`, `Optional[Loss]`, `Loss | None`, `"Loss"`."""
        if isinstance(annotation, ast.Subscript) and _names(annotation.value)[:1] == ["Optional"]:
            annotation = annotation.slice
        if (isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr)
                and isinstance(annotation.right, ast.Constant) and annotation.right.value is None):
            annotation = annotation.left
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            # a forward reference: only a dotted name can name a class (no parse for the rest)
            if not _DOTTED.match(annotation.value):
                return None
            head, *rest = annotation.value.split(".")
            annotation = ast.Name(head)
            for part in rest:
                annotation = ast.Attribute(annotation, part)
        if isinstance(annotation, (ast.Name, ast.Attribute)) and _class_like(annotation):
            return self.ref(annotation, scope)
        return None

    # -- regions ----------------------------------------------------------------------------------

    def region(self, kind: str, node: ast.stmt, scope: _Scope, visit, trains: bool = False) -> None:
        self.enter(kind, self.span(node), node.lineno, scope, visit, trains)

    def span(self, node: ast.AST) -> Span:
        end_row = node.end_lineno or node.lineno
        return (node.lineno, self.column(node.lineno, node.col_offset), end_row, self.column(end_row, node.end_col_offset or 0))

    def enter(self, kind: str, span: Span, header: int, scope: _Scope, visit, trains: bool = False) -> None:
        self.out["regions"].append([kind, *span, header, scope.key, None, trains])
        scope.regions.append((kind, span))
        try:
            visit()
        finally:
            scope.regions.pop()

    # -- expressions: calls and comprehensions ------------------------------------------------------

    def exprs(self, nodes, scope: _Scope) -> None:
        # An explicit stack over `_fields`: `ast.walk` costs twice as much, and this walk is most
        # of the summary's time.
        stack = [(n, 1) for n in nodes if n is not None]
        push, pop = stack.append, stack.pop
        calls, regions = self.out["calls"], self.out["regions"]
        deepest = self.depth
        while stack:
            node, depth = pop()
            if depth > deepest:
                deepest = depth
            kind = type(node)
            if kind is ast.Call:
                ref = self.ref(node.func, scope)
                if ref is not None:
                    calls.append([scope.key, ref, node.lineno, _site(scope.regions), scope.conditions > 0])
            elif kind in _COMPREHENSIONS:
                # the first iterable is evaluated once: the region leaves it out
                first = node.generators[0].iter
                loop = STEP_LOOP if _is_step_iterable(first, LOADER_ITERABLE) else COMPREHENSION
                regions.append([loop, *self.span(node), node.lineno, scope.key, self.span(first), False])
            fields = _CHILD_FIELDS.get(kind)
            if fields is None:
                fields = _child_fields(kind)
            depth += 1
            for field in fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    for item in value:
                        if type(item) in _LEAVES:
                            if depth > deepest:
                                deepest = depth
                        elif isinstance(item, ast.AST):
                            push((item, depth))
                elif type(value) in _LEAVES:
                    if depth > deepest:
                        deepest = depth
                elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
                    push((value, depth))
        self.depth = deepest

    def ref(self, func: ast.expr, scope: _Scope) -> Optional[str]:
        """What a called or base-class expression names, as a project-wide reference:
        `pkg.mod.f`, `self:pkg.mod.C.m` (through the class's MRO), `super:pkg.mod.C.m`."""
        parts: List[str] = []
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        parts.reverse()
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "super" and parts:
            return f"super:{scope.class_key}.{parts[0]}" if scope.class_key else None
        if not isinstance(func, ast.Name):
            return None
        head = func.id
        if head in ("self", "cls") and scope.class_key and parts:
            if len(parts) == 1:
                return f"self:{scope.class_key}.{parts[0]}"
            # `self.loss(...)`, `self.decoder.step(...)`: a method of the attribute's class
            return f"attr:{scope.class_key}.{parts[0]}.{parts[1]}" if len(parts) == 2 else None
        cls = scope.instances.get(head)
        if cls is not None:
            return f"obj:{cls}.{parts[0] if parts else '__call__'}" if len(parts) <= 1 else None
        base = scope.locals.get(head) or self.top.get(head) or self.imports.get(head)
        if base is None:
            return None
        return ".".join([base, *parts])

    def marker(self, node, first: int) -> Optional[str]:
        """Why a decorator or comment makes the function per step, completing "which ..."."""
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = self.ref(target, _Scope("", None))
            if name in HOT_MARKERS:
                return f"is marked `{HOT_MARKERS[name]}`"
            event = self._ignite_event(decorator)
            if event is not None:
                return f"ignite runs on every iteration (`@{ast.unparse(target)}(Events.{event})`)"
        rows = range(max(first - 1, 1), node.body[0].lineno if node.body else node.lineno + 1)
        if any(HOT_COMMENT in self.lines[r - 1] for r in rows if r - 1 < len(self.lines)):
            return f"is marked `# {HOT_COMMENT}`"
        return None

    def _ignite_event(self, decorator: ast.expr) -> Optional[str]:
        """`@trainer.on(Events.ITERATION_COMPLETED)`: a handler an ignite engine runs on every
        iteration. With a filter (`Events.ITERATION_COMPLETED(every=100)`) it runs periodically."""
        if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr == "on" and decorator.args):
            return None
        event = self.ref(decorator.args[0], _Scope("", None)) or ""
        package, _, name = event.rpartition(".Events.")
        return name if package.split(".")[0] == "ignite" and name in IGNITE_PER_ITERATION else None

    def column(self, row: int, byte_offset: int) -> int:
        """ast counts columns in UTF-8 bytes, libcst (and the findings) in code points."""
        line = self.lines[row - 1] if 0 < row <= len(self.lines) else ""
        if line.isascii():
            return byte_offset
        return len(line.encode("utf-8")[:byte_offset].decode("utf-8", "replace"))


_NEWLINE = re.compile(r"\r\n|\r|\n")
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# What the nested blocks of a statement hold: statements, `except` handlers, `match` cases (3.10+).
_BLOCK_ITEMS = (ast.stmt, ast.excepthandler, *((ast.match_case,) if hasattr(ast, "match_case") else ()))
_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {}
# Nodes with no nodes inside (most of an expression's nodes): they count for the depth, and the
# walk does not push and pop them.
_LEAVES = frozenset({ast.Name, ast.Constant, *ast.operator.__subclasses__(), *ast.unaryop.__subclasses__(),
                     *ast.cmpop.__subclasses__(), *ast.boolop.__subclasses__()})


def _child_fields(kind: type) -> Tuple[str, ...]:
    """The fields of a node type that can hold other nodes (not names, numbers or contexts)."""
    found = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in ("ctx", "id", "attr", "arg", "n", "s",
                                                                             "kind", "type_comment", "conversion"))
    return found


def _child(scope_key: str, name: str) -> str:
    if scope_key.endswith("." + MODULE_LEVEL):
        scope_key = scope_key[: -len(MODULE_LEVEL) - 1]
    return f"{scope_key}.{name}"


def _top_level(body: List[ast.stmt]):
    """Statements at module level, looking inside `if`/`try` (conditional definitions)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(node, (ast.If, ast.Try)) and isinstance(inner, list):
                yield from _top_level(inner)


def _site(regions: List[Tuple[str, Span]]) -> str:
    looped = False
    for kind, _ in reversed(regions):
        if kind == STEP_LOOP:
            return STEP
        if kind in RARE_REGIONS:
            return COLD
        looped = True
    return LOOP_SITE if looped else PLAIN


def _backpropagates(body: List[ast.stmt]) -> bool:
    """The loop's own body calls `backward()`: each pass is a training step, whatever the loop
    iterates (`for batch in tepoch`, `for data in buffer.get(n)`). Loops and defs nested in it are
    left out: they are judged on their own (an epoch loop around the step loop is no step loop, a
    closure handed to `optimizer.step` is no pass of the loop), so each statement is scanned once."""
    stack: List[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _NOT_THE_LOOPS_OWN):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _BACKWARD:
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


_NOT_THE_LOOPS_OWN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.For, ast.AsyncFor, ast.While)


def _names(node: ast.AST) -> List[str]:
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]


def _is_step_iterable(node: ast.expr, names: "re.Pattern[str]" = STEP_ITERABLE) -> bool:
    if isinstance(node, ast.Call) and ".".join(reversed(_names(node.func))) in SETTING_GRIDS:
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        return names is STEP_ITERABLE and any(STEP_RANGE_BOUND.search(n) for arg in node.args for n in _names(arg))
    return any(names.search(n) for n in _names(node))


def _is_step_condition(test: ast.expr) -> bool:
    """`while not done`, `while step < max_steps`, `while not should_stop(scores)`: a training or
    decoding loop written as a while."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        if isinstance(operand, (ast.Name, ast.Attribute)):
            return True
        return isinstance(operand, ast.Call) and bool(_STOP_TEST.search(".".join(_names(operand.func))))
    return _counts_steps(test)


_STOP_TEST = re.compile(r"stop|done|finished", re.IGNORECASE)
_DOTTED = re.compile(r"[A-Za-z_][\w.]*\Z")


def _counts_steps(test: ast.expr) -> bool:
    return isinstance(test, ast.Compare) and any(STEP_RANGE_BOUND.search(n) for n in _names(test))


def _breaks_at_step_count(body: List[ast.stmt]) -> bool:
    """The loop's own body leaves it at a step count: `if iter_num > max_iters: break`."""
    stack: List[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _NOT_THE_LOOPS_OWN):
            continue
        if (isinstance(node, ast.If) and _counts_steps(node.test)
                and any(isinstance(s, (ast.Break, ast.Return)) for s in node.body)):
            return True
        if isinstance(node, ast.stmt):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _class_like(func: ast.expr) -> bool:
    """`Loss`, `nn.CrossEntropyLoss`: a capitalised name, as classes are named."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name[:1].isupper()


# Device types a CUDA run never has, and the tests that ask for one.
_OFF_DEVICES = frozenset({"cpu", "mps"})


def _accelerator_test(test: ast.expr) -> Optional[bool]:
    """True when `test` holds only on a CUDA device (`x.is_cuda`, `device.type == "cuda"`,
    `torch.cuda.is_available()`), False when it never does (`x.device.type == "mps"`,
    `not torch.cuda.is_available()`), None when it is about something else."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _accelerator_test(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Attribute) and test.attr == "is_cuda":
        return True
    if isinstance(test, ast.Call) and not test.args:
        called = ".".join(reversed(_names(test.func)))
        if called.endswith("cuda.is_available"):
            return True
        if called.endswith("mps.is_available"):
            return False
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    sides = [test.left, test.comparators[0]]
    texts = [s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
    others = [s for s in sides if not isinstance(s, ast.Constant)]
    if len(texts) != 1 or len(others) != 1 or not any("device" in n or n == "type" for n in _names(others[0])):
        return None
    if texts[0] == "cuda":
        on = True
    elif texts[0] in _OFF_DEVICES:
        on = False
    else:
        return None
    return on if isinstance(test.ops[0], ast.Eq) else not on


def _rare_block(node: ast.If, periodic_names: set) -> Optional[str]:
    """LAZY for `if self.x is None: self.x = ...`, PERIODIC for `if step % every == 0:` (or a
    name bound to such a test: `log_now = step % every == 0 or last` then `if log_now:`)."""
    test = node.test
    if _is_periodic(test, periodic_names):
        return PERIODIC
    # `if self.buf is None or self.buf.size(0) != n:` rebuilds a cache only when it must grow
    for part in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]:
        attribute = _none_tested_attribute(part)
        if attribute is not None and _initialises(node.body, attribute):
            return LAZY
    if _not_predicate(test, LAZY_READY) or _first_pass(test):
        return LAZY
    return None


def _first_pass(test: ast.expr) -> bool:
    """`if i == 0:` / `if step == 0:`: the first pass of a loop only (a warm-up, a first-batch dump)."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == 0 and type(test.comparators[0].value) is int)


def _skips_unless_periodic(stmt: ast.stmt) -> bool:
    """`if step % every != 0: return` (or `continue`, `if step % every: return`, or
    `if not self.metrics.should_log(step): return`)."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
            and isinstance(stmt.body[0], (ast.Return, ast.Continue))):
        return False
    test = stmt.test
    if _not_predicate(test, PERIODIC_PREDICATE):
        return True
    if isinstance(test, ast.BinOp) and isinstance(test.op, ast.Mod):
        modulo = test
    elif (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq)
          and isinstance(test.left, ast.BinOp) and isinstance(test.left.op, ast.Mod)
          and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0):
        modulo = test.left
    else:
        return False
    return _every_n_steps(modulo)


def _is_periodic(test: ast.expr, periodic_names: set) -> bool:
    """A test that holds every N steps (see `_every_n_steps`), a name bound to one, or an `and`/`or`
    with such a part at any depth (`is_last_step or (freq > 0 and is_valid_step)`: the last step
    comes once). An `or` with a gradient-accumulation boundary holds on every optimizer step."""
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.Or) and any(_accumulation_boundary(v) for v in test.values):
            return False
        return any(_is_periodic(v, periodic_names) for v in test.values)
    if isinstance(test, ast.Name) and test.id in periodic_names:
        return True
    if _predicate(test, PERIODIC_PREDICATE):
        return True
    modulo = _modulo_in(test)
    return modulo is not None and _every_n_steps(modulo)


def _accumulation_boundary(test: ast.expr) -> bool:
    modulo = _modulo_in(test)
    return modulo is not None and not _every_n_steps(modulo)


def _every_n_steps(modulo: ast.BinOp) -> bool:
    """`step % log_every`, not `(i + 1) % accum_steps`: the divisor's name tells a logging interval
    from a gradient-accumulation boundary (which comes every optimizer step)."""
    return not any(ACCUMULATION.search(n) for n in _names(modulo.right))


def _modulo_in(test: ast.expr) -> Optional[ast.BinOp]:
    """The `step % every` of `step % every == 0` or `not step % every` (inside an `and`/`or` too);
    only its own names decide whether it is a gradient-accumulation boundary."""
    if isinstance(test, ast.BoolOp):
        return next((m for m in map(_modulo_in, test.values) if m is not None), None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        return operand if isinstance(operand, ast.BinOp) and isinstance(operand.op, ast.Mod) else None
    if (isinstance(test, ast.Compare) and isinstance(test.left, ast.BinOp) and isinstance(test.left.op, ast.Mod)
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == 0 and isinstance(test.ops[0], ast.Eq)):
        return test.left
    return None


def _fails(body: List[ast.stmt]) -> bool:
    """The block handles something gone wrong: its last statement raises or exits the program, or
    one of its statements is a `warnings.warn` (a module that warns, then repairs its input)."""
    last = body[-1]
    return (isinstance(last, ast.Raise) or (_calls(last, _EXITS) and not _exits_with_a_result(last))
            or any(_calls(stmt, _WARNINGS) for stmt in body))


def _exits_with_a_result(stmt: ast.stmt) -> bool:
    """`sys.exit(main())`: the program's work runs inside the exit's argument, then it ends."""
    return any(isinstance(arg, ast.Call) for arg in stmt.value.args)  # type: ignore[attr-defined]


def _tests_for_nan(test: ast.expr) -> bool:
    """`if torch.isnan(loss).any():`, `if not torch.isfinite(x).all():`: a repair that runs only
    when the numbers went wrong (the test itself runs every time)."""
    return any(isinstance(n, ast.Call) and _names(n.func)[:1] in (["isnan"], ["isinf"], ["isfinite"])
               for n in ast.walk(test))


def _calls(stmt: ast.stmt, functions: frozenset) -> bool:
    """The statement is a bare call of one of `functions` (dotted names)."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and ".".join(reversed(_names(stmt.value.func))) in functions)


def _not_predicate(test: ast.expr, names: "re.Pattern[str]") -> bool:
    """`not <predicate>` (see `_predicate`)."""
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _predicate(test.operand, names)


def _predicate(test: ast.expr, names: "re.Pattern[str]") -> bool:
    """`flag`, `self.flag` or a call `self.metrics.flag(step)` whose own name matches."""
    if isinstance(test, ast.Call):
        test = test.func
    name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
    return name is not None and names.search(name) is not None


def _none_tested_attribute(test: ast.expr) -> Optional[str]:
    """`x` for `self.x is None` or `not hasattr(self, "x")`: state kept on an object between calls
    (a local `if mask is None: mask = ...` is a per-call default, not a lazy init)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is):
        right = test.comparators[0]
        if isinstance(right, ast.Constant) and right.value is None and isinstance(test.left, ast.Attribute):
            return test.left.attr
    if (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)
            and isinstance(test.operand.func, ast.Name) and test.operand.func.id == "hasattr"
            and len(test.operand.args) == 2 and isinstance(test.operand.args[1], ast.Constant)):
        return str(test.operand.args[1].value)
    return None


def _initialises(body: List[ast.stmt], attribute: str) -> bool:
    """The block sets the attribute, or calls an initialiser (`self._init_step_index(t)`)."""
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == attribute for t in targets):
                return True
        if isinstance(node, ast.Call) and "init" in (_names(node.func) or [""])[0].lower():
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == attribute):
            return True
    return False


def _cold_name(name: str) -> Optional[str]:
    if method_matches(name, ONE_OFF_FUNCTIONS):
        return f"`{name}` is one-off work (data processing or debugging output)"
    if name in COLD_FUNCTIONS or name.startswith(COLD_PREFIXES):
        return f"`{name}` runs once (setup, loading or saving)"
    return None


def is_one_off(name: str) -> bool:
    return method_matches(name, ONE_OFF_FUNCTIONS)


def method_matches(name: str, patterns: Tuple[str, ...]) -> bool:
    """`name` matches one of the fnmatch-style patterns (`on_*_batch_end`)."""
    return _pattern(patterns).fullmatch(name) is not None


@lru_cache(maxsize=None)
def _pattern(patterns: Tuple[str, ...]) -> "re.Pattern[str]":
    # One compiled alternation per table row: fnmatch per name and pattern was a tenth of the summary.
    return re.compile("|".join(fnmatch.translate(p) for p in patterns))
