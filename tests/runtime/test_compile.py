"""`profile --compile` and `--graph-breaks` end to end, with real torch.compile in real processes.

One inductor compile for the whole module (`compiled_run`): a cold compile takes ~20 s on two
cores. The other tests stop before inductor (explain only, a function that cannot compile, a
compile cut short by its timeout).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perflsp import profile_result
from perflsp.runtime import cold_cache

CASES = Path(__file__).parent / "targets" / "compile_cases.py"


def _run(peaks_cache: Path, workspace: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # A private inductor cache: every compile here is cold, as on a first run.
    env = dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache), TORCHINDUCTOR_CACHE_DIR=str(workspace / "inductor"))
    return subprocess.run([sys.executable, "-m", "perflsp.runtime", "profile", *args, "--workspace", str(workspace)],
                          cwd=str(workspace), env=env, capture_output=True, text=True, timeout=timeout)


def _load_cases():
    import importlib.util

    spec = importlib.util.spec_from_file_location("perflsp_test_targets.compile_cases_explained", CASES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def explained_breaks(qualname: str):
    """The distinct (file, line) pairs among torch._dynamo.explain's break reasons, in this process."""
    import torch._dynamo

    module = _load_cases()
    torch._dynamo.reset()
    try:
        fn = getattr(module, qualname)
        out = torch._dynamo.explain(fn)(*fn.__perflsp_profile__.setup())
    finally:
        torch._dynamo.reset()
    return {(os.path.realpath(r.user_stack[-1].filename), r.user_stack[-1].lineno) for r in out.break_reasons}


def _validate(result):
    assert profile_result.check(result) == []
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(profile_result.load_schema()).validate(result)


@pytest.fixture(scope="module")
def compiled_run(peaks_cache, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("compiled")
    started = time.monotonic()
    out = _run(peaks_cache, workspace, f"{CASES}:pointwise_with_breaks", "--compile", "--cold-cache", "--min-time", "0.5",
               "--progress", "json", "--json", str(workspace / "out.json"))
    return out, json.loads((workspace / "out.json").read_text()), time.monotonic() - started


@pytest.mark.slow
def test_compile_reports_both_medians_and_the_breaks_explain_reports(compiled_run, find_line):
    out, result, elapsed = compiled_run
    assert out.returncode == 0, out.stderr
    _validate(result)
    assert result["status"] == "ok" and result["timing"]["median_us"] > 0  # the eager profile as always
    block = result["compile"]
    assert block["error"] is None and block["mode"] == "default" and block["compile_cache"] == "cold"
    assert block["compile_s"] > 0 and block["eager_median_us"] > 0 and block["compiled_median_us"] > 0
    assert block["speedup"] == pytest.approx(block["eager_median_us"] / block["compiled_median_us"])
    assert block["recompiles"] == []  # the same inputs every call
    found = {(b["file"], b["line"]) for b in block["graph_breaks"]}
    assert found == explained_breaks("pointwise_with_breaks")
    assert len(block["graph_breaks"]) == len(found) == 2
    by_line = {b["line"]: b for b in block["graph_breaks"]}
    assert "torch.where" in by_line[find_line(CASES, "if y.sum() > 0")]["explanation"]
    assert "capture_scalar_outputs" in by_line[find_line(CASES, ".item()")]["explanation"]
    assert "compiled: " in out.stdout and "2 graph breaks" in out.stdout
    phases = [json.loads(line)["phase"] for line in out.stderr.splitlines() if line.startswith('{"event": "phase"')]
    assert phases.index("analysis") < phases.index("explain") < phases.index("compile")
    print(f"compile {block['compile_s']:.1f} s, eager {block['eager_median_us']:.0f} us, compiled "
          f"{block['compiled_median_us']:.0f} us, speedup {block['speedup']:.2f}, whole run {elapsed:.0f} s")


@pytest.mark.slow
def test_compiled_and_eager_medians_come_from_the_same_kind_of_window(compiled_run):
    """Same inputs (the eager profile's --cold-cache copies), warm-up policy, clock and rounds,
    and no compilation inside the timed calls: the speedup divides like by like."""
    out, result, _ = compiled_run
    block = result["compile"]
    windows = block["windows"]
    assert windows["cache"] == result["settings"]["cache"] == "cold"
    assert windows["clock"] == result["timing"]["clock"]
    assert windows["compiles_during_timing"] == 0 and not any("during the timed calls" in n for n in block["notes"])
    minimum = result["settings"]["warmup"]
    for side in ("eager", "compiled"):
        assert windows[side]["warmup_calls"] >= minimum and windows[side]["calls"] >= windows["rounds"]
    assert (block["eager_median_us"], block["compiled_median_us"]) == (windows["eager"]["median_us"],
                                                                      windows["compiled"]["median_us"])
    copies = cold_cache.copies_needed(cold_cache.input_bytes(_load_cases().make_inputs()), result["ceilings"]["levels"])
    profile_notes, compile_notes = " ".join(result["verdict"]["notes"]), " ".join(block["notes"])
    if copies > 1:
        assert f"the next of {copies} copies" in profile_notes
        assert f"rotate over the same {copies} copies" in compile_notes
    else:
        assert "without copies" in profile_notes and "without copies" in compile_notes


def test_graph_breaks_only_is_fast_saves_nothing_and_fails_ci_on_a_break(peaks_cache, tmp_path):
    started = time.monotonic()
    out = _run(peaks_cache, tmp_path, f"{CASES}:pointwise_with_breaks", "--graph-breaks", "--fail-on-break",
               "--json", "-")
    elapsed = time.monotonic() - started
    assert out.returncode == profile_result.EXIT_GRAPH_BREAKS, out.stderr
    block = json.loads(out.stdout)["compile"]
    assert block["explain_only"] and block["compile_s"] is None and block["error"] is None
    assert {(b["file"], b["line"]) for b in block["graph_breaks"]} == explained_breaks("pointwise_with_breaks")
    assert not (tmp_path / ".perflsp").exists()
    print(f"--graph-breaks took {elapsed:.1f} s, interpreter start and torch import included")

    clean = _run(peaks_cache, tmp_path, f"{CASES}:fuses_cleanly", "--graph-breaks", "--fail-on-break",
                 "--compile-mode", "reduce-overhead")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 graph breaks" in clean.stdout
    assert "CUDA graphs" in clean.stdout  # reduce-overhead on a CPU: said, and the default mode used


def test_a_function_that_cannot_compile_keeps_its_eager_profile(peaks_cache, tmp_path):
    out = _run(peaks_cache, tmp_path, f"{CASES}:cannot_compile", "--compile", "--min-time", "0.05",
               "--json", str(tmp_path / "out.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    _validate(result)
    assert result["status"] == "ok" and result["timing"]["median_us"] > 0
    error = result["compile"]["error"]
    assert error["kind"] == "exception" and "during explain" in error["message"]
    assert "no fake impl registered" in error["message"]
    assert result["compile"]["compiled_median_us"] is None


def test_a_compile_past_its_timeout_keeps_the_eager_profile(peaks_cache, tmp_path):
    out = _run(peaks_cache, tmp_path, f"{CASES}:pointwise_with_breaks", "--compile", "--compile-timeout", "4",
               "--min-time", "0.05", "--json", str(tmp_path / "out.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    _validate(result)
    assert result["status"] == "ok" and result["timing"]["median_us"] > 0
    block = result["compile"]
    assert block["error"]["kind"] == "timeout", block
    assert "timed out after 4 s" in out.stdout
    if "during compile" in block["error"]["message"]:  # explain had finished: its breaks were kept
        assert len(block["graph_breaks"]) == 2
    saved = profile_result.read_result(tmp_path / ".perflsp" / "profiles" / "compile_cases.pointwise_with_breaks.json")
    assert saved["compile"]["error"]["kind"] == "timeout"


def test_an_int_argument_that_changes_recompiles_once_with_its_guard():
    """The premise behind recompilation reports (torch 2.13: one recompile, then dynamic)."""
    import torch

    from perflsp.runtime import dynamo_compat, graph_breaks

    def scale(x, step):
        return x * step + 1

    dynamo_compat.reset()
    try:
        compiled = torch.compile(scale, backend="eager")  # dynamo's guards without inductor's compile time
        for step in range(6):
            compiled(torch.ones(4), step)
        recompiles = [graph_breaks.recompile(text) for text in dynamo_compat.guard_failures()]
    finally:
        dynamo_compat.reset()
    assert recompiles == [{"reason": "step == 0"}]


def test_a_break_inside_a_library_is_placed_on_the_users_line():
    """`logging` breaks the graph inside the logging module: the break belongs to the call's line."""
    import inspect
    import logging

    import torch

    from perflsp.runtime import dynamo_compat, graph_breaks

    def step(x):
        y = x * 2
        logging.getLogger("perflsp.test").info("step")
        return y + 1

    dynamo_compat.reset()
    try:
        explained = dynamo_compat.explain(step, (torch.ones(4),), {})
    finally:
        dynamo_compat.reset()
    innermost = {stack[-1].filename for _, stack in explained.reasons}
    assert innermost and all("logging" in name for name in innermost)  # where torch says it broke
    [found] = graph_breaks.graph_breaks(explained.reasons)
    _, first = inspect.getsourcelines(step)
    assert (found["file"], found["line"]) == (os.path.realpath(__file__), first + 2)
    assert found["explanation"] == found["reason"]  # no plain words for it: torch's own headline


def test_a_torch_without_explain_gets_a_clear_message(monkeypatch):
    """dynamo's APIs are private: a torch that drops one is said to, not a crash."""
    import torch
    import torch._dynamo

    from perflsp.runtime import dynamo_compat

    monkeypatch.delattr(torch._dynamo, "explain")
    missing = re.escape(f"torch {torch.__version__} has no torch._dynamo.explain")
    with pytest.raises(dynamo_compat.CompileUnavailable, match=missing):
        dynamo_compat.explain(lambda x: x + 1, (torch.ones(2),), {})


@pytest.mark.parametrize("qualname, marked, explain_names_it, graphs", [
    ("item_in_loop", ".item() > 1e6", False, 0),  # the frame is skipped: nothing compiled
    ("while_on_item", "while y.sum().item()", True, 1),  # a graph, then the loop runs eagerly
    ("loop_count_from_item", "range(int(count.item()))", False, 1),  # a break before the first graph
])
def test_item_in_a_loop_is_a_break_on_its_line_and_fails_ci(peaks_cache, tmp_path, find_line, qualname, marked,
                                                            explain_names_it, graphs):
    """torch 2.13 skips a frame whose loop breaks the graph, and explain's reasons do not say so."""
    line = find_line(CASES, marked)
    assert ((os.path.realpath(CASES), line) in explained_breaks(qualname)) == explain_names_it
    out = _run(peaks_cache, tmp_path, f"{CASES}:{qualname}", "--graph-breaks", "--fail-on-break", "--json", "-")
    assert out.returncode == profile_result.EXIT_GRAPH_BREAKS, out.stdout + out.stderr
    block = json.loads(out.stdout)["compile"]
    assert block["graph_count"] == graphs
    assert [(b["file"], b["line"]) for b in block["graph_breaks"]] == [(os.path.realpath(CASES), line)]
    assert "Graph break" not in out.stderr  # dynamo's own log was read, not printed
    skipped = block["skipped_frames"] > 0
    assert skipped == (qualname != "loop_count_from_item")
    assert block["graph_breaks"][0]["explanation"].startswith("a graph break inside a loop") == skipped


def test_a_function_torch_compile_skips_is_not_compiled_in_text_and_fails_ci(peaks_cache, tmp_path):
    out = _run(peaks_cache, tmp_path, f"{CASES}:item_in_loop", "--compile", "--fail-on-break", "--min-time", "0.05",
               "--json", str(tmp_path / "out.json"))
    assert out.returncode == profile_result.EXIT_GRAPH_BREAKS, out.stdout + out.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    _validate(result)
    block = result["compile"]
    assert block["error"] is None and block["graph_count"] == 0 and block["compiled_median_us"] > 0
    assert "under torch.compile: " in out.stdout and "not compiled, the call runs eagerly: dynamo captured no graph" in out.stdout
    assert "0 graph breaks" not in out.stdout
