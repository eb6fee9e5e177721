"""The torch.compile facilities perflsp uses, in one place (as `compat.py` is for the profiler).

Covered: torch 2.1 to 2.13 fully; torch 2.0 without recompilation reasons. Checked on 2.13.
- `torch.compile` arrived in 2.0; older torch gets `CompileUnavailable` with that reason.
- `torch._dynamo.explain`: 2.0 took `explain(fn, *args)` and returned a tuple whose fourth item
  was the break reasons; 2.1 onwards `explain(fn)(*args)` returns an `ExplainOutput` with
  `graph_count` and `break_reasons`. Each reason (`GraphCompileReason`) has `.reason` (text)
  and `.user_stack` (`FrameSummary`s, outermost first) in every version.
- Guard failures (the reason behind each recompilation) are recorded per code object in
  `torch._dynamo.utils.guard_failures` from 2.1; `torch._dynamo.reset()` clears them.
- Inductor's FX graph cache counts hits and misses in `counters["inductor"]` (2.2 onwards): a
  compile with hits and no misses ran from a warm cache (on disk, so it survives processes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple


class CompileUnavailable(Exception):
    """This torch lacks a facility `--compile` needs; the message says which and since when."""


@dataclass
class Explained:
    graph_count: int
    reasons: List[Tuple[str, List[Any]]]  # (torch's reason text, user stack as FrameSummary list)


def _dynamo() -> Any:
    import torch

    if not hasattr(torch, "compile"):
        raise CompileUnavailable(f"torch {torch.__version__} has no torch.compile (it needs torch 2.0 or later)")
    import torch._dynamo

    return torch._dynamo


def reset() -> None:
    """Forget every compiled graph, guard and recorded failure (explain's included)."""
    _dynamo().reset()


def explain(fn: Callable[..., Any], args: tuple, kwargs: Dict[str, Any]) -> Explained:
    """Trace `fn(*args, **kwargs)` once with dynamo's explain backend (no inductor: ~1 s)."""
    import torch

    dynamo = _dynamo()
    if torch.__version__ < "2.1":  # explain(fn, *args) -> (graphs, graph_count, break_count, reasons, ...)
        legacy = dynamo.explain(fn, *args, **kwargs)
        return Explained(int(legacy[1]), [(r.reason, list(r.user_stack)) for r in legacy[3]])
    out = dynamo.explain(fn)(*args, **kwargs)
    return Explained(int(out.graph_count), [(r.reason, list(r.user_stack)) for r in out.break_reasons])


def compile_fn(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    import torch

    _dynamo()
    return torch.compile(fn, mode=None if mode == "default" else mode)


def guard_failures() -> Optional[List[str]]:
    """Each recompilation's guard-failure text since the last reset; None where torch keeps none."""
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
