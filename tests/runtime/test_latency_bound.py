"""latency-bound and the levers that fit, on real CPU torch with analytic truth.

The FLOPs, bytes and working set of softmax, layer_norm and an MLP step are known exactly; each
function is measured once and judged against ceilings set relative to the rate of that
measurement's fastest timed call, the rate the latency test uses (x100: neither roof is near;
x1.2: the bandwidth roof binds), so the verdicts depend neither on how fast this machine is nor on
how busy it was at any moment.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from perflsp import profile_result  # noqa: E402
from perflsp.runtime import session  # noqa: E402
from perflsp.runtime.channel import NullReporter  # noqa: E402
from perflsp.runtime.timing import TimingOptions  # noqa: E402

FAST = TimingOptions(min_time_s=0.05, min_iters=5)
ROWS, COLS = 2048, 1024
N = ROWS * COLS
FUSE_WORDS = ("fuse", "copies", "out=")


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x):
    return torch.nn.functional.layer_norm(x, (COLS,))


def _measured(fn, args, cpu_peaks):
    """(context, measurement, its fastest timed call in seconds) of one measurement of `fn(*args)`."""
    ctx, call, options = session.function_context(fn, args, device="cpu", peaks=cpu_peaks, timing=FAST)
    measured = session.measure(call, "cpu", ctx.source_file, options, NullReporter())
    return ctx, measured, min(measured.samples_s)


def _judged(ctx, measured, peaks):
    return session.result_from(measured, dataclasses.replace(ctx, peaks=peaks))


def _ceilings(base, flops_per_s, bytes_per_s):
    peaks = copy.deepcopy(base)
    for level in peaks["levels"]:
        level["bandwidth_bytes_per_s"] = bytes_per_s
    peaks["bandwidth_bytes_per_s"] = bytes_per_s
    peaks["compute_flops_per_s"] = {key: flops_per_s for key in peaks["compute_flops_per_s"]}
    return peaks


@pytest.mark.parametrize("fn", [softmax, layer_norm], ids=["softmax", "layer_norm"])
def test_read_once_normalisation_far_from_both_roofs_is_latency_bound(fn, cpu_peaks):
    x = torch.randn(ROWS, COLS)
    read_once = 2 * 4 * N  # read x once, write the output once (float32)
    ctx, measured, fastest_s = _measured(fn, (x,), cpu_peaks)
    result = _judged(ctx, measured, _ceilings(cpu_peaks, 1000 * N / fastest_s, 100 * read_once / fastest_s))
    totals, verdict = result["totals"], result["verdict"]
    assert totals["flops"] == N and totals["flops_by_kind"] == {"normalization": N}
    # layer_norm also writes its mean and rstd (ROWS floats each): a hair above the read-once pair
    assert read_once <= totals["bytes"] <= read_once * 1.01
    assert result["ceilings"]["level"]["working_set_bytes"] == pytest.approx(totals["bytes"])
    assert verdict["regime"] == "latency-bound", verdict["summary"]
    assert verdict["summary"].startswith("latency-bound: neither roof is near")
    assert totals["bandwidth_fraction"] < 0.1 and totals["flops_fraction"] < 0.1
    assert not any(word in lever for lever in verdict["levers"] for word in FUSE_WORDS)
    assert any("threads" in lever for lever in verdict["levers"])
    assert any("read or written once" in note for note in verdict["notes"])
    assert profile_result.check(result) == []


def test_read_once_softmax_near_the_bandwidth_roof_is_memory_bound_without_fuse_levers(cpu_peaks):
    x = torch.randn(ROWS, COLS)
    ctx, measured, fastest_s = _measured(softmax, (x,), cpu_peaks)
    result = _judged(ctx, measured, _ceilings(cpu_peaks, 1000 * N / fastest_s, 1.2 * 2 * 4 * N / fastest_s))
    verdict = result["verdict"]
    assert verdict["regime"] == "memory-bound", verdict["summary"]
    assert verdict["levers"]
    assert not any(word in lever for lever in verdict["levers"] for word in FUSE_WORDS)


def test_a_chain_of_elementwise_ops_keeps_the_fuse_lever(cpu_peaks):
    def chain(x):
        return ((x * 2) + 1).relu()

    x = torch.randn(N)
    moved = 3 * 2 * 4 * N  # three ops, each reads N floats and writes N
    ctx, measured, fastest_s = _measured(chain, (x,), cpu_peaks)
    result = _judged(ctx, measured, _ceilings(cpu_peaks, 1000 * 3 * N / fastest_s, 1.2 * moved / fastest_s))
    assert result["totals"]["bytes"] == moved
    assert result["verdict"]["regime"] == "memory-bound", result["verdict"]["summary"]
    assert any("fuse" in lever for lever in result["verdict"]["levers"])


def test_an_mlp_step_stays_compute_bound_whatever_the_ridge(cpu_peaks):
    w1 = torch.randn(256, 256, requires_grad=True)
    w2 = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(64, 256)

    def step(x):
        loss = (torch.relu(x @ w1) @ w2).square().mean()
        loss.backward()

    # forward x@w1, h@w2; backward dW2, dh, dW1 (x needs no gradient): five 64x256x256 matmuls
    matmul_flops = 5 * 2 * 64 * 256 * 256
    ctx, measured, fastest_s = _measured(step, (x,), cpu_peaks)
    flop_rate = matmul_flops / fastest_s
    regimes = set()
    # ridge 1e-3 FLOP/B and 1e6 FLOP/B; a peak 100x and 1.5x the step's own rate
    for flops_per_s, bytes_per_s in ((100 * flop_rate, 1e14), (100 * flop_rate, 1e2), (1.5 * flop_rate, 1e2)):
        result = _judged(ctx, measured, _ceilings(cpu_peaks, flops_per_s, bytes_per_s))
        totals = result["totals"]
        assert totals["flops_by_kind"]["matmul"] == matmul_flops
        assert totals["flops_by_kind"]["matmul"] >= 0.8 * totals["flops"]
        regimes.add(result["verdict"]["regime"])
        if flops_per_s == 100 * flop_rate:
            assert result["verdict"]["levers"][0].startswith("bigger matmuls")
    assert regimes == {"compute-bound"}
