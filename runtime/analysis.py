"""From measurements to the result document (schema version 2). No torch in here.

Joins the timed pass (how long a call takes), the clean profiled pass (where device and host
time goes), and the attribution pass (FLOPs, bytes, syncs and time per source line), then asks
`roofline` for the verdicts.
"""
from __future__ import annotations

import datetime
import hashlib
import inspect
import json
import linecache
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import perflsp
from perflsp import units
from perflsp.profile_result import SCHEMA_VERSION, function_source_sha256
from perflsp.runtime import roofline, steadiness
from perflsp.runtime.counting import OpRecord, flops_uncounted
from perflsp.runtime.peaks import ceiling_for, ceilings_id, level_for
from perflsp.runtime.profiling import Attribution, CleanProfile, RangeTiming, SHORT_KERNEL_US, median_or_none
from perflsp.runtime.timing import percentile

SYNC_LABELS = {
    "item": "host read of a device value (.item(), float(), bool(), if tensor:)",
    "device-to-host": "blocking device-to-host copy (.cpu(), .to('cpu'), .numpy())",
    "data-dependent-shape": "op whose output size depends on device data (nonzero, boolean-mask indexing, unique)",
    "synchronize": "explicit torch.cuda.synchronize()",
}


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_result(target: Dict[str, Any], settings: Dict[str, Any]) -> Dict[str, Any]:
    """A result with every block present and empty; callers fill what they measured."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "perflsp", "version": perflsp.__version__},
        "created_at": now_iso(),
        "status": "ok",
        "target": target,
        "settings": settings,
        "device": None,
        "ceilings": None,
        "timing": None,
        "totals": None,
        "verdict": None,
        "lines": [],
        "syncs": [],
        "kernels": None,
        "top_ops": [],
        "environment": None,
        "error": None,
        "comparison": None,
    }


def error_block(kind: str, message: str, phase: Optional[str] = None, exception_type: Optional[str] = None,
                traceback: Optional[str] = None, defined: Optional[List[str]] = None) -> Dict[str, Any]:
    return {"kind": kind, "message": message, "phase": phase, "exception_type": exception_type,
            "traceback": traceback, "defined": defined}


def with_error(result: Dict[str, Any], error: Dict[str, Any]) -> Dict[str, Any]:
    result["status"] = "error"
    result["error"] = error
    result["verdict"] = None
    return result


def target_block(spec: str, module: str, qualname: str, source_file: Optional[Path],
                 code_qualname: Optional[str] = None) -> Dict[str, Any]:
    """The result's `target`: where the function is and digests to tell when it changed."""
    block: Dict[str, Any] = {"spec": spec, "file": str(source_file) if source_file else None, "module": module,
                             "qualname": qualname, "def_line": None, "source_sha256": None, "file_sha256": None}
    if source_file is None:
        return block
    try:
        text = source_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return block
    block["file_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    block["source_sha256"], block["def_line"] = function_source_sha256(text, code_qualname or qualname)
    return block


def code_qualname_of(fn: Any) -> Optional[str]:
    """The function's own qualname in its file (differs from the target's for re-exports)."""
    inner = inspect.unwrap(getattr(fn, "__func__", fn))
    name = getattr(inner, "__qualname__", None)
    return name if name and "<locals>" not in name else None


def settings_block(*, inputs: Optional[str], setup: Optional[str], run_command: Optional[str], stop_program: bool,
                   timing: Any, timeout_s: Optional[float], device: str,
                   arguments: Optional[List[str]] = None, cold_cache: bool = False) -> Dict[str, Any]:
    """`arguments`: the call's arguments described (`arguments.describe_arguments`), once known."""
    return {
        "inputs": inputs,
        "setup": setup,
        "run_command": run_command,
        "stop_program": stop_program,
        "warmup": timing.warmup,
        "iters": timing.iters,
        "min_time_s": timing.min_time_s,
        "timeout_s": timeout_s,
        "device": device,
        "arguments": arguments,
        "cache": "cold" if cold_cache else "warm",
    }


@dataclass
class LineStats:
    line: int
    cpu_us: float = 0.0
    device_us: float = 0.0
    blocked_us: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    matmul_flops: float = 0.0
    ops: int = 0
    op_times_us: List[float] = field(default_factory=list)
    op_names: Counter = field(default_factory=Counter)
    transfer_us: float = 0.0  # copies between host and device, and CPU ops in a GPU function
    has_transfer: bool = False
    calls_us: List[float] = field(default_factory=list)  # CPU: the line's host time in each profiled call


@dataclass
class Inputs:
    """What `build_result` joins."""

    target: Dict[str, Any]
    settings: Dict[str, Any]
    device: Dict[str, Any]
    peaks: Dict[str, Any]
    peaks_source: str
    datasheet: Optional[Dict[str, Any]]
    timing: Dict[str, Any]
    clean: CleanProfile
    attribution: Attribution
    environment: Dict[str, Any]
    source_file: Optional[str]
    tf32_enabled: bool = False
    notes: List[str] = field(default_factory=list)
    top_lines: int = 10
    program: Optional[Dict[str, Any]] = None
    cold_cache: bool = False  # each call read its inputs from main memory (`cold_cache.py`)
    warmup_s: Sequence[float] = ()  # the warm-up calls: whether they settled (steadiness.py)
    wanted_calls: Optional[int] = None  # timed calls a program run asked for (it may end first)


def _dominant_dtype(records: List[OpRecord]) -> Optional[str]:
    """The dtype doing the matmul work if there is any, else the one moving the most bytes."""
    matmul: Counter = Counter()
    moved: Counter = Counter()
    for r in records:
        if r.dtype is None:
            continue
        if r.flop_kind == "matmul":
            matmul[r.dtype] += r.flops
        moved[r.dtype] += r.bytes
    for table in (matmul, moved):
        if table and max(table.values()) > 0:
            return table.most_common(1)[0][0]
    return None


def _is_cpu_fallback(record: OpRecord, device: str) -> bool:
    return device == "cuda" and record.device == "cpu" and not record.transfer


def _line_stats(records: List[OpRecord], timings: Dict[int, RangeTiming], device: str,
                calls_us: List[Dict[int, float]]) -> Dict[int, LineStats]:
    """Per line: the ops' figures summed; on a CPU the host time is the median over the profiled
    calls of the line's time in each call (`calls_us`), so one preempted call cannot make a line
    dominate."""
    stats: Dict[int, LineStats] = {}
    for r in records:
        if r.line is None:
            continue
        s = stats.setdefault(r.line, LineStats(r.line))
        t = timings.get(r.index, RangeTiming())
        s.cpu_us += t.cpu_us
        s.device_us += t.device_us
        s.blocked_us += t.blocked_us
        s.flops += r.flops
        s.bytes += r.bytes
        if r.flop_kind == "matmul":
            s.matmul_flops += r.flops
        s.ops += 1
        s.op_times_us.append(t.device_us if device == "cuda" else t.cpu_us)
        s.op_names[r.name] += 1
        if r.transfer or _is_cpu_fallback(r, device):
            s.has_transfer = True
            s.transfer_us += t.device_us if r.transfer else t.cpu_us
    for call in calls_us:
        per_line: Dict[int, float] = defaultdict(float)
        for r in records:
            if r.line is not None:
                per_line[r.line] += call.get(r.index, 0.0)
        for line, s in stats.items():
            s.calls_us.append(per_line[line])
    for s in stats.values():
        if s.calls_us:
            s.cpu_us = percentile(sorted(s.calls_us), 0.5)
    return stats


def _code(file: Optional[str], line: Optional[int]) -> str:
    if not file or not line:
        return ""
    return linecache.getline(file, line).strip()


def _site_label(file: Optional[str], line: Optional[int]) -> str:
    code = _code(file, line)
    if len(code) > 48:
        code = code[:45] + "..."
    return f"line {line} (`{code}`)" if code else f"line {line}"


def _syncs(records: List[OpRecord], timings: Dict[int, RangeTiming], device: str, host_blocked_us: float,
           source_file: Optional[str], call_us: float) -> List[Dict[str, Any]]:
    """Sync sites, with the clean pass's blocked time shared out by where the attribution pass
    saw the waits (the instrumented host is slower, so its own waits are shorter)."""
    groups: Dict[tuple, Dict[str, Any]] = {}
    attributed_total = 0.0
    for r in records:
        if r.sync_kind is None:
            continue
        key = (r.line, r.sync_kind, r.name)
        g = groups.setdefault(key, {"count": 0, "attributed_us": 0.0})
        g["count"] += 1
        blocked = timings.get(r.index, RangeTiming()).blocked_us
        g["attributed_us"] += blocked
        attributed_total += blocked
    total_count = sum(g["count"] for g in groups.values())
    out = []
    for (line, kind, op), g in groups.items():
        if device != "cuda":
            blocked = 0.0
        elif attributed_total > 0:
            blocked = host_blocked_us * g["attributed_us"] / attributed_total
        else:
            blocked = host_blocked_us * g["count"] / total_count if total_count else 0.0
        out.append({
            "file": source_file if line else None,
            "line": line,
            "code": _code(source_file, line),
            "kind": kind,
            "op": op,
            "count": float(g["count"]),
            "blocked_us": blocked,
            "share": min(1.0, blocked / call_us) if call_us > 0 else 0.0,
            "blocking": device == "cuda",
        })
    out.sort(key=lambda s: (-s["blocked_us"], s["line"] or 0))
    return out


def _host_scale(timings: Dict[int, RangeTiming], clean: CleanProfile, median_us: float) -> float:
    """The factor that puts host times from the attribution pass in the units of a real (timed) call.

    The lines' total is scaled to the part of a timed call spent inside ops: the timed median
    times the clean pass's share of its call inside ops (that pass runs under the profiler, ~1-3
    µs per op, so its absolute times are not used, and a ratio of its own times survives a
    preempted pass). Usually that scales down: under the dispatch mode every op runs 2-3x slower
    on the host (cache and branch-predictor pollution from the Python in between). It scales up
    when the attribution calls ran in a quieter moment than the timed calls, on a machine whose
    load comes and goes. Proportions between lines are kept. Device times are left alone:
    kernels do not slow down because the host does.
    """
    attributed = sum(t.cpu_us for t in timings.values())
    if attributed <= 0 or clean.op_time_us <= 0 or clean.wall_us <= 0:
        return 1.0
    return median_us * min(1.0, clean.op_time_us / clean.wall_us) / attributed


# Others' load (1-minute average when measuring began) at least this far above the cores our
# threads leave free: other work competed for our cores (docs/profiling.md, "A busy machine").
BUSY_LOAD = 0.75


def _noise_notes(timing: Dict[str, Any], environment: Dict[str, Any], threads: int,
                 lines: List[Dict[str, Any]]) -> List[str]:
    """One note when the machine was busy (others' load when measuring began, see BUSY_LOAD) or
    the timed calls spread widely: the figures behind it, and what that does to the verdict."""
    load, cpus = environment.get("load_average_1m_before"), environment.get("cpu_count")
    busy = load is not None and bool(cpus) and load >= BUSY_LOAD + max(0, cpus - threads)
    spread = timing["p90_us"] / timing["p10_us"] if timing["calls"] >= 5 and timing["p10_us"] > 0 else None
    noisy = spread is not None and spread > steadiness.NOISY_SPREAD
    if not busy and not noisy:
        return []
    figures = []
    if busy:
        figures.append(f"load average {load:.2f} on {cpus} CPUs when measuring began, with {threads} thread(s) of "
                       "this process")
    if spread is not None:
        figures.append(f"the timed calls' p90 = {spread:.1f} x p10")
    if lines and lines[0]["calls"] > 1:
        top = lines[0]
        figures.append(f"line {top['line']} took {units.duration_us(top['time_min_us'])}-"
                       f"{units.duration_us(top['time_max_us'])} over {top['calls']} profiled calls")
    cause = ("the machine was busy" if busy else
             "the timed calls vary a lot: something else competed for the machine, or the function's work varies "
             "between calls")
    return [f"{cause} ({'; '.join(figures)}). Effect: times run slower and attained fractions lower than on a quiet "
            "machine; the regime is judged on the fastest timed call and lines are ranked by their median "
            "over the profiled calls, so a load that lasts the whole timing should move neither (one that comes and "
            "goes can: see a tentative verdict's note). Profile on a quiet machine for absolute figures"]


def _ceilings_notes(peaks: Dict[str, Any], source: str) -> List[str]:
    notes = []
    if source == "measured":
        notes.append(f"the ceilings were measured during this profile ({peaks['duration_s']:.1f} s): none were "
                     "stored for this device, or --refresh-peaks asked for it; later profiles reuse them")
    if not peaks["protocol"]["rounds_agree"]:
        notes.append("the ceilings did not converge when measured (the machine was busy): fractions of them are "
                     "uncertain; re-measure with `perflsp peaks` on a quiet machine")
    return notes


def _level_notes(level: Dict[str, Any], peaks: Dict[str, Any], working_set_bytes: Optional[float],
                 cold_cache: bool) -> List[str]:
    """Which memory level the bandwidth ceiling is, and why: a figure above main memory's
    bandwidth is no counting error when the data sits in a cache. (With a cold cache the note
    on the copies says it.)"""
    if working_set_bytes is None or cold_cache:
        return []
    main = peaks["levels"][-1]
    text = (f"working set {units.byte_count(working_set_bytes)}: judged against the {level['name']} bandwidth, "
            f"{units.byte_rate(level['bandwidth_bytes_per_s'])} (measured for "
            f"{units.byte_count(level['from_bytes'])}-{units.byte_count(level['to_bytes'])} working sets)")
    if level is not main:
        text += (f", not {main['name']}'s {units.byte_rate(main['bandwidth_bytes_per_s'])}: the data stays in "
                 f"{level['name']} (a warm cache: every call reused the same inputs; `--cold-cache` rotates copies of "
                 "them)")
    if working_set_bytes < level["from_bytes"]:
        text += "; smaller than any measured plateau, so each op's fixed dispatch cost weighs on it"
    return [text]


def _uncounted_notes(records: List[OpRecord], limit: int = 6) -> List[str]:
    missing = Counter(r.name for r in records if flops_uncounted(r))
    if not missing:
        return []
    names = ", ".join(f"{name} x{count}" for name, count in missing.most_common(limit))
    more = f" and {len(missing) - limit} more" if len(missing) > limit else ""
    return [f"FLOPs not counted (no formula) for {names}{more}: the FLOP totals and intensity are lower bounds"]


def read_previous(path: Path) -> Optional[Dict[str, Any]]:
    """The result last written for this function, whatever its schema version, or None."""
    from perflsp.profile_result import MAX_RESULT_BYTES
    from perflsp.safe_files import read_regular

    try:
        data = json.loads(read_regular(path, MAX_RESULT_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def ceilings_change_note(result: Dict[str, Any], previous: Optional[Dict[str, Any]]) -> Optional[str]:
    """A note when `result` was judged against other ceilings than the previous result for the
    same function: a moved fraction or regime may then come from the ceilings, not the code."""
    if result.get("status") != "ok" or not previous or previous.get("status") != "ok":
        return None
    now, before = result.get("ceilings") or {}, previous.get("ceilings") or {}
    if not now.get("id") or not before.get("id") or now["id"] == before["id"]:
        return None
    regime_before = (previous.get("verdict") or {}).get("regime")
    regime_now = (result.get("verdict") or {}).get("regime")
    text = (f"judged against other ceilings than the previous result for this function "
            f"({previous.get('created_at', '?')}): ceilings {before['id']} (measured {before.get('measured_at', '?')}) "
            f"then, {now['id']} (measured {now.get('measured_at', '?')}) now")
    if regime_before and regime_before != regime_now:
        text += f"; the regime moved from {regime_before} to {regime_now}, which may come from the ceilings, not the code"
    else:
        text += "; fractions of the ceilings are not comparable between the two"
    return text


def note_ceilings_change(result: Dict[str, Any], previous: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    note = ceilings_change_note(result, previous)
    if note:
        result["verdict"]["notes"].append(note)
    return result


def _near_roof(regime: str, got: roofline.Attained, ceilings: roofline.Ceilings,
               lines: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """When the call is at >= NEAR_ROOF of the ceiling that binds it: little is left to gain in
    this function, so the first lever names the next most expensive line to look at (the one
    after the line that does the binding work; a helper of the same file has its own line)."""
    fraction = roofline.roof_fraction(regime, got)
    if fraction is None or fraction < roofline.NEAR_ROOF:
        return None
    side = "compute" if regime == "compute-bound" else "memory"
    ceiling = (f"the measured {ceilings.dtype_key} peak" if side == "compute"
               else f"the measured {ceilings.level} bandwidth")
    gain = (f"at most {1 / fraction:.2g}x left to gain in this function" if fraction < 1
            else "nothing measurable left to gain in this function")
    text = f"near the roof: {units.percent(fraction)} of {ceiling}, {gain}"
    following = lines[1] if len(lines) > 1 else None
    if following is not None:
        text += (f"; look next at {_site_label(following['file'], following['line'])}: "
                 f"{units.percent(following['share'])} of the call, {following['regime']}")
    elif lines:
        text += (f"; its time is all on line {lines[0]['line']}: what is left is calling it less often, or another "
                 "algorithm")
    return {"ceiling": side, "fraction": fraction,
            "next": None if following is None else {k: following[k] for k in ("line", "code", "share", "regime")},
            "lever": text}


def build_result(inp: Inputs) -> Dict[str, Any]:
    device = inp.device["kind"]
    records = inp.attribution.records
    clean = inp.clean
    median_us = inp.timing["median_us"]
    scale = _host_scale(inp.attribution.timings, clean, median_us)
    timings = {i: RangeTiming(t.cpu_us * scale, t.device_us, t.blocked_us) for i, t in inp.attribution.timings.items()}
    calls_us = [{i: us * scale for i, us in call.items()} for call in inp.attribution.calls_us]

    # Work on the measured device; CPU-side ops of a GPU function are judged separately.
    work = [r for r in records if r.device == device or r.transfer]
    flops = float(sum(r.flops for r in work))
    bytes_read = float(sum(r.bytes_read for r in work))
    bytes_written = float(sum(r.bytes_written for r in work))
    by_kind: Dict[str, float] = defaultdict(float)
    for r in work:
        if r.flop_kind:
            by_kind[r.flop_kind] += r.flops
    dtype = _dominant_dtype(work)

    ceiling_key, peak_flops, ceiling_notes = ceiling_for(inp.peaks, dtype, inp.tf32_enabled)
    working_set_bytes = inp.attribution.working_set_bytes or None
    level = inp.peaks["levels"][-1] if inp.cold_cache else level_for(inp.peaks["levels"], working_set_bytes)
    ceilings = roofline.Ceilings(level["bandwidth_bytes_per_s"], peak_flops, ceiling_key, level["name"])

    stats = _line_stats(records, timings, device, calls_us)
    # Shares: of the timed call for host times (calibrated onto it above); of the profiled call
    # for device times and waits, which come from that pass unscaled.
    call_us = clean.wall_us if device == "cuda" and clean.wall_us > 0 else median_us
    syncs = _syncs(records, timings, device, clean.host_blocked_us, inp.source_file, call_us)
    sync_sites = [roofline.Site(_site_label(s["file"], s["line"]), s["blocked_us"]) for s in syncs if s["blocking"]]
    transfer_sites = [roofline.Site(_site_label(inp.source_file, s.line), s.transfer_us) for s in stats.values() if s.has_transfer]
    cpu_fallback_us = sum(timings.get(r.index, RangeTiming()).cpu_us for r in records if _is_cpu_fallback(r, device))

    figures = roofline.CallFigures(
        device=device,
        median_us=median_us,
        flops=flops,
        bytes=bytes_read + bytes_written,
        wall_us=clean.wall_us,
        overhead_fraction=clean.overhead_fraction,
        busy_fraction=clean.busy_fraction,
        kernels_per_call=clean.kernels_per_call,
        median_kernel_us=median_or_none(clean.kernel_durations_us),
        ops_per_call=clean.ops_per_call,
        median_op_us=median_or_none(clean.op_durations_us),
        host_blocked_us=clean.host_blocked_us,
        transfer_us=clean.transfer_us,
        cpu_fallback_us=cpu_fallback_us,
        sync_sites=sync_sites,
        transfer_sites=transfer_sites,
        tf32_enabled=inp.tf32_enabled,
        dominant_dtype=dtype,
        min_us=inp.timing.get("min_us"),
        matmul_flops=by_kind.get("matmul", 0.0),
        working_set_bytes=working_set_bytes,
    )
    verdict, got = roofline.classify(figures, ceilings)
    steady = steadiness.assess(inp.timing, inp.timing.get("samples_us") or [], inp.warmup_s, inp.wanted_calls)
    tentative = steadiness.tentative_note(steady, program_run=inp.program is not None)
    if tentative:
        verdict.summary += f"; tentative: {steady.calls} unsteady timed calls (see the notes)"
    verdict.notes = (list(inp.notes) + ([tentative] if tentative else []) + ceiling_notes + verdict.notes
                     + _ceilings_notes(inp.peaks, inp.peaks_source) + _level_notes(level, inp.peaks, working_set_bytes, inp.cold_cache)
                     + _uncounted_notes(work))

    lines = []
    for s in stats.values():
        time_us = s.device_us if device == "cuda" else s.cpu_us
        lines.append({
            "file": inp.source_file or "",
            "line": s.line,
            "code": _code(inp.source_file, s.line),
            "time_us": time_us,
            "time_min_us": min(s.calls_us) if s.calls_us else time_us,
            "time_max_us": max(s.calls_us) if s.calls_us else time_us,
            "calls": len(s.calls_us) or 1,
            "device_time_us": s.device_us,
            "cpu_time_us": s.cpu_us,
            "blocked_us": s.blocked_us,
            "share": min(1.0, max(time_us, s.blocked_us) / call_us) if call_us > 0 else 0.0,
            "ops": s.ops,
            "flops": s.flops,
            "bytes": s.bytes,
            "intensity_flop_per_byte": roofline.intensity(s.flops, s.bytes),
            "regime": roofline.classify_line(device, s.flops, s.bytes, s.op_times_us, s.blocked_us, time_us,
                                             s.has_transfer, ceilings, s.matmul_flops,
                                             min(s.calls_us) if s.calls_us else None),
            "top_ops": [name for name, _ in s.op_names.most_common(3)],
        })
    lines.sort(key=lambda l: -max(l["time_us"], l["blocked_us"]))
    verdict.notes += _noise_notes(inp.timing, inp.environment, inp.device.get("threads") or 1, lines)
    near_roof = _near_roof(verdict.regime, got, ceilings, lines)
    if near_roof is not None:
        verdict.levers.insert(0, near_roof.pop("lever"))

    kernel_times = sorted(clean.kernel_durations_us if device == "cuda" else clean.op_durations_us)
    short_limit = SHORT_KERNEL_US if device == "cuda" else 20.0
    result = new_result(inp.target, inp.settings)
    result.update({
        "device": inp.device,
        "ceilings": {
            "source": inp.peaks_source,
            "id": ceilings_id(inp.peaks),
            "measured_at": inp.peaks["measured_at"],
            "converged": inp.peaks["protocol"]["rounds_agree"],
            "level": {"name": level["name"], "bandwidth_bytes_per_s": level["bandwidth_bytes_per_s"],
                      "working_set_bytes": working_set_bytes},
            "levels": [{k: lv[k] for k in ("name", "from_bytes", "to_bytes", "bandwidth_bytes_per_s")}
                       for lv in inp.peaks["levels"]],
            "bandwidth_bytes_per_s": ceilings.bandwidth_bytes_per_s,
            "compute_flops_per_s": dict(inp.peaks["compute_flops_per_s"]),
            "dtype": ceiling_key,
            "peak_flops_per_s": peak_flops,
            "ridge_flop_per_byte": ceilings.ridge_flop_per_byte,
            "datasheet": inp.datasheet,
        },
        "timing": inp.timing,
        "totals": {
            "flops": flops,
            "flops_by_kind": dict(by_kind),
            "bytes": bytes_read + bytes_written,
            "bytes_read": bytes_read,
            "bytes_written": bytes_written,
            "ops": len(records),
            "intensity_flop_per_byte": got.intensity_flop_per_byte,
            "dominant_dtype": dtype,
            "attained_flops_per_s": got.attained_flops_per_s,
            "attained_bytes_per_s": got.attained_bytes_per_s,
            "flops_fraction": got.flops_fraction,
            "bandwidth_fraction": got.bandwidth_fraction,
            "roofline_efficiency": got.roofline_efficiency,
            "bytes_method": roofline.BYTES_METHOD,
        },
        "verdict": {
            "regime": verdict.regime,
            "summary": verdict.summary,
            "reasons": verdict.reasons,
            "levers": verdict.levers,
            "notes": verdict.notes,
            "near_roof": near_roof,
        },
        "lines": lines[: inp.top_lines],
        "syncs": syncs,
        "kernels": {
            "device": device,
            "profiled_calls": clean.calls,
            "per_call": clean.kernels_per_call if device == "cuda" else clean.ops_per_call,
            "median_us": percentile(kernel_times, 0.5) if kernel_times else None,
            "p90_us": percentile(kernel_times, 0.9) if kernel_times else None,
            "short_fraction": (sum(1 for t in kernel_times if t < short_limit) / len(kernel_times)) if kernel_times else None,
            "busy_fraction": clean.busy_fraction,
            "idle_us": max(0.0, clean.wall_us - clean.busy_us),
            "gaps": {"count": clean.gaps_count, "total_us": clean.gaps_total_us, "largest_us": clean.gaps_largest_us},
            "ops_per_call": clean.ops_per_call,
            "median_op_us": median_or_none(clean.op_durations_us),
            "overhead_fraction": clean.overhead_fraction,
            "host_blocked_us": clean.host_blocked_us,
            "transfer_us": clean.transfer_us,
            "top": clean.top_kernels,
        },
        "top_ops": clean.top_ops,
        "environment": inp.environment,
    })
    if inp.program is not None:
        result["program"] = inp.program
    return result
