"""Profile a callable in this process: warm-up, timing, clean profile, attribution, verdict.

`profile_call` is the whole protocol for inputs we own (a setup function). Program runs
(`--run`) measure real calls one at a time with the same pieces (see `program.py`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from perflsp.runtime import analysis, datasheet, env
from perflsp.runtime.arguments import describe_arguments
from perflsp.runtime.channel import NullReporter, Reporter
from perflsp.runtime.cold_cache import rotating_call
from perflsp.runtime.profiling import Attribution, CleanProfile, run_attribution, run_clean_profile
from perflsp.runtime.timing import TimingOptions, percentile, summarize, timed_calls, warm_up

# Profiled calls, chosen by the timed median so that a call of median m >= 10 ms costs at most
# 3 s + 20 m beyond the torch import (issue 11's bound; docs/profiling.md lists the counts). The
# clean pass turns every trace event into a Python object (~100 µs each on a small machine): few
# calls, one for long calls. The CPU attribution pass ranks the lines by their median over its
# calls, so it never gets fewer than three.
PROFILE_CALLS = 3
PROFILE_CALLS_SHORT = 5  # for calls under SHORT_CALL_S
SHORT_CALL_S = 0.02
LONG_CALL_S = 0.2


@dataclass
class MeasureOptions:
    timing: TimingOptions = field(default_factory=TimingOptions)
    top_lines: int = 10


@dataclass
class Measurement:
    warmup_s: List[float]
    samples_s: List[float]
    clock: str
    clean: CleanProfile
    attribution: Attribution
    load_before_1m: Optional[float] = None  # the load average when measuring began (others' work)
    wanted_calls: Optional[int] = None  # timed calls asked for, when a program's end can cut them short


def profile_calls_for(median_s: float) -> int:
    """Clean pass: several calls (their median survives a preempted call) unless calls are long."""
    if median_s >= LONG_CALL_S:
        return 1
    return PROFILE_CALLS_SHORT if median_s < SHORT_CALL_S else PROFILE_CALLS


def attribution_calls_for(median_s: float) -> int:
    """Attribution pass: 5 calls (their median survives two bad ones) under LONG_CALL_S, else 3
    (a median needs three; five would break the time bound)."""
    return PROFILE_CALLS_SHORT if median_s < LONG_CALL_S else PROFILE_CALLS


def measure(call: Callable[[], Any], device: str, source_file: str, options: MeasureOptions,
            reporter: Reporter) -> Measurement:
    """The four phases, in the order that keeps instrumentation out of the timing."""
    load_before = env.load_average_1m()
    reporter.phase("warm-up")
    warm = warm_up(call, device, options.timing, on_call=lambda n: reporter.progress(n, None))
    window = f"{options.timing.iters} calls" if options.timing.iters else f"about {options.timing.min_time_s:g} s"
    reporter.phase("timing", window)
    samples = timed_calls(call, device, options.timing,
                          on_call=lambda done, fraction: reporter.progress(done, None, fraction=fraction))
    reporter.progress(len(samples), len(samples), force=True)
    median_s = percentile(sorted(samples), 0.5)
    reporter.phase("profile")
    clean = run_clean_profile(call, profile_calls_for(median_s), device)
    reporter.phase("attribution")
    attribution = run_attribution(call, source_file, device, attribution_calls_for(median_s))
    clock = "cuda-events" if device == "cuda" else "perf_counter"
    return Measurement(warm, samples, clock, clean, attribution, load_before)


def tf32_enabled() -> bool:
    import torch

    return bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"


def device_notes(device: str, requested: str = "auto") -> List[str]:
    import torch

    if device == "cpu" and not torch.cuda.is_available():
        return ["no CUDA device: this is a CPU profile (ceilings and verdict are the CPU's)"]
    if device == "cpu" and requested == "cpu":
        return ["CPU profile requested (--device cpu) although CUDA is available"]
    return []


def datasheet_for(device_desc: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    if device_desc["kind"] != "cuda":
        return None
    sheet = datasheet.lookup(device_desc["name"], device_desc["compute_capability"])
    return datasheet.as_dict(sheet) if sheet else None


@dataclass
class Context:
    """Everything around the measurement that goes into the result."""

    device: str
    peaks: Dict[str, Any]
    peaks_source: str
    target: Dict[str, Any]
    settings: Dict[str, Any]
    source_file: str
    top_lines: int = 10
    notes: List[str] = field(default_factory=list)
    requested_device: str = "auto"
    cold_cache: bool = False


def result_from(measured: Measurement, ctx: Context, program: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    desc = env.describe_device(ctx.device)
    return analysis.build_result(analysis.Inputs(
        target=ctx.target,
        settings=ctx.settings,
        device=desc,
        peaks=ctx.peaks,
        peaks_source=ctx.peaks_source,
        datasheet=datasheet_for(desc),
        timing=summarize(measured.samples_s, measured.clock, len(measured.warmup_s)),
        clean=measured.clean,
        attribution=measured.attribution,
        environment=dict(env.environment(), load_average_1m_before=measured.load_before_1m),
        source_file=ctx.source_file,
        tf32_enabled=ctx.device == "cuda" and tf32_enabled(),
        notes=device_notes(ctx.device, ctx.requested_device) + ctx.notes,
        top_lines=ctx.top_lines,
        program=program,
        cold_cache=ctx.cold_cache,
        warmup_s=measured.warmup_s,
        wanted_calls=measured.wanted_calls,
    ))


def profile_call(call: Callable[[], Any], ctx: Context, options: Optional[MeasureOptions] = None,
                 reporter: Optional[Reporter] = None) -> Dict[str, Any]:
    """Measure `call` (a zero-argument closure over the target and its inputs) and return the
    result document. Exceptions from the target propagate to the caller."""
    options = options or MeasureOptions()
    reporter = reporter or NullReporter()
    measured = measure(call, ctx.device, ctx.source_file, options, reporter)
    reporter.phase("analysis")
    return result_from(measured, ctx)


def profile_function(fn: Callable[..., Any], args: tuple = (), kwargs: Optional[Dict[str, Any]] = None, *,
                     device: str, peaks: Dict[str, Any], peaks_source: str = "cache",
                     timing: Optional[TimingOptions] = None, top_lines: int = 10,
                     cold_cache: bool = False) -> Dict[str, Any]:
    """Convenience for tests and notebooks: profile `fn(*args, **kwargs)` in this process."""
    ctx, call, options = function_context(fn, args, kwargs, device=device, peaks=peaks, peaks_source=peaks_source,
                                          timing=timing, top_lines=top_lines, cold_cache=cold_cache)
    return profile_call(call, ctx, options)


def function_context(fn: Callable[..., Any], args: tuple = (), kwargs: Optional[Dict[str, Any]] = None, *,
                     device: str, peaks: Dict[str, Any], peaks_source: str = "cache",
                     timing: Optional[TimingOptions] = None, top_lines: int = 10,
                     cold_cache: bool = False) -> Tuple[Context, Callable[[], Any], MeasureOptions]:
    """What `profile_function` measures and judges with: the context, the zero-argument call and
    the options (for judging one measurement against several ceilings: `measure`, `result_from`)."""
    kwargs = kwargs or {}
    inner = inspect.unwrap(fn)
    source = Path(inspect.getsourcefile(inner) or inner.__code__.co_filename).resolve()
    qualname = analysis.code_qualname_of(fn) or fn.__name__
    timing = timing or TimingOptions()
    target = analysis.target_block(f"{source}:{qualname}", fn.__module__, qualname, source)
    settings = analysis.settings_block(inputs="setup", setup=None, run_command=None, stop_program=True,
                                       timing=timing, timeout_s=None, device=device,
                                       arguments=describe_arguments(args, kwargs), cold_cache=cold_cache)
    ctx = Context(device=device, peaks=peaks, peaks_source=peaks_source, target=target, settings=settings,
                  source_file=str(source), top_lines=top_lines, cold_cache=cold_cache)
    call = lambda: fn(*args, **kwargs)  # noqa: E731
    if cold_cache:
        call, note = rotating_call(fn, args, kwargs, peaks["levels"])
        ctx.notes.append(note)
    return ctx, call, MeasureOptions(timing=timing, top_lines=top_lines)
