"""The torch.compile facilities perflsp uses, in one place (as `compat.py` is for the profiler).

perflsp supports torch 2.1 and later; checked on 2.13. These are private (`torch._dynamo`) APIs,
so a later torch may drop or reshape them: each one missing is a clear message, never a crash.
- `torch._dynamo.explain(fn)(*args)` returns an `ExplainOutput` (2.1 onwards; 2.0's
  `explain(fn, *args)` tuple predates what perflsp supports) with `graph_count` and
  `break_reasons`; each reason has `.reason` (text) and `.user_stack` (`FrameSummary`s,
  outermost first). Missing: `CompileUnavailable`.
- Guard failures (the reason behind each recompilation) are kept per code object in
  `torch._dynamo.utils.guard_failures`; `torch._dynamo.reset()` clears them. Missing: None, and
  the result says recompilations are not reported.
- Inductor's FX graph cache counts hits and misses in `counters["inductor"]` (2.2 onwards): a
  compile with hits and no misses ran from a warm cache (on disk, so it survives processes).
  Missing: the cache state is unknown (null).
"""
from __future__ import annotations

import logging
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
    out = dynamo.explain(fn)(*args, **kwargs)
    return Explained(int(out.graph_count), [(r.reason, list(r.user_stack)) for r in out.break_reasons])


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
