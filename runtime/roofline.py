"""The verdict: which ceiling a function (or a line) is under, because of what, and the lever.

Pure arithmetic on measured figures (no torch), in this order of precedence:

1. sync-bound (GPU): the host is blocked in synchronisations for >= 20% of the call and the
   device sits idle for >= 20% of it. A big GEMM followed by one `.item()` blocks the host for
   most of the call too, but the device is busy throughout: that stays compute-bound.
2. transfer-bound (GPU): host<->device copies plus ops on CPU tensors take >= 20% of the call
   (and more of it than the blocked time, when both apply).
3. overhead-bound: GPU busy < 50% of the call (launch overhead, Python between kernels); on CPU,
   >= 50% of the call spent outside ops of at least 20 µs (dispatcher, Python, tiny ops).
4. compute-bound when the call's FLOPs are mostly matmul-family (>= 80%) and its intensity is
   that of a matrix-matrix product (>= 2 FLOP/B): such a step stays on the compute side whatever
   the ceilings measured, never memory- or latency-bound; far below the peak, a note and levers say
   the matmuls are too small. (A matrix-vector product, AI <= 1 FLOP/B, goes on to the roofline.)
5. latency-bound (as Nsight Compute's speed-of-light rule): neither the compute nor the memory
   throughput reaches LATENCY_FRACTION of its ceiling, measured on the fastest timed call: a busy
   machine only makes calls slower, so a call that is far from both roofs even at its fastest is
   far from them (the fastest tenth, p10, was used first: a load that lasts the whole timing
   window moved it 50x and flipped softmax between memory- and latency-bound; one quiet moment in
   the window is enough for the fastest call). The time goes to latency (dependent steps, too little
   parallel work per op, a slow kernel), not to moving bytes or to arithmetic.
6. otherwise the roofline (Williams et al. 2009): arithmetic intensity (FLOP/byte) below the
   ridge point peak_flops / peak_bandwidth is memory-bound, above it compute-bound; the
   attained fraction is measured against the ceiling that binds. A memory-bound call whose bytes
   already equal its working set (each byte read or written once) gets no fuse / avoid-copies
   levers: there is no traffic to remove, only fewer bytes (precision) or more bandwidth.

LATENCY_FRACTION, chosen from measurements on the 2-core CI VM (torch 2.13, 2 threads): a plain
streaming add of 192 MB reached 15-25% of the measured DRAM ceiling (median to best call), a copy
and layer_norm/softmax of 34 MB 1-4% (the issue's runs: 4-10%). 0.20 would call the add
latency-bound on a median call; 0.10 on the fastest call leaves a margin of about 2x to either side.
On a GPU a streaming kernel of a few MB reaches 50-90% of HBM and a latency-bound one (a few
thousand threads, one wave) under 10%: 0.20 there, as the old "under-occupied" note's 10% plus
margin (Nsight Compute's own cut, 60%, is for hardware counters, not analytic FLOP/byte estimates).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from perflsp import units

SYNC_BLOCKED_SHARE = 0.20
SYNC_IDLE_SHARE = 0.20
TRANSFER_SHARE = 0.20
OVERHEAD_SHARE = 0.50
LATENCY_FRACTION = {"cuda": 0.20, "cpu": 0.10}  # neither roof reaches this: latency-bound (see above)
MATMUL_DOMINANT = 0.80  # share of the FLOPs in matmul-family ops that keeps a call on the compute side
MATMUL_MIN_INTENSITY = 2.0  # FLOP/B; below it a matmul-heavy call is matrix-vector (memory-side) work
READ_ONCE_SLACK = 1.05  # bytes within 5% of the working set: every byte moved once
SHORT_OP_US = {"cuda": 10.0, "cpu": 20.0}
NEAR_ROOF = 0.80  # of the applicable ceiling: little is left to gain in the function itself

BYTES_METHOD = ("estimate: distinct storage bytes each op reads and writes (views 0, broadcast "
                "dims once); no cache reuse, fused kernels over-counted, GEMM tiling re-reads not "
                "counted; only hardware counters (Nsight Compute dram__bytes) measure real traffic")

LEVERS = {
    ("sync-bound", "cuda"): [
        "keep values on the device: accumulate losses and metrics in tensors, read them once every N steps",
        "replace .item()/.cpu()/`if tensor:` inside the loop with tensor ops",
        "copy to pinned host memory with non_blocking=True instead of blocking copies",
        "remove explicit torch.cuda.synchronize() calls from the hot path",
    ],
    ("transfer-bound", "cuda"): [
        "create tensors on the device (device=...) instead of copying them there each call",
        "move the CPU ops onto the device",
        "pin host memory and copy with non_blocking=True so copies overlap compute",
    ],
    ("overhead-bound", "cuda"): [
        "torch.compile to fuse the small kernels",
        "CUDA graphs (torch.compile(mode='reduce-overhead')) to remove per-kernel launch cost",
        "batch the small ops: one op over a stacked tensor instead of a loop",
    ],
    ("overhead-bound", "cpu"): [
        "vectorise: one op over a batch instead of a Python loop of small ops",
        "torch.compile to fuse the small ops",
        "move Python work out of the hot path",
    ],
    ("memory-bound", "cuda"): [
        "fuse elementwise ops (torch.compile) so intermediates never go to memory",
        "use a lower-precision dtype (bfloat16) to move fewer bytes",
        "avoid copies in the hot path: .contiguous(), .to(), .clone(), dtype conversions",
    ],
    ("memory-bound", "cpu"): [
        "fuse elementwise ops (torch.compile) so intermediates stay in cache",
        "avoid copies in the hot path: .contiguous(), .to(), .clone(), dtype conversions",
        "write into preallocated outputs (out=) to avoid page faults on fresh buffers",
    ],
    ("latency-bound", "cuda"): [
        "more work per launch: a larger batch, or one op over stacked tensors instead of several small ones",
        "occupancy: shapes that give every SM several blocks (bigger batch/hidden sizes); check with Nsight "
        "Compute (sm__throughput, achieved occupancy)",
        "a better kernel: torch.compile(mode='max-autotune'), the fused SDPA/cuDNN paths, a contiguous layout",
    ],
    ("latency-bound", "cpu"): [
        "more work per call: a larger batch, or one op over stacked tensors instead of several small ones",
        "threads: torch.set_num_threads(<physical cores>) and nothing else competing for them "
        "(see torch.get_num_threads())",
        "a better kernel: torch.compile, a contiguous (or channels_last) layout, a dtype with a fast CPU path",
    ],
    ("compute-bound", "cuda"): [
        "use tensor cores: bfloat16/float16 (torch.autocast)",
        "shapes that are multiples of 8/16 so tensor-core tiles are full",
    ],
    ("compute-bound", "cpu"): [
        "the arithmetic dominates: do less of it (smaller/fewer matmuls) or use more threads (torch.set_num_threads)",
        "lower precision only where the CPU has native support (AMX / AVX512-BF16)",
    ],
}
# Memory-bound, but the call already moves each byte once: nothing to fuse or copy away.
READ_ONCE_LEVERS = {
    "cuda": ["use a lower-precision dtype (bfloat16) to move fewer bytes",
             "more work per launch (a larger batch) if the kernels are short: bandwidth needs many bytes in flight"],
    "cpu": ["use a lower-precision dtype (bfloat16) to move fewer bytes",
            "threads: bandwidth per core is limited; torch.set_num_threads(<physical cores>)"],
}
SMALL_MATMUL_LEVERS = {
    "cuda": "bigger matmuls: batch several small ones (torch.bmm, a larger batch) so they fill the SMs",
    "cpu": "bigger matmuls: batch several small ones (torch.bmm, a larger batch) so each call keeps all cores busy",
}
TF32_LEVER = "enable TF32 for float32 matmuls: torch.set_float32_matmul_precision('high')"


@dataclass(frozen=True)
class Ceilings:
    bandwidth_bytes_per_s: float
    peak_flops_per_s: float
    dtype_key: str  # which compute ceiling: float32, tf32, bfloat16, ...
    level: str = "DRAM"  # the memory level whose bandwidth this is (where the working set fits)

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s


@dataclass
class Site:
    """A place to name in a reason: "`.item()` at line 42"."""

    label: str
    us: float


@dataclass
class CallFigures:
    """Everything the function-level verdict needs, per call."""

    device: str  # "cuda" | "cpu"
    median_us: float  # timed pass
    flops: float
    bytes: float
    wall_us: float  # clean profiled pass: call start until its device work is done
    overhead_fraction: float
    busy_fraction: float
    kernels_per_call: float
    median_kernel_us: Optional[float]
    ops_per_call: float
    median_op_us: Optional[float]
    host_blocked_us: float = 0.0
    transfer_us: float = 0.0  # host<->device memcpy time
    cpu_fallback_us: float = 0.0  # host time of ops on CPU tensors in a GPU function
    sync_sites: List[Site] = field(default_factory=list)
    transfer_sites: List[Site] = field(default_factory=list)
    tf32_enabled: bool = False
    dominant_dtype: Optional[str] = None
    min_us: Optional[float] = None  # the fastest timed call: the latency test uses it
    matmul_flops: float = 0.0  # FLOPs of matmul-family ops (mm, bmm, conv, SDPA, mv, ...)
    working_set_bytes: Optional[float] = None  # distinct storage bytes one call touches


@dataclass
class Attained:
    intensity_flop_per_byte: Optional[float]
    attained_flops_per_s: float
    attained_bytes_per_s: float
    flops_fraction: Optional[float]
    bandwidth_fraction: Optional[float]
    roofline_efficiency: Optional[float]  # achieved FLOP/s over min(peak, bandwidth x AI)


@dataclass
class Verdict:
    regime: str
    summary: str
    reasons: List[str]
    levers: List[str]
    notes: List[str]


def intensity(flops: float, bytes_: float) -> Optional[float]:
    if bytes_ > 0:
        return flops / bytes_
    return None


def attained(flops: float, bytes_: float, seconds: float, ceilings: Ceilings) -> Attained:
    ai = intensity(flops, bytes_)
    flop_rate = flops / seconds if seconds > 0 else 0.0
    byte_rate = bytes_ / seconds if seconds > 0 else 0.0
    efficiency = None
    if ai is not None and flops > 0:
        attainable = min(ceilings.peak_flops_per_s, ceilings.bandwidth_bytes_per_s * ai)
        efficiency = flop_rate / attainable
    elif bytes_ > 0:
        efficiency = byte_rate / ceilings.bandwidth_bytes_per_s  # AI 0: only the bandwidth roof applies
    return Attained(
        intensity_flop_per_byte=ai,
        attained_flops_per_s=flop_rate,
        attained_bytes_per_s=byte_rate,
        flops_fraction=flop_rate / ceilings.peak_flops_per_s if flops > 0 else None,
        bandwidth_fraction=byte_rate / ceilings.bandwidth_bytes_per_s if bytes_ > 0 else None,
        roofline_efficiency=efficiency,
    )


def roofline_regime(flops: float, bytes_: float, ceilings: Ceilings) -> str:
    ai = intensity(flops, bytes_)
    if ai is None:
        return "compute-bound" if flops > 0 else "memory-bound"
    return "memory-bound" if ai < ceilings.ridge_flop_per_byte else "compute-bound"


def latency_fraction(device: str) -> float:
    return LATENCY_FRACTION["cuda" if device == "cuda" else "cpu"]


def matmul_dominated(flops: float, bytes_: float, matmul_flops: float) -> bool:
    """Mostly matmul-family FLOPs at matrix-matrix intensity: judged on the compute roof."""
    if flops <= 0 or matmul_flops < MATMUL_DOMINANT * flops:
        return False
    ai = intensity(flops, bytes_)
    return ai is None or ai >= MATMUL_MIN_INTENSITY


def nearest_roof(got: Attained) -> float:
    """The larger of the two attained fractions: how near the call comes to any roof."""
    return max(got.flops_fraction or 0.0, got.bandwidth_fraction or 0.0)


def work_regime(device: str, flops: float, bytes_: float, seconds: float, ceilings: Ceilings,
                matmul_flops: float = 0.0) -> str:
    """Steps 4-6 of the order above, for a call or a line: compute-bound (matmul-dominated),
    latency-bound (neither roof near), else the roofline's side of the ridge."""
    if matmul_dominated(flops, bytes_, matmul_flops):
        return "compute-bound"
    if seconds > 0 and (flops > 0 or bytes_ > 0):
        if nearest_roof(attained(flops, bytes_, seconds, ceilings)) < latency_fraction(device):
            return "latency-bound"
    return roofline_regime(flops, bytes_, ceilings)


def roof_fraction(regime: str, got: Attained) -> Optional[float]:
    """The attained fraction of the ceiling that binds `regime` (None: no roof binds it)."""
    if regime == "compute-bound":
        return got.flops_fraction
    if regime == "memory-bound":
        return got.bandwidth_fraction
    return None


def over_ceiling_notes(got: Attained, ceilings: Ceilings) -> List[str]:
    """Every attained fraction above 1, whatever the regime, with its possible reasons: no figure
    above its ceiling goes without one."""
    notes = []
    for fraction, ceiling in ((got.flops_fraction, f"the measured {ceilings.dtype_key} compute peak"),
                              (got.bandwidth_fraction, f"the measured {ceilings.level} bandwidth")):
        if fraction is not None and fraction > 1.0:
            notes.append(f"attained {units.percent(fraction)} of {ceiling}, above the ceiling: the FLOP/byte count "
                         "over-estimates (reuse within a smaller cache level, fused kernels), or the ceiling was "
                         "measured under load or is a few percent off (its spread); re-measure with `perflsp peaks`")
    return notes


def reads_once(bytes_: float, working_set_bytes: Optional[float]) -> bool:
    return bool(working_set_bytes) and bytes_ <= READ_ONCE_SLACK * working_set_bytes


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _sites(sites: List[Site], whole_us: float, limit: int = 3) -> str:
    ranked = sorted(sites, key=lambda s: -s.us)[:limit]
    return "; ".join(f"{s.label}: {units.percent(_share(s.us, whole_us))} of the call" for s in ranked)


def classify(fig: CallFigures, ceilings: Ceilings) -> Tuple[Verdict, Attained]:
    got = attained(fig.flops, fig.bytes, fig.median_us / 1e6, ceilings)
    levers_key_device = "cuda" if fig.device == "cuda" else "cpu"
    reasons: List[str] = []
    notes: List[str] = []
    blocked = _share(fig.host_blocked_us, fig.wall_us)
    idle = fig.overhead_fraction if fig.device == "cuda" else 0.0
    transfer = _share(fig.transfer_us + fig.cpu_fallback_us, fig.wall_us)

    syncing = fig.device == "cuda" and blocked >= SYNC_BLOCKED_SHARE and idle >= SYNC_IDLE_SHARE
    transferring = fig.device == "cuda" and transfer >= TRANSFER_SHARE
    # A big `.cpu()` blocks the host too; when copies and CPU ops outweigh the waiting, the
    # lever is to avoid the transfer, not the sync.
    if syncing and (not transferring or blocked > transfer):
        regime = "sync-bound"
        summary = (f"sync-bound: the host waits for the device {units.percent(blocked)} of the call "
                   f"while the device is idle {units.percent(idle)}")
        if fig.sync_sites:
            reasons.append(_sites(fig.sync_sites, fig.wall_us))
        reasons.append(f"{units.duration_us(fig.host_blocked_us)} blocked per call of {units.duration_us(fig.wall_us)}")
    elif transferring:
        regime = "transfer-bound"
        summary = (f"transfer-bound: host-device copies and ops on CPU tensors take "
                   f"{units.percent(transfer)} of the call")
        if fig.transfer_sites:
            reasons.append(_sites(fig.transfer_sites, fig.wall_us))
        reasons.append(f"copies {units.duration_us(fig.transfer_us)}, CPU ops {units.duration_us(fig.cpu_fallback_us)} per call")
    elif fig.overhead_fraction >= OVERHEAD_SHARE or (fig.flops == 0 and fig.bytes == 0):
        regime = "overhead-bound"
        if fig.device == "cuda":
            summary = (f"overhead-bound: the GPU is busy {units.percent(fig.busy_fraction)} of the call; "
                       f"{fig.kernels_per_call:.0f} kernels per call, median {units.duration_us(fig.median_kernel_us)}")
            reasons.append("the device waits for the host to launch work: launch overhead and Python between kernels")
        else:
            summary = (f"overhead-bound: {units.percent(fig.overhead_fraction)} of the call is outside tensor ops "
                       f"of >= 20 µs; {fig.ops_per_call:.0f} ops per call, median {units.duration_us(fig.median_op_us)}")
            reasons.append("dispatcher and Python overhead per op outweigh the work each op does")
        if fig.flops == 0 and fig.bytes == 0:
            reasons.append("no tensor work was counted in the call")
    else:
        fastest_s = (fig.min_us if fig.min_us and fig.min_us > 0 else fig.median_us) / 1e6
        regime = work_regime(fig.device, fig.flops, fig.bytes, fastest_s, ceilings, fig.matmul_flops)
        ai, ridge = got.intensity_flop_per_byte, ceilings.ridge_flop_per_byte
        ai_text = f"AI {units.intensity(ai)}" if ai is not None else "AI unbounded (no bytes counted)"
        limit = latency_fraction(fig.device)
        if regime == "memory-bound":
            summary = (f"memory-bound: {units.byte_rate(got.attained_bytes_per_s)} = "
                       f"{units.percent(got.bandwidth_fraction)} of the measured "
                       f"{units.byte_rate(ceilings.bandwidth_bytes_per_s)} ({ceilings.level}); {ai_text}, ridge {units.intensity(ridge)} "
                       f"({ceilings.dtype_key})")
        elif regime == "latency-bound":
            summary = (f"latency-bound: neither roof is near: {units.byte_rate(got.attained_bytes_per_s)} = "
                       f"{units.percent(got.bandwidth_fraction or 0.0)} of the measured "
                       f"{units.byte_rate(ceilings.bandwidth_bytes_per_s)} ({ceilings.level}) and "
                       f"{units.flop_rate(got.attained_flops_per_s)} = {units.percent(got.flops_fraction or 0.0)} of "
                       f"{units.flop_rate(ceilings.peak_flops_per_s)} {ceilings.dtype_key}; {ai_text}")
            reasons.append(f"below {units.percent(limit)} of both ceilings even in the fastest timed call: the "
                           "time goes to latency (dependent steps, too little parallel work per op, a slow kernel), "
                           "not to moving bytes or to arithmetic")
        else:
            summary = (f"compute-bound: {units.flop_rate(got.attained_flops_per_s)} = "
                       f"{units.percent(got.flops_fraction)} of the measured "
                       f"{units.flop_rate(ceilings.peak_flops_per_s)} {ceilings.dtype_key}; {ai_text}, "
                       f"ridge {units.intensity(ridge)}")
        reasons.append(f"{units.flops(fig.flops)} and {units.byte_count(fig.bytes)} per call in "
                       f"{units.duration_us(fig.median_us)}")
        if regime == "compute-bound" and matmul_dominated(fig.flops, fig.bytes, fig.matmul_flops):
            reasons.append(f"{units.percent(fig.matmul_flops / fig.flops)} of the FLOPs are in matmul-family ops: "
                           "judged on the compute roof")
            if ai is not None and ai < ridge:
                notes.append(f"intensity {units.intensity(ai)} is below the ridge ({units.intensity(ridge)}) of these "
                             "ceilings, but a matmul-dominated call is judged on the compute roof: its verdict does "
                             "not hang on how high the last `perflsp peaks` put the ridge")
        if regime == "compute-bound" and got.flops_fraction is not None and got.flops_fraction < limit:
            notes.append(f"the matmuls reach {units.percent(got.flops_fraction)} of the {ceilings.dtype_key} peak: "
                         "too small (or too few) to keep the device busy")
        if regime in ("memory-bound", "latency-bound") and reads_once(fig.bytes, fig.working_set_bytes):
            notes.append(f"each byte is read or written once per call ({units.byte_count(fig.bytes)} moved, "
                         f"{units.byte_count(fig.working_set_bytes)} working set): there are no intermediates to "
                         "fuse or copies to avoid")

    notes += over_ceiling_notes(got, ceilings)
    levers = list(LEVERS[(regime, levers_key_device)])
    if regime == "memory-bound" and reads_once(fig.bytes, fig.working_set_bytes):
        levers = list(READ_ONCE_LEVERS[levers_key_device])
    if (regime == "compute-bound" and got.flops_fraction is not None
            and got.flops_fraction < latency_fraction(fig.device)):
        levers.insert(0, SMALL_MATMUL_LEVERS[levers_key_device])
    if regime == "compute-bound" and fig.device == "cuda" and fig.dominant_dtype == "float32" and not fig.tf32_enabled:
        levers.insert(0, TF32_LEVER)
    return Verdict(regime, summary, reasons, levers, notes), got


def classify_line(device: str, flops: float, bytes_: float, op_times_us: List[float],
                  blocked_us: float, time_us: float, transfer: bool, ceilings: Ceilings,
                  matmul_flops: float = 0.0, fastest_us: Optional[float] = None) -> str:
    """The regime of one source line, from its own ops. A line is overhead-bound when most of
    its time is in short ops (a view next to a big matmul does not make it so); else the same
    compute / latency / roofline order as the call, on the line's own time: its fastest profiled
    call (`fastest_us`) for the latency test, as the call's verdict uses its fastest timed call,
    so that load does not push a line there."""
    if device == "cuda" and blocked_us > 0 and blocked_us >= time_us:
        return "sync-bound"
    if device == "cuda" and transfer:
        return "transfer-bound"
    short = SHORT_OP_US.get(device, 20.0)
    total = sum(op_times_us)
    if total > 0 and sum(t for t in op_times_us if t < short) >= OVERHEAD_SHARE * total:
        return "overhead-bound"
    return work_regime(device, flops, bytes_, (fastest_us or time_us) / 1e6, ceilings, matmul_flops)
