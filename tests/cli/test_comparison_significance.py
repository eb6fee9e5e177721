"""Whether a change between two runs is real (perflsp.significance, perflsp.comparison), on
constructed per-call samples: a 2× change in noisy runs whose p10-p90 ranges overlap, the same
ratio from a handful of calls, and two runs of the same distribution."""
from __future__ import annotations

import random
import statistics

from perflsp import comparison, significance


def _calls(median_us: float, n: int, spread: float, seed: int):
    """`n` call times around `median_us`, log-normally spread (sigma `spread`), as a busy machine gives."""
    rng = random.Random(seed)
    return [median_us * rng.lognormvariate(0.0, spread) for _ in range(n)]


def _result(samples_us, created_at="2026-12-02T10:00:00+00:00"):
    ordered = sorted(samples_us)
    q = statistics.quantiles(ordered, n=10, method="inclusive")
    return {"status": "ok", "created_at": created_at, "target": {"source_sha256": "same"},
            "timing": {"median_us": statistics.median(ordered), "p10_us": q[0], "p90_us": q[-1],
                       "samples_us": list(samples_us)},
            "settings": {"arguments": ["float32[1000] cpu"], "cache": "warm"},
            "device": {"kind": "cpu", "name": "cpu", "compute_capability": None, "threads": 2},
            "ceilings": {"id": "c"}, "verdict": {"regime": "memory-bound"}}


def _compared(before_us, now_us):
    now = _result(now_us, created_at="2026-12-02T10:05:00+00:00")
    now["comparison"] = comparison.compare(now, _result(before_us))
    return now


def test_a_2x_change_in_noisy_runs_is_a_change_though_their_ranges_overlap():
    before, now = _calls(10_900, 200, 0.45, seed=1), _calls(5_020, 200, 0.45, seed=2)
    result = _compared(before, now)
    block = result["comparison"]
    assert block["speedup"] > 1.8
    assert result["timing"]["p90_us"] > _result(before)["timing"]["p10_us"]  # the ranges overlap
    low, high = block["speedup_interval"]
    assert 1 < low < block["speedup"] < high
    assert block["significant"] is True and block["significance_test"] == "bootstrap"
    text = comparison.describe(result)
    assert f"{block['speedup']:.3g}× faster (95% interval {low:.2g}–{high:.2g}×)" in text
    assert "noisy" not in text
    assert comparison.short(result).startswith(f"{block['speedup']:.3g}× faster since ")


def test_the_same_ratio_from_a_handful_of_scattered_calls_is_too_noisy_to_tell():
    before = [4_000, 30_000, 10_900, 6_000, 25_000, 9_000]
    now = [2_000, 16_000, 5_020, 12_000, 3_000, 4_800]
    block = _compared(before, now)["comparison"]
    low, high = block["speedup_interval"]
    assert low < 1 < high
    assert block["significant"] is False
    text = comparison.describe(_compared(before, now))
    assert "faster, but the runs are too noisy to tell (95% interval" in text
    assert comparison.short(_compared(before, now)).startswith("no clear change since ")


def test_two_runs_of_the_same_calls_are_no_change():
    block = _compared(_calls(1_000, 300, 0.2, seed=3), _calls(1_000, 300, 0.2, seed=4))["comparison"]
    low, high = block["speedup_interval"]
    assert low < 1 < high and block["significant"] is False


def test_a_slowdown_reads_as_slower_with_the_interval_inverted():
    result = _compared(_calls(1_000, 300, 0.1, seed=5), _calls(2_500, 300, 0.1, seed=6))
    block = result["comparison"]
    low, high = block["speedup_interval"]
    assert high < 1 and block["significant"] is True
    assert f"× slower (95% interval {1 / high:.2g}–{1 / low:.2g}×)" in comparison.describe(result)


def test_results_without_samples_fall_back_to_the_ranges_and_say_so():
    before, now = _result(_calls(10_900, 200, 0.45, seed=1)), _result(_calls(5_020, 200, 0.45, seed=2))
    for result in (before, now):
        del result["timing"]["samples_us"]
    now["comparison"] = comparison.compare(now, before)
    block = now["comparison"]
    assert block["speedup_interval"] is None and block["significance_test"] == "p10-p90"
    assert block["significant"] is False  # the ranges overlap: the old test's answer, said as such
    assert "faster, but the runs are too noisy to tell (their p10–p90 ranges overlap)" in comparison.describe(now)


def test_the_interval_is_the_same_for_the_same_runs_and_needs_a_few_calls():
    before, now = _calls(2_000, 50, 0.3, seed=7), _calls(1_000, 50, 0.3, seed=8)
    assert significance.median_ratio_interval(before, now) == significance.median_ratio_interval(before, now)
    assert significance.median_ratio_interval(before[:4], now) is None
