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
    assert peaks.load_cached(cpu_peaks["key"]) is None  # another format counts as absent


def test_get_uses_the_cache(monkeypatch, tmp_path, cpu_peaks):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path))
    peaks.save(cpu_peaks)

    def must_not_measure(*args, **kwargs):
        raise AssertionError("measured although cached")

    monkeypatch.setattr(peaks, "measure", must_not_measure)
    found, source = peaks.get("cpu")
    assert (found, source) == (cpu_peaks, "cache")


def test_measured_cpu_ceilings(cpu_peaks):
    assert cpu_peaks["format"] == peaks.PEAKS_FORMAT == 2
    assert cpu_peaks["clock"] == "perf_counter"
    rates = cpu_peaks["compute_flops_per_s"]
    # every dtype a CPU supports, no tf32/int8 on a CPU
    assert {"float64", "float32", "bfloat16"} <= set(rates) <= {"float64", "float32", "bfloat16", "float16"}
    assert all(rate > 0 for rate in rates.values())
    assert set(cpu_peaks["compute_spread"]) == set(rates) == set(cpu_peaks["matmul_n"])
    levels = cpu_peaks["levels"]
    assert levels[-1]["name"] == "DRAM"
    assert cpu_peaks["bandwidth_bytes_per_s"] == levels[-1]["bandwidth_bytes_per_s"] > 0
    assert [lv["from_bytes"] for lv in levels] == sorted(lv["from_bytes"] for lv in levels)
    sizes = [p["working_set_bytes"] for p in cpu_peaks["sweep"]]
    assert sizes == sorted(sizes) and sizes[0] < 1 << 20  # measured from cache-sized working sets up
    assert cpu_peaks["load_average_1m"]["before"] is not None
    assert cpu_peaks["protocol"]["rounds"] >= 1
    for key in ("torch", "python", "perflsp", "measured_at", "duration_s", "budget_s"):
        assert cpu_peaks[key]


def test_measure_stays_within_its_budget():
    import time

    started = time.perf_counter()
    measured = peaks.measure("cpu", budget_s=1.0)
    elapsed = time.perf_counter() - started
    # the budget bounds the measuring; one last sample may run past it
    assert measured["duration_s"] < 1.0 + 0.5 and elapsed < 2.5


class _FakeClock:
    """Hands out the given sample times (the first is the warm-up): no real timing in logic tests."""

    device = "cpu"

    def __init__(self, seconds):
        self._seconds = iter(seconds)

    def once(self, fn):
        return next(self._seconds)


def test_converge_stops_when_the_best_three_agree():
    clock = _FakeClock([3.0, 1.0, 2.0, 1.02, 5.0, 1.01, 9.0, 9.0])
    got = peaks.converge(clock, lambda: None, deadline=float("inf"))
    assert got.converged and got.best_s == 1.0 and got.samples == 5 and got.spread == pytest.approx(0.02)


def test_converge_reports_an_unconverged_spread_at_the_deadline():
    got = peaks.converge(_FakeClock([3.0, 1.0, 2.0, 3.0]), lambda: None, deadline=0.0)
    assert not got.converged and got.samples == 2 and got.spread == pytest.approx(1.0)


def _sweep(bandwidths_gb):
    """Sweep points at working sets doubling from 48 KiB, with the given bandwidths."""
    points = []
    for i, gb in enumerate(bandwidths_gb):
        size = (48 << 10) << i
        points.append({"working_set_bytes": size, "bytes_per_s": gb * 1e9, "call_us": size / (gb * 1e3),
                       "spread": 0.01, "converged": True})
    return points


def test_memory_levels_from_a_measured_shape():
    # dispatch-bound ramp, a cache plateau, one transition point, main memory
    sweep = _sweep([30, 60, 130, 190, 200, 195, 192, 140, 70, 68, 66])
    levels = peaks.memory_levels(sweep, "cpu")
    assert [lv["name"] for lv in levels] == ["LLC", "DRAM"]
    assert levels[0]["bandwidth_bytes_per_s"] == 200e9 and levels[1]["bandwidth_bytes_per_s"] == 70e9
    assert levels[0]["from_bytes"] == sweep[3]["working_set_bytes"]  # the ramp belongs to no level
    # a working set picks the last plateau starting at or below it; between plateaus, the faster one
    assert peaks.level_for(levels, 64 << 10)["name"] == "LLC"  # dispatch-bound sizes: the first level
    assert peaks.level_for(levels, sweep[7]["working_set_bytes"])["name"] == "LLC"
    assert peaks.level_for(levels, sweep[9]["working_set_bytes"])["name"] == "DRAM"
    assert peaks.level_for(levels, None)["name"] == "DRAM"


def test_cache_levels_are_named_from_main_memory_back():
    sweep = _sweep([300, 310, 200, 205, 120, 118, 50, 49])
    assert [lv["name"] for lv in peaks.memory_levels(sweep, "cpu")] == ["L1", "L2", "LLC", "DRAM"]
    assert [lv["name"] for lv in peaks.memory_levels(sweep, "cuda")] == ["cache 1", "cache 2", "L2", "device memory"]


def test_disturbed_points_are_the_ones_slower_than_a_larger_size():
    sweep = _sweep([30, 60, 130, 190, 200, 195])
    sweep[2]["call_us"] = 8000.0  # a scheduler slice lost to another process
    assert peaks.disturbed(sweep) == [2]


def test_rounds_agree_within_twice_the_sample_tolerance():
    assert peaks.rounds_agree({"float32": 100.0, "bandwidth DRAM": 50.0}, {"float32": 95.0, "bandwidth DRAM": 52.0})
    assert not peaks.rounds_agree({"float32": 100.0}, {"float32": 60.0})  # a round under load
    assert not peaks.rounds_agree({"float32": 100.0}, {"bandwidth L2": 60.0})  # a level the best never had


def test_cuda_plan_guards_tf32_and_int8_by_architecture():
    # tested with fakes only: no GPU in CI
    assert [p.key for p in peaks.matmul_plan("cuda", "7.0")] == ["float64", "float32", "bfloat16", "float16"]
    ampere = peaks.matmul_plan("cuda", "8.0")
    assert [p.key for p in ampere] == ["float64", "float32", "tf32", "bfloat16", "float16", "int8"]
    assert next(p for p in ampere if p.key == "tf32").tf32 is True
    assert next(p for p in ampere if p.key == "float32").tf32 is False
    assert [p.key for p in peaks.matmul_plan("cpu", None)] == ["float64", "float32", "bfloat16", "float16"]


def test_an_unsupported_dtype_is_skipped_with_its_reason():
    assert peaks.supported("cpu", peaks.MatmulPlan("float32", "float32")) is None
    assert "AttributeError" in peaks.supported("cpu", peaks.MatmulPlan("nonesuch", "no_such_dtype"))


def test_ladder_climbs_to_the_plateau_and_keeps_the_best_size():
    import torch

    points = peaks.matmul_ladder("cpu", peaks.MatmulPlan("float32", "float32"), peaks._Clock("cpu"),
                                 deadline=float("inf"), sizes=(64, 128, 256, 512))
    assert [p["n"] for p in points] == [64, 128, 256, 512][: len(points)]
    rates = [p["flops_per_s"] for p in points]
    # it stopped because a size gained < 10% on the best before it, or the list ran out
    assert len(points) == 4 or rates[-1] < max(rates[:-1]) * (1 + peaks.PLATEAU_GAIN)
    assert torch.get_num_threads() >= 1


def test_the_result_names_its_ceilings(cpu_peaks):
    other = dict(cpu_peaks, measured_at="2000-01-01T00:00:00+00:00")
    assert peaks.ceilings_id(cpu_peaks) == peaks.ceilings_id(dict(cpu_peaks))
    assert peaks.ceilings_id(cpu_peaks) != peaks.ceilings_id(other)


def test_a_format_1_file_counts_as_absent_and_profile_does_not_replace_a_stored_one(monkeypatch, tmp_path, cpu_peaks):
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(tmp_path))
    path = peaks.save(cpu_peaks)
    old = {k: v for k, v in cpu_peaks.items() if k not in ("levels", "sweep")}
    path.write_text(json.dumps(dict(old, format=1)))
    assert peaks.load_cached(cpu_peaks["key"]) is None
    peaks.save(cpu_peaks)
    monkeypatch.setattr(peaks, "measure", lambda *a, **k: pytest.fail("re-measured behind the user's back"))
    assert peaks.get("cpu") == (cpu_peaks, "cache")


def test_ceiling_choice():
    measured = {"compute_flops_per_s": {"float32": 50e12, "tf32": 400e12, "bfloat16": 790e12}}
    assert peaks.ceiling_for(measured, "bfloat16", False)[:2] == ("bfloat16", 790e12)
    assert peaks.ceiling_for(measured, "float32", True)[:2] == ("tf32", 400e12)
    assert peaks.ceiling_for(measured, "float32", False)[:2] == ("float32", 50e12)
    key, rate, notes = peaks.ceiling_for(measured, "float64", False)
    assert (key, rate) == ("float32", 50e12) and "no measured float64 ceiling" in notes[0]
    assert peaks.ceiling_for(measured, None, False)[0] == "float32"
