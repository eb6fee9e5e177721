"""Device ceilings: datasheet matching, the cache, the measured CPU figures."""
from __future__ import annotations

import json

import pytest

from perflsp.runtime import datasheet, peaks


@pytest.mark.parametrize("name, cc, expected", [
    ("NVIDIA H200", "9.0", "H200 SXM"),
    ("NVIDIA H100 80GB HBM3", "9.0", "H100 SXM"),
    ("NVIDIA H100 PCIe", "9.0", "H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "8.0", "A100 SXM 80GB"),
    ("NVIDIA A100 80GB PCIe", "8.0", "A100 PCIe 80GB"),
    ("NVIDIA A100-SXM4-40GB", "8.0", "A100 40GB"),
    ("NVIDIA L40S", "8.9", "L40S"),
    ("NVIDIA L4", "8.9", "L4"),
    ("NVIDIA GeForce RTX 4090", "8.9", "RTX 4090"),
    ("NVIDIA H100 NVL", "9.0", None),  # not in the table: no guess
    ("NVIDIA H200", "8.0", None),  # a name match with the wrong architecture is rejected
    ("Tesla T4", "7.5", None),
])
def test_datasheet_matching(name, cc, expected):
    sheet = datasheet.lookup(name, cc)
    assert (sheet.name if sheet else None) == expected


def test_datasheet_figures_are_dense_decimal():
    h200 = datasheet.lookup("NVIDIA H200", "9.0")
    assert h200.bandwidth_bytes_per_s == 4.8e12
    assert h200.compute_flops_per_s["bfloat16"] == pytest.approx(989.4e12)
    assert datasheet.as_dict(h200)["compute_flops_per_s"]["float32"] == 67e12


CPU_DEVICE = {"kind": "cpu", "name": "AMD EPYC", "threads": 2, "compute_capability": None}
GPU_DEVICE = {"kind": "cuda", "name": "NVIDIA H200", "threads": None, "compute_capability": "9.0"}


def test_cache_key_separates_devices_versions_and_threads():
    keys = {
        peaks.cache_key(CPU_DEVICE, "2.13.0", None),
        peaks.cache_key(dict(CPU_DEVICE, threads=4), "2.13.0", None),
        peaks.cache_key(CPU_DEVICE, "2.11.0", None),
        peaks.cache_key(GPU_DEVICE, "2.11.0", "12.8"),
        peaks.cache_key(GPU_DEVICE, "2.11.0", "12.6"),
    }
    assert len(keys) == 5
    assert all("/" not in k and " " not in k for k in keys)


def test_cache_dir_override_and_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path / "c"))
    assert peaks.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PERFLSP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if peaks.sys.platform.startswith("linux"):
        assert peaks.cache_dir() == tmp_path / "xdg" / "perflsp"


def test_cache_round_trip_and_rejection(monkeypatch, tmp_path, cpu_peaks):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path))
    path = peaks.save(cpu_peaks)
    assert path.parent == tmp_path / "peaks"
    assert peaks.load_cached(cpu_peaks["key"]) == cpu_peaks
    assert peaks.load_cached("some-other-device") is None
    path.write_text(json.dumps(dict(cpu_peaks, format=peaks.PEAKS_FORMAT + 1)))
    assert peaks.load_cached(cpu_peaks["key"]) is None  # an older/newer format is re-measured


def test_get_uses_the_cache(monkeypatch, tmp_path, cpu_peaks):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path))
    peaks.save(cpu_peaks)

    def must_not_measure(*args, **kwargs):
        raise AssertionError("measured although cached")

    monkeypatch.setattr(peaks, "measure", must_not_measure)
    found, source = peaks.get("cpu")
    assert (found, source) == (cpu_peaks, "cache")


def test_measured_cpu_ceilings(cpu_peaks):
    assert cpu_peaks["device"]["kind"] == "cpu"
    assert cpu_peaks["clock"] == "perf_counter"
    bandwidth = cpu_peaks["bandwidth"]
    assert cpu_peaks["bandwidth_bytes_per_s"] == max(bandwidth["copy_bytes_per_s"], bandwidth["triad_bytes_per_s"]) > 0
    assert bandwidth["buffer_bytes"] >= 64 << 20  # beyond the last-level cache
    assert set(cpu_peaks["compute_flops_per_s"]) == {"float32", "bfloat16"}  # no tf32 on a CPU
    assert all(rate > 0 for rate in cpu_peaks["compute_flops_per_s"].values())
    assert cpu_peaks["matmul_n"]["float32"] >= 256


def test_ceiling_choice():
    measured = {"compute_flops_per_s": {"float32": 50e12, "tf32": 400e12, "bfloat16": 790e12}}
    assert peaks.ceiling_for(measured, "bfloat16", False)[:2] == ("bfloat16", 790e12)
    assert peaks.ceiling_for(measured, "float32", True)[:2] == ("tf32", 400e12)
    assert peaks.ceiling_for(measured, "float32", False)[:2] == ("float32", 50e12)
    key, rate, notes = peaks.ceiling_for(measured, "float64", False)
    assert (key, rate) == ("float32", 50e12) and "no measured float64 ceiling" in notes[0]
    assert peaks.ceiling_for(measured, None, False)[0] == "float32"
