"""Timing discipline: warm up until stable, time many calls, report the median and spread.

On CPU each call is timed with `time.perf_counter`. On CUDA each call sits between two CUDA
events recorded on the current stream; the device is synchronized once before the timed region
and once after it, never inside it, so the host can run ahead as it does in real code.
The garbage collector is paused while timing (as `timeit` does) so a collection triggered by an
earlier allocation is not charged to one unlucky call.
"""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

CLOCK_CPU = "perf_counter"
CLOCK_CUDA = "cuda-events"

# Warm-up ends once two consecutive calls are within this fraction of each other.
STABLE_TOLERANCE = 0.15
MAX_KEPT_SAMPLES = 500  # per-call times kept in the result (~8 kB of JSON)


@dataclass
class TimingOptions:
    warmup: int = 3  # minimum warm-up calls; more run until the time is stable
    max_warmup: int = 50
    iters: Optional[int] = None  # fixed number of timed calls (else enough for min_time_s)
    min_time_s: float = 1.0
    min_iters: int = 10
    max_iters: int = 100_000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def kept_samples_us(samples_s: Sequence[float]) -> List[float]:
    """At most MAX_KEPT_SAMPLES of the timed calls, evenly spaced and in call order (a drift stays
    visible), in µs to the nanosecond: enough for the next run's comparison (perflsp.significance)."""
    step = max(1, math.ceil(len(samples_s) / MAX_KEPT_SAMPLES))
    return [round(t * 1e6, 3) for t in samples_s[::step]]


def summarize(samples_s: Sequence[float], clock: str, warmup_calls: int) -> Dict[str, Any]:
    ordered = sorted(samples_s)
    to_us = 1e6
    return {
        "clock": clock,
        "warmup_calls": warmup_calls,
        "calls": len(ordered),
        "median_us": percentile(ordered, 0.5) * to_us,
        "p10_us": percentile(ordered, 0.1) * to_us,
        "p90_us": percentile(ordered, 0.9) * to_us,
        "min_us": ordered[0] * to_us,
        "max_us": ordered[-1] * to_us,
        "mean_us": sum(ordered) / len(ordered) * to_us,
        "samples_us": kept_samples_us(samples_s),
    }


def is_stable(samples_s: Sequence[float]) -> bool:
    """The last two calls agree within STABLE_TOLERANCE: cold-start costs (first-call
    allocation, library setup, compilation) make consecutive early calls differ."""
    if len(samples_s) < 2:
        return False
    a, b = samples_s[-2], samples_s[-1]
    low = min(a, b)
    if low <= 0:
        return True
    return abs(a - b) / low <= STABLE_TOLERANCE


def warmup_done(samples_s: Sequence[float], options: TimingOptions) -> bool:
    """Whether the warm-up calls so far are enough (minimum reached, and stable or capped)."""
    n = len(samples_s)
    if n < options.warmup:
        return False
    if n >= options.max_warmup or sum(samples_s) >= options.min_time_s:
        return True  # capped: a function that never settles still gets measured
    return is_stable(samples_s)


def choose_iters(per_call_s: float, options: TimingOptions) -> int:
    """Fixed `iters` if given, else enough calls for about `min_time_s`, at least `min_iters`."""
    if options.iters is not None:
        return max(1, options.iters)
    if per_call_s <= 0:
        return options.max_iters
    wanted = math.ceil(options.min_time_s / per_call_s)
    return int(min(options.max_iters, max(options.min_iters, wanted)))


class CpuTimer:
    clock = CLOCK_CPU

    def __init__(self) -> None:
        self._starts: List[float] = []
        self._samples: List[float] = []

    def start(self) -> None:
        self._starts.append(time.perf_counter())

    def stop(self) -> None:
        self._samples.append(time.perf_counter() - self._starts[-1])

    def samples_s(self) -> List[float]:
        return list(self._samples)


class CudaTimer:
    """Per-call CUDA events; `samples_s()` synchronizes once and reads all of them."""

    clock = CLOCK_CUDA

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._pairs: List[Any] = []

    def start(self) -> None:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        self._pairs.append([event, None])

    def stop(self) -> None:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        self._pairs[-1][1] = event

    def samples_s(self) -> List[float]:
        self._torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in self._pairs if end is not None]  # ms -> s


def make_timer(device: str):
    return CudaTimer() if device == "cuda" else CpuTimer()


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class PausedGC:
    """Context manager: collector off inside, restored to its previous state after."""

    def __enter__(self) -> "PausedGC":
        self._was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._was_enabled:
            gc.enable()


def warm_up(call: Callable[[], Any], device: str, options: TimingOptions, on_call: Callable[[int], None] = lambda n: None) -> List[float]:
    """Run warm-up calls until `warmup_done`; returns their times (never reported as results).

    Each warm-up call is synchronized on both sides so its time is that call's alone.
    """
    samples: List[float] = []
    while not warmup_done(samples, options):
        synchronize(device)
        t0 = time.perf_counter()
        call()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
        on_call(len(samples))
    return samples


def timed_calls(call: Callable[[], Any], device: str, options: TimingOptions,
                on_call: Callable[[int, float], None] = lambda n, fraction: None) -> List[float]:
    """Time calls back to back: `options.iters` of them, or until `min_time_s` has passed (and
    at least `min_iters`). Stopping on elapsed time rather than on a count estimated from the
    warm-up keeps the window right when the warm-up was unrepresentative (a busy machine).
    The device is synchronized before and after the region only."""
    timer = make_timer(device)
    synchronize(device)
    started = time.perf_counter()
    done = 0
    with PausedGC():
        while True:
            timer.start()
            call()
            timer.stop()
            done += 1
            elapsed = time.perf_counter() - started
            if options.iters is not None:
                on_call(done, done / options.iters)
                if done >= options.iters:
                    break
            else:
                on_call(done, min(1.0, elapsed / options.min_time_s))
                if (elapsed >= options.min_time_s and done >= options.min_iters) or done >= options.max_iters:
                    break
    return timer.samples_s()
