"""Measured device ceilings: peak memory bandwidth and peak matmul rate per dtype.

- Bandwidth: a device copy (`dst.copy_(src)`, 2 x bytes moved) and a triad
  (`a = b + 2 c` with `out=`, 3 x bytes) on buffers well beyond the last-level cache (1 GiB each
  on a GPU, 4 x LLC on a CPU, within 64-512 MiB); the ceiling is the better of the two.
- Compute: `torch.mm(a, b, out=c)`, 2 n^3 FLOPs, per dtype: float32 (TF32 forced off), tf32
  (on GPUs of compute capability >= 8.0), bfloat16 and float16 on GPUs (n = 8192); on CPUs
  float32 and bfloat16, with n grown until one call is long enough to time.
- Best run, not median: a machine's ceiling is what it can reach. CUDA events on the GPU,
  `perf_counter` on the CPU. Outputs are preallocated so page faults are not measured.
- Everything runs within a time budget (default 3 s of measuring) and is cached per device and
  torch version in the user cache dir, so `perflsp profile` pays for it once.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from perflsp.profile_result import write_json_atomic
from perflsp.runtime import env

PEAKS_FORMAT = 1
DEFAULT_BUDGET_S = 3.0
GPU_MATMUL_N = 8192
GPU_BUFFER_BYTES = 1 << 30
CPU_MATMUL_MAX_N = 4096
CPU_BUFFER_MIN_BYTES = 64 << 20
CPU_BUFFER_MAX_BYTES = 512 << 20


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
    import json

    try:
        with cache_path(key).open(encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if data.get("format") != PEAKS_FORMAT or data.get("key") != key:
        return None
    return data


def save(peaks: Dict[str, Any]) -> Path:
    return write_json_atomic(cache_path(peaks["key"]), peaks)


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


def best_time(clock: _Clock, fn: Callable[[], Any], budget_s: float, min_reps: int = 3, max_reps: int = 50) -> float:
    """Best of repeated calls after one warm-up call, within `budget_s` (but at least min_reps)."""
    clock.once(fn)
    deadline = time.perf_counter() + budget_s
    best = float("inf")
    reps = 0
    while reps < min_reps or (time.perf_counter() < deadline and reps < max_reps):
        best = min(best, clock.once(fn))
        reps += 1
    return best


def _bandwidth(device: str, budget_s: float, clock: _Clock) -> Dict[str, float]:
    import torch

    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        buffer_bytes = min(GPU_BUFFER_BYTES, free // 8)
    else:
        llc = env.last_level_cache_bytes() or (32 << 20)
        buffer_bytes = min(max(4 * llc, CPU_BUFFER_MIN_BYTES), CPU_BUFFER_MAX_BYTES)
        memory = env.physical_memory_bytes()
        if memory:
            buffer_bytes = min(buffer_bytes, memory // 16)
    n = buffer_bytes // 4
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.ones(n, dtype=torch.float32, device=device)
    c = torch.ones(n, dtype=torch.float32, device=device)
    a.zero_()  # touch every page before timing
    copy_s = best_time(clock, lambda: a.copy_(b), budget_s / 2)
    triad_s = best_time(clock, lambda: torch.add(b, c, alpha=2.0, out=a), budget_s / 2)
    del a, b, c
    return {
        "copy_bytes_per_s": 2 * n * 4 / copy_s,
        "triad_bytes_per_s": 3 * n * 4 / triad_s,
        "buffer_bytes": float(n * 4),
    }


def _matmul_rate(device: str, dtype: Any, budget_s: float, clock: _Clock, fixed_n: Optional[int],
                 max_n: int = CPU_MATMUL_MAX_N, target_call_s: float = 0.05) -> Tuple[float, int]:
    """(best FLOP/s, the n it was reached at).

    GPU: one size (n = 8192 saturates every current part). CPU: sizes from 256 doubling until a
    call takes `target_call_s` (or the budget runs short), each timed best-of within its share
    of the budget: on a CPU a mid-sized matmul that fits the caches can beat a large one, and
    the ceiling is the best any size reaches.
    """
    import torch

    sizes = [fixed_n] if fixed_n is not None else []
    if fixed_n is None:
        n = 256
        while n <= max_n:
            sizes.append(n)
            n *= 2
    started = time.perf_counter()
    best_rate, best_n = 0.0, sizes[0]
    for i, n in enumerate(sizes):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        call = lambda: torch.mm(a, b, out=c)  # noqa: E731
        remaining = budget_s - (time.perf_counter() - started)
        share = remaining / (len(sizes) - i) if fixed_n is None else remaining
        seconds = best_time(clock, call, max(share, 0.0), min_reps=2 if fixed_n is None else 3)
        if 2.0 * n ** 3 / seconds > best_rate:
            best_rate, best_n = 2.0 * n ** 3 / seconds, n
        next_call_s = 8 * seconds  # doubling n is 8x the work
        if fixed_n is None and (seconds >= target_call_s or time.perf_counter() - started + 4 * next_call_s > budget_s):
            break  # long enough to time, or the next size would not fit a few repetitions
    return best_rate, best_n


def measure(device: str, budget_s: float = DEFAULT_BUDGET_S, on_step: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """Measure the ceilings of `device` ('cpu' or 'cuda') now."""
    import torch

    started = time.perf_counter()
    desc = env.describe_device(device)
    clock = _Clock(device)
    on_step("memory bandwidth")
    bandwidth = _bandwidth(device, budget_s * 0.3, clock)

    rates: Dict[str, float] = {}
    sizes: Dict[str, int] = {}
    if device == "cuda":
        major = int(desc["compute_capability"].split(".")[0])
        plan: List[Tuple[str, Any, Optional[bool]]] = [("float32", torch.float32, False)]
        if major >= 8:
            plan.append(("tf32", torch.float32, True))
        plan += [("bfloat16", torch.bfloat16, None), ("float16", torch.float16, None)]
        share = 0.7 / len(plan)
        saved_tf32 = torch.backends.cuda.matmul.allow_tf32
        try:
            for key, dtype, tf32 in plan:
                on_step(f"{key} matmul")
                if tf32 is not None:
                    torch.backends.cuda.matmul.allow_tf32 = tf32
                rates[key], sizes[key] = _matmul_rate(device, dtype, budget_s * share, clock, GPU_MATMUL_N)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        torch.cuda.empty_cache()
    else:
        on_step("float32 matmul")
        rates["float32"], sizes["float32"] = _matmul_rate(device, torch.float32, budget_s * 0.5, clock, None)
        # bfloat16 GEMM is emulated on many CPUs (orders of magnitude slower): small sizes only.
        on_step("bfloat16 matmul")
        rates["bfloat16"], sizes["bfloat16"] = _matmul_rate(device, torch.bfloat16, budget_s * 0.2, clock, None,
                                                            max_n=1024, target_call_s=0.02)

    cuda_version = torch.version.cuda if device == "cuda" else None
    return {
        "format": PEAKS_FORMAT,
        "key": cache_key(desc, torch.__version__, cuda_version),
        "device": desc,
        "torch": torch.__version__,
        "cuda": cuda_version,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "clock": "cuda-events" if device == "cuda" else "perf_counter",
        "budget_s": budget_s,
        "duration_s": time.perf_counter() - started,
        "bandwidth_bytes_per_s": max(bandwidth["copy_bytes_per_s"], bandwidth["triad_bytes_per_s"]),
        "bandwidth": bandwidth,
        "compute_flops_per_s": rates,
        "matmul_n": sizes,
    }


def get(device: str, refresh: bool = False, budget_s: float = DEFAULT_BUDGET_S,
        on_step: Callable[[str], None] = lambda s: None) -> Tuple[Dict[str, Any], str]:
    """(peaks, 'cache' | 'measured'): the cached ceilings for this device, measured if missing."""
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
