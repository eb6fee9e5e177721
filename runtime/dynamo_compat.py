"""The torch.compile facilities perflsp uses, in one place (as `compat.py` is for the profiler).

perflsp supports torch 2.1 and later; checked on 2.13. These are private (`torch._dynamo`) APIs,
so a later torch may drop or reshape them: each one missing is a clear message, never a crash.
- `torch._dynamo.explain(fn)(*args)` returns an `ExplainOutput` (2.1 onwards; 2.0's
  `explain(fn, *args)` tuple predates what perflsp supports) with `graph_count` and
  `break_reasons`; each reason has `.reason` (text) and `.user_stack` (`FrameSummary`s,
  outermost first). Missing: `CompileUnavailable`.
- `break_reasons` leaves out what matters most (torch 2.13): a graph break inside a loop makes
  dynamo skip the whole frame and run it eagerly (`graph_count` 0, no reason at all), and a
  break before the first graph has no reason either. Dynamo's `graph_breaks` log
  (`TORCH_LOGS=graph_breaks`, from `torch._logging.getArtifactLogger`) names both, as
  `... in user code at FILE:LINE` then `Graph Break Reason: ...`; it is read during explain.
  Missing or reworded: only explain's reasons are reported.
- `counters["frames"]` counts the frames dynamo started (`total`) and finished (`ok`): the
  difference is the frames it gave up on and ran eagerly, whether or not the log named a line;
  `total` growing during the timed calls means they compiled again. Missing: unknown (null).
- Guard failures (the reason behind each recompilation) are kept per code object in
  `torch._dynamo.utils.guard_failures`; `torch._dynamo.reset()` clears them. Missing: None, and
  the result says recompilations are not reported.
- Inductor's FX graph cache counts hits and misses in `counters["inductor"]` (2.2 onwards): a
  compile with hits and no misses ran from a warm cache (on disk, so it survives processes).
  Missing: the cache state is unknown (null).
"""
from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple


class CompileUnavailable(Exception):
    """This torch lacks a facility `--compile` needs; the message says which and since when."""


@dataclass
class Explained:
    graph_count: int
    reasons: List[Tuple[str, List[Any]]]  # (torch's reason text, user stack as FrameSummary list)
    logged: List[Tuple[str, int, str]] = field(default_factory=list)  # (file, line, reason) from the log
    skipped_frames: Optional[int] = None  # frames dynamo gave up on and ran eagerly


# The modules whose `graph_breaks` artifact logger reports breaks (the second one a frame it could
# not resume, when the first did not already log it).
GRAPH_BREAK_LOG_MODULES = ("torch._dynamo.symbolic_convert", "torch._dynamo.convert_frame")
LOGGED_BREAK = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*\nGraph Break Reason: (?P<reason>.*)",
                          re.DOTALL)


class _BreakLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: List[Tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = LOGGED_BREAK.search(record.getMessage())
        if found:
            self.breaks.append((found["file"], int(found["line"]), found["reason"]))


@contextlib.contextmanager
def _reading_break_log() -> Iterator[_BreakLog]:
    """Dynamo's graph-break log, caught in memory (never on the terminal) while the block runs."""
    handler = _BreakLog()
    try:
        from torch._logging import getArtifactLogger

        loggers = [getArtifactLogger(module, "graph_breaks") for module in GRAPH_BREAK_LOG_MODULES]
    except (ImportError, ValueError):  # no artifact logs, or no `graph_breaks` artifact: explain's reasons only
        loggers = []
    saved = [(logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # torch's own handler would print each break with its stack
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger, (level, propagate) in zip(loggers, saved):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def _frame_counts() -> Optional[Tuple[int, int]]:
    """(frames dynamo started, frames it finished) so far, or None where torch does not count them."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    frames = counters.get("frames", {})
    return int(frames.get("total", 0)), int(frames.get("ok", 0))


def _dynamo() -> Any:
    import torch

    try:
        import torch._dynamo
    except ImportError as exc:  # builds without dynamo (some platforms, some Python versions)
        raise CompileUnavailable(f"torch {torch.__version__} cannot import torch._dynamo ({exc}), which "
                                 "torch.compile needs") from None
    # Dynamo logs each graph break as a warning with its stack; perflsp reports every break on its
    # line itself, so the log would only repeat it on the terminal.
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
    return torch._dynamo


def reset() -> None:
    """Forget every compiled graph, guard and recorded failure (explain's included)."""
    _dynamo().reset()


def explain(fn: Callable[..., Any], args: tuple, kwargs: Dict[str, Any]) -> Explained:
    """Trace `fn(*args, **kwargs)` once with dynamo's explain backend (no inductor: ~1 s)."""
    dynamo = _dynamo()
    if not hasattr(dynamo, "explain"):
        import torch

        raise CompileUnavailable(f"torch {torch.__version__} has no torch._dynamo.explain, which finding graph "
                                 "breaks needs (perflsp knows torch 2.1 to 2.13)")
    before = _frame_counts()
    with _reading_break_log() as log:
        out = dynamo.explain(fn)(*args, **kwargs)
    after = _frame_counts()
    skipped = None if before is None or after is None else (after[0] - before[0]) - (after[1] - before[1])
    return Explained(int(out.graph_count), [(r.reason, list(r.user_stack)) for r in out.break_reasons],
                     log.breaks, skipped)


def frames_compiled() -> Optional[int]:
    """Frames dynamo has started compiling in this process (each compile and recompile), or None."""
    counts = _frame_counts()
    return None if counts is None else counts[0]


def compile_fn(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    import torch

    return torch.compile(fn, mode=None if mode == "default" else mode)


def guard_failures() -> Optional[List[str]]:
    """Each recompilation's guard-failure text since the last reset; None where this torch keeps none."""
    try:
        from torch._dynamo.utils import guard_failures as failures
    except ImportError:
        return None
    return [reason for reasons in failures.values() for reason in reasons]


def inductor_cache_counts() -> Optional[Tuple[int, int]]:
    """Inductor's FX graph cache (hits, misses) so far in this process (reset() keeps them), or
    None where torch does not count them."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    inductor = counters.get("inductor", {})
    return int(inductor.get("fxgraph_cache_hit", 0)), int(inductor.get("fxgraph_cache_miss", 0))
