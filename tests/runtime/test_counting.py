"""FLOPs, bytes, syncs and lines from the counting dispatch mode."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from perflsp.runtime.counting import OpCounter, parse_range_name, touched_bytes

HERE = __file__


def count(fn, *args):
    with OpCounter(HERE, ranges=False) as counter:
        fn(*args)
    return counter.records


def reference_flops(fn, *args):
    with FlopCounterMode(display=False) as mode:
        fn(*args)
    return mode.get_total_flops()


def test_matmul_family_matches_flop_counter_mode():
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    weight, bias = torch.randn(16, 32), torch.randn(16)
    batch = torch.randn(4, 8, 16), torch.randn(4, 16, 8)
    image, kernel = torch.randn(2, 3, 16, 16), torch.randn(4, 3, 3, 3)
    cases = [
        (lambda: a @ b, ()),
        (lambda: F.linear(a, weight, bias), ()),
        (lambda: torch.bmm(*batch), ()),
        (lambda: F.conv2d(image, kernel, padding=1), ()),
    ]
    for fn, args in cases:
        records = count(fn, *args)
        matmul = sum(r.flops for r in records if r.flop_kind == "matmul")
        assert matmul == reference_flops(fn, *args) > 0
    assert sum(r.flops for r in count(lambda: a @ b)) == 2 * 64 * 32 * 48


def test_pointwise_one_flop_per_output_and_three_buffers_of_traffic():
    x, y = torch.randn(1000), torch.randn(1000)
    (record,) = count(torch.add, x, y)
    assert (record.name, record.flop_kind, record.flops) == ("aten::add", "pointwise", 1000)
    assert (record.bytes_read, record.bytes_written) == (8000, 4000)
    assert record.dtype == "float32" and record.device == "cpu"


def test_broadcast_dimension_is_read_once():
    x, bias = torch.randn(100, 50), torch.randn(50)
    (record,) = count(torch.add, x, bias)
    assert record.bytes_read == 100 * 50 * 4 + 50 * 4
    assert touched_bytes(bias.expand(100, 50)) == 50 * 4


def test_out_buffer_and_copy_destination_are_written_not_read():
    x, y, out = torch.randn(256), torch.randn(256), torch.empty(256)
    (record,) = count(lambda: torch.add(x, y, out=out))
    assert (record.bytes_read, record.bytes_written) == (2048, 1024)
    (record,) = count(lambda: out.copy_(x))
    assert (record.name, record.flops, record.bytes_read, record.bytes_written) == ("aten::copy_", 0, 1024, 1024)


def test_in_place_reads_and_writes_self():
    x, y = torch.randn(256), torch.randn(256)
    (record,) = count(lambda: x.add_(y))
    assert (record.bytes_read, record.bytes_written) == (2048, 1024)


def test_views_and_empty_cost_nothing():
    x = torch.randn(10, 10)
    records = count(lambda: (x.view(100), x.t(), torch.empty(1000)))
    assert [r.name for r in records] == ["aten::view", "aten::t", "aten::empty"]
    assert all(r.bytes == 0 and r.flops == 0 for r in records)


def test_reduction_counts_its_input():
    x = torch.randn(300)
    sums = [r for r in count(lambda: x.sum()) if r.name == "aten::sum"]
    assert sums[0].flop_kind == "reduction" and sums[0].flops == 300


def test_syncs_are_named():
    x = torch.randn(100)
    records = count(lambda: (x.sum().item(), x[x > 0], torch.nonzero(x)))
    kinds = {r.name: r.sync_kind for r in records if r.sync_kind}
    assert kinds["aten::_local_scalar_dense"] == "item"
    assert kinds["aten::index"] == "data-dependent-shape"
    assert kinds["aten::nonzero"] == "data-dependent-shape"


def helper(x):
    return x.exp()  # LINE: helper


def calls_helper(x):
    y = x * 3  # LINE: caller
    return helper(y)  # LINE: call


def _line(marker):
    for number, text in enumerate(open(HERE).read().splitlines(), start=1):
        if text.rstrip().endswith(f"# LINE: {marker}"):
            return number
    raise AssertionError(marker)


def test_ops_are_charged_to_the_innermost_frame_in_the_file():
    records = count(calls_helper, torch.randn(10))
    lines = {r.name: r.line for r in records}
    assert lines["aten::mul"] == _line("caller")
    assert lines["aten::exp"] == _line("helper")


def backward_case(w, x):
    loss = (x @ w).sum()
    loss.backward()  # LINE: backward


def test_backward_ops_belong_to_the_backward_line():
    w = torch.randn(8, 4, requires_grad=True)
    records = count(backward_case, w, torch.randn(5, 8))
    backward = [r for r in records if r.line == _line("backward")]
    assert any(r.flop_kind == "matmul" for r in backward)  # the weight gradient's mm


def test_ranges_name_each_op_for_the_join():
    with OpCounter(HERE, ranges=True) as counter:
        torch.randn(4) + 1
    assert [parse_range_name(r.range_name) for r in counter.records] == [(r.line or 0, r.index) for r in counter.records]
    assert parse_range_name("perflsp@call") is None
    assert parse_range_name("perflsp@12#7") == (12, 7)


def test_patches_are_removed_afterwards():
    before = torch.Tensor.backward
    with OpCounter(HERE, ranges=False):
        assert torch.Tensor.backward is not before
    assert torch.Tensor.backward is before
