"""Graph breaks and recompilations as a person reads them: the user's file and line, plain words.

torch reports a break with its own text ("generic_jump TensorVariable()") and the Python stack
where it happened, innermost last; the innermost frame is often inside torch or the standard
library (a `logging` call breaks inside `logging`), so a break is placed on the innermost frame
of the user's own code. Each (file, line) is one break however often torch reports it (a `while`
on a tensor is reported on every iteration traced).

Dynamo's graph-break log adds the breaks explain leaves out (see dynamo_compat.py); it names only
dynamo's innermost frame, so a logged break inside a library is left to explain's reasons. A
break inside a loop is worse than a break: dynamo cannot resume there, skips the whole frame and
runs it eagerly, and the explanation says so.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from perflsp.runtime import env

# (a piece of torch's reason text, what it means and what to do). First match wins.
PLAIN_WORDS: Tuple[Tuple[str, str], ...] = (
    ("generic_jump", "data-dependent `if` or `while` on a tensor: the graph breaks here; use `torch.where` or "
                     "`torch.cond`"),
    ("Tensor.item()", "a tensor turned into a Python number (`.item()`, `float()`, `int()`, `bool()`): the graph "
                      "breaks here; keep it a tensor, or set `torch._dynamo.config.capture_scalar_outputs = True`"),
    ("tolist()", "`.tolist()` copies a tensor into Python: the graph breaks here; keep the values in a tensor"),
    ("Data dependent operator", "an op that reads a tensor's values into Python (`.tolist()` of an integer "
                                "tensor, ...): the graph breaks here; keep the values in a tensor"),
    ("builtin operator `print`", "`print` in compiled code: the graph breaks here; print outside the compiled "
                                 "function"),
    ("Dynamic shape operator", "the op's output shape depends on the tensor's values (`nonzero`, boolean-mask "
                               "indexing): the graph breaks here; use a fixed-shape form (`torch.where`, multiply "
                               "by the mask), or set `torch._dynamo.config.capture_dynamic_output_shape_ops = True`"),
    ("marked as skipped", "a call torch.compile cannot trace (a C function or builtin such as `time.time` or "
                          "`warnings.warn`): the graph breaks here; move it out of the compiled function"),
    ("graph_break()", "an explicit `torch._dynamo.graph_break()`"),
)


# Pieces of torch's text for a break it could not resume from: the frame runs eagerly.
SKIPPED_FRAME = ("Skipping the function", "Skipping the frame", "results in a skip")
SKIPPED_WORDS = ("a graph break inside a loop: torch.compile cannot resume in a graph after it and runs the rest of "
                 "the function eagerly (all of it when no graph came before); ")


def skips_frame(reason: str) -> bool:
    return any(piece in reason for piece in SKIPPED_FRAME)


def explain_reason(reason: str) -> str:
    """Plain words for torch's reason text; torch's own explanation when we have none."""
    for piece, words in PLAIN_WORDS:
        if piece in reason:
            return words
    return first_lines(reason)


def first_lines(reason: str) -> str:
    """torch's headline and, when it gives one, its `Explanation:` line, on one line."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    if not lines:
        return "graph break"
    explanation = next((line for line in lines[1:] if line.startswith("Explanation:")), None)
    return lines[0] + (f" ({explanation[len('Explanation:'):].strip()})" if explanation else "")


def _is_user_file(filename: str, libraries: Tuple[str, ...]) -> bool:
    return not filename.startswith(("<",) + libraries) and not filename.startswith(env.RUNTIME_DIR)


def user_frame(stack: Sequence[Any], libraries: Tuple[str, ...]) -> Optional[Tuple[str, int]]:
    """(file, line) of the innermost frame of the user's code, else of the innermost frame."""
    frames = [(os.path.realpath(f.filename), int(f.lineno)) for f in stack if f.lineno is not None]
    mine = [frame for frame in frames if _is_user_file(frame[0], libraries)]
    return (mine or frames or [None])[-1]


def _entry(where: Tuple[str, int], reason: str) -> Dict[str, Any]:
    words = explain_reason(reason)
    return {"file": where[0], "line": where[1], "reason": first_lines(reason),
            "explanation": SKIPPED_WORDS + words if skips_frame(reason) else words}


def graph_breaks(reasons: Sequence[Tuple[str, Sequence[Any]]],
                 logged: Sequence[Tuple[str, int, str]] = ()) -> List[Dict[str, Any]]:
    """One entry per distinct (file, line) among explain's break reasons and the logged breaks
    in the user's files, in the order torch met them; a line where the frame was skipped says so."""
    libraries = env.library_dirs()
    seen: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for reason, stack in reasons:
        where = user_frame(stack, libraries)
        if where is not None and where not in seen:
            seen[where] = _entry(where, reason)
    for file, line, reason in logged:
        where = (os.path.realpath(file), line)
        if not _is_user_file(where[0], libraries):
            continue
        if where not in seen or (skips_frame(reason) and not seen[where]["explanation"].startswith(SKIPPED_WORDS)):
            seen[where] = _entry(where, reason)
    return list(seen.values())


def recompile(guard_failure: str) -> Dict[str, Any]:
    """A recompilation from torch's guard-failure text: `0/0: step == 0   # code  # file:line in f`
    becomes "step == 0" (the guard that failed: the value or shape the compiled code assumed)."""
    head = guard_failure.strip().splitlines()[0] if guard_failure.strip() else guard_failure
    code, sep, condition = head.partition(": ")
    if not sep or not code.replace("/", "").isdigit():
        condition = head
    return {"reason": condition.split("  #", 1)[0].strip()}
