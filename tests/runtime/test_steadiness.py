"""A verdict that rests on few or unsteady calls says so (runtime/steadiness.py): constructed
call times both ways, then real programs run with `--run`."""
from __future__ import annotations

import random

import pytest

from perflsp.runtime import steadiness
from perflsp.runtime.timing import summarize

torch = pytest.importorskip("torch")


def _assess(samples_us, warmup_s=(0.0011, 0.001)):
    timing = summarize([t / 1e6 for t in samples_us], "perf_counter", len(warmup_s))
    return steadiness.assess(timing, timing["samples_us"], list(warmup_s))


def _steady(n, median_us=1000.0, seed=0):
    rng = random.Random(seed)
    return [median_us * rng.uniform(0.95, 1.1) for _ in range(n)]


def test_steady_calls_need_no_note():
    assert steadiness.tentative_note(_assess(_steady(40)), program_run=True) is None


def test_few_calls_are_named_with_what_to_do():
    found = _assess(_steady(6))
    note = steadiness.tentative_note(found, program_run=True)
    assert found.reasons() == ["only 6 timed calls"]
    assert note.startswith("tentative verdict: it rests on 6 timed calls")
    assert "run the program for more steps" in note
    assert "--min-time" in steadiness.tentative_note(found, program_run=False)


def test_calls_still_getting_faster_are_drift():
    falling = [2000.0 - 30 * i for i in range(40)]  # 2 ms down to 0.83 ms: warming up all along
    [reason] = [r for r in _assess(falling).reasons() if "drifting" in r]
    assert "faster than the first" in reason


def test_a_fastest_call_far_from_the_median_and_a_wide_spread_are_named():
    bimodal = [100.0 if i % 2 else 5000.0 for i in range(40)]
    reasons = " | ".join(_assess(bimodal).reasons())
    assert "the fastest call, which the regime is judged on" in reasons and "p90 = " in reasons


def test_a_warm_up_that_never_settled_is_named():
    found = _assess(_steady(40), warmup_s=[0.002, 0.001])
    assert found.reasons() == ["the warm-up stopped before two calls agreed (its cap of calls or time was reached)"]


def _tentative(result):
    return [note for note in result["verdict"]["notes"] if note.startswith("tentative verdict")]


def _run(run_job, program, script, *arguments, **options):
    code, result = run_job(f"{program / 'layers.py'}:step", " ".join(["python", str(program / script), *arguments]),
                           **options)
    assert code == 0
    return result


def test_a_short_program_run_gives_a_tentative_verdict(run_job, targets_dir, tmp_path):
    result = _run(run_job, targets_dir / "program", "train.py", "12", str(tmp_path / "marker"), iters=50, warmup=3)
    calls = result["timing"]["calls"]
    assert calls < steadiness.FEW_CALLS
    [note] = _tentative(result)
    assert f"it rests on {calls} timed calls" in note and f"only {calls} timed call" in note
    assert f"the program ended after {calls} of the 50 timed calls wanted" in note
    assert "run the program for more steps" in note
    assert "; tentative: " in result["verdict"]["summary"]


def test_steps_of_uneven_size_give_a_tentative_verdict(run_job, targets_dir):
    result = _run(run_job, targets_dir / "program", "uneven.py", "400", iters=40)
    assert result["timing"]["calls"] == 40
    [note] = _tentative(result)
    timing = result["timing"]
    gap = timing["median_us"] / timing["min_us"] >= steadiness.FASTEST_GAP
    # The fastest call is named exactly when it is far from the median; on a busy machine the two
    # sizes can blur, and then the drift between thirds must speak instead.
    assert ("the fastest call, which the regime is judged on" in note) == gap, note
    assert gap or "the last third of the calls" in note, note
