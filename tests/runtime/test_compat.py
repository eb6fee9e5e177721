"""The compatibility layer, against the installed torch and against both spellings."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch

from perflsp.runtime import compat

Kernel = namedtuple("Kernel", ["name", "device", "duration"])


class NewStyleEvent:
    """torch >= 2.4 spelling (what FunctionEventAvg has in 2.13)."""

    device_time_total = 5.0
    self_device_time_total = 3.0
    device_time = 2.5
    self_cpu_time_total = 7.0


class OldStyleEvent:
    """torch < 2.4 spelling: no device_* attributes at all."""

    cuda_time_total = 11.0
    self_cuda_time_total = 6.0
    cuda_time = 5.5
    self_cpu_time_total = 4.0


def test_new_spelling():
    event = NewStyleEvent()
    assert compat.device_time_total_us(event) == 5.0
    assert compat.self_device_time_total_us(event) == 3.0
    assert compat.device_time_us(event) == 2.5


def test_old_spelling():
    event = OldStyleEvent()
    assert compat.device_time_total_us(event) == 11.0
    assert compat.self_device_time_total_us(event) == 6.0
    assert compat.device_time_us(event) == 5.5
    assert compat.self_cpu_time_total_us(event) == 4.0


def test_neither_spelling_is_zero():
    assert compat.device_time_total_us(SimpleNamespace()) == 0.0


def _real_profile():
    x = torch.ones(1000)
    with compat.open_profiler(use_cuda=False) as prof:
        (x * 2).sum()
    return prof


def test_real_torch_events_and_averages_without_deprecation_warnings():
    prof = _real_profile()
    events = list(compat.profiler_events(prof))
    averages = list(prof.key_averages())
    assert any(e.name == "aten::mul" for e in events)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the old names warn in 2.13: never touched
        for item in events + averages:
            assert compat.device_time_total_us(item) == 0.0  # CPU-only: every device time is 0
            assert compat.self_device_time_total_us(item) == 0.0
            assert compat.device_time_us(item) == 0.0
            assert compat.self_cpu_time_total_us(item) >= 0.0
    assert all(compat.event_device_name(e) == "CPU" for e in events)
    assert not any(compat.is_device_event(e) for e in events)


def test_key_averages_rows_really_lack_the_old_names():
    # Why the layer exists: FunctionEventAvg in this torch has no cuda_time_total at all.
    row = list(_real_profile().key_averages())[0]
    if hasattr(torch.autograd.profiler_util.FunctionEventAvg, "cuda_time_total"):
        pytest.skip("this torch still has the old spelling on FunctionEventAvg")
    with pytest.raises(AttributeError):
        row.cuda_time_total


def test_kernel_time_skips_annotation_mirrors():
    event = SimpleNamespace(kernels=[Kernel("ampere_sgemm", 0, 40.0), Kernel("perflsp@12#3", 0, 41.0),
                                     Kernel("elementwise_kernel", 0, 2.0)])
    assert compat.kernel_time_us(event) == 42.0


def test_device_name_from_enum_and_fakes():
    assert compat.event_device_name(SimpleNamespace(device_type=torch.autograd.DeviceType.CUDA)) == "CUDA"
    assert compat.is_device_event(SimpleNamespace(device_type=SimpleNamespace(name="CUDA")))
    assert compat.is_user_annotation(SimpleNamespace(name="perflsp@call"))
    assert compat.is_user_annotation(SimpleNamespace(name="x", is_user_annotation=True))
    assert not compat.is_user_annotation(SimpleNamespace(name="aten::mm", is_user_annotation=False))


class NewProfile:
    def __init__(self, enabled=True, *, use_device=None, record_shapes=False):
        pass


class OldProfile:
    def __init__(self, enabled=True, *, use_cuda=False, record_shapes=False):
        pass


def test_profiler_keyword_for_both_constructors():
    assert compat.profiler_kwargs(NewProfile, True, False) == {"use_device": "cuda", "record_shapes": False}
    assert compat.profiler_kwargs(NewProfile, False, False) == {"use_device": None, "record_shapes": False}
    assert compat.profiler_kwargs(OldProfile, True, True) == {"use_cuda": True, "record_shapes": True}
    assert compat.profiler_kwargs(OldProfile, False, True) == {"record_shapes": True}


def test_flop_formula_output_keyword_both_ways():
    def new_style(a, b, *args, out_val=None, **kwargs):
        return ("new", out_val)

    def old_style(a, b, *args, out=None, **kwargs):
        return ("old", out)

    calls = []
    compat._output_keyword.cache_clear()
    assert compat._output_keyword(new_style) == "out_val"
    assert compat._output_keyword(old_style) == "out"

    def counting(a, b, out_val=None):
        calls.append(out_val)
        return 7

    assert compat.call_flop_formula(counting, (1, 2), {}, "OUT") == 7
    assert calls == ["OUT"]


def test_real_mm_formula_counts_two_flops_per_multiply_add():
    from torch.utils.flop_counter import flop_registry

    a, b = torch.randn(4, 5), torch.randn(5, 6)
    assert compat.call_flop_formula(flop_registry[torch.ops.aten.mm], (a, b), {}, a @ b) == 2 * 4 * 5 * 6


def test_out_of_memory_detection():
    assert compat.is_out_of_memory(MemoryError())
    assert compat.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 5 bytes"))
    assert compat.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not compat.is_out_of_memory(ValueError("out of memory"))
    assert not compat.is_out_of_memory(RuntimeError("shape mismatch"))
    for cls in compat.out_of_memory_types():
        assert compat.is_out_of_memory(cls.__new__(cls))


def test_storage_key_shares_between_views():
    x = torch.arange(10.0)
    assert compat.storage_key(x) == compat.storage_key(x[2:5]) == compat.storage_key(x.view(2, 5))
    assert compat.storage_key(x) != compat.storage_key(x.clone())


def test_kineto_start_stop_chatter_is_filtered_but_other_output_kept(capfd):
    with compat._filtered_stderr():
        os.write(2, b"USDT:2026 profiler_start\nCUPTI_ERROR_INSUFFICIENT_PRIVILEGES\nSTAGE: Warm Up\n")
    assert capfd.readouterr().err == "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES\n"


def test_profiling_and_counting_never_import_dynamo():
    # Importing dynamo costs seconds on a small machine; torch.profiler.profile and a default
    # TorchDispatchMode both trigger it, the runtime's own paths must not.
    code = (
        "import sys, torch\n"
        "from perflsp.runtime import profiling\n"
        "f = lambda: (torch.ones(8) * 2).sum()\n"
        "profiling.run_clean_profile(f, 1, 'cpu')\n"
        "profiling.run_attribution(f, '<string>', 'cpu')\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
