"""`--run`: real calls of the target measured while a program runs.

One test goes through the real CLI and subprocess; the others run the profiling job in this
process (the program runs in-process there too), which is much faster.
"""
from __future__ import annotations

import json

import pytest

from perflsp import profile_result


def test_real_calls_are_measured_and_the_program_stopped(run_runtime, targets_dir, tmp_path):
    program = targets_dir / "program"
    marker = tmp_path / "finished.txt"
    out = run_runtime("profile", f"{program / 'layers.py'}:step", "--run",
                      f"python {program / 'train.py'} 100000 {marker}", "--iters", "5", "--workspace", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / ".perflsp" / "profiles" / "layers.step.json").read_text())
    assert profile_result.check(result) == []
    assert result["settings"]["inputs"] == "run" and result["timing"]["calls"] == 5
    assert result["settings"]["arguments"] == ["float32[64, 64] cpu", "float32[32, 64] cpu"]  # the measured call's
    assert result["program"]["stopped_early"] is True
    assert result["program"]["calls_seen"] < 100
    assert not marker.exists()  # the program never reached its end
    lines = {line["code"]: line for line in result["lines"]}
    assert lines["y = x @ w"]["flops"] == 2 * 32 * 64 * 64
    assert {line["calls"] for line in result["lines"]} == {3}  # medians over three real calls
    assert result["verdict"]["regime"] in profile_result.REGIMES


def test_no_stop_lets_the_program_finish(run_job, targets_dir, tmp_path):
    program = targets_dir / "program"
    marker = tmp_path / "finished.txt"
    code, result = run_job(f"{program / 'layers.py'}:step", f"python {program / 'train.py'} 40 {marker}",
                           stop_program=False)
    assert code == 0
    assert marker.read_text().startswith("40 ")
    assert result["program"]["stopped_early"] is False
    assert result["program"]["command"] == f"python {program / 'train.py'} 40 {marker}"
    assert 5 < result["program"]["calls_seen"] < 40  # counted when the measurement completed


def test_target_defined_in_the_script_itself(run_job, targets_dir):
    script = targets_dir / "program" / "inline.py"
    code, result = run_job(f"{script}:step", f"python {script} 1000")
    assert code == 0
    assert result["lines"][0]["code"] == "return (x * 2).sum()"
    assert result["target"]["def_line"] == 7


def test_module_run_with_dash_m(run_job, targets_dir, monkeypatch):
    program = targets_dir / "program"
    monkeypatch.chdir(program)
    code, result = run_job("layers:step", f"python -m train 100000 {program / 'never.txt'}", cwd=str(program))
    assert code == 0 and result["program"]["stopped_early"] is True


def test_short_program_reports_what_it_measured(run_job, targets_dir, tmp_path):
    # Enough calls for the passes but fewer timed calls than asked: a result, with a note.
    program = targets_dir / "program"
    code, result = run_job(f"{program / 'layers.py'}:step", f"python {program / 'train.py'} 12 {tmp_path / 'm'}",
                           iters=50, warmup=3)
    assert code == 0 and result["timing"]["calls"] >= 1
    assert any("the program ended after" in note for note in result["verdict"]["notes"])


@pytest.mark.parametrize("steps, message", [("0", "without calling step"), ("3", "after calling step 3 times")])
def test_too_few_calls(run_job, targets_dir, tmp_path, steps, message):
    program = targets_dir / "program"
    code, result = run_job(f"{program / 'layers.py'}:step", f"python {program / 'train.py'} {steps} {tmp_path / 'm'}")
    assert code == 6
    assert result["error"]["kind"] == "not-called" and message in result["error"]["message"]


def test_program_exception_is_the_targets_failure(run_job, targets_dir, tmp_path):
    program = targets_dir / "program"
    code, result = run_job(f"{program / 'layers.py'}:step", f"python {program / 'train.py'} not-a-number {tmp_path / 'm'}")
    assert code == 3
    assert result["error"]["exception_type"] == "ValueError" and "train.py" in result["error"]["traceback"]
