"""Targets: `path/to/file.py:func`, `file.py:Class.method`, `pkg.mod:func`.

Parsing and naming are torch-free so the supervising process can name the result file even
when the profiling process never gets that far (a timeout during import, say). Loading imports
the user's module, and so runs only in the profiling process.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

from perflsp.profile_result import find_definition


class TargetError(Exception):
    """The target cannot be found; `defined` lists what the file does define."""

    def __init__(self, message: str, defined: Optional[List[str]] = None):
        super().__init__(message)
        self.defined = defined


class SpecSyntaxError(ValueError):
    """A target string that is neither `file.py:qualname` nor `module:qualname`."""


class UsageError(Exception):
    """A request perflsp cannot carry out: a target it cannot measure, an unusable --run command."""


@dataclass(frozen=True)
class TargetSpec:
    spec: str  # as the user wrote it
    qualname: str
    file: Optional[Path]  # absolute, for file targets
    module: str  # dotted import name (derived from the file for file targets)
    import_root: Optional[Path]  # the folder to put on sys.path to import `module` by name

    @property
    def is_file(self) -> bool:
        return self.file is not None


def parse_target(spec: str, cwd: Optional[Path] = None) -> TargetSpec:
    """Split and check a target string; does not import anything."""
    path_part, sep, qualname = spec.rpartition(":")
    if not sep or not path_part or not qualname:
        raise SpecSyntaxError(f"{spec!r} is not a target: use path/to/file.py:func, file.py:Class.method or pkg.mod:func")
    if not all(part.isidentifier() for part in qualname.split(".")):
        raise SpecSyntaxError(f"{qualname!r} is not a qualified name (expected func or Class.method)")
    if path_part.endswith(".py") or os.sep in path_part or "/" in path_part:
        if not path_part.endswith(".py"):
            raise SpecSyntaxError(f"{path_part} is not a Python file: a file target is path/to/file.py:func "
                                  f"(or pkg.module:func for a module on the import path)")
        file = (Path(cwd or os.getcwd()) / path_part).resolve()
        module, root = module_name_for(file)
        return TargetSpec(spec, qualname, file, module, root)
    if not all(part.isidentifier() for part in path_part.split(".")):
        raise SpecSyntaxError(f"{path_part!r} is neither a .py file nor a dotted module name")
    return TargetSpec(spec, qualname, None, path_part, None)


def module_name_for(file: Path) -> tuple:
    """(dotted module name, folder to import it from) for a source file.

    Walks up through folders that have an `__init__.py`, the way Python would import the file
    from its project root: `proj/pkg/sub/mod.py` with packages `pkg` and `sub` is
    `pkg.sub.mod`, imported from `proj`; a script without a package is just its stem.
    """
    parts = [file.stem]
    folder = file.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def defined_names(file: Path) -> List[str]:
    """Qualnames of the functions, classes and methods a file defines (for 'did you mean')."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    names: List[str] = []

    def visit(body, prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(prefix + stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                names.append(prefix + stmt.name)
                visit(stmt.body, prefix + stmt.name + ".")
            elif isinstance(stmt, (ast.If, ast.Try)):
                visit(getattr(stmt, "body", []), prefix)
                visit(getattr(stmt, "orelse", []), prefix)

    visit(tree.body, "")
    return names


def not_found_message(target: TargetSpec, where: str, defined: List[str]) -> str:
    listing = ", ".join(defined) if defined else "no functions or classes"
    return f"{target.qualname!r} is not defined in {where}; it defines: {listing}"


def check_exists(target: TargetSpec) -> None:
    """Cheap checks that need no import: the file exists and (statically) defines the name, as
    a function whose calls can be measured."""
    if target.file is None:
        return
    if not target.file.is_file():
        raise TargetError(f"no such file: {target.file}")
    try:
        source = importlib.util.decode_source(target.file.read_bytes())  # honours a coding cookie
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise UsageError(f"cannot read {target.file} as Python source: {exc}") from None
    try:
        tree = ast.parse(source, str(target.file))
    except SyntaxError:
        return  # importing it will raise the SyntaxError with the user's line
    node = find_definition(tree, target.qualname)
    if node is None:
        defined = defined_names(target.file)
        raise TargetError(not_found_message(target, str(target.file), defined), defined)
    refuse_unmeasurable(node, target.qualname)


def refuse_unmeasurable(node: ast.AST, qualname: str) -> None:
    """Calling a generator or coroutine function runs none of its body (it only creates the
    generator or coroutine), so timing the call would report nothing: refuse it."""
    if isinstance(node, ast.AsyncFunctionDef):
        kind, made = "an async function", "a coroutine"
    elif isinstance(node, ast.FunctionDef) and _yields(node):
        kind, made = "a generator function", "a generator"
    else:
        return
    name = qualname.rpartition(".")[2]
    raise UsageError(f"{qualname} is {kind}: calling it only creates {made} and runs none of its body, so there "
                     f"is nothing to measure. Profile the function that consumes it, or add one that does, e.g. "
                     f"`def run(*args): return list({name}(*args))`")


def _yields(function: ast.AST) -> bool:
    """Whether the function's own body yields (not a nested function's or class's)."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def import_target_module(target: TargetSpec) -> Any:
    """Import the module that defines the target (runs the user's module code)."""
    if target.file is None:
        try:
            return importlib.import_module(target.module)
        except ModuleNotFoundError as exc:
            if exc.name and target.module.startswith(exc.name):
                raise TargetError(f"no module named {target.module!r} (from {sys.executable})") from None
            raise
    assert target.import_root is not None
    root = str(target.import_root)
    if root not in sys.path:
        sys.path.insert(0, root)
    module = importlib.import_module(target.module) if target.module not in sys.modules else sys.modules[target.module]
    if _same_file(getattr(module, "__file__", None), target.file):
        return module
    # The derived name is taken by another module (a script called `random.py`, say): load the
    # file under a private name instead of shadowing the real one.
    private = "__perflsp_target__." + target.module
    spec = importlib.util.spec_from_file_location(private, target.file)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot load {target.file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module
    spec.loader.exec_module(module)
    return module


def _same_file(a: Optional[str], b: Optional[Path]) -> bool:
    if not a or b is None:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def resolve_attribute(module: Any, target: TargetSpec) -> Any:
    """`module.Class.method` for qualname `Class.method`; a TargetError listing names if absent."""
    obj = module
    for part in target.qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = str(target.file) if target.file else f"module {target.module}"
            file = target.file or (Path(module.__file__) if getattr(module, "__file__", None) else None)
            defined = defined_names(file) if file else sorted(n for n in dir(module) if not n.startswith("_"))
            raise TargetError(not_found_message(target, where, defined), defined) from None
    if not callable(obj):
        raise TargetError(f"{target.qualname!r} in {target.module} is a {type(obj).__name__}, not a function")
    return obj


def source_file_of(obj: Any, module: Any) -> Optional[Path]:
    """The file that holds the target's code, for line attribution."""
    fn = getattr(obj, "__func__", obj)
    fn = getattr(fn, "__wrapped__", fn)
    code = getattr(fn, "__code__", None)
    if code is not None and os.path.isfile(code.co_filename):
        return Path(code.co_filename).resolve()
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None
