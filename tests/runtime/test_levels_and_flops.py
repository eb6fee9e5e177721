"""Cache-aware verdicts and the FLOPs FlopCounterMode misses, against analytic truth on the CPU.

The ceilings are the session's measured ones with fixed memory levels (the sweep of a short
measurement on a noisy machine decides nothing here): an LLC plateau at 200 GB/s for working
sets of 0.75-24 MiB and DRAM at 50 GB/s from 96 MiB.
"""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from perflsp.runtime import compat, peaks
from perflsp.runtime.counting import OpCounter, flops_uncounted
from perflsp.runtime.session import profile_function
from perflsp.runtime.timing import TimingOptions

HERE = __file__
FAST = TimingOptions(min_time_s=0.05, min_iters=5)
LLC = {"name": "LLC", "from_bytes": 768 << 10, "to_bytes": 24 << 20, "bandwidth_bytes_per_s": 200e9, "spread": 0.0}
DRAM = {"name": "DRAM", "from_bytes": 96 << 20, "to_bytes": 768 << 20, "bandwidth_bytes_per_s": 50e9, "spread": 0.0}


def _fixed_levels(cpu_peaks):
    return dict(cpu_peaks, levels=[LLC, DRAM], bandwidth_bytes_per_s=DRAM["bandwidth_bytes_per_s"],
                protocol=dict(cpu_peaks["protocol"], rounds_agree=True))


def count(fn):
    with OpCounter(HERE, ranges=False) as counter:
        fn()
    return counter


def test_matrix_vector_and_dot_products_count_two_flops_per_multiply_add():
    m, n = 96, 64
    weight, x, y, bias = torch.randn(m, n), torch.randn(n), torch.randn(n), torch.randn(m)
    assert sum(r.flops for r in count(lambda: weight @ x).records) == 2 * m * n  # aten::mv
    assert sum(r.flops for r in count(lambda: torch.addmv(bias, weight, x)).records) == 2 * m * n
    assert sum(r.flops for r in count(lambda: torch.dot(x, y)).records) == 2 * n
    assert sum(r.flops for r in count(lambda: torch.vdot(x, y)).records) == 2 * n
    with FlopCounterMode(display=False) as mode:  # the user's own FlopCounterMode is left as torch made it
        weight @ x
    assert mode.get_total_flops() == 0


def test_missing_formulas_step_aside_for_torchs_own():
    from torch.utils.flop_counter import flop_registry

    assert not set(compat.missing_flop_formulas()) & set(flop_registry)


def test_working_set_counts_each_storage_once():
    x, y, out = torch.randn(4096), torch.randn(4096), torch.empty(4096)
    counter = count(lambda: (torch.add(x, y, out=out), torch.mul(x, y, out=out)))
    assert counter.working_set_bytes == 3 * 4 * 4096


def test_ops_without_a_flop_formula_are_listed():
    x = torch.randn(1000)
    records = count(lambda: torch.sort(x)).records
    assert any(flops_uncounted(r) and r.name == "aten::sort" for r in records)
    assert not any(flops_uncounted(r) for r in count(lambda: x.clone()).records)  # a copy has no arithmetic


def small_add(x, y, out):
    torch.add(x, y, out=out)


def matrix_vector(weight, x):
    return weight @ x


def sort_values(x):
    return torch.sort(x)


def test_an_add_that_fits_in_cache_is_judged_against_the_cache(cpu_peaks):
    elements = 64 << 10  # 3 x 256 KiB: a working set of 768 KiB, the LLC plateau's first size
    args = (torch.randn(elements), torch.randn(elements), torch.empty(elements))
    result = profile_function(small_add, args, device="cpu", peaks=_fixed_levels(cpu_peaks), timing=FAST)
    level = result["ceilings"]["level"]
    assert level["name"] == "LLC" and level["working_set_bytes"] == 3 * 4 * elements
    assert result["ceilings"]["bandwidth_bytes_per_s"] == LLC["bandwidth_bytes_per_s"]
    assert result["totals"]["bytes"] == 3 * 4 * elements
    notes = " ".join(result["verdict"]["notes"])
    assert "judged against the LLC bandwidth" in notes and "not DRAM's" in notes
    fraction = result["totals"]["bandwidth_fraction"]
    # a figure above its ceiling always comes with its reason
    assert fraction <= 1.1 or "attained" in notes


def test_matrix_vector_profile_counts_its_flops(cpu_peaks):
    m, n = 512, 256
    result = profile_function(matrix_vector, (torch.randn(m, n), torch.randn(n)), device="cpu",
                              peaks=_fixed_levels(cpu_peaks), timing=FAST)
    assert result["totals"]["flops"] == 2 * m * n
    assert result["totals"]["flops_by_kind"] == {"matmul": 2 * m * n}
    assert result["ceilings"]["level"]["name"] == "LLC"  # 512 KiB of weights plus two vectors


def test_uncounted_flops_are_named_in_the_notes(cpu_peaks):
    result = profile_function(sort_values, (torch.randn(4096),), device="cpu", peaks=_fixed_levels(cpu_peaks),
                              timing=FAST)
    assert any("FLOPs not counted" in note and "aten::sort" in note for note in result["verdict"]["notes"])


def test_level_for_a_working_set_beyond_every_cache_is_main_memory():
    assert peaks.level_for([LLC, DRAM], 512 << 20)["name"] == "DRAM"
