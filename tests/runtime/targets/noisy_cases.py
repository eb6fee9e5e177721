"""A function with one slow call in three, on a line that is cheap in the other two.

Stands in for a preempted call on a busy machine, but deterministically: the per-line figures
must come from the median over several profiled calls, never from one call.
"""
import itertools

import torch

import perflsp

SLOW_EVERY = 3  # any 3 consecutive calls (the fewest any pass profiles) hold exactly one slow call
SMALL, LARGE = 1_000, 24_000_000  # elements: a 4 kB fill, and a ~96 MB one (tens of ms)
_calls = itertools.count()


def inputs():
    return (torch.randn(256, 256),)


@perflsp.profile(setup=inputs)
def one_slow_call_in_three(a):
    y = a @ a
    z = torch.ones(LARGE if next(_calls) % SLOW_EVERY == SLOW_EVERY - 1 else SMALL)
    return y, z
