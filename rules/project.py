"""The project graph: which functions run on every step, which run once, and why.

Built from file summaries alone (`perflsp.rules.summary`), never from a parse, so the CLI builds
it once per run and the language server rebuilds it after an edit from cached summaries. Evidence,
strongest first: markers and `hot-functions`, framework entry points recognised through base
classes (`perflsp.rules.hot_table`), calls made inside step loops, then calls from per-step code,
across modules. A function cold by name, or reached only from cold code, is cold unless per-step
code calls it. The answer for one file is a small JSON-able `facts` dict handed to the engine.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, deque
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from perflsp.rules import summary as S
from perflsp.rules.measured import Verdict
from perflsp.rules.hot_table import ENTRY_POINTS, RARE_METHODS, TORCH_NN, EntryPoint

STEP, COLD = "step", "cold"
# Why a function is cold when every caller is: a script's `main()` runs once, but the data and
# step loops in it (and in what it calls) are the run's steps; code reached only from lazy-init,
# periodic or failure blocks or from one-off functions runs rarely, its loops included (an
# evaluation every N steps is amortised).
SCRIPT_REASON = "only called from the script's top level"
RARE_REASON = "only called from code that runs once or every N steps"
_MAX_ALIAS_DEPTH = 8  # re-exports followed through at most this many `__init__` files
_MAX_CHAIN = 3  # hops named in a hot reason before "…"


def _line(row: int) -> str:
    return f"line {row}"


def module_name(path: Path, _memo: Dict[Path, Tuple[str, ...]] = {}) -> Tuple[str, bool]:
    """(`pkg.sub.mod`, is_package) for a file: the folders above it that hold an `__init__.py`
    name its package (so `src/` layouts and scripts next to no package work)."""
    folder = path.parent
    package = _memo.get(folder)
    if package is None:
        parts: List[str] = []
        current = folder
        while (current / "__init__.py").is_file() and current.parent != current:
            parts.append(current.name)
            current = current.parent
        package = _memo[folder] = tuple(reversed(parts))
    if path.stem == "__init__":
        return ".".join(package) or path.parent.name, True
    return ".".join([*package, path.stem]), False


class Project:
    """Per-step and cold status of every function in a set of summaries."""

    def __init__(self, files: Iterable[Tuple[str, Dict[str, Any]]], hot_functions: Sequence[str] = (),
                 measured: Optional[Callable[[str, str], Optional[Verdict]]] = None):
        self.functions: Dict[str, Dict[str, Any]] = {}
        self.classes: Dict[str, List[str]] = {}
        self.attributes: Dict[str, Dict[str, str]] = {}  # class -> its attributes bound to objects: name -> class ref
        self.imports: Dict[str, Dict[str, str]] = {}  # module -> its import aliases (re-exports)
        self.paths: Dict[str, str] = {}  # module -> display path
        self.tests: Set[str] = set()
        files = list(files)
        # Scripts outside packages in different folders can share a name (`examples/*/train.py`):
        # nothing tells which one another file's `import train` means, and their functions' keys
        # would collide. Such files stay out of the graph and are judged alone.
        claims = Counter(summary["module"] for _, summary in files)
        self.ambiguous = {module for module, count in claims.items() if count > 1}
        calls: List[Tuple[str, str, int, str]] = []
        for path, summary in files:
            module = summary["module"]
            if module in self.ambiguous:
                continue
            self.paths[module] = path
            self.imports[module] = summary["imports"]
            if summary["test"]:
                self.tests.add(module)
            for function in summary["functions"]:
                self.functions[function["key"]] = {**function, "module": module}
            for key, info in summary["classes"].items():
                self.classes[key] = info["bases"]
                self.attributes[key] = info["attrs"]
            calls.extend((caller, ref, row, site, conditional) for caller, ref, row, site, conditional in summary["calls"])
        self._resolved: Dict[str, List[str]] = {}  # the same reference is called from many places
        self._mros: Dict[str, List[str]] = {}
        self.subclasses: Dict[str, List[str]] = {}
        for key in self.classes:
            for base in self._bases(key):
                self.subclasses.setdefault(base, []).append(key)
        # caller -> [(callee, row, site, conditional)]
        self.edges: Dict[str, List[Tuple[str, int, str, bool]]] = {}
        for caller, ref, row, site, conditional in calls:
            for callee in self.resolve(ref):
                self.edges.setdefault(caller, []).append((callee, row, site, conditional))
        self.status: Dict[str, Tuple[str, Any]] = {}
        self._measured = self._measured_verdicts(measured) if measured else {}
        self._mark_per_step(hot_functions)
        self._mark_cold()

    # -- name resolution ---------------------------------------------------------------------------

    def resolve(self, ref: str) -> List[str]:
        """The project functions a call reference can run (none when it leaves the project)."""
        return _memoised(self._resolved, ref, self._resolve)

    def _resolve(self, ref: str) -> List[str]:
        if ref.startswith("self:"):
            owner, _, method = ref[5:].rpartition(".")
            found = self._dispatch(owner, method)
            # `self.loss(x)` where `self.loss = Loss()`: the attribute's `__call__`
            return found or self._attribute_call(owner, method, "__call__")
        if ref.startswith("attr:"):
            owner, attribute, method = ref[5:].rsplit(".", 2)
            return self._attribute_call(owner, attribute, method)
        if ref.startswith("obj:"):
            cls, _, method = ref[4:].rpartition(".")
            target = self._lookup(cls)
            return self._dispatch(target, method) if target in self.classes else []
        if ref.startswith("super:"):
            owner, _, method = ref[6:].rpartition(".")
            found = self._method(owner, method, skip_self=True)
            return [found] if found else []
        target = self._lookup(ref)
        if target in self.functions:
            return [target]
        if target in self.classes:  # constructing an object runs its __init__
            found = self._method(target, "__init__", skip_self=False)
            return [found] if found else []
        return []

    def _dispatch(self, cls: str, method: str) -> List[str]:
        """What calling `method` on an object of `cls` (or of any subclass) can run."""
        found = self._method(cls, method, skip_self=False)
        overrides = [f"{sub}.{method}" for sub in self._all_subclasses(cls) if f"{sub}.{method}" in self.functions]
        return ([found] if found else []) + overrides

    def _attribute_call(self, owner: str, attribute: str, method: str) -> List[str]:
        """`self.<attribute>.<method>()` in a method of `owner`: the attribute's class is where a
        class of `owner`'s ancestry binds it (`self.loss = Loss()`, `loss: Loss`)."""
        for cls in self.mro(owner):
            bound = self.attributes.get(cls, {}).get(attribute)
            if bound is not None:
                target = self._lookup(bound)
                return self._dispatch(target, method) if target in self.classes else []
        return []

    def _lookup(self, ref: str, depth: int = 0) -> Optional[str]:
        """A function or class key for a dotted name, following imports (re-exports) in the project."""
        if ref in self.functions or ref in self.classes or depth > _MAX_ALIAS_DEPTH:
            return ref
        parts = ref.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            aliases = self.imports.get(module)
            if aliases is None:
                continue
            head, rest = parts[cut], parts[cut + 1:]
            defined = f"{module}.{head}"
            if defined in self.classes and rest:
                found = self._method(defined, rest[0], skip_self=False)
                return found if found and len(rest) == 1 else None
            if defined in self.functions or defined in self.classes:
                return defined if not rest else None
            if head in aliases:
                return self._lookup(".".join([aliases[head], *rest]), depth + 1)
            return None
        return None

    def _bases(self, key: str) -> List[str]:
        """The base classes of a class, as project class keys or external qualified names."""
        return [self._lookup(base) or base for base in self.classes.get(key, [])]

    def mro(self, key: str) -> List[str]:
        return _memoised(self._mros, key, self._mro)

    def _mro(self, key: str) -> List[str]:
        order, stack, seen = [], [key], set()
        while stack:
            current = stack.pop(0)
            if current in seen:
                continue
            seen.add(current)
            order.append(current)
            stack.extend(self._bases(current) if current in self.classes else [])
        return order

    def _method(self, owner: str, method: str, skip_self: bool) -> Optional[str]:
        for cls in self.mro(owner)[1 if skip_self else 0:]:
            if f"{cls}.{method}" in self.functions:
                return f"{cls}.{method}"
        return None

    def _all_subclasses(self, key: str) -> List[str]:
        found: Dict[str, None] = {}  # ordered, and membership is O(1)
        stack = list(self.subclasses.get(key, []))
        while stack:
            current = stack.pop()
            if current not in found:
                found[current] = None
                stack.extend(self.subclasses.get(current, []))
        return list(found)

    # -- per-step and cold ----------------------------------------------------------------------------

    def _measured_verdicts(self, measured: Callable[[str, str], Optional[Verdict]]) -> Dict[str, Verdict]:
        """What a recorded run (`.perflsp/hot.json`) says of each function: the strongest evidence."""
        found = {}
        for key, function in self.functions.items():
            path = self.paths.get(function["module"])
            verdict = measured(path, self.label(key)) if path else None
            if verdict is not None:
                found[key] = verdict
        return found

    def _entry(self, function: Dict[str, Any], hot_functions: Sequence[str]) -> Optional[str]:
        if function["module"] in self.tests:
            return None
        measured = self._measured.get(function["key"])
        if measured is not None:
            return measured[1] if measured[0] else None
        if function["marker"]:
            return f"which {function['marker']}"
        name, cls = function["name"], function["cls"]
        ancestry = self.mro(cls) if cls else []
        for entry in hot_functions:
            owner, _, method = entry.rpartition(".")
            if method == name and (not owner or any(c.rpartition(".")[2] == owner for c in ancestry)):
                return f"which `hot-functions` lists (`{entry}`)"
        entry = _framework_row(ENTRY_POINTS, name, ancestry)
        return f"which {entry.why}" if entry else None

    def _rare(self, function: Dict[str, Any]) -> Optional[str]:
        """A framework method that runs once per epoch, run or logging interval."""
        if function["cold"]:
            return function["cold"]
        row = _framework_row(RARE_METHODS, function["name"], self.mro(function["cls"]) if function["cls"] else [])
        return f"`{function['name']}` is {row.why}" if row else None

    def _mark_per_step(self, hot_functions: Sequence[str]) -> None:
        queue: deque = deque()
        for key, function in self.functions.items():
            why = self._entry(function, hot_functions)
            if why is not None:
                self.status[key] = (STEP, ("entry", why))
                queue.append(key)
        for caller, edges in self.edges.items():
            if self._module_of(caller) in self.tests:
                continue
            for callee, row, site, conditional in edges:
                if site == S.STEP and callee not in self.status and self._passes(callee, conditional):
                    self.status[callee] = (STEP, ("step-loop", caller, row))
                    queue.append(callee)
        children: Dict[str, List[str]] = {}
        for key, function in self.functions.items():
            if function["parent"]:
                children.setdefault(function["parent"], []).append(key)
        while queue:
            key = queue.popleft()
            for callee, row, site, conditional in self.edges.get(key, ()):
                if site != S.COLD and callee not in self.status and self._passes(callee, conditional):
                    self.status[callee] = (STEP, ("called", key, row))
                    queue.append(callee)
            for child in children.get(key, ()):
                if child not in self.status:
                    self.status[child] = (STEP, ("nested", key, self.functions[child]["start"]))
                    queue.append(child)

    def _passes(self, callee: str, conditional: bool) -> bool:
        """Per-step evidence beats a cold name only when the call runs every time: `self.unmerge()`
        under `if self.merged:` in a `forward` runs once, not per step. A recorded run that saw the
        callee called, but not per step, beats both."""
        measured = self._measured.get(callee)
        if measured is not None:
            return measured[0]
        return not (conditional and self.functions[callee]["cold"])

    def _mark_cold(self) -> None:
        """Cold by name or test file, then: every known caller is cold (a worklist with counts,
        so the pass stays linear in the number of calls)."""
        queue: deque = deque()
        for key, function in self.functions.items():
            if key in self.status:
                continue
            if function["module"] in self.tests:
                why: Optional[str] = "test code"
            elif key in self._measured:  # measured per step is already STEP: this one was not
                why = "measured: called, but not on every step"
            else:
                why = self._rare(function)  # closures of cold code are decided at the end
            if why is not None:
                self.status[key] = (COLD, why)
                queue.append(key)
        pending: Dict[str, int] = {}
        waiting: Dict[str, List[str]] = {}
        from_script: Set[str] = set()  # reached from a script's top level: its step loops stay hot
        for caller, edges in self.edges.items():
            if self._module_of(caller) in self.tests:
                continue  # tests call a library's API: that says nothing of how often it runs
            module_level = caller.endswith("." + S.MODULE_LEVEL)
            for callee, _, site, _ in edges:
                if callee in self.status:
                    continue
                if site == S.COLD or (module_level and site == S.PLAIN):
                    pending.setdefault(callee, 0)
                    if site == S.PLAIN:
                        from_script.add(callee)
                    continue
                pending[callee] = pending.get(callee, 0) + 1
                waiting.setdefault(caller, []).append(callee)

        def settle(callee: str) -> None:
            self.status[callee] = (COLD, SCRIPT_REASON if callee in from_script else RARE_REASON)
            queue.append(callee)

        for callee, count in pending.items():
            if count == 0 and callee not in self.status:
                settle(callee)
        while queue:
            key = queue.popleft()
            for callee in waiting.get(key, ()):
                pending[callee] -= 1
                if self.status[key][1] == SCRIPT_REASON:
                    from_script.add(callee)
                if pending[callee] == 0 and callee not in self.status:
                    settle(callee)
        for key, function in self.functions.items():  # closures of cold code are cold
            parent = function["parent"]
            while parent and key not in self.status:
                if parent in self.status:
                    if self.status[parent][0] == COLD:
                        self.status[key] = (COLD, f"defined in `{self.label(parent)}`, which runs once")
                    break
                parent = self.functions.get(parent, {}).get("parent")

    def _module_of(self, key: str) -> str:
        function = self.functions.get(key)
        return function["module"] if function else key.rpartition(".")[0]

    # -- answers ----------------------------------------------------------------------------------

    def label(self, key: str) -> str:
        """`Class.method` for a function key (its module left out)."""
        module = self._module_of(key)
        if key.endswith("." + S.MODULE_LEVEL):
            return "the module's top level"
        return key[len(module) + 1:] if key.startswith(module + ".") else key

    def _where(self, key: str, row: int, here: str, label: Callable[[int], str]) -> str:
        module = self._module_of(key)
        if module == here:
            return label(row)
        return f"{os.path.basename(self.paths.get(module, ''))}:{row}"

    def explain(self, key: str, label: Callable[[int], str] = _line) -> Optional[str]:
        """Why `key` runs on every step, as the tail of a sentence: "which the HF `Trainer` runs on
        every training step" or "called from `f` (a.py:12), which ...". Rows in `key`'s own file
        are named by `label`."""
        here = self._module_of(key)
        hops: List[str] = []
        current = key
        for _ in range(64):  # a chain is acyclic by construction; the bound is belt and braces
            state = self.status.get(current)
            if state is None or state[0] != STEP:
                return None
            how = state[1]
            if how[0] == "entry":
                tail = how[1]
                break
            caller, row = how[1], how[2]
            if how[0] == "step-loop":
                tail = f"called inside a step loop ({self._where(caller, row, here, label)})"
                break
            verb = "defined in" if how[0] == "nested" else "called from"
            hops.append(f"{verb} `{self.label(caller)}` ({self._where(caller, row, here, label)})")
            current = caller
        else:
            return None
        if len(hops) > _MAX_CHAIN:
            hops = hops[:_MAX_CHAIN - 1] + ["…"]
        return ", ".join([*hops, tail]) if hops else tail

    def _call_row(self, key: str, module: str, calls: Set[Tuple[str, int]]) -> Optional[int]:
        """The row of the call in `module` that makes `key` per step: what an editor points at. None
        when the file's text now makes no call there (`calls`: its summary's (caller, row) pairs):
        the graph can be a build behind it, since the language server builds again for rows that
        moved only once typing pauses."""
        how = self.status[key][1]
        if how[0] in ("called", "step-loop") and self._module_of(how[1]) == module and (how[1], how[2]) in calls:
            return how[2]
        return None

    def facts(self, module: str, summary: Dict[str, Any], label: Callable[[int], str] = _line) -> Optional[Dict[str, Any]]:
        """What the engine needs about one file: its summary and its functions' status
        ([STEP, why, call row or None, direct] or [COLD, why]); None for a file the graph left out."""
        if module in self.ambiguous:
            return None
        functions: Dict[str, List[str]] = {}
        calls = {(call[0], call[2]) for call in summary["calls"]}
        for function in summary["functions"]:
            key = function["key"]
            state = self.status.get(key)
            if state is None:
                continue
            if state[0] == STEP:
                # direct: an entry point itself (or measured), not a function reached through calls
                functions[key] = [STEP, self.explain(key, label) or "runs on every step",
                                  self._call_row(key, module, calls), state[1][0] == "entry"]
            else:
                functions[key] = [COLD, state[1]]
        return {"summary": summary, "functions": functions}


def _memoised(cache: Dict[str, List[str]], key: str, compute: Callable[[str], List[str]]) -> List[str]:
    """`compute(key)` once per graph: the same reference and class come up for many calls."""
    found = cache.get(key)
    if found is None:
        found = cache[key] = compute(key)
    return found


def _framework_row(rows: Sequence[EntryPoint], method: str, ancestry: Sequence[str]) -> Optional[EntryPoint]:
    """The table row for `method` of a class whose ancestry (own key first) holds a framework class."""
    for cls_name in ancestry:
        top, short = cls_name.split(".", 1)[0], cls_name.rpartition(".")[2]
        # `nn.LayerNorm`, and the private bases losses and norms derive from (`_Loss`, `_BatchNorm`)
        if cls_name.startswith(TORCH_NN) and short.lstrip("_")[:1].isupper():
            short = "Module"
        for row in rows:
            if top in row.packages and short in row.classes and S.method_matches(method, row.methods):
                return row
    return None


def facts_digest(facts: Dict[str, Any]) -> str:
    """A key for cached findings: they change when the file's functions change status."""
    payload = json.dumps(facts["functions"], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def single_file_facts(source: str, path: str, hot_functions: Sequence[str] = (),
                      label: Callable[[int], str] = _line) -> Dict[str, Any]:
    """Facts for a file checked alone (stdin, a test, an editor buffer with no project graph)."""
    module, is_package = module_name(Path(path)) if path not in ("", "<stdin>", "-") else ("__main__", False)
    summary = S.summarize(source, module, is_package, path)
    return Project([(path, summary)], hot_functions).facts(module, summary, label)
