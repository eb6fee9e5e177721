"""The verdict logic on given figures (GPU cases included: they need no GPU to check)."""
from __future__ import annotations

import pytest

from perflsp import units
from perflsp.profile_result import REGIMES
from perflsp.runtime import roofline
from perflsp.runtime.roofline import CallFigures, Ceilings, Site

H200_BF16 = Ceilings(bandwidth_bytes_per_s=4.3e12, peak_flops_per_s=790e12, dtype_key="bfloat16")
CPU = Ceilings(bandwidth_bytes_per_s=10e9, peak_flops_per_s=100e9, dtype_key="float32")


def figures(**overrides) -> CallFigures:
    base = dict(device="cuda", median_us=1000.0, flops=0.0, bytes=0.0, wall_us=1000.0, overhead_fraction=0.05,
                busy_fraction=0.95, kernels_per_call=3, median_kernel_us=300.0, ops_per_call=3, median_op_us=20.0)
    base.update(overrides)
    return CallFigures(**base)


def test_ridge_point_and_attained_fractions():
    assert H200_BF16.ridge_flop_per_byte == pytest.approx(183.7, rel=1e-3)
    got = roofline.attained(flops=1e9, bytes_=4e9, seconds=2e-3, ceilings=H200_BF16)
    assert got.intensity_flop_per_byte == 0.25
    assert got.attained_bytes_per_s == pytest.approx(2e12)
    assert got.bandwidth_fraction == pytest.approx(2e12 / 4.3e12)
    # attainable at AI 0.25 is bandwidth x AI = 1.075 TFLOP/s; achieved 0.5 TFLOP/s
    assert got.roofline_efficiency == pytest.approx(0.5e12 / 1.075e12)


def test_memory_bound_below_the_ridge_with_its_fraction_in_the_summary():
    verdict, got = roofline.classify(figures(flops=1e9, bytes=4e9, median_us=2000.0), H200_BF16)
    assert verdict.regime == "memory-bound"
    assert "47% of the measured 4.3 TB/s" in verdict.summary
    assert "ridge 184 FLOP/B" in verdict.summary
    assert any("fuse" in lever for lever in verdict.levers)


def test_compute_bound_above_the_ridge():
    n = 8192
    verdict, got = roofline.classify(figures(flops=2 * n ** 3, bytes=3 * n * n * 2, median_us=2000.0), H200_BF16)
    assert verdict.regime == "compute-bound"
    assert got.flops_fraction == pytest.approx(2 * n ** 3 / 2e-3 / 790e12)


def test_tf32_lever_only_for_plain_float32_on_gpu():
    fp32 = Ceilings(4.3e12, 51e12, "float32")
    args = dict(flops=1e12, bytes=1e9, median_us=30000.0, dominant_dtype="float32")
    assert roofline.TF32_LEVER in roofline.classify(figures(**args), fp32)[0].levers
    assert roofline.TF32_LEVER not in roofline.classify(figures(tf32_enabled=True, **args), fp32)[0].levers
    assert roofline.TF32_LEVER not in roofline.classify(figures(device="cpu", **args), fp32)[0].levers


def test_sync_bound_needs_the_host_blocked_and_the_device_idle():
    item_loop = figures(flops=1e6, bytes=1e6, host_blocked_us=310.0, overhead_fraction=0.7, busy_fraction=0.3,
                        sync_sites=[Site("line 42 (`loss.item()`)", 310.0)])
    verdict, _ = roofline.classify(item_loop, H200_BF16)
    assert verdict.regime == "sync-bound"
    assert "line 42 (`loss.item()`): 31% of the call" in verdict.reasons[0]
    # A big GEMM followed by one .item(): the host waits 90% of the call, the device is busy.
    gemm_then_item = figures(flops=1.1e12, bytes=4e8, median_us=1500.0, wall_us=1500.0, host_blocked_us=1350.0,
                             overhead_fraction=0.02, busy_fraction=0.98)
    assert roofline.classify(gemm_then_item, H200_BF16)[0].regime == "compute-bound"


def test_transfer_bound_on_gpu_only():
    copies = figures(flops=1e6, bytes=1e8, transfer_us=300.0, cpu_fallback_us=100.0,
                     transfer_sites=[Site("line 7 (`x.cpu()`)", 400.0)])
    assert roofline.classify(copies, H200_BF16)[0].regime == "transfer-bound"
    # x.cpu() * 2 then .cuda(): the host blocks in the copies, but copying is the problem.
    round_trip = figures(flops=1.6e7, bytes=2e8, wall_us=25000.0, transfer_us=10000.0, cpu_fallback_us=10000.0,
                         host_blocked_us=10000.0, overhead_fraction=0.6, busy_fraction=0.4)
    assert roofline.classify(round_trip, H200_BF16)[0].regime == "transfer-bound"
    assert roofline.classify(figures(device="cpu", flops=1e6, bytes=1e8, transfer_us=300.0), CPU)[0].regime != "transfer-bound"


def test_overhead_bound_gpu_and_cpu_wording():
    launch_bound = figures(flops=1e5, bytes=1e6, overhead_fraction=0.85, busy_fraction=0.15, kernels_per_call=2000,
                           median_kernel_us=2.1)
    verdict, _ = roofline.classify(launch_bound, H200_BF16)
    assert verdict.regime == "overhead-bound"
    assert "GPU is busy 15%" in verdict.summary and "2000 kernels per call" in verdict.summary
    assert any("CUDA graphs" in lever for lever in verdict.levers)
    cpu_loop = figures(device="cpu", flops=400, bytes=51200, overhead_fraction=0.97, ops_per_call=400, median_op_us=4.0)
    verdict, _ = roofline.classify(cpu_loop, CPU)
    assert verdict.regime == "overhead-bound" and "400 ops per call" in verdict.summary


def test_no_counted_work_is_not_called_memory_bound():
    verdict, _ = roofline.classify(figures(device="cpu", overhead_fraction=0.1), CPU)
    assert verdict.regime == "overhead-bound"
    assert "no tensor work was counted" in verdict.reasons[-1]


def test_counting_error_and_low_efficiency_notes():
    over = figures(device="cpu", flops=1e8, bytes=1e9, median_us=50000.0)  # 20 GB/s on a 10 GB/s ceiling
    assert any("over-estimates" in n for n in roofline.classify(over, CPU)[0].notes)
    # just above the ceiling, on the side that does not bind, in a regime that is not a roof's
    slightly = figures(device="cpu", flops=1e8, bytes=1.05e9, median_us=100000.0, overhead_fraction=0.9)
    verdict, got = roofline.classify(slightly, CPU)
    assert verdict.regime == "overhead-bound" and 1.0 < got.bandwidth_fraction < 1.1
    [note] = [n for n in verdict.notes if "above the ceiling" in n]
    assert note.startswith(f"attained {units.percent(got.bandwidth_fraction)} of the measured DRAM bandwidth")
    tiny_kernel = figures(flops=1e6, bytes=4e6, median_us=1000.0)  # 4 GB/s on a 4.3 TB/s GPU
    assert roofline.classify(tiny_kernel, H200_BF16)[0].regime == "latency-bound"


def test_every_verdict_uses_a_fixed_regime_string():
    cases = [figures(flops=1e9, bytes=4e9), figures(flops=1e12, bytes=1e8), figures(overhead_fraction=0.9),
             figures(host_blocked_us=500.0, overhead_fraction=0.6), figures(transfer_us=500.0),
             figures(flops=1e6, bytes=4e6)]
    assert {roofline.classify(c, H200_BF16)[0].regime for c in cases} == set(REGIMES)


def test_line_regimes():
    line = roofline.classify_line
    assert line("cuda", 0, 4, [3.0], blocked_us=500.0, time_us=3.0, transfer=False, ceilings=H200_BF16) == "sync-bound"
    assert line("cuda", 0, 4e6, [90.0], blocked_us=0.0, time_us=90.0, transfer=True, ceilings=H200_BF16) == "transfer-bound"
    assert line("cpu", 400, 51200, [4.0] * 400, 0.0, 1600.0, False, CPU) == "overhead-bound"
    assert line("cpu", 2e8, 1e6, [5000.0], 0.0, 5000.0, False, CPU) == "compute-bound"
    assert line("cpu", 1e6, 1.2e7, [5000.0], 0.0, 5000.0, False, CPU) == "memory-bound"
    assert line("cpu", 0, 8e6, [900.0], 0.0, 900.0, False, CPU) == "memory-bound"  # a copy: AI 0
    # 8 MB in 9 ms is 9% of 10 GB/s (latency-bound), but its fastest profiled call took 4 ms (20%):
    # a line slowed by load is judged, like the call, on its fastest time
    assert line("cpu", 0, 8e6, [9000.0], 0.0, 9000.0, False, CPU) == "latency-bound"
    assert line("cpu", 0, 8e6, [9000.0], 0.0, 9000.0, False, CPU, fastest_us=4000.0) == "memory-bound"
    # `x.t() @ w.t()`: two views that take no time next to a big matmul
    assert line("cuda", 2e12, 1e8, [0.0, 0.0, 2600.0], 0.0, 2600.0, False, H200_BF16) == "compute-bound"
    assert line("cpu", 2e8, 1e6, [2.0, 2.0, 5000.0], 0.0, 5004.0, False, CPU) == "compute-bound"


def test_noise_and_load_are_stated_with_their_effect():
    from perflsp.runtime.analysis import _noise_notes

    steady = {"calls": 100, "p10_us": 100.0, "p90_us": 120.0}
    noisy = {"calls": 100, "p10_us": 100.0, "p90_us": 900.0}
    quiet = {"load_average_1m_before": 0.3, "cpu_count": 2}
    loaded = {"load_average_1m_before": 2.5, "cpu_count": 2}
    line = {"line": 7, "calls": 5, "time_min_us": 80.0, "time_max_us": 120.0}
    assert _noise_notes(steady, quiet, 2, [line]) == []
    [note] = _noise_notes(noisy, quiet, 2, [line])
    assert note.startswith("the timed calls vary a lot") and "p90 = 9.0 x p10" in note
    assert "line 7 took 80 µs-120 µs over 5 profiled calls" in note and "Effect: " in note
    assert _noise_notes(dict(noisy, calls=3), quiet, 2, []) == []  # too few calls to judge
    [note] = _noise_notes(steady, loaded, 2, [line])
    assert note.startswith("the machine was busy (load average 2.50 on 2 CPUs when measuring began, with 2 thread")
    assert "p90 = 1.2 x p10" in note
    assert "fastest timed call" in note and "median over the profiled calls" in note
    # a load that leaves our threads their cores is not a busy machine
    assert _noise_notes(steady, {"load_average_1m_before": 2.5, "cpu_count": 16}, 4, [line]) == []
    assert _noise_notes(steady, {"load_average_1m_before": None, "cpu_count": 2}, 2, [line]) == []


# --- latency-bound, matmul-dominated calls, read-once traffic --------------------------------------

def test_latency_bound_when_neither_roof_is_near_with_latency_levers():
    # softmax over 4096x1024 float32: read 16.8 MB once, write it once; 4.19 MFLOP (1 per element)
    n = 4096 * 1024
    softmax = figures(device="cpu", flops=n, bytes=8 * n, median_us=12000.0, min_us=10000.0,
                      working_set_bytes=8 * n)  # 3.4 GB/s = 3.4% of 100 GB/s
    cpu = Ceilings(bandwidth_bytes_per_s=100e9, peak_flops_per_s=200e9, dtype_key="float32", level="DRAM")
    verdict, got = roofline.classify(softmax, cpu)
    assert verdict.regime == "latency-bound", verdict.summary
    assert verdict.summary.startswith("latency-bound: neither roof is near")
    assert "3% of the measured 100 GB/s (DRAM)" in verdict.summary
    assert "below 10% of both ceilings" in verdict.reasons[0]
    assert not any(word in lever for lever in verdict.levers for word in ("fuse", "copies", "out="))
    assert any("threads" in lever for lever in verdict.levers) and any("batch" in lever for lever in verdict.levers)
    assert any("read or written once" in note for note in verdict.notes)
    gpu = roofline.classify(figures(flops=1e6, bytes=4e6, median_us=100.0), H200_BF16)[0]
    assert gpu.regime == "latency-bound" and any("occupancy" in lever for lever in gpu.levers)


def test_latency_fraction_is_judged_on_the_fastest_calls():
    cpu = Ceilings(10e9, 100e9, "float32")
    # median 8% of the bandwidth (a loaded machine), fastest call 16%: the call can reach the roof, memory-bound
    loaded = figures(device="cpu", flops=1e6, bytes=8e6, median_us=10000.0, min_us=5000.0)
    assert roofline.classify(loaded, cpu)[0].regime == "memory-bound"
    # without a fastest call the median decides
    assert roofline.classify(figures(device="cpu", flops=1e6, bytes=8e6, median_us=10000.0), cpu)[0].regime == "latency-bound"
    # exactly at the fraction is not latency-bound; just under it is
    at = figures(device="cpu", flops=0.0, bytes=1e7, median_us=10000.0)  # 1 GB/s = 10%
    assert roofline.classify(at, cpu)[0].regime == "memory-bound"
    assert roofline.classify(figures(device="cpu", flops=0.0, bytes=0.99e7, median_us=10000.0), cpu)[0].regime == "latency-bound"
    assert roofline.LATENCY_FRACTION == {"cuda": 0.20, "cpu": 0.10}


def test_memory_bound_read_once_gets_no_fuse_levers():
    cpu = Ceilings(10e9, 100e9, "float32")
    once = figures(device="cpu", flops=1e6, bytes=8e6, median_us=1600.0, working_set_bytes=8e6)  # 50%
    verdict, _ = roofline.classify(once, cpu)
    assert verdict.regime == "memory-bound"
    assert not any(word in lever for lever in verdict.levers for word in ("fuse", "copies", "out="))
    assert any("lower-precision" in lever for lever in verdict.levers)
    # a chain of ops with intermediates moves more than its working set: fusing helps
    chain = figures(device="cpu", flops=3e6, bytes=24e6, median_us=4800.0, working_set_bytes=8e6)
    assert any("fuse" in lever for lever in roofline.classify(chain, cpu)[0].levers)


def test_matmul_dominated_call_stays_on_the_compute_side_whatever_the_ridge():
    # an MLP training step: 98% of the FLOPs in matmuls, AI 25 FLOP/B
    step = dict(device="cpu", flops=1.0e8, bytes=4.0e6, matmul_flops=0.98e8, median_us=2000.0)  # 50 GFLOP/s
    low_ridge = Ceilings(bandwidth_bytes_per_s=50e9, peak_flops_per_s=200e9, dtype_key="float32")  # ridge 4
    high_ridge = Ceilings(bandwidth_bytes_per_s=4e9, peak_flops_per_s=200e9, dtype_key="float32")  # ridge 50
    for ceilings in (low_ridge, high_ridge):
        verdict, _ = roofline.classify(figures(**step), ceilings)
        assert verdict.regime == "compute-bound", verdict.summary
        assert "98% of the FLOPs are in matmul-family ops" in verdict.reasons[-1]
    assert any("below the ridge" in n for n in roofline.classify(figures(**step), high_ridge)[0].notes)
    # far below the peak it still says compute-bound, with the small-matmul lever first
    slow = roofline.classify(figures(**dict(step, median_us=20000.0)), low_ridge)[0]  # 2.5% of the peak
    assert slow.regime == "compute-bound" and slow.levers[0].startswith("bigger matmuls")
    assert any("too small" in n for n in slow.notes)
    # a matrix-vector product (AI 0.5) is not matmul-dominated in that sense: the roofline decides
    gemv = figures(device="cpu", flops=2e6, bytes=4e6, matmul_flops=2e6, median_us=800.0)  # 5 GB/s of 10
    assert roofline.classify(gemv, Ceilings(10e9, 100e9, "float32"))[0].regime == "memory-bound"


def test_line_regimes_latency_and_matmul():
    cpu = Ceilings(100e9, 200e9, "float32")
    line = roofline.classify_line
    # softmax line: 33.6 MB in 10 ms = 3.4 GB/s, 3% of 100 GB/s
    assert line("cpu", 4.2e6, 3.36e7, [10000.0], 0.0, 10000.0, False, cpu) == "latency-bound"
    assert line("cpu", 4.2e6, 3.36e7, [500.0], 0.0, 500.0, False, cpu) == "memory-bound"  # 67 GB/s
    assert line("cpu", 1e8, 4e6, [50000.0], 0.0, 50000.0, False, cpu, matmul_flops=1e8) == "compute-bound"
