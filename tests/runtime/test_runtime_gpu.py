"""GPU checks (marked `gpu`, skipped without CUDA). They need no jsonschema: results are
checked with perflsp.profile_result.check. Run by bench/gpu_check.sh on an H200."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from perflsp import profile_result
from perflsp.runtime import compat, datasheet, peaks, profiling
from perflsp.runtime.session import profile_function
from perflsp.runtime.timing import TimingOptions

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TIMING = TimingOptions(min_time_s=0.2)


@pytest.fixture(scope="module")
def gpu_peaks():
    return peaks.measure("cuda", budget_s=3.0)


@pytest.fixture(scope="module")
def gpu_cases():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "targets" / "gpu_cases.py"
    spec = importlib.util.spec_from_file_location("perflsp_test_targets.gpu_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def profile(gpu_cases, gpu_peaks):
    cache = {}

    def run(name):
        if name not in cache:
            fn = getattr(gpu_cases, name)
            cache[name] = profile_function(fn, fn.__perflsp_profile__.setup(), device="cuda", peaks=gpu_peaks,
                                           timing=TIMING)
            assert profile_result.check(cache[name]) == []
        return cache[name]

    return run


def test_peaks_are_plausible_for_the_device(gpu_peaks):
    rates = gpu_peaks["compute_flops_per_s"]
    assert gpu_peaks["clock"] == "cuda-events"
    assert gpu_peaks["bandwidth_bytes_per_s"] > 100e9
    assert rates["bfloat16"] > rates["float32"]
    major = int(gpu_peaks["device"]["compute_capability"].split(".")[0])
    assert ("tf32" in rates) == (major >= 8)
    sheet = datasheet.lookup(gpu_peaks["device"]["name"], gpu_peaks["device"]["compute_capability"])
    if sheet is not None:  # measured ceilings can approach the datasheet, not beat it by much
        assert gpu_peaks["bandwidth_bytes_per_s"] < 1.15 * sheet.bandwidth_bytes_per_s
        assert rates["bfloat16"] < 1.15 * sheet.compute_flops_per_s["bfloat16"]
    print(json.dumps({k: gpu_peaks[k] for k in ("device", "bandwidth_bytes_per_s", "compute_flops_per_s")}))


@pytest.mark.parametrize("case, regime", [
    ("matmul_bf16", "compute-bound"),
    ("gemm_then_item", "compute-bound"),
    ("copy", "memory-bound"),
    ("elementwise", "memory-bound"),
    ("tiny_ops", "overhead-bound"),
    ("tiny_kernels", "overhead-bound"),
    ("item_per_step", "sync-bound"),
    ("round_trip", "transfer-bound"),
])
def test_gpu_reference_regimes(profile, case, regime):
    result = profile(case)
    print(case, result["verdict"]["summary"])
    assert result["verdict"]["regime"] == regime, result["verdict"]["summary"]
    assert result["timing"]["clock"] == "cuda-events"
    assert result["device"]["kind"] == "cuda"


def test_memory_bound_cases_reach_a_real_share_of_bandwidth(profile):
    for case in ("copy", "elementwise"):
        totals = profile(case)["totals"]
        assert 0.3 < totals["bandwidth_fraction"] < 1.15, totals


def test_matmul_uses_the_bf16_ceiling_and_tensor_cores(profile):
    result = profile("matmul_bf16")
    assert result["ceilings"]["dtype"] == "bfloat16"
    assert 0.2 < result["totals"]["flops_fraction"] < 1.15
    (line,) = [l for l in result["lines"] if l["code"] == "torch.mm(a, b, out=out)"]
    assert line["device_time_us"] > 0 and line["regime"] == "compute-bound"
    assert result["kernels"]["top"] and result["kernels"]["busy_fraction"] > 0.5


def test_launch_bound_chain_shows_many_short_kernels(profile, gpu_cases):
    kernels = profile("tiny_kernels")["kernels"]
    assert kernels["per_call"] >= gpu_cases.TINY_KERNELS
    assert kernels["median_us"] < 10 and kernels["short_fraction"] > 0.9
    assert kernels["busy_fraction"] < 0.5 and kernels["gaps"]["count"] > 0 and kernels["idle_us"] > 0


def test_sync_line_is_named(profile):
    result = profile("item_per_step")
    sync = result["syncs"][0]
    assert sync["code"] == "total += x.norm().item()" and sync["kind"] == "item" and sync["blocking"]
    assert sync["count"] == 50 and sync["share"] > 0.2
    assert "total += x.norm().item()" in " ".join(result["verdict"]["reasons"])
    assert result["kernels"]["host_blocked_us"] > 0


def test_transfer_lines(profile):
    result = profile("round_trip")
    kinds = {s["kind"] for s in result["syncs"]}
    assert "device-to-host" in kinds
    assert any(line["regime"] == "transfer-bound" for line in result["lines"])


def test_compat_on_real_cuda_events():
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with compat.open_profiler(use_cuda=True) as prof:
        (x * 2).sum()
        torch.cuda.synchronize()
    events = list(compat.profiler_events(prof))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        assert any(compat.is_device_event(e) for e in events)
        assert sum(compat.self_device_time_total_us(e) for e in events if not compat.is_device_event(e)) > 0
        assert sum(compat.self_device_time_total_us(row) for row in prof.key_averages()) > 0
    assert any(e.name in profiling.SYNC_EVENT_NAMES for e in events)


def test_cuda_out_of_memory_names_the_sizes(gpu_cases, tmp_path, monkeypatch):
    from pathlib import Path

    from perflsp.runtime import worker

    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path / "cache"))
    target = Path(gpu_cases.__file__)
    job = worker.Job({"command": "profile", "target": f"{target}:out_of_memory", "cwd": str(tmp_path),
                      "setup": None, "run": None, "stop_program": True, "warmup": None, "iters": None,
                      "min_time_s": 0.05, "timeout_s": 60.0, "device": "cuda", "peaks_budget_s": 1.0,
                      "result": str(tmp_path / "r.json")})
    assert worker.run_profile(job) == 5
    error = json.loads((tmp_path / "r.json").read_text())["error"]
    assert error["kind"] == "out-of-memory"
    assert "free of" in error["message"] and "PyTorch holds" in error["message"]
