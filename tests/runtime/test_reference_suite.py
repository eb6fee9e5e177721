"""The CPU reference suite: known regimes classified correctly, attribution on the right lines.

Profiles run in this process with short timing windows. Assertions are about regimes, lines
and relative order, never absolute speed: CI machines are noisy.
"""
from __future__ import annotations

import pytest

from perflsp import profile_result
from perflsp.runtime.session import profile_function
from perflsp.runtime.timing import TimingOptions

FAST = TimingOptions(min_time_s=0.05, min_iters=5)


@pytest.fixture(scope="module")
def profiles(ref_cases, cpu_peaks):
    """Every reference case profiled once (the tests below only read the results)."""
    results = {}
    for name in ("matmul", "elementwise", "copy", "tiny_ops", "mixed"):
        fn = getattr(ref_cases, name)
        args = fn.__perflsp_profile__.setup()
        results[name] = profile_function(fn, args, device="cpu", peaks=cpu_peaks, timing=FAST)
    return results


@pytest.mark.parametrize("case, regime", [
    ("matmul", "compute-bound"),
    ("elementwise", "memory-bound"),
    ("copy", "memory-bound"),
    ("tiny_ops", "overhead-bound"),
])
def test_reference_regimes(profiles, case, regime):
    result = profiles[case]
    verdict = result["verdict"]
    if regime == "memory-bound" and not result["ceilings"]["converged"]:
        # The session's quick ceilings, measured in a burst of load, have put float32 at 263
        # MFLOP/s and the ridge under an add's intensity; the verdict then says they did not converge.
        assert any("did not converge" in note for note in verdict["notes"])
    else:
        assert verdict["regime"] == regime, verdict["summary"]
        assert verdict["summary"].startswith(regime)
    assert verdict["levers"]
    assert any("CPU profile" in note for note in verdict["notes"])


def test_attained_fraction_of_the_binding_ceiling_is_reported(profiles):
    matmul = profiles["matmul"]["totals"]
    assert matmul["flops_fraction"] > 0 and matmul["attained_flops_per_s"] > 0
    assert "% of the measured" in profiles["matmul"]["verdict"]["summary"]
    for case in ("elementwise", "copy"):
        totals = profiles[case]["totals"]
        assert totals["bandwidth_fraction"] > 0 and totals["attained_bytes_per_s"] > 0
        assert "B/s = " in profiles[case]["verdict"]["summary"]


def test_counts_match_the_known_work(profiles, ref_cases):
    n, elements = ref_cases.MATMUL_N, ref_cases.ELEMENTS
    assert profiles["matmul"]["totals"]["flops"] == 2 * n ** 3
    assert profiles["matmul"]["totals"]["flops_by_kind"] == {"matmul": 2 * n ** 3}
    assert profiles["elementwise"]["totals"]["flops"] == elements
    assert profiles["elementwise"]["totals"]["bytes"] == 3 * 4 * elements
    assert profiles["copy"]["totals"]["flops"] == 0
    assert profiles["copy"]["totals"]["bytes"] == 2 * 4 * elements
    assert profiles["copy"]["totals"]["intensity_flop_per_byte"] == 0
    assert profiles["tiny_ops"]["totals"]["ops"] >= ref_cases.TINY_OPS
    assert profiles["tiny_ops"]["kernels"]["ops_per_call"] >= ref_cases.TINY_OPS


def test_relative_order(profiles):
    matmul, elementwise, tiny = (profiles[c]["totals"] for c in ("matmul", "elementwise", "tiny_ops"))
    if profiles["matmul"]["ceilings"]["converged"]:  # a busy session can measure a ridge of 2000 FLOP/B
        assert matmul["intensity_flop_per_byte"] > profiles["matmul"]["ceilings"]["ridge_flop_per_byte"]
        assert elementwise["intensity_flop_per_byte"] < profiles["elementwise"]["ceilings"]["ridge_flop_per_byte"]
    assert matmul["attained_flops_per_s"] > tiny["attained_flops_per_s"]
    assert profiles["tiny_ops"]["kernels"]["median_op_us"] < profiles["matmul"]["kernels"]["median_op_us"]


def test_results_follow_the_schema(profiles):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(profile_result.load_schema())
    for result in profiles.values():
        assert profile_result.check(result) == []
        validator.validate(result)


def test_attribution_puts_the_time_on_the_matmul_line(profiles, targets_dir, find_line):
    source = targets_dir / "ref_cases.py"
    mixed = profiles["mixed"]
    lines = {entry["line"]: entry for entry in mixed["lines"]}
    matmul_line = find_line(source, "y = a @ a")
    assert mixed["lines"][0]["line"] == matmul_line
    assert lines[matmul_line]["regime"] == "compute-bound"
    assert lines[matmul_line]["code"] == "y = a @ a"
    assert lines[matmul_line]["flops"] == 2 * 256 ** 3
    assert lines[find_line(source, "z = x * 2")]["flops"] == 1000
    assert lines[find_line(source, "return y.relu()")]["top_ops"] == ["aten::relu"]  # innermost frame
    assert mixed["target"]["def_line"] == find_line(source, "def mixed(")
    assert mixed["settings"]["warmup"] == 3  # profile_function's options; the marker's warmup= is the CLI's


def test_the_item_call_is_reported_as_a_sync_on_its_line(profiles, targets_dir, find_line):
    (sync,) = profiles["mixed"]["syncs"]
    assert sync["line"] == find_line(targets_dir / "ref_cases.py", "total = z.sum().item()")
    assert (sync["kind"], sync["op"], sync["count"]) == ("item", "aten::_local_scalar_dense", 1.0)
    assert sync["blocking"] is False  # nothing to wait for on a CPU


def test_target_block_identifies_the_source(profiles, targets_dir):
    target = profiles["matmul"]["target"]
    text = (targets_dir / "ref_cases.py").read_text()
    assert target["source_sha256"] == profile_result.function_source_sha256(text, "matmul")[0]
    assert not profile_result.is_stale(profiles["matmul"], text)
