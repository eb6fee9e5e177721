"""Is the change between two runs real? A bootstrap interval for the ratio of their medians.

Each result keeps (an evenly spaced subset of) its per-call times, `timing.samples_us`.
Resampling each run's calls with replacement, many times, shows which ratios of medians the two
runs could as well have produced; the middle 95% of them is the interval. An interval that
leaves out 1 is a change; one that holds 1 means the runs are too noisy to tell.

Why not the p10-p90 ranges (the test before this one): on a busy machine one run's calls can
spread over 2x or more, and then a 2x change in the medians has overlapping ranges and was called
"within the spread". A median's uncertainty shrinks with the number of calls; a range does not.

Calls within a run are treated as independent. A load that changes between the two runs moves
every call of one of them, and no test on the calls can tell that from a change of code: the
sentence's `same code` is there for that. Standard library only, and seeded, so the same two
results always give the same interval.
"""
from __future__ import annotations

import random
import statistics
from typing import Optional, Sequence, Tuple

CONFIDENCE = 0.95
RESAMPLES = 1000
MIN_SAMPLES = 5  # fewer calls than this say nothing about a median's spread


def median_ratio_interval(before_us: Sequence[float], now_us: Sequence[float], confidence: float = CONFIDENCE,
                          resamples: int = RESAMPLES, seed: int = 0) -> Optional[Tuple[float, float]]:
    """The `confidence` percentile-bootstrap interval of median(before) / median(now) (the
    speedup), or None with fewer than MIN_SAMPLES positive times on either side."""
    before = [t for t in before_us if t > 0]
    now = [t for t in now_us if t > 0]
    if len(before) < MIN_SAMPLES or len(now) < MIN_SAMPLES:
        return None
    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(before, k=len(before)))
                    / statistics.median(rng.choices(now, k=len(now))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return ratios[int(tail * resamples)], ratios[min(resamples - 1, int((1 - tail) * resamples))]
