"""Measured device ceilings: a matmul rate per dtype and a bandwidth per memory level.

Protocol (docs/profiling.md, "Ceilings"):
- Every figure converges: one warm-up call, then samples until the best three agree within
  `CONVERGED_SPREAD` (or the figure's share of the budget runs out). A ceiling is the best
  sample (what the machine can reach); `spread` = third-best / best - 1 is recorded beside it,
  and `converged` says whether the tolerance was met.
- Compute: `torch.mm(a, b, out=c)`, 2 n^3 FLOPs, per dtype the device supports (CPU: float64,
  float32, bfloat16, float16; GPU: also tf32 and int8 through `torch._int_mm`). n climbs a
  ladder of sizes, each measured to convergence, until the rate stops rising (the plateau) or
  one call gets too long for the budget; the ceiling is the best size's converged rate, so a
  size is never picked from one noisy sample.
- Bandwidth: a triad `torch.add(b, c, alpha=2, out=a)` (3 x bytes) over working sets that
  double from 48 KiB (CPU) / 3 MiB (GPU) until the bandwidth has settled below its peak (main
  memory). Plateaus of that sweep are the memory levels (`levels`), named from the largest
  down: DRAM (device memory on a GPU), then LLC, L2, L1 on a CPU, L2 on a GPU. The sweep is
  measured, not read from sysfs (VMs report the host's whole L3). Small working sets are
  dispatch-bound before they are cache-bound (a torch op costs ~1 µs on a CPU): the sizes
  before the sweep's peak are recorded but belong to no level.
- Everything runs within a budget (`DEFAULT_BUDGET_S` of measuring); the file records when,
  versions, load average, spread and the sweep. Ceilings are measured by `perflsp peaks`
  (or `profile --refresh-peaks`), and by a profile only when none exist for the device:
  never re-measured behind the user's back.
- CUDA: events for the clock, tf32/int8 guarded; tested with fakes only (no GPU in CI).
"""
from __future__ import annotations

import datetime
import hashlib
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from perflsp.profile_result import write_json_atomic
from perflsp.runtime import env

PEAKS_FORMAT = 2  # 2: per-dtype ladders, memory levels, spread, load; format 1 files count as absent
DEFAULT_BUDGET_S = 6.0
CONVERGED_SPREAD = 0.05
MIN_SAMPLES = 4
MAX_SAMPLES = 40
SAMPLE_MIN_S = 2e-4  # a sample repeats short calls until it lasts this long: timer and jitter are small beside it
MATMUL_SIZES = {"cpu": (128, 256, 512, 1024, 2048), "cuda": (2048, 4096, 8192)}
ROUNDS_MAX = 4  # whole re-measurements, apart in time: a sustained load shows up as rounds that disagree
FIRST_ROUND_SHARE = 0.6  # of the budget; later rounds share the rest
MATMUL_MAX_CALL_S = 0.03  # a dtype the CPU emulates stops climbing here: larger sizes would eat the budget
PLATEAU_GAIN = 0.10  # a size that is not 10% faster than the best so far: the plateau is reached
SWEEP_START_BYTES = {"cpu": 16 << 10, "cuda": 1 << 20}  # per array; the working set is 3 arrays
SWEEP_MAX_BYTES = {"cpu": 256 << 20, "cuda": 1 << 30}
SWEEP_MIN_SETTLED_BYTES = {"cpu": 96 << 20, "cuda": 384 << 20}  # working sets below this may still be cached
LEVEL_DROP = 0.20  # bandwidth this far below a plateau's best starts the next level
SWEEP_SHARE = 0.35  # of the budget, for the bandwidth sweep; the rest for the matmul ladders
CPU_LEVEL_NAMES = ("LLC", "L2", "L1")  # cache plateaus, counted back from main memory
GPU_LEVEL_NAMES = ("L2",)


def cache_dir() -> Path:
    """`$PERFLSP_CACHE_DIR`, else the platform's user cache folder + `perflsp`."""
    override = os.environ.get("PERFLSP_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "perflsp"
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "perflsp" / "Cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perflsp"


def cache_key(device: Dict[str, Any], torch_version: str, cuda_version: Optional[str]) -> str:
    """One file per device + torch (+ CUDA) version; CPU peaks also depend on the thread count."""
    parts = [device["kind"], device["name"]]
    if device["kind"] == "cuda":
        parts += [f"cc{device['compute_capability']}", f"cuda{cuda_version}"]
    else:
        parts.append(f"{device['threads']}threads")
    parts.append(f"torch{torch_version}")
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", "-".join(str(p) for p in parts)).strip("-")
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:8]
    return f"{readable[:100]}-{digest}"


def cache_path(key: str) -> Path:
    return cache_dir() / "peaks" / f"{key}.json"


def load_cached(key: str) -> Optional[Dict[str, Any]]:
    """The stored ceilings, or None when absent, unreadable, for another key or another format."""
    import json

    try:
        with cache_path(key).open(encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != PEAKS_FORMAT or data.get("key") != key:
        return None
    return data


def save(peaks: Dict[str, Any]) -> Path:
    return write_json_atomic(cache_path(peaks["key"]), peaks)


def ceilings_id(peaks: Dict[str, Any]) -> str:
    """Names one measurement: two results with the same id were judged against the same ceilings."""
    stamp = f"{peaks['key']}|{peaks['measured_at']}|{peaks['bandwidth_bytes_per_s']}|{sorted(peaks['compute_flops_per_s'].items())}"
    return hashlib.sha256(stamp.encode()).hexdigest()[:12]


class _Clock:
    """Times one callable: CUDA events on the GPU (synchronize once per sample), else perf_counter."""

    def __init__(self, device: str):
        self.device = device
        if device == "cuda":
            import torch

            self._torch = torch

    def once(self, fn: Callable[[], Any]) -> float:
        if self.device != "cuda":
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        start = self._torch.cuda.Event(enable_timing=True)
        end = self._torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


@dataclass
class Converged:
    best_s: float  # per call
    spread: float  # third-best / best - 1 (or the worst over the best with fewer samples)
    samples: int
    converged: bool


def _repeated(fn: Callable[[], Any], calls: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(calls):
            fn()
    return run


def converge(clock: _Clock, fn: Callable[[], Any], deadline: float, tolerance: float = CONVERGED_SPREAD) -> Converged:
    """Best per-call time of `fn`, sampled until the best three samples agree within `tolerance`.

    Stops early (unconverged) at `deadline`, but never with fewer than two samples."""
    first_s = max(clock.once(fn), 1e-9)  # warm-up, also sizes the samples
    calls = max(1, min(10_000, int(SAMPLE_MIN_S / first_s)))
    sample = _repeated(fn, calls)
    times: List[float] = []
    while True:
        times.append(clock.once(sample) / calls)
        ranked = sorted(times)
        spread = ranked[min(2, len(ranked) - 1)] / ranked[0] - 1
        if len(times) >= MIN_SAMPLES and spread <= tolerance:
            return Converged(ranked[0], spread, len(times), True)
        out_of_time = time.perf_counter() + ranked[0] * calls > deadline
        if len(times) >= MAX_SAMPLES or (out_of_time and len(times) >= 2):
            return Converged(ranked[0], spread, len(times), False)


# --- compute ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatmulPlan:
    key: str  # ceiling key: float32, tf32, bfloat16, ...
    dtype: str  # torch dtype name
    tf32: Optional[bool] = None  # CUDA only: force TF32 matmuls on or off
    int_mm: bool = False  # int8 x int8 -> int32 through torch._int_mm


def matmul_plan(device: str, compute_capability: Optional[str]) -> List[MatmulPlan]:
    if device != "cuda":
        return [MatmulPlan("float64", "float64"), MatmulPlan("float32", "float32"),
                MatmulPlan("bfloat16", "bfloat16"), MatmulPlan("float16", "float16")]
    major = int((compute_capability or "0").split(".")[0])
    plan = [MatmulPlan("float64", "float64"), MatmulPlan("float32", "float32", tf32=False)]
    if major >= 8:
        plan.append(MatmulPlan("tf32", "float32", tf32=True))
    plan += [MatmulPlan("bfloat16", "bfloat16"), MatmulPlan("float16", "float16")]
    if major >= 8:
        plan.append(MatmulPlan("int8", "int8", int_mm=True))
    return plan


def _operands(device: str, plan: MatmulPlan, n: int) -> Callable[[], Any]:
    """One n x n x n matmul in the plan's dtype."""
    import torch

    dtype = getattr(torch, plan.dtype)
    if plan.int_mm:
        a = torch.randint(-8, 8, (n, n), device=device, dtype=torch.int8)
        b = torch.randint(-8, 8, (n, n), device=device, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=c)


def supported(device: str, plan: MatmulPlan) -> Optional[str]:
    """None if this device runs the plan's matmul, else why not."""
    try:
        call = _operands(device, plan, 32)
        call()
    except (RuntimeError, TypeError, AttributeError, NotImplementedError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    return None


def matmul_ladder(device: str, plan: MatmulPlan, clock: _Clock, deadline: float,
                  sizes: Tuple[int, ...]) -> List[Dict[str, Any]]:
    """Converged rate at each size, climbing until the plateau, a too-long call or the deadline."""
    points: List[Dict[str, Any]] = []
    best_rate = 0.0
    for n in sizes:
        if points and time.perf_counter() + (MIN_SAMPLES + 1) * 8 * points[-1]["call_s"] > deadline:
            break  # doubling n is 8x the work: the next size would not converge in time
        call = _operands(device, plan, n)
        got = converge(clock, call, deadline)
        rate = 2.0 * n ** 3 / got.best_s
        points.append({"n": n, "flops_per_s": rate, "spread": got.spread, "samples": got.samples,
                       "converged": got.converged, "call_s": got.best_s})
        plateau = len(points) >= 2 and rate < best_rate * (1 + PLATEAU_GAIN) and best_rate > 0
        best_rate = max(best_rate, rate)
        if got.best_s > MATMUL_MAX_CALL_S or plateau:
            break
    return points


def _best(points: List[Dict[str, Any]], rate_key: str) -> Dict[str, Any]:
    return max(points, key=lambda p: p[rate_key])


def _with_tf32(plan: MatmulPlan, fn: Callable[[], Any]) -> Any:
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    if plan.tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = plan.tf32
    try:
        return fn()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def measure_compute(device: str, clock: _Clock, plans: List[MatmulPlan], deadline: float,
                    on_step: Callable[[str], None]) -> Dict[str, Any]:
    """{"ladders": {key: points}, "skipped": {key: why}} over the plans this device supports."""
    out: Dict[str, Any] = {"ladders": {}, "skipped": {}}
    sizes = MATMUL_SIZES[device]
    for i, plan in enumerate(plans):
        on_step(f"{plan.key} matmul")
        why_not = _with_tf32(plan, lambda: supported(device, plan))
        if why_not is not None:
            out["skipped"][plan.key] = why_not
            continue
        # The time left is shared by the dtypes still to measure, so a fast one leaves more to the rest.
        share_deadline = time.perf_counter() + (deadline - time.perf_counter()) / (len(plans) - i)
        out["ladders"][plan.key] = _with_tf32(plan, lambda: matmul_ladder(device, plan, clock, share_deadline, sizes))
    return out


def recheck_compute(device: str, clock: _Clock, plans: List[MatmulPlan], ladders: Dict[str, List[Dict[str, Any]]],
                    deadline: float) -> Dict[str, float]:
    """Each dtype's rate again at its best size: {key: FLOP/s}, for the dtypes time allowed."""
    rates: Dict[str, float] = {}
    measured = [plan for plan in plans if plan.key in ladders]
    for i, plan in enumerate(measured):
        n = _best(ladders[plan.key], "flops_per_s")["n"]
        share_deadline = time.perf_counter() + (deadline - time.perf_counter()) / (len(measured) - i)
        call = _operands(device, plan, n)
        got = _with_tf32(plan, lambda: converge(clock, call, share_deadline))
        rates[plan.key] = 2.0 * n ** 3 / got.best_s
    return rates


# --- bandwidth --------------------------------------------------------------------------------

def _sweep_limit_bytes(device: str) -> int:
    import torch

    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return min(SWEEP_MAX_BYTES["cuda"], free // 8)
    memory = env.physical_memory_bytes()
    return min(SWEEP_MAX_BYTES["cpu"], memory // 16) if memory else SWEEP_MAX_BYTES["cpu"]


def _settled(points: List[Dict[str, Any]], device: str) -> bool:
    """Main memory reached: past the smallest size any current last-level cache could hold, the
    last three sizes agree, well below the sweep's peak."""
    if len(points) < 3 or points[-1]["working_set_bytes"] < SWEEP_MIN_SETTLED_BYTES[device]:
        return False
    peak = max(p["bytes_per_s"] for p in points)
    last = [p["bytes_per_s"] for p in points[-3:]]
    return max(last) < (1 - LEVEL_DROP) * peak and min(last) >= (1 - LEVEL_DROP / 2) * max(last)


def _triad(a: Any, b: Any, c: Any, n: int) -> Callable[[], Any]:
    import torch

    av, bv, cv = a[:n], b[:n], c[:n]
    return lambda: torch.add(bv, cv, alpha=2.0, out=av)


def _point(working_set_bytes: int, got: Converged) -> Dict[str, Any]:
    return {"working_set_bytes": working_set_bytes, "bytes_per_s": working_set_bytes / got.best_s,
            "call_us": got.best_s * 1e6, "spread": got.spread, "converged": got.converged}


def disturbed(points: List[Dict[str, Any]]) -> List[int]:
    """Indices of sweep points slower per call than a larger working set: more bytes never take
    less time, so such a point was measured while something else held the cores (on a loaded
    2-core machine an op's second thread can wait a whole scheduler slice, ~8 ms)."""
    out = []
    for i, p in enumerate(points):
        if any(q["call_us"] < p["call_us"] for q in points[i + 1:]):
            out.append(i)
    return out


def bandwidth_sweep(device: str, clock: _Clock, deadline: float) -> List[Dict[str, Any]]:
    """Triad bandwidth at working sets doubling until main memory is reached (or the deadline).

    The buffers are allocated once at the largest size; each step uses views of their start
    and first writes the new part, so a step never pays page faults inside its samples. Points
    that break the sweep's order (see `disturbed`) are measured again once the sweep is done."""
    import torch

    limit = _sweep_limit_bytes(device)
    elements = limit // 4
    a = torch.empty(elements, dtype=torch.float32, device=device)
    b = torch.empty(elements, dtype=torch.float32, device=device)
    c = torch.empty(elements, dtype=torch.float32, device=device)
    points: List[Dict[str, Any]] = []
    ready = 0
    size = SWEEP_START_BYTES[device]
    while size <= limit:
        n = size // 4
        for buffer in (a, b, c):
            buffer[ready:n].fill_(1.0)  # real numbers (no denormals) and touched pages
        ready = n
        got = converge(clock, _triad(a, b, c, n), deadline)
        points.append(_point(3 * size, got))
        if _settled(points, device) or time.perf_counter() + 8 * 2 * got.best_s * MIN_SAMPLES > deadline:
            break
        size *= 2
    for i in disturbed(points):
        if time.perf_counter() + 10 * points[i]["call_us"] / 1e6 > deadline:
            break
        again = _point(points[i]["working_set_bytes"],
                       converge(clock, _triad(a, b, c, points[i]["working_set_bytes"] // 12), deadline))
        points[i] = min(points[i], again, key=lambda p: p["call_us"])
    del a, b, c
    return points


def memory_levels(points: List[Dict[str, Any]], device: str) -> List[Dict[str, Any]]:
    """Plateaus of the sweep, smallest first: {name, from_bytes, to_bytes, bandwidth_bytes_per_s, spread}.

    Sizes before the sweep first comes near its peak are dispatch-bound, and sizes alone between
    two plateaus are transitions (the data half fits): neither makes a level. The largest
    plateau is main memory."""
    if not points:
        return []
    peak = max(p["bytes_per_s"] for p in points)
    start = next(i for i, p in enumerate(points) if p["bytes_per_s"] >= (1 - LEVEL_DROP) * peak)
    runs: List[List[Dict[str, Any]]] = []
    for p in points[start:]:
        if runs and p["bytes_per_s"] >= (1 - LEVEL_DROP) * max(q["bytes_per_s"] for q in runs[-1]):
            runs[-1].append(p)
        else:
            runs.append([p])
    plateaus = [run for run in runs[:-1] if len(run) >= 2] + [runs[-1]]
    names = GPU_LEVEL_NAMES if device == "cuda" else CPU_LEVEL_NAMES
    memory_name = "device memory" if device == "cuda" else "DRAM"
    levels = []
    for i, run in enumerate(plateaus):
        back = len(plateaus) - 2 - i  # 0 for the cache just above main memory
        name = memory_name if i == len(plateaus) - 1 else (names[back] if back < len(names) else f"cache {i + 1}")
        top = _best(run, "bytes_per_s")
        levels.append({"name": name, "from_bytes": run[0]["working_set_bytes"], "to_bytes": run[-1]["working_set_bytes"],
                       "bandwidth_bytes_per_s": top["bytes_per_s"], "spread": top["spread"]})
    if len(levels) == 1:  # the sweep never left one plateau (budget, or no cache effect): that is all we know
        levels[0]["name"] = memory_name
    return levels


def level_for(levels: List[Dict[str, Any]], working_set_bytes: Optional[float]) -> Optional[Dict[str, Any]]:
    """The level a working set runs from: the last whose plateau starts at or below it.

    A working set between two plateaus is judged against the faster one (partly cached data
    can beat main memory); one smaller than every plateau against the first (the smallest
    sizes are dispatch-bound, not faster)."""
    if not levels:
        return None
    if working_set_bytes is None:
        return levels[-1]
    chosen = levels[0]
    for level in levels:
        if level["from_bytes"] <= working_set_bytes:
            chosen = level
    return chosen


# --- the whole measurement --------------------------------------------------------------------

def _merge_sweeps(first: List[Dict[str, Any]], second: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per working set, the faster of two sweeps."""
    by_size = {p["working_set_bytes"]: p for p in first}
    for p in second:
        known = by_size.get(p["working_set_bytes"])
        by_size[p["working_set_bytes"]] = p if known is None else min(known, p, key=lambda q: q["call_us"])
    return [by_size[size] for size in sorted(by_size)]


def _round_figures(levels: List[Dict[str, Any]], rates: Dict[str, float]) -> Dict[str, float]:
    figures = {f"bandwidth {level['name']}": level["bandwidth_bytes_per_s"] for level in levels}
    figures.update(rates)
    return figures


def rounds_agree(previous_best: Dict[str, float], latest: Dict[str, float], tolerance: float = 2 * CONVERGED_SPREAD) -> bool:
    """Every figure of the latest round within `tolerance` of the best of the rounds before it."""
    return all(key in previous_best and abs(value / previous_best[key] - 1) <= tolerance for key, value in latest.items())


def measure(device: str, budget_s: float = DEFAULT_BUDGET_S, on_step: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """Measure the ceilings of `device` ('cpu' or 'cuda') now, within about `budget_s` of measuring.

    A first round sweeps the bandwidth and climbs each dtype's ladder; later rounds, apart in
    time, measure the sweep and each dtype's best size again, until a round agrees with the
    best before it (a load that lasted a whole round shows up as a disagreement) or time runs out."""
    import torch

    import perflsp

    started = time.perf_counter()
    deadline = started + budget_s
    load_before = env.load_average_1m()
    desc = env.describe_device(device)
    clock = _Clock(device)
    plans = matmul_plan(device, desc.get("compute_capability"))
    first_end = started + FIRST_ROUND_SHARE * budget_s
    on_step("memory bandwidth")
    sweep = bandwidth_sweep(device, clock, started + SWEEP_SHARE * FIRST_ROUND_SHARE * budget_s)
    compute = measure_compute(device, clock, plans, first_end, on_step)
    rates = {key: _best(points, "flops_per_s")["flops_per_s"] for key, points in compute["ladders"].items()}
    best = _round_figures(memory_levels(sweep, device), rates)
    rounds = [dict(best)]
    converged = False
    while len(rounds) < ROUNDS_MAX and time.perf_counter() < deadline - 0.05 * budget_s:
        on_step(f"round {len(rounds) + 1}")
        round_end = time.perf_counter() + (deadline - time.perf_counter()) / (ROUNDS_MAX - len(rounds))
        sweep_again = bandwidth_sweep(device, clock, time.perf_counter() + SWEEP_SHARE * (round_end - time.perf_counter()))
        rates_again = recheck_compute(device, clock, plans, compute["ladders"], round_end)
        latest = _round_figures(memory_levels(sweep_again, device), rates_again)
        rounds.append(latest)
        converged = rounds_agree(best, latest)
        sweep = _merge_sweeps(sweep, sweep_again)
        rates = {key: max(rate, rates_again.get(key, 0.0)) for key, rate in rates.items()}
        best = _round_figures(memory_levels(sweep, device), rates)
        if converged:
            break
    if device == "cuda":
        torch.cuda.empty_cache()
    levels = memory_levels(sweep, device)
    cuda_version = torch.version.cuda if device == "cuda" else None
    ladders = compute["ladders"]
    return {
        "format": PEAKS_FORMAT,
        "key": cache_key(desc, torch.__version__, cuda_version),
        "device": desc,
        "torch": torch.__version__,
        "cuda": cuda_version,
        "python": platform.python_version(),
        "perflsp": perflsp.__version__,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "clock": "cuda-events" if device == "cuda" else "perf_counter",
        "protocol": {"converged_spread": CONVERGED_SPREAD, "min_samples": MIN_SAMPLES, "statistic": "best sample",
                     "rounds": len(rounds), "rounds_agree": converged},
        "budget_s": budget_s,
        "duration_s": time.perf_counter() - started,
        "load_average_1m": {"before": load_before, "after": env.load_average_1m()},
        "bandwidth_bytes_per_s": levels[-1]["bandwidth_bytes_per_s"],
        "levels": levels,
        "sweep": sweep,
        "compute_flops_per_s": rates,
        "compute_spread": {key: _spread_of(key, rates[key], rounds) for key in rates},
        "bandwidth_spread": {level["name"]: _spread_of(f"bandwidth {level['name']}", level["bandwidth_bytes_per_s"], rounds)
                             for level in levels},
        "matmul_n": {key: _best(points, "flops_per_s")["n"] for key, points in ladders.items()},
        "matmul_ladders": ladders,
        "skipped_dtypes": compute["skipped"],
        "rounds": rounds,
    }


def _spread_of(key: str, best: float, rounds: List[Dict[str, float]]) -> float:
    """1 - the second-best round / the best: how well another round confirmed the best (0: exactly).
    With one round, 0 (its own samples agreed within CONVERGED_SPREAD or it says so in `sweep`/ladders)."""
    seen = sorted((r[key] for r in rounds if key in r), reverse=True)
    top = max(best, seen[0]) if seen else best  # a level's plateau can shift when sweeps are merged
    return 1 - seen[1] / top if len(seen) >= 2 and top > 0 else 0.0


def get(device: str, refresh: bool = False, budget_s: float = DEFAULT_BUDGET_S,
        on_step: Callable[[str], None] = lambda s: None) -> Tuple[Dict[str, Any], str]:
    """(peaks, 'cache' | 'measured'): the stored ceilings for this device; measured only when
    asked to (`refresh`) or when none are stored (none, or an older format)."""
    import torch

    desc = env.describe_device(device)
    key = cache_key(desc, torch.__version__, torch.version.cuda if device == "cuda" else None)
    if not refresh:
        cached = load_cached(key)
        if cached is not None:
            return cached, "cache"
    peaks = measure(device, budget_s, on_step)
    save(peaks)
    return peaks, "measured"


def ceiling_for(peaks: Dict[str, Any], dtype: Optional[str], tf32_enabled: bool) -> Tuple[str, float, List[str]]:
    """(ceiling key, FLOP/s, notes) for a function whose dominant dtype is `dtype`."""
    rates: Dict[str, float] = peaks["compute_flops_per_s"]
    notes: List[str] = []
    key = dtype or "float32"
    if key == "float32" and tf32_enabled and "tf32" in rates:
        key = "tf32"
    if key not in rates:
        notes.append(f"no measured {key} ceiling on this device; float32's is used")
        key = "float32"
    return key, rates[key], notes
