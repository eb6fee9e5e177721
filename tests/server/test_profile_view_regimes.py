"""The editor's headline for each regime (no torch, no server)."""
from __future__ import annotations

from perflsp.profile_result import REGIMES, SCHEMA_VERSION
from perflsp.server import profile_view


def _result(regime, flops_fraction, bandwidth_fraction):
    return {"schema_version": SCHEMA_VERSION, "status": "ok", "target": {"qualname": "f"},
            "verdict": {"regime": regime, "summary": f"{regime}: ...", "reasons": [], "levers": ["batch"], "notes": []},
            "timing": {"median_us": 1200.0}, "device": {"kind": "cpu"},
            "totals": {"flops_fraction": flops_fraction, "bandwidth_fraction": bandwidth_fraction},
            "ceilings": {"peak_flops_per_s": 2e11, "bandwidth_bytes_per_s": 1e11}}


def test_latency_bound_is_a_regime_of_this_version():
    assert SCHEMA_VERSION >= 2 and "latency-bound" in REGIMES


def test_latency_bound_headline_names_the_nearer_roof():
    assert profile_view.headline(_result("latency-bound", 0.004, 0.034)) == "latency-bound · 1.2 ms · 3% of 100 GB/s"
    assert profile_view.headline(_result("latency-bound", 0.05, 0.01)) == "latency-bound · 1.2 ms · 5% of 200 GFLOP/s"
    assert profile_view.headline(_result("latency-bound", None, 0.02)) == "latency-bound · 1.2 ms · 2% of 100 GB/s"
    assert profile_view.headline(_result("compute-bound", 0.5, 0.9)).endswith("50% of 200 GFLOP/s")
    assert profile_view.headline(_result("memory-bound", 0.5, 0.9)).endswith("90% of 100 GB/s")


def test_hover_shows_the_latency_verdict():
    text = profile_view.hover_text(_result("latency-bound", 0.004, 0.034), stale=False, result_file=None)
    assert "**latency-bound**" in text and "lever: batch" in text


def test_the_line_table_shows_each_lines_spread_over_its_profiled_calls():
    result = _result("compute-bound", 0.5, 0.1)
    result["lines"] = [
        {"line": 3, "time_us": 100.0, "time_min_us": 80.0, "time_max_us": 120.0, "calls": 5, "share": 0.9,
         "flops": 1e6, "bytes": 1e3, "regime": "compute-bound", "code": "y = a @ b"},
        {"line": 4, "time_us": 10.0, "time_min_us": 10.0, "time_max_us": 10.0, "calls": 1, "share": 0.1,
         "flops": 0, "bytes": 1e3, "regime": "memory-bound", "code": "z = y.cpu()"},
    ]
    text = profile_view.hover_text(result, stale=False, result_file=None)
    assert "| line | time | spread | share |" in text
    assert "| 3 | 100 µs | ±20% | 90% |" in text and "| 4 | 10 µs |  | 10% |" in text
