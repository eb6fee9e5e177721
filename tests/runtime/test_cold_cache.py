"""`--cold-cache`: rotating copies of the inputs, judged against main memory, and said so.

Real torch on the CPU; levels come from the session's measured ceilings, so the assertions
follow whatever this machine's sweep found rather than fixed sizes.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from perflsp import comparison, profile_result  # noqa: E402
from perflsp.runtime import cold_cache  # noqa: E402
from perflsp.runtime.peaks import level_for  # noqa: E402
from perflsp.runtime.session import profile_function  # noqa: E402
from perflsp.runtime.timing import TimingOptions  # noqa: E402

FAST = TimingOptions(min_time_s=0.05, min_iters=5)


def add(x, y, out):
    torch.add(x, y, out=out)


def _elements(peaks):
    """Three float32 tensors an eighth of the size where main memory's plateau starts (a sweep
    on a busy machine may find no cache level at all: then that is main memory anyway)."""
    return max(1024, peaks["levels"][-1]["from_bytes"] // (3 * 4 * 8))


def _inputs(peaks):
    n = _elements(peaks)
    return torch.randn(n), torch.randn(n), torch.empty(n)


def test_warm_and_cold_verdicts_name_their_memory_level(cpu_peaks):
    levels = cpu_peaks["levels"]
    main = levels[-1]
    args = _inputs(cpu_peaks)
    warm = profile_function(add, args, device="cpu", peaks=cpu_peaks, timing=FAST)
    cold = profile_function(add, args, device="cpu", peaks=cpu_peaks, timing=FAST, cold_cache=True)
    jsonschema = pytest.importorskip("jsonschema")
    for result in (warm, cold):
        assert profile_result.check(result) == []
        jsonschema.Draft202012Validator(profile_result.load_schema()).validate(result)

    working_set = warm["ceilings"]["level"]["working_set_bytes"]
    assert working_set == 3 * 4 * _elements(cpu_peaks)
    assert warm["settings"]["cache"] == "warm" and cold["settings"]["cache"] == "cold"
    assert warm["ceilings"]["level"]["name"] == level_for(levels, working_set)["name"]
    assert cold["ceilings"]["level"]["name"] == main["name"]
    assert cold["ceilings"]["bandwidth_bytes_per_s"] == main["bandwidth_bytes_per_s"]
    assert cold["totals"]["bytes"] == warm["totals"]["bytes"]  # the same work, read from elsewhere

    copies = cold_cache.copies_needed(working_set, levels)
    assert copies > 1
    [note] = [n for n in cold["verdict"]["notes"] if n.startswith("cold cache:")]
    assert f"the next of {copies} copies of its inputs" in note and f"came from {main['name']}" in note
    assert (copies - 1) * working_set >= main["from_bytes"]  # the others evict each copy between its uses
    assert not any(n.startswith("cold cache:") for n in warm["verdict"]["notes"])
    if warm["ceilings"]["level"]["name"] != main["name"]:
        assert any("a warm cache" in n and "--cold-cache" in n for n in warm["verdict"]["notes"])


def test_each_call_gets_the_next_copy(cpu_peaks):
    seen = []

    def remember(x, y, out):
        seen.append((x.data_ptr(), y.data_ptr(), out.data_ptr()))

    args = _inputs(cpu_peaks)
    call, _ = cold_cache.rotating_call(remember, args, {}, cpu_peaks["levels"])
    copies = cold_cache.copies_needed(3 * 4 * _elements(cpu_peaks), cpu_peaks["levels"])
    for _ in range(2 * copies):
        call()
    assert len(set(seen)) == copies and seen[:copies] == seen[copies:]
    assert seen[0] == tuple(t.data_ptr() for t in args)  # the first copy is the caller's own
    assert len({ptr for triple in seen for ptr in triple}) == 3 * copies  # no storage shared between copies


def test_inputs_larger_than_the_caches_need_no_copies(cpu_peaks):
    main = cpu_peaks["levels"][-1]
    assert cold_cache.copies_needed(main["from_bytes"], cpu_peaks["levels"]) == 1
    model = torch.nn.Linear(64, 64)
    size = cold_cache.input_bytes(((model, [torch.ones(10)], {"t": torch.ones(5)}), {}))
    assert size == 4 * (64 * 64 + 64 + 10 + 5)
    assert cold_cache.copies_needed(10, cpu_peaks["levels"]) == cold_cache.MAX_COPIES  # tiny inputs: capped


def test_a_cold_profile_is_no_speedup_of_a_warm_one(cpu_peaks):
    args = _inputs(cpu_peaks)
    warm = profile_function(add, args, device="cpu", peaks=cpu_peaks, timing=FAST)
    cold = profile_function(add, args, device="cpu", peaks=cpu_peaks, timing=FAST, cold_cache=True)
    block = comparison.compare(cold, warm)
    assert block["inputs_changed"] is True and block["speedup"] is None
    assert any("cold cache" in n and "no speedup" in n for n in block["notes"])


def test_cold_cache_with_a_program_run_is_a_usage_error(run_runtime, targets_dir, tmp_path):
    program = targets_dir / "program"
    out = run_runtime("profile", f"{program / 'layers.py'}:step", "--run", f"python {program / 'train.py'} 20 "
                      f"{tmp_path / 'done.txt'}", "--cold-cache", "--workspace", str(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--cold-cache needs inputs from --setup or the @perflsp.profile marker" in out.stdout
