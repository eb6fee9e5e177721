"""The two profiled passes and what is read out of their events.

1. Clean pass: torch's profiler (CPU + CUDA activities) around a few calls, nothing else in the
   way. Gives per-op and per-kernel times, kernels per call, device busy time and idle gaps,
   host time blocked in synchronisations, host-device copies.
2. Attribution pass: the profiler plus `counting.OpCounter`, which runs each op inside a
   `perflsp@<line>#<index>` range. Gives each op's host time, the device time of the kernels it
   launched and the host time it spent blocked, joined to the op's FLOPs, bytes and line.

Each call is bracketed by a `perflsp@call` range and followed by a `perflsp@drain` range that
synchronizes, so a call's window runs from its start until the device has finished its work.
All profiler times are microseconds (kineto's unit).
"""
from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from perflsp.runtime import compat
from perflsp.runtime.counting import OpCounter, OpRecord, parse_range_name
from perflsp.runtime.timing import percentile, synchronize

CALL_RANGE = "perflsp@call"
DRAIN_RANGE = "perflsp@drain"

# Host-side runtime calls that block the host until the device has caught up: the explicit
# synchronizations, and the copies (a device-to-host copy into pageable memory, which is what
# `.item()` and `.cpu()` do, returns only once the stream has drained up to it).
SYNC_EVENT_NAMES = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
    "cudaMemcpy", "cudaMemcpyAsync", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2",
    "hipMemcpy", "hipMemcpyAsync",
})
RUNTIME_ACTIVITIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "xpu_runtime", "privateuse1_runtime"})
_RUNTIME_NAME = re.compile(r"^(cuda|cu|hip)[A-Z]")

# A CPU op shorter than this is dominated by dispatcher/Python overhead (see docs/profiling.md).
CPU_SUBSTANTIAL_OP_US = 20.0
# Device kernels shorter than this are "tiny": launch overhead is comparable to their work.
SHORT_KERNEL_US = 10.0
# Idle stretches on the device shorter than this are not counted as gaps (timer noise).
GAP_MIN_US = 1.0


def is_runtime_event(event: Any) -> bool:
    activity = str(getattr(event, "activity_type", "") or "")
    return activity in RUNTIME_ACTIVITIES or bool(_RUNTIME_NAME.match(event.name))


def _start(event: Any) -> float:
    return float(event.time_range.start)


def _end(event: Any) -> float:
    return float(event.time_range.end)


@dataclass
class Window:
    start_us: float
    call_end_us: float  # end of the call itself (syncs are counted up to here)
    end_us: float  # end of the drain: the device has finished the call's work

    @property
    def length_us(self) -> float:
        return self.end_us - self.start_us


def call_windows(events: Sequence[Any]) -> List[Window]:
    """One window per `perflsp@call` range, extended to the end of the drain that follows it."""
    host = sorted((e for e in events if not compat.is_device_event(e)), key=_start)
    calls = [e for e in host if e.name == CALL_RANGE]
    drains = [e for e in host if e.name == DRAIN_RANGE]
    windows = []
    for call in calls:
        drain = next((d for d in drains if _start(d) >= _end(call)), None)
        windows.append(Window(_start(call), _end(call), _end(drain) if drain is not None else _end(call)))
    return windows


def merged_intervals(intervals: Iterable[Tuple[float, float]]) -> List[Tuple[float, float]]:
    merged: List[Tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _is_top_level_op(event: Any) -> bool:
    """A host op (`namespace::name`, which also rules out kineto's own bookkeeping events such as
    "Activity Buffer Request") none of whose ancestors is an op; user annotations are transparent."""
    if ("::" not in event.name or compat.is_user_annotation(event) or is_runtime_event(event)
            or getattr(event, "is_async", False)):
        return False
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if not compat.is_user_annotation(parent):
            return False
        parent = getattr(parent, "cpu_parent", None)
    return True


@dataclass
class CleanProfile:
    """Per-call figures from the clean pass. Times that a preempted call would distort (wall,
    busy, blocked, transfer, gaps) are medians over the profiled calls; counts are means."""

    device: str
    calls: int
    wall_us: float
    ops_per_call: float
    op_durations_us: List[float]  # every top-level host op, all calls
    op_time_us: float  # time inside top-level host ops
    substantial_op_us: float  # time in host ops whose typical (median) duration is >= CPU_SUBSTANTIAL_OP_US
    kernels_per_call: float
    kernel_durations_us: List[float]
    busy_us: float  # GPU: union of kernel/memcpy intervals; CPU: time inside ops
    gaps_count: float
    gaps_total_us: float
    gaps_largest_us: float
    host_blocked_us: float
    sync_calls: float
    transfer_us: float  # host<->device memcpy time on the device
    busy_fraction: float  # GPU: device busy / call; CPU: time inside ops / call
    # GPU: the share of the call the device sits idle. CPU: the share spent outside ops that
    # typically take >= CPU_SUBSTANTIAL_OP_US (Python, dispatcher, tiny ops).
    overhead_fraction: float
    top_kernels: List[Dict[str, Any]] = field(default_factory=list)
    top_ops: List[Dict[str, Any]] = field(default_factory=list)


def _median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 0.5) if values else 0.0


def _window_of(start: float, end: float, windows: Sequence[Window], upto_call_end: bool = False) -> Optional[int]:
    for i, w in enumerate(windows):
        limit = w.call_end_us if upto_call_end else w.end_us
        if start >= w.start_us and end <= limit:
            return i
    return None


def _overlapping_window(start: float, end: float, windows: Sequence[Window]) -> Optional[int]:
    for i, w in enumerate(windows):
        if start < w.end_us and end > w.start_us:
            return i
    return None


def analyze_clean_events(sessions: Sequence[Sequence[Any]], device: str) -> CleanProfile:
    """Per-call figures from one or more profiler sessions' events (each session has its own
    clock, so windows are matched within their session only)."""
    windows: List[Window] = []
    located: List[Tuple[List[Any], List[Window], int]] = []  # (events, their windows, first index)
    for events in sessions:
        events = list(events)
        session_windows = call_windows(events)
        located.append((events, session_windows, len(windows)))
        windows.extend(session_windows)
    if not windows:
        raise RuntimeError("the profiler recorded no perflsp@call range")
    calls = len(windows)
    per_window = [defaultdict(float) for _ in windows]

    # Host ops. Each op's "typical" duration is the median for its name, so one preempted call
    # of a 5 µs op does not turn it into substantial work.
    ops = []
    for events, session_windows, first in located:
        for e in events:
            if compat.is_device_event(e) or not _is_top_level_op(e):
                continue
            i = _window_of(_start(e), _end(e), session_windows)
            if i is not None:
                ops.append((first + i, e.name, _end(e) - _start(e)))
    by_name: Dict[str, List[float]] = defaultdict(list)
    for _, name, duration in ops:
        by_name[name].append(duration)
    typical = {name: _median(durations) for name, durations in by_name.items()}
    for i, name, duration in ops:
        per_window[i]["op_time"] += duration
        if typical[name] >= CPU_SUBSTANTIAL_OP_US:
            per_window[i]["substantial"] += duration

    # Device activity, clipped to the call windows; blocking sync calls on the host.
    intervals: List[List[Tuple[float, float]]] = [[] for _ in windows]
    kernels: List[Any] = []
    sync_count = 0
    for events, session_windows, first in located:
        for e in events:
            start, end = _start(e), _end(e)
            if not compat.is_device_event(e):
                if e.name in SYNC_EVENT_NAMES:
                    i = _window_of(start, end, session_windows, upto_call_end=True)
                    if i is not None:
                        per_window[first + i]["blocked"] += end - start
                        sync_count += 1
                continue
            if compat.is_user_annotation(e):
                continue
            i = _overlapping_window(start, end, session_windows)
            if i is None:
                continue
            w = session_windows[i]
            intervals[first + i].append((max(start, w.start_us), min(end, w.end_us)))
            if e.name.startswith("Memcpy"):
                if "HtoD" in e.name or "DtoH" in e.name:
                    per_window[first + i]["transfer"] += end - start
            elif not e.name.startswith("Memset"):
                kernels.append(e)

    gaps: List[float] = []
    for i, w in enumerate(windows):
        busy = merged_intervals(intervals[i])
        per_window[i]["busy"] = sum(end - start for start, end in busy)
        cursor = w.start_us
        for start, end in busy:
            if start - cursor >= GAP_MIN_US:
                gaps.append(start - cursor)
                per_window[i]["gap_count"] += 1
                per_window[i]["gap_total"] += start - cursor
            cursor = max(cursor, end)
        if device == "cuda" and w.end_us - cursor >= GAP_MIN_US:
            gaps.append(w.end_us - cursor)
            per_window[i]["gap_count"] += 1
            per_window[i]["gap_total"] += w.end_us - cursor

    def med(key: str) -> float:
        return _median([pw[key] for pw in per_window])

    # Fractions per call, then the median call: a call preempted inside a big op stays busy, a
    # call preempted inside a tiny op stays overhead, whichever call it happens to.
    busy_key = "busy" if device == "cuda" else "op_time"
    busy_fractions = [min(1.0, pw[busy_key] / w.length_us) if w.length_us > 0 else 0.0
                      for pw, w in zip(per_window, windows)]
    if device == "cuda":
        overhead_fractions = [1.0 - f for f in busy_fractions]
    else:
        overhead_fractions = [max(0.0, 1.0 - pw["substantial"] / w.length_us) if w.length_us > 0 else 0.0
                              for pw, w in zip(per_window, windows)]

    kernel_totals: Dict[str, List[float]] = defaultdict(lambda: [0, 0.0])
    for e in kernels:
        entry = kernel_totals[e.name]
        entry[0] += 1
        entry[1] += _end(e) - _start(e)
    top_kernels = [{"name": name, "count": n / calls, "total_us": total / calls}
                   for name, (n, total) in sorted(kernel_totals.items(), key=lambda kv: -kv[1][1])[:10]]

    return CleanProfile(
        device=device,
        calls=calls,
        wall_us=_median([w.length_us for w in windows]),
        ops_per_call=len(ops) / calls,
        op_durations_us=[d for _, _, d in ops],
        op_time_us=med("op_time"),
        substantial_op_us=med("substantial"),
        kernels_per_call=len(kernels) / calls,
        kernel_durations_us=[_end(e) - _start(e) for e in kernels],
        busy_us=med("busy") if device == "cuda" else med("op_time"),
        gaps_count=med("gap_count"),
        gaps_total_us=med("gap_total"),
        gaps_largest_us=max(gaps) if gaps else 0.0,
        host_blocked_us=med("blocked"),
        sync_calls=sync_count / calls,
        transfer_us=med("transfer"),
        busy_fraction=_median(busy_fractions),
        overhead_fraction=_median(overhead_fractions),
        top_kernels=top_kernels,
    )


def top_ops(averages: Iterable[Any], calls: int, device: str, limit: int = 10) -> List[Dict[str, Any]]:
    """Per-op self times from `key_averages()` rows (through compat: the row type lost its
    `cuda_*` names), without our ranges and runtime calls."""
    rows = []
    for avg in averages:
        name = getattr(avg, "key", "")
        if name.startswith("perflsp@") or _RUNTIME_NAME.match(name) or compat.is_user_annotation(avg):
            continue
        shapes = getattr(avg, "input_shapes", None)
        rows.append({
            "name": name,
            "shapes": str(shapes) if shapes else None,
            "count": float(getattr(avg, "count", 0)) / calls,
            "self_cpu_us": compat.self_cpu_time_total_us(avg) / calls,
            "self_device_us": compat.self_device_time_total_us(avg) / calls,
        })
    key = "self_device_us" if device == "cuda" else "self_cpu_us"
    rows.sort(key=lambda r: -r[key])
    return rows[:limit]


# Turning a trace into Python objects costs ~100 µs per event on a small machine: once one
# profiled call has this many events, further calls add cost but little robustness (the
# per-op medians already rest on many samples).
MANY_EVENTS = 500


def _profile_session(call: Callable[[], Any], n_calls: int, device: str) -> Tuple[List[Any], Any]:
    from torch.autograd.profiler import record_function

    prof = compat.open_profiler(use_cuda=device == "cuda", record_shapes=True)
    synchronize(device)
    with prof:
        for _ in range(n_calls):
            with record_function(CALL_RANGE):
                call()
            with record_function(DRAIN_RANGE):
                synchronize(device)
    return list(compat.profiler_events(prof)), prof


def run_clean_profile(call: Callable[[], Any], n_calls: int, device: str) -> CleanProfile:
    """Profile `n_calls` calls: one first, the rest only if that one's trace was small."""
    events, prof = _profile_session(call, 1, device)
    traces, profilers = [events], [prof]
    if n_calls > 1 and len(events) < MANY_EVENTS:
        more, prof_more = _profile_session(call, n_calls - 1, device)
        traces.append(more)
        profilers.append(prof_more)
    profile = analyze_clean_events(traces, device)
    averages = [row for p in profilers for row in _key_averages(p)]
    profile.top_ops = top_ops(_merge_rows(averages), profile.calls, device)
    return profile


def _key_averages(prof: Any) -> List[Any]:
    """Rows per (op, input shapes): "aten::mm [[4096, 4096], [4096, 4096]]" says which call."""
    try:
        return list(prof.key_averages(group_by_input_shape=True))
    except Exception:  # an old/odd profiler object: top_ops is a nicety, not a requirement
        return []


def _merge_rows(rows: List[Any]) -> List[Any]:
    """key_averages rows of several sessions, summed per op and shapes."""
    merged: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for row in rows:
        shapes = getattr(row, "input_shapes", None)
        entry = merged.setdefault((row.key, str(shapes)), {
            "key": row.key, "input_shapes": shapes, "count": 0, "self_cpu_time_total": 0.0,
            "self_device_time_total": 0.0, "is_user_annotation": compat.is_user_annotation(row)})
        entry["count"] += getattr(row, "count", 0)
        entry["self_cpu_time_total"] += compat.self_cpu_time_total_us(row)
        entry["self_device_time_total"] += compat.self_device_time_total_us(row)
    return [SimpleNamespace(**entry) for entry in merged.values()]


# --- attribution pass -------------------------------------------------------------------------

@dataclass
class RangeTiming:
    cpu_us: float = 0.0  # host time of the op
    device_us: float = 0.0  # device time of the kernels/memcpys it launched
    blocked_us: float = 0.0  # host time inside blocking sync calls


def _subtree(event: Any) -> Iterable[Any]:
    stack = [event]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(getattr(node, "cpu_children", ()) or ())


def analyze_attribution_events(events: Iterable[Any]) -> Dict[int, RangeTiming]:
    """Times per op index from the `perflsp@<line>#<index>` host ranges."""
    timings: Dict[int, RangeTiming] = {}
    for event in events:
        if compat.is_device_event(event):
            continue  # the device-side mirror of a range spans its kernels; counted below
        parsed = parse_range_name(event.name)
        if parsed is None:
            continue
        _, index = parsed
        timing = timings.setdefault(index, RangeTiming())
        # The op's own events, not the range: entering and leaving a record_function from
        # Python costs more than a small op itself (~25 µs on a CI VM vs ~3 µs for a tiny add).
        children = getattr(event, "cpu_children", None) or []
        timing.cpu_us += sum(_end(c) - _start(c) for c in children) if children else _end(event) - _start(event)
        for node in _subtree(event):
            timing.device_us += compat.kernel_time_us(node)
            if node is not event and node.name in SYNC_EVENT_NAMES:
                timing.blocked_us += _end(node) - _start(node)
    return timings


@dataclass
class Attribution:
    records: List[OpRecord]
    timings: Dict[int, RangeTiming]  # per op; on a CPU each op's median over the profiled calls
    wall_us: float  # the instrumented call's window (slower than a real call)
    working_set_bytes: float = 0.0  # distinct storage bytes one call touched
    # CPU: each profiled call's host time per op index, for per-line medians and spreads
    # (one call on a GPU, whose per-op device times do not depend on host noise).
    calls_us: List[Dict[int, float]] = field(default_factory=list)


def run_attribution(call: Callable[[], Any], target_file: str, device: str, n_calls: int = 1) -> Attribution:
    """Calls under the counting mode. On a GPU one call, each op in a range under the profiler
    (device time and sync waits per op: device times do not depend on host noise). On a CPU a
    timer around each op, over `n_calls` calls, keeping every call's times: each op's and each
    line's figure is the median over the calls, so one preempted call (a 2-thread op can lose a
    whole ~8 ms scheduler slice) moves neither the figures nor which line dominates. The
    proportions are what matters here; the totals are calibrated against the clean pass afterwards."""
    if device != "cuda":
        return merge_cpu_calls([attribute_cpu_call(call, target_file) for _ in range(max(1, n_calls))])

    from torch.autograd.profiler import record_function

    counter = OpCounter(target_file, ranges=True)
    prof = compat.open_profiler(use_cuda=device == "cuda")
    synchronize(device)
    with prof:
        with record_function(CALL_RANGE):
            with counter:
                call()
        with record_function(DRAIN_RANGE):
            synchronize(device)
    events = list(compat.profiler_events(prof))
    windows = call_windows(events)
    return Attribution(counter.records, analyze_attribution_events(events), windows[0].length_us if windows else 0.0,
                       counter.working_set_bytes)


@dataclass
class AttributedCall:
    """One CPU call under the counting mode, each op timed."""

    records: List[OpRecord]
    wall_us: float
    working_set_bytes: float


def attribute_cpu_call(call: Callable[[], Any], target_file: str) -> AttributedCall:
    counter = OpCounter(target_file, ranges=False, time_ops=True)
    started = time.perf_counter()
    with counter:
        call()
    return AttributedCall(counter.records, (time.perf_counter() - started) * 1e6, counter.working_set_bytes)


def merge_cpu_calls(calls: Sequence[AttributedCall]) -> Attribution:
    """Several attributed calls as one: each op's time and work are its median over the calls
    (the work too, so that a call whose sizes vary, one batch in three larger, is described by its
    typical call whichever came first). Calls that ran other ops (data-dependent control flow)
    cannot be matched op by op: then the first call alone."""
    first = calls[0].records
    same_ops = all([r.name for r in c.records] == [r.name for r in first] for c in calls)
    usable = list(calls) if same_ops else list(calls[:1])
    records = [replace(r, **{key: round(_median([getattr(c.records[r.index], key) for c in usable]))
                             for key in ("flops", "bytes_read", "bytes_written")})
               for r in first]
    calls_us = [{r.index: r.host_us for r in c.records} for c in usable]
    timings = {r.index: RangeTiming(cpu_us=_median([c[r.index] for c in calls_us])) for r in records}
    return Attribution(records, timings, _median([c.wall_us for c in usable]),
                       _median([c.working_set_bytes for c in usable]), calls_us)


def median_or_none(values: Sequence[float]) -> Optional[float]:
    return percentile(sorted(values), 0.5) if values else None
