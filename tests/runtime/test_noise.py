"""Noise-aware figures: per-line medians and spreads over several profiled calls, and how many.

Real torch on the CPU. A function that is slow on one call in three stands in for a preempted call.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from perflsp.runtime import session  # noqa: E402
from perflsp.runtime.session import profile_function  # noqa: E402
from perflsp.runtime.timing import TimingOptions  # noqa: E402

FAST = TimingOptions(min_time_s=0.05, min_iters=5)


def test_one_slow_call_moves_neither_the_lines_nor_the_dominant_line(noisy_cases, cpu_peaks, targets_dir, find_line):
    fn = noisy_cases.one_slow_call_in_three
    result = profile_function(fn, fn.__perflsp_profile__.setup(), device="cpu", peaks=cpu_peaks, timing=FAST)
    source = targets_dir / "noisy_cases.py"
    lines = {entry["line"]: entry for entry in result["lines"]}
    matmul, fill = lines[find_line(source, "y = a @ a")], lines[find_line(source, "z = torch.ones(")]
    assert result["lines"][0]["line"] == matmul["line"]
    assert matmul["calls"] == fill["calls"] == session.attribution_calls_for(result["timing"]["median_us"] / 1e6) >= 3
    # The slow call shows in the spread, not in the figure the lines are ranked by.
    assert fill["time_max_us"] > 10 * fill["time_us"]
    assert fill["time_us"] < matmul["time_us"]
    for entry in result["lines"]:
        assert entry["time_min_us"] <= entry["time_us"] <= entry["time_max_us"]
    assert result["timing"]["median_us"] < 0.5 * result["timing"]["max_us"]  # the slow calls were timed too


def test_the_work_is_that_of_the_typical_call_whichever_call_comes_first(noisy_cases, targets_dir):
    import itertools

    from perflsp.runtime.profiling import run_attribution

    fn = noisy_cases.one_slow_call_in_three
    (a,) = fn.__perflsp_profile__.setup()
    noisy_cases._calls = itertools.count(noisy_cases.SLOW_EVERY - 1)  # the next call is the slow one
    attribution = run_attribution(lambda: fn(a), str(targets_dir / "noisy_cases.py"), "cpu", 5)
    matmul_bytes, fill_bytes = 2 * 4 * 256 * 256, 4 * noisy_cases.SMALL  # `a` read once, `y` and `z` written
    assert sum(r.bytes for r in attribution.records) == matmul_bytes + fill_bytes
    assert sum(r.flops for r in attribution.records) == 2 * 256 ** 3
    assert attribution.working_set_bytes == matmul_bytes + fill_bytes
    [fill] = [r for r in attribution.records if r.name == "aten::ones"]
    slow_call = attribution.calls_us[0][fill.index]
    assert slow_call > 10 * attribution.timings[fill.index].cpu_us  # seen, but not the figure


@pytest.mark.parametrize("median_s, clean, attribution", [
    (0.0001, 5, 5), (0.019, 5, 5), (0.05, 3, 5), (0.2, 1, 3), (2.0, 1, 3),
])
def test_profiled_calls_follow_the_functions_time(median_s, clean, attribution):
    assert (session.profile_calls_for(median_s), session.attribution_calls_for(median_s)) == (clean, attribution)


def test_lines_of_a_long_call_still_come_from_three_calls(cpu_peaks):
    def long_call(a):
        return a @ a

    a = torch.randn(1024, 1024)
    result = profile_function(long_call, (a,), device="cpu", peaks=cpu_peaks,
                              timing=TimingOptions(warmup=1, iters=1, min_time_s=0.01))
    median_s = result["timing"]["median_us"] / 1e6
    assert result["kernels"]["profiled_calls"] == session.profile_calls_for(median_s)
    assert result["lines"][0]["calls"] == session.attribution_calls_for(median_s) >= 3
