"""The profiling process's job handling, run in this process (the subprocess and watchdog
are covered by test_runtime_cli.py): inputs, and each way a target can fail."""
from __future__ import annotations

import json
import sys

import pytest

from perflsp import profile_result
from perflsp.runtime import worker


@pytest.fixture
def run_job(peaks_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(peaks_cache))
    saved_path, saved_modules = list(sys.path), set(sys.modules)

    def run(target: str, **options):
        data = {"command": "profile", "target": target, "cwd": str(tmp_path), "setup": None, "run": None,
                "stop_program": True, "warmup": None, "iters": None, "min_time_s": 0.05, "timeout_s": 60.0,
                "device": "auto", "top_lines": 10, "result": str(tmp_path / "result.json")}
        data.update(options)
        job = worker.Job(data)
        code = worker.run_profile(job)
        result = json.loads((tmp_path / "result.json").read_text())
        assert profile_result.check(result) == []
        return code, result

    yield run
    sys.path[:] = saved_path  # the worker imports the user's modules: leave no trace
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]


def test_marker_inputs_and_its_warmup(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'ref_cases.py'}:mixed")
    assert code == 0 and result["status"] == "ok"
    assert result["settings"]["inputs"] == "marker"
    assert result["settings"]["warmup"] == 2  # the marker's warmup= applies when no flag is given
    assert result["timing"]["warmup_calls"] >= 2


def test_setup_flag_with_a_method_target(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'ref_cases.py'}:Model.forward",
                           setup=f"{targets_dir / 'ref_cases.py'}:model_inputs", iters=4, warmup=1)
    assert code == 0
    assert (result["settings"]["inputs"], result["settings"]["warmup"], result["timing"]["calls"]) == ("setup", 1, 4)
    assert result["lines"][0]["code"] == "return x @ self.w"


def test_module_target_missing_attribute(run_job, targets_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(targets_dir))
    code, result = run_job("ref_cases:nope", setup=f"{targets_dir / 'ref_cases.py'}:tiny_inputs")
    assert code == 6
    assert result["error"]["kind"] == "target-not-found" and "tiny_ops" in result["error"]["defined"]


def test_no_inputs(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'faults.py'}:plain")
    assert code == 2 and result["error"]["kind"] == "usage"
    assert "@perflsp.profile(setup=make_inputs)" in result["error"]["message"]


def test_raising_target(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'faults.py'}:raises")
    assert code == 3
    error = result["error"]
    assert (error["kind"], error["exception_type"], error["phase"]) == ("exception", "ValueError", "warm-up")
    assert "in raises" in error["traceback"] and "ValueError: bad value 8.0" in error["traceback"]
    assert "runtime/timing.py" not in error["traceback"]


def test_raising_setup(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'faults.py'}:plain", setup=f"{targets_dir / 'faults.py'}:raises")
    assert code == 3 and result["error"]["phase"] == "setup"


def test_out_of_memory(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'faults.py'}:out_of_memory")
    assert code == 5
    assert result["error"]["kind"] == "out-of-memory"
    assert "1125899906842624 bytes" in result["error"]["message"] and "available of" in result["error"]["message"]


def test_cuda_asked_for_without_cuda(run_job, targets_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, result = run_job(f"{targets_dir / 'ref_cases.py'}:matmul", device="cuda")
    assert code == 2 and "no CUDA device" in result["error"]["message"]


def test_peaks_job_with_an_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path / "empty"))
    job = worker.Job({"command": "peaks", "device": "cpu", "cached_only": True, "result": str(tmp_path / "r.json")})
    assert worker.run_peaks(job) == 2
    assert "no cached ceilings" in json.loads((tmp_path / "r.json").read_text())["error"]


def test_peaks_job_reads_the_cache(peaks_cache, cpu_peaks, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(peaks_cache))
    job = worker.Job({"command": "peaks", "device": "cpu", "cached_only": True, "result": str(tmp_path / "r.json")})
    assert worker.run_peaks(job) == 0
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["source"] == "cache" and payload["peaks"] == cpu_peaks


def test_a_perflsp_bug_is_not_blamed_on_the_target(run_job, targets_dir, monkeypatch):
    from perflsp.runtime import analysis

    # A builtin that fails on the runtime's own data: every Python frame is perflsp's.
    monkeypatch.setattr(analysis, "_dominant_dtype", int)
    code, result = run_job(f"{targets_dir / 'ref_cases.py'}:matmul", iters=2, warmup=1)
    assert code == 3
    assert result["error"]["message"].startswith("internal error in perflsp")
    assert "in build_result" in result["error"]["traceback"]  # the full traceback, runtime frames kept


def test_the_targets_own_failure_is_not_internal(run_job, targets_dir):
    code, result = run_job(f"{targets_dir / 'faults.py'}:raises")
    assert not result["error"]["message"].startswith("internal error")


def test_probe_finds_cpu_work():
    import torch

    assert worker.probe_device(lambda: torch.ones(3) * 2, __file__) == "cpu"
