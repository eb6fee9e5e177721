"""`--compile`: the same call eager and under torch.compile, its graph breaks and recompilations.

Runs in a profiling process of its own, after the eager profile's process has written its
result (see cli.py): a compile that hangs, crashes or runs past its own timeout never costs the
eager profile, and no dispatch mode of the eager profile's counting passes can be active here
(torch.compile refuses to trace under one). Both medians are measured here, in alternating
windows with the same inputs (with `--cold-cache` the same copies) and clock, each after its own
warm-up and after compilation, so the speedup compares like with like (compile_windows.py).

Order: explain (dynamo's explain backend: breaks in ~1 s, no inductor), `reset()` so the real
compile starts from nothing (explain leaves its graphs and guards cached), the first compiled
call (its time is `compile_s`: compilation plus one call), then the compiled and the eager
function timed in alternating windows.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Optional

from perflsp.runtime import cold_cache, compile_windows, dynamo_compat, env, graph_breaks
from perflsp.runtime.channel import Reporter
from perflsp.runtime.timing import CLOCK_CPU, CLOCK_CUDA, TimingOptions, synchronize, timed_calls, warm_up

MODES = ("default", "reduce-overhead", "max-autotune")
ROUNDS = 5
CPU_GRAPHS_NOTE = ("reduce-overhead means CUDA graphs, which need a CUDA device: on this CPU run the default "
                   "mode was used")


def effective_mode(requested: str, device: str) -> str:
    return "default" if requested == "reduce-overhead" and device != "cuda" else requested


def new_block(requested: str, device: str, explain_only: bool = False) -> Dict[str, Any]:
    """The `compile` block before anything is measured (what a failure leaves standing)."""
    mode = effective_mode(requested, device)
    return {"mode": mode, "requested_mode": requested, "explain_only": explain_only, "eager_median_us": None,
            "compiled_median_us": None, "speedup": None, "compile_s": None, "compile_cache": None,
            "graph_count": None, "skipped_frames": None, "graph_breaks": [], "recompiles": [], "windows": None,
            "notes": [CPU_GRAPHS_NOTE] if mode != requested else [], "error": None}


def find_breaks(fn: Callable[..., Any], args: tuple, kwargs: Dict[str, Any], block: Dict[str, Any]) -> None:
    explained = dynamo_compat.explain(fn, args, kwargs)
    block["graph_count"] = explained.graph_count
    block["skipped_frames"] = explained.skipped_frames
    block["graph_breaks"] = graph_breaks.graph_breaks(explained.reasons, explained.logged)


def _round_options(options: TimingOptions) -> TimingOptions:
    """One of ROUNDS timing windows: together they time about as long as one profile does."""
    return dataclasses.replace(options, min_time_s=options.min_time_s / ROUNDS,
                               min_iters=max(1, options.min_iters // ROUNDS),
                               iters=None if options.iters is None else max(1, options.iters // ROUNDS))


def interleaved_windows(calls: Dict[str, Callable[[], Any]], device: str, options: TimingOptions,
                        reporter: Reporter) -> Dict[str, Any]:
    """Each call's window (compile_windows.side) over ROUNDS alternating timing windows, after
    each one's warm-up: on a busy machine the load drifts, and alternating makes the drift fall on
    both alike. `compiles_during_timing` counts dynamo compiling again inside the timed rounds."""
    warmups = {}
    for name, call in calls.items():
        reporter.phase("warm-up", name)
        warmups[name] = warm_up(call, device, options, on_call=lambda n: reporter.progress(n, None))
    samples: Dict[str, List[float]] = {name: [] for name in calls}
    window = _round_options(options)
    reporter.phase("timing", " and ".join(calls))
    frames_before = dynamo_compat.frames_compiled()
    for done in range(ROUNDS):
        for name, call in calls.items():
            samples[name].extend(timed_calls(call, device, window))
        reporter.progress(done + 1, ROUNDS, unit="rounds", force=True)
    frames_after = dynamo_compat.frames_compiled()
    windows: Dict[str, Any] = {name: compile_windows.side(warmups[name], samples[name]) for name in calls}
    windows["compiles_during_timing"] = (None if frames_before is None or frames_after is None
                                         else frames_after - frames_before)
    return windows


def measure(fn: Callable[..., Any], args: tuple, kwargs: Dict[str, Any], device: str, block: Dict[str, Any],
            options: TimingOptions, reporter: Reporter, cold_levels: Optional[List[Dict[str, Any]]] = None) -> None:
    """Compile, then time compiled and eager; fills `block` as it goes (a failure keeps what is in).
    With `cold_levels` (`--cold-cache`: the ceilings' memory levels) both rotate over the same
    copies of the inputs, as the eager profile's calls did."""
    dynamo_compat.reset()
    compiled = dynamo_compat.compile_fn(fn, block["mode"])
    cache_before = dynamo_compat.inductor_cache_counts()
    reporter.phase("compile", block["mode"])
    synchronize(device)
    started = time.perf_counter()
    compiled(*args, **kwargs)
    synchronize(device)
    block["compile_s"] = time.perf_counter() - started
    block["compile_cache"] = _cache_state(cache_before, dynamo_compat.inductor_cache_counts())
    if cold_levels:
        copies, _ = cold_cache.input_copies(args, kwargs, cold_levels)
        block["notes"].append(
            f"cold cache: the compiled and the eager calls rotate over the same {len(copies)} copies of the inputs, "
            "as the eager profile's calls did" if len(copies) > 1 else
            "cold cache: the inputs are larger than the caches, so the compiled and the eager calls read them from "
            "main memory without copies, as the eager profile's calls did")
        calls = {"compiled": cold_cache.rotating(compiled, copies), "eager": cold_cache.rotating(fn, copies)}
    else:
        calls = {"compiled": lambda: compiled(*args, **kwargs), "eager": lambda: fn(*args, **kwargs)}
    windows = interleaved_windows(calls, device, options, reporter)
    windows.update(cache="cold" if cold_levels else "warm", rounds=ROUNDS,
                   clock=CLOCK_CUDA if device == "cuda" else CLOCK_CPU, load_average_1m=env.load_average_1m())
    block["windows"] = windows
    block["notes"].extend(compile_windows.notes(windows))
    block["compiled_median_us"] = windows["compiled"]["median_us"]
    block["eager_median_us"] = windows["eager"]["median_us"]
    block["speedup"] = block["eager_median_us"] / block["compiled_median_us"] if block["compiled_median_us"] else None
    failures = dynamo_compat.guard_failures()
    if failures is None:
        block["notes"].append("this torch does not report recompilations (torch._dynamo.utils.guard_failures "
                              "is gone)")
    block["recompiles"] = [graph_breaks.recompile(text) for text in failures or []]


def _cache_state(before: Optional[tuple], after: Optional[tuple]) -> Optional[str]:
    """'cold' when inductor compiled a graph, 'warm' when its on-disk cache served them all."""
    if before is None or after is None:
        return None
    hits, misses = after[0] - before[0], after[1] - before[1]
    if misses:
        return "cold"
    return "warm" if hits else None

