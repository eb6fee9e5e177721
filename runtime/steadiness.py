"""Whether the timed calls are steady enough for the regime to rest on them.

The regime is judged on the fastest timed call and the attained fractions on the median
(roofline.py). Few calls, a fastest call far from the median, a wide p10-p90 spread, or times
still drifting (a warm-up that stopped before two calls agreed; the last third of the timed calls
off the first third) make that call a poor witness: the same program gave latency-bound on 50
steps and memory-bound at 2% of bandwidth on 200. The verdict then says it is tentative, with
the figures behind that and what to do: time more calls.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence

from perflsp import units
from perflsp.runtime.timing import STABLE_TOLERANCE

FEW_CALLS = 10  # TimingOptions.min_iters: a profile times at least this many calls on its own
FASTEST_GAP = 2.0  # median / fastest call: the call the regime is judged on is no typical one
NOISY_SPREAD = 2.0  # p90 / p10 above this: the calls did not take the same time
DRIFT = 0.25  # the last third's median this far off the first third's: still warming up (or slowing)
MIN_DRIFT_CALLS = 9  # three calls a third at least


@dataclass
class Steadiness:
    calls: int
    median_us: float
    p10_us: float
    p90_us: float
    fastest_us: float
    drift: Optional[float]  # last third's median / first third's, minus 1 (None: too few calls)
    warmup_settled: Optional[bool]  # the last two warm-up calls agreed (None: fewer than two)
    wanted_calls: Optional[int] = None  # a program run's timed calls asked for (its end can come first)

    def reasons(self) -> List[str]:
        """Why the regime may not hold, each with its figures; empty when the calls are steady."""
        out = []
        if self.wanted_calls is not None and self.calls < self.wanted_calls:
            out.append(f"the program ended after {self.calls} of the {self.wanted_calls} timed calls wanted")
        if self.calls < FEW_CALLS:
            out.append(f"only {self.calls} timed call{'s' if self.calls != 1 else ''}")
        if self.fastest_us > 0 and self.median_us / self.fastest_us >= FASTEST_GAP:
            out.append(f"the fastest call, which the regime is judged on, took {units.duration_us(self.fastest_us)}: "
                       f"{self.median_us / self.fastest_us:.2g}× faster than the median")
        if self.p10_us > 0 and self.p90_us / self.p10_us > NOISY_SPREAD:
            out.append(f"p90 = {self.p90_us / self.p10_us:.2g}× p10")
        if self.drift is not None and abs(self.drift) > DRIFT:
            out.append(f"the last third of the calls ran {units.percent(abs(self.drift))} "
                       f"{'slower' if self.drift > 0 else 'faster'} than the first: the times were still drifting")
        if self.warmup_settled is False:
            out.append("the warm-up stopped before two calls agreed (its cap of calls or time was reached)")
        return out


def assess(timing: Mapping[str, float], samples_us: Sequence[float], warmup_s: Sequence[float],
           wanted_calls: Optional[int] = None) -> Steadiness:
    """`timing`: the summary (median, p10, p90, min, calls); `samples_us`: the timed calls in call
    order (a subset will do); `warmup_s`: the warm-up calls; `wanted_calls`: a program run's."""
    third = len(samples_us) // 3
    drift = (statistics.median(samples_us[-third:]) / statistics.median(samples_us[:third]) - 1
             if len(samples_us) >= MIN_DRIFT_CALLS and statistics.median(samples_us[:third]) > 0 else None)
    settled = None
    if len(warmup_s) >= 2:
        a, b = warmup_s[-2], warmup_s[-1]
        settled = min(a, b) <= 0 or abs(a - b) / min(a, b) <= STABLE_TOLERANCE
    return Steadiness(int(timing["calls"]), timing["median_us"], timing["p10_us"], timing["p90_us"],
                      timing["min_us"], drift, settled, wanted_calls)


def tentative_note(steadiness: Steadiness, program_run: bool) -> Optional[str]:
    """The verdict's note when the calls are not steady: the figures, and what to do."""
    reasons = steadiness.reasons()
    if not reasons:
        return None
    todo = ("run the program for more steps, so that more of its calls are timed (or pass --iters)" if program_run
            else "time more calls: a longer --min-time, or --iters")
    return (f"tentative verdict: it rests on {steadiness.calls} timed calls (median "
            f"{units.duration_us(steadiness.median_us)}, p10-p90 {units.duration_us(steadiness.p10_us)}-"
            f"{units.duration_us(steadiness.p90_us)}): {'; '.join(reasons)}. The regime may change with more calls: "
            f"{todo}")
