"""Reading profiler traces: fake GPU traces (no GPU here) and a real CPU trace.

The fakes mimic what torch's kineto parser produces: host events with `cpu_parent` /
`cpu_children` and `kernels`, device events with device_type CUDA, runtime calls such as
`cudaStreamSynchronize` on the host, and the device-side mirror of each `record_function`.
"""
from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import torch

from perflsp.runtime import profiling
from perflsp.runtime.counting import OpCounter

Kernel = namedtuple("Kernel", ["name", "device", "duration"])
CPU, CUDA = SimpleNamespace(name="CPU"), SimpleNamespace(name="CUDA")


def event(name, start, end, device=CPU, parent=None, kernels=(), annotation=False, activity=""):
    e = SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), device_type=device,
                        cpu_parent=parent, cpu_children=[], kernels=list(kernels), is_async=False,
                        is_user_annotation=annotation, activity_type=activity)
    if parent is not None:
        parent.cpu_children.append(e)
    return e


def item_per_step_trace():
    """One call: a tiny kernel, then `.item()` waits 345 µs for a 5 µs copy; the device idles."""
    call = event("perflsp@call", 0, 1000, annotation=True)
    mul = event("aten::mul", 10, 20, parent=call, kernels=[Kernel("vectorized_elementwise", 0, 5.0)])
    launch = event("cudaLaunchKernel", 12, 18, parent=mul, activity="cuda_runtime")
    item = event("aten::_local_scalar_dense", 30, 400, parent=call, kernels=[Kernel("Memcpy DtoH (Device -> Pageable)", 0, 5.0)])
    copy = event("cudaMemcpyAsync", 35, 45, parent=item, activity="cuda_runtime")
    wait = event("cudaStreamSynchronize", 45, 390, parent=item, activity="cuda_runtime")
    drain = event("perflsp@drain", 1000, 1010, annotation=True)
    drain_sync = event("cudaDeviceSynchronize", 1001, 1009, parent=drain, activity="cuda_runtime")
    device = [
        event("vectorized_elementwise", 25, 30, device=CUDA),
        event("Memcpy DtoH (Device -> Pageable)", 380, 385, device=CUDA),
        event("perflsp@call", 25, 385, device=CUDA, annotation=True),  # the range's device mirror
    ]
    return [call, mul, launch, item, copy, wait, drain, drain_sync] + device


def test_gpu_window_busy_idle_blocked_and_transfers():
    clean = profiling.analyze_clean_events([item_per_step_trace()], "cuda")
    assert clean.calls == 1
    assert clean.wall_us == 1010  # until the drain: the device has finished the call's work
    assert clean.busy_us == 10  # the mirror annotation is not device work
    assert clean.busy_fraction == 10 / 1010
    assert clean.overhead_fraction == 1 - 10 / 1010
    assert clean.host_blocked_us == 355  # the copy and the wait; not the drain's own synchronize
    assert clean.sync_calls == 2
    assert clean.transfer_us == 5
    assert clean.kernels_per_call == 1  # memcpys are not kernels
    assert clean.ops_per_call == 2  # top-level ops only, runtime calls excluded
    assert clean.gaps_count == 3 and clean.gaps_largest_us == 625  # 0-25, 30-380, 385-1010
    assert clean.gaps_total_us == 25 + 350 + 625
    assert clean.top_kernels == [{"name": "vectorized_elementwise", "count": 1.0, "total_us": 5.0}]


def test_sessions_keep_their_own_clocks():
    # Two sessions both start near t=0: a call of one must not swallow events of the other.
    first, second = item_per_step_trace(), item_per_step_trace()
    clean = profiling.analyze_clean_events([first, second], "cuda")
    assert clean.calls == 2
    assert clean.kernels_per_call == 1 and clean.ops_per_call == 2
    assert clean.host_blocked_us == 355


def test_one_slow_call_does_not_change_the_median():
    calls = []
    for i, scale in enumerate((1.0, 1.0, 8.0)):
        base = i * 10_000
        call = event("perflsp@call", base, base + 1000 * scale, annotation=True)
        event("aten::mm", base + 10, base + 990 * scale, parent=call, kernels=[Kernel("sgemm", 0, 900.0)])
        drain = event("perflsp@drain", base + 1000 * scale, base + 1000 * scale + 10, annotation=True)
        calls += [call, call.cpu_children[0], drain, event("sgemm", base + 50, base + 950, device=CUDA)]
    clean = profiling.analyze_clean_events([calls], "cuda")
    assert clean.wall_us == 1010
    assert clean.busy_fraction == 900 / 1010


def test_attribution_joins_ranges_to_ops_and_counts_waits():
    outer = event("perflsp@call", 0, 1000, annotation=True)
    rng = event("perflsp@42#7", 30, 400, parent=outer, annotation=True)
    inner = event("aten::_local_scalar_dense", 31, 399, parent=rng, kernels=[Kernel("Memcpy DtoH", 0, 4.0),
                                                                             Kernel("perflsp@42#7", 0, 360.0)])
    event("cudaStreamSynchronize", 45, 390, parent=inner, activity="cuda_runtime")
    mirror = event("perflsp@42#7", 40, 400, device=CUDA, annotation=True)
    other = event("perflsp@43#8", 410, 430, parent=outer, annotation=True)
    event("aten::add", 411, 429, parent=other, kernels=[Kernel("add_kernel", 0, 3.0)])
    timings = profiling.analyze_attribution_events([outer, rng, inner, mirror, other, other.cpu_children[0]])
    assert timings[7].device_us == 4.0  # the mirror kernel entry is skipped
    assert timings[7].blocked_us == 345.0
    assert timings[7].cpu_us == 368.0  # the op's own event, not the range around it
    assert (timings[8].device_us, timings[8].blocked_us, timings[8].cpu_us) == (3.0, 0.0, 18.0)


class OldRow:
    key = "aten::mm"
    count = 2
    self_cpu_time_total = 30.0
    self_cuda_time_total = 900.0


class NewRow:
    key = "aten::add"
    count = 2
    self_cpu_time_total = 10.0
    self_device_time_total = 40.0


def test_top_ops_read_both_spellings_and_skip_ranges():
    rows = [OldRow(), NewRow(), SimpleNamespace(key="perflsp@call", count=2, self_cpu_time_total=1e6),
            SimpleNamespace(key="cudaLaunchKernel", count=4, self_cpu_time_total=50.0)]
    top = profiling.top_ops(rows, calls=2, device="cuda")
    assert [r["name"] for r in top] == ["aten::mm", "aten::add"]
    assert top[0] == {"name": "aten::mm", "shapes": None, "count": 1.0, "self_cpu_us": 15.0, "self_device_us": 450.0}


def test_real_cpu_trace():
    x = torch.randn(200, 200)

    def work():
        return (x @ x).relu().sum()

    work()
    clean = profiling.run_clean_profile(work, 3, "cpu")
    assert clean.calls == 3
    assert clean.ops_per_call >= 3  # matmul, relu, sum
    assert clean.kernels_per_call == 0 and clean.host_blocked_us == 0
    assert 0 <= clean.overhead_fraction <= 1 and 0 < clean.busy_fraction <= 1
    assert {"aten::matmul", "aten::relu", "aten::sum"} <= {row["name"] for row in clean.top_ops}
    matmul = next(row for row in clean.top_ops if row["name"] == "aten::matmul")
    assert matmul["shapes"] == "[[200, 200], [200, 200]]"


def test_real_cpu_attribution_times_each_op():
    x = torch.randn(100, 100)
    attribution = profiling.run_attribution(lambda: (x @ x).sum(), __file__, "cpu")
    names = [r.name for r in attribution.records]
    assert names[:2] == ["aten::mm", "aten::sum"]
    assert all(attribution.timings[r.index].cpu_us > 0 for r in attribution.records)
    assert attribution.wall_us >= sum(t.cpu_us for t in attribution.timings.values())


def test_cpu_attribution_needs_no_trace(monkeypatch):
    # On a CPU the counting mode times ops itself; no profiler session is opened.
    def no_profiler(*args, **kwargs):
        raise AssertionError("profiler opened")

    monkeypatch.setattr(profiling.compat, "open_profiler", no_profiler)
    with OpCounter(__file__, ranges=False, time_ops=True) as counter:
        torch.ones(3) * 2
    assert counter.records[0].host_us > 0
    profiling.run_attribution(lambda: torch.ones(3) + 1, __file__, "cpu")


def test_cpu_attribution_over_several_calls_keeps_one_calls_records():
    x = torch.randn(64, 64)
    attribution = profiling.run_attribution(lambda: (x @ x).sum(), __file__, "cpu", n_calls=3)
    assert [r.name for r in attribution.records] == ["aten::mm", "aten::sum"]
    assert set(attribution.timings) == {0, 1}


def test_cpu_attribution_with_data_dependent_ops_uses_the_first_call():
    x, calls = torch.ones(4), []

    def varying():
        calls.append(1)
        for _ in range(len(calls)):  # one more op every call
            x + 1

    attribution = profiling.run_attribution(varying, __file__, "cpu", n_calls=3)
    assert len(calls) == 3 and len(attribution.records) == 1
    assert attribution.timings[0].cpu_us > 0
