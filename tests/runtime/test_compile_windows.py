"""The windows the two `--compile` medians come from: a compilation inside the timed rounds is
counted (real dynamo), and the note that says when the eager profile and the eager calls timed
beside the compiled ones disagree (their p10-p90 ranges apart), silent when they overlap."""
from __future__ import annotations

import itertools

import pytest

from perflsp import units
from perflsp.runtime import compile_windows


def _timing(samples_us):
    """A timing summary as `timing.summarize` writes it, from per-call times in µs."""
    window = compile_windows.side([], [us / 1e6 for us in samples_us])
    return {key: window[key] for key in ("median_us", "p10_us", "p90_us")}


def _block(eager_samples_us, load=None):
    return {"windows": {"eager": compile_windows.side([0.1] * 3, [us / 1e6 for us in eager_samples_us]),
                        "load_average_1m": load}}


def test_overlapping_eager_windows_need_no_note():
    profile = _timing([4000 + 50 * i for i in range(40)])
    assert compile_windows.disagreement_note(profile, _block([3900 + 60 * i for i in range(40)])) is None


def test_eager_windows_apart_say_so_with_both_medians_and_the_loads():
    profile = _timing([4350 + 10 * i for i in range(40)])
    block = _block([54600 + 100 * i for i in range(40)], load=3.9)
    note = compile_windows.disagreement_note(profile, block, profile_load=1.1)
    ratio = block["windows"]["eager"]["median_us"] / profile["median_us"]
    assert f"{ratio:.2g}× the profile's" in note
    assert units.duration_us(block["windows"]["eager"]["median_us"]) in note
    assert units.duration_us(profile["median_us"]) in note
    assert "load average 1.10 then 3.90" in note


def test_a_recompilation_inside_the_timed_rounds_is_counted_and_noted():
    torch = pytest.importorskip("torch")
    from perflsp.runtime import compiling, dynamo_compat
    from perflsp.runtime.channel import NullReporter
    from perflsp.runtime.timing import TimingOptions

    options = TimingOptions(warmup=3, max_warmup=3, iters=50)  # 3 warm-up calls, then 5 rounds of 10
    compiled = torch.compile(lambda x: x * 2 + 1, backend="eager")  # dynamo's compiles without inductor's time
    # The compiled side's 21st call gets float64 inputs: a new guard, compiled inside the timed rounds.
    inputs = itertools.chain([torch.ones(8)] * 20, itertools.repeat(torch.ones(8, dtype=torch.float64)))
    calls = {"compiled": lambda: compiled(next(inputs)), "eager": lambda: torch.ones(8) * 2 + 1}
    dynamo_compat.reset()
    try:
        windows = compiling.interleaved_windows(calls, "cpu", options, NullReporter())
    finally:
        dynamo_compat.reset()
    assert windows["compiles_during_timing"] == 1
    assert windows["compiled"]["warmup_calls"] == windows["eager"]["warmup_calls"] == 3
    assert windows["compiled"]["calls"] == windows["eager"]["calls"] == 50
    [note] = compile_windows.notes(windows)
    assert "compiled 1 more time(s) during the timed calls" in note
