"""The profile result: schema version, fixed vocabularies, file location and atomic writing.

The runtime (`python -m perflsp.runtime profile ...`) writes one JSON document per profiled
function to `<workspace>/.perflsp/profiles/<module>.<qualname>.json`; the language server and
scripts read it. This module is the contract between them, so it stays in the core and uses the
standard library only: the server must be able to read results without importing torch.

The full shape is the JSON Schema beside this file (`profile_result.schema.json`, documented in
`docs/profile-result.md`). `check()` is a small stdlib-only structural check for places that have
no `jsonschema` installed (the GPU machines); tests validate against the real schema.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from perflsp import units
from perflsp.safe_files import ensure_inside, read_regular
from perflsp.schema_check import Validator

SCHEMA_VERSION = 3  # 2: `latency-bound` joined the regimes; 3: `comparison` (the re-measure loop) and `compile`
SCHEMA_FILE = Path(__file__).with_name("profile_result.schema.json")
MAX_RESULT_BYTES = 64 * 1024 * 1024  # a profile result is a few hundred kB at most

# `verdict.regime` is keyed on by the editor and by scripts: these strings never change meaning.
REGIMES = ("compute-bound", "memory-bound", "latency-bound", "overhead-bound", "sync-bound", "transfer-bound")

# `error.kind` values and the exit code each one maps to.
EXIT_OK = 0
EXIT_GRAPH_BREAKS = 1  # --fail-on-break and torch.compile broke the function's graph
EXIT_USAGE = 2
EXIT_TARGET_RAISED = 3
EXIT_TIMEOUT = 4
EXIT_OUT_OF_MEMORY = 5
EXIT_TARGET_NOT_FOUND = 6

ERROR_EXIT_CODES: Dict[str, int] = {
    "usage": EXIT_USAGE,  # no inputs for the target, an unusable --run command, ...
    "exception": EXIT_TARGET_RAISED,  # the target (or its setup, or its module) raised
    "crash": EXIT_TARGET_RAISED,  # the profiling process died without a result (signal)
    "timeout": EXIT_TIMEOUT,
    "out-of-memory": EXIT_OUT_OF_MEMORY,
    "target-not-found": EXIT_TARGET_NOT_FOUND,  # no such file, module or qualname
    "not-called": EXIT_TARGET_NOT_FOUND,  # --run: the program never called the target
}
ERROR_KINDS = tuple(ERROR_EXIT_CODES)

RESULTS_DIR = Path(".perflsp") / "profiles"
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


class ResultError(Exception):
    """A result file that cannot be used: unreadable, not JSON, or another schema version."""


def exit_code_for(error_kind: str) -> int:
    return ERROR_EXIT_CODES.get(error_kind, EXIT_TARGET_RAISED)


def results_dir(workspace: os.PathLike | str) -> Path:
    return Path(workspace) / RESULTS_DIR


def result_filename(module: str, qualname: str) -> str:
    """`<module>.<qualname>.json`. Anything that is not safe in a file name is replaced by `_`,
    and then a short digest of the real name is appended (`t.f_-1a2b3c4d.json`), so that two
    names differing only there (`fé`, `fè`) never share a file."""
    name = f"{module}.{qualname}"
    safe = _UNSAFE_NAME_CHARS.sub("_", name)
    if safe != name:
        safe += "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return safe + ".json"


def result_path(workspace: os.PathLike | str, module: str, qualname: str) -> Path:
    return results_dir(workspace) / result_filename(module, qualname)


def write_json_atomic(path: os.PathLike | str, data: Any, inside: Optional[os.PathLike | str] = None) -> Path:
    """Write `data` as JSON to `path` so that readers see the old file or the whole new one.

    `inside`: the folder the file belongs in (a workspace, which a cloned repository controls):
    nothing is written when a symbolic link leads `path` out of it (`safe_files.LeavesFolder`).

    The text is serialised before any file is touched (a value that cannot be encoded leaves
    nothing behind), written to a temporary file in the same folder, flushed to disk and moved
    over `path` with `os.replace`, which is atomic on POSIX and Windows. On any failure the
    temporary file is removed.
    """
    target = Path(path)
    text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"
    if inside is not None:
        ensure_inside(target, inside)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent))
    try:
        _chmod_like_new_file(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    return target


def _chmod_like_new_file(fd: int) -> None:
    """mkstemp makes 0600 files; give the result the mode `open()` would (0666 less umask)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)
    except (AttributeError, OSError):  # no fchmod on Windows
        pass


def read_result(path: os.PathLike | str) -> Dict[str, Any]:
    """Load a result file, refusing other schema versions (a reader must not guess) and anything
    the schema does not allow."""
    try:
        data = json.loads(read_regular(path, MAX_RESULT_BYTES).decode("utf-8"))
    except (OSError, ValueError) as exc:  # NotRegularFile, JSONDecodeError and UnicodeDecodeError included
        raise ResultError(f"{path}: cannot read profile result: {exc}") from None
    except RecursionError:
        raise ResultError(f"{path}: cannot read profile result: nested too deeply") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: a profile result must be a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version {version!r}; this perflsp reads version {SCHEMA_VERSION}")
    problems = check(data)
    if problems:
        raise ResultError(f"{path}: not a valid profile result: {problems[0]}")
    return data


def load_schema() -> Dict[str, Any]:
    with SCHEMA_FILE.open(encoding="utf-8") as handle:
        return json.load(handle)


# --- the compile block -------------------------------------------------------------------------

def not_compiled(block: Mapping[str, Any]) -> bool:
    """torch.compile captured no graph (explain's `graph_count` 0): the whole call runs eagerly
    (torch 2.13 skips a frame whose loop holds a graph break, and reports no break for it)."""
    return block.get("graph_count") == 0


def compile_falls_short(block: Mapping[str, Any]) -> bool:
    """What `--fail-on-break` fails on: a graph break, a frame dynamo skipped, or no graph at all."""
    return bool(block.get("graph_breaks")) or bool(block.get("skipped_frames")) or not_compiled(block)


def compile_summary(block: Mapping[str, Any]) -> str:
    """The `compile` block in one line, for the terminal and the editor: `compiled: 0.12 ms vs
    eager 0.41 ms, 3.4× faster, 2 graph breaks, compile 19 s`, or what stopped it."""
    breaks = len(block.get("graph_breaks") or [])
    counted = f"{breaks} graph break{'s' if breaks != 1 else ''}"
    skipped = block.get("skipped_frames") or 0
    if not_compiled(block):
        counted = "not compiled, the call runs eagerly: dynamo captured no graph" + (f" ({counted})" if breaks else "")
    elif skipped:
        counted += f", {skipped} frame{'s' if skipped != 1 else ''} skipped (run eagerly)"
    error = block.get("error")
    if block.get("speedup") is not None:
        speedup = block["speedup"]
        faster = f"{speedup:.2g}× faster" if speedup >= 1 else f"{1 / speedup:.2g}× slower"
        label = "under torch.compile" if not_compiled(block) else "compiled"
        parts = [f"{label}: {units.duration_us(block['compiled_median_us'])} vs eager "
                 f"{units.duration_us(block['eager_median_us'])}", faster, counted]
        if block.get("recompiles"):
            parts.append(f"{len(block['recompiles'])} recompiles")
        # "inductor": `--cold-cache` is about the inputs, this is the compiler's on-disk cache
        parts.append(f"compile {block['compile_s']:.2g} s" + (f" (inductor cache {block['compile_cache']})"
                                                            if block.get("compile_cache") else ""))
    elif block.get("graph_count") is not None:  # explained, then nothing (more) measured
        explain_only = block.get("explain_only") and not not_compiled(block)  # else it says "not compiled" twice
        parts = [f"torch.compile: {counted}" + (" (explain only, not compiled)" if explain_only else "")]
    else:
        parts = ["torch.compile"]
    if error:
        parts.append(f"{error['kind']}: {error['message']}")
    return ", ".join(parts)


# --- staleness ---------------------------------------------------------------------------------

def find_definition(tree: ast.Module, qualname: str) -> Optional[ast.AST]:
    """The `def`/`class` node for a dotted qualname such as `Model.forward`, or None.

    Looks through module and class bodies, including the bodies of `if`/`try` blocks at those
    levels (conditional definitions), but not inside functions (`<locals>` are not targets).
    """
    scope: List[ast.stmt] = list(tree.body)
    node: Optional[ast.AST] = None
    for part in qualname.split("."):
        node = None
        for candidate in _walk_scope(scope):
            if isinstance(candidate, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and candidate.name == part:
                node = candidate  # a later definition rebinds the name, as at run time
        if node is None:
            return None
        scope = list(node.body) if isinstance(node, ast.ClassDef) else []
    return node


def _walk_scope(body: List[ast.stmt]):
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _walk_scope(stmt.body)
            yield from _walk_scope(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _walk_scope(stmt.body)
            for handler in stmt.handlers:
                yield from _walk_scope(handler.body)
            yield from _walk_scope(stmt.orelse)
            yield from _walk_scope(stmt.finalbody)


def function_source_sha256(source_text: str, qualname: str) -> Tuple[Optional[str], Optional[int]]:
    """(sha256 of the definition's text, its `def` line), or (None, None) if not found.

    The text runs from the first decorator to the last line of the body, with line endings
    normalised, so the editor can compute the same digest from its buffer and tell whether a
    result is stale without re-running anything. Edits elsewhere in the file do not stale it.
    """
    try:
        tree = ast.parse(source_text)
    except SyntaxError:
        return None, None
    node = find_definition(tree, qualname)
    if node is None:
        return None, None
    lines = source_text.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    last = getattr(node, "end_lineno", None) or node.lineno
    segment = "\n".join(line.rstrip() for line in lines[first - 1:last])
    return hashlib.sha256(segment.encode("utf-8")).hexdigest(), node.lineno


def is_stale(result: Mapping[str, Any], source_text: str) -> bool:
    """True when the profiled function's text differs from `source_text`'s version of it."""
    target = result.get("target") or {}
    recorded = target.get("source_sha256")
    if not recorded:
        return True
    current, _ = function_source_sha256(source_text, target.get("qualname", ""))
    return current != recorded


# --- validation (stdlib only) ------------------------------------------------------------------

def check(result: Any) -> List[str]:
    """Where `result` breaks the JSON Schema (empty when valid), first problems first. Readers
    validate before they use a result: a cloned repository can commit any file as one."""
    return _validator().problems(result)


@functools.lru_cache(maxsize=1)
def _validator() -> Validator:
    return Validator(load_schema())
