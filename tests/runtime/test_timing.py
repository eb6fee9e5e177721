"""Warm-up, iteration count and statistics (logic only: no wall-clock assertions)."""
from __future__ import annotations

import gc

import pytest

from perflsp.runtime import timing
from perflsp.runtime.timing import TimingOptions


def test_percentiles_interpolate_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert timing.percentile(values, 0.5) == 3.0
    assert timing.percentile(values, 0.1) == pytest.approx(1.4)
    assert timing.percentile(values, 0.9) == pytest.approx(7.6)
    assert timing.percentile([5.0], 0.9) == 5.0
    with pytest.raises(ValueError):
        timing.percentile([], 0.5)


def test_summary_is_in_microseconds_and_names_the_clock():
    summary = timing.summarize([0.003, 0.001, 0.002], "perf_counter", warmup_calls=4)
    assert summary["clock"] == "perf_counter"
    assert (summary["calls"], summary["warmup_calls"]) == (3, 4)
    assert summary["median_us"] == pytest.approx(2000.0)
    assert summary["min_us"] == pytest.approx(1000.0) and summary["max_us"] == pytest.approx(3000.0)
    assert summary["p10_us"] <= summary["median_us"] <= summary["p90_us"]


def test_warm_up_waits_for_a_stable_time():
    options = TimingOptions(warmup=3, max_warmup=50, min_time_s=10.0)
    cold_then_steady = [0.5, 0.2, 0.012, 0.010, 0.0101]
    assert not timing.warmup_done(cold_then_steady[:3], options)  # 0.2 then 0.012
    assert not timing.warmup_done(cold_then_steady[:4], options)  # 0.012 then 0.010: 20% apart
    assert timing.warmup_done(cold_then_steady, options)
    assert timing.warmup_done([0.5, 0.01, 0.0105], options)  # stable as soon as the minimum is reached
    assert not timing.warmup_done([0.01, 0.01], options)  # minimum not reached


def test_warm_up_is_capped_by_count_and_by_time():
    never_stable = [0.001 * (1 + (i % 2) * 3) for i in range(49)]
    options = TimingOptions(warmup=3, max_warmup=50, min_time_s=10.0)
    assert not timing.warmup_done(never_stable, options)
    assert timing.warmup_done(never_stable + [0.001], TimingOptions(warmup=3, max_warmup=50, min_time_s=10.0)) is True
    assert timing.warmup_done([0.6, 0.1, 0.6], TimingOptions(warmup=3, min_time_s=1.0))  # spent >= min_time


def test_iteration_count():
    options = TimingOptions(min_time_s=1.0, min_iters=10, max_iters=1000)
    assert timing.choose_iters(0.001, options) == 1000  # enough for a second, capped
    assert timing.choose_iters(0.01, options) == 100
    assert timing.choose_iters(0.5, options) == 10  # at least ten
    assert timing.choose_iters(0.5, TimingOptions(iters=3)) == 3  # fixed count wins


def test_phases_call_the_function_the_expected_number_of_times():
    calls = []
    warm = timing.warm_up(lambda: calls.append(1), "cpu", TimingOptions(warmup=3, max_warmup=5, min_time_s=10.0))
    assert 3 <= len(warm) <= 5 and len(calls) == len(warm)
    calls.clear()
    seen = []
    samples = timing.timed_calls(lambda: calls.append(1), "cpu", TimingOptions(iters=25),
                                 on_call=lambda n, fraction: seen.append((n, fraction)))
    assert len(samples) == len(calls) == 25
    assert seen == [(n, n / 25) for n in range(1, 26)]
    assert all(s >= 0 for s in samples)


def test_timed_window_ends_on_elapsed_time_with_a_minimum_count():
    samples = timing.timed_calls(lambda: None, "cpu", TimingOptions(min_time_s=0.02, min_iters=10))
    assert len(samples) >= 10  # a no-op takes far less than 20 ms: the time, not the minimum, ended it
    assert len(samples) > 100
    slow = timing.timed_calls(lambda: timing.time.sleep(0.002), "cpu", TimingOptions(min_time_s=0.001, min_iters=4))
    assert len(slow) == 4  # the window was over after one call, the minimum count still applies
    capped = timing.timed_calls(lambda: None, "cpu", TimingOptions(min_time_s=60.0, max_iters=50))
    assert len(capped) == 50


def test_garbage_collector_is_paused_only_inside():
    assert gc.isenabled()
    with timing.PausedGC():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with timing.PausedGC():
            pass
        assert not gc.isenabled()  # a caller's choice is respected
    finally:
        gc.enable()
