"""Measured hotness: a program run under `perflsp profile --run` writes `.perflsp/hot.json`."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflsp.rules.measured import load_measured

ROOT = Path(__file__).resolve().parents[2]
HOT = Path(__file__).parent / "targets" / "hot"


def _by_name(document):
    return {f["qualname"]: f for f in document["functions"]}


def test_profile_run_records_per_step_and_one_off_functions(peaks_cache, tmp_path):
    workspace = tmp_path / "ws"
    shutil.copytree(HOT, workspace, ignore=shutil.ignore_patterns("recorded.py", "__pycache__"))
    out = subprocess.run([sys.executable, "-m", "perflsp", "profile", "model.py:loss_fn", "--run", "python train.py 40",
                          "--cwd", str(workspace), "--iters", "5", "--min-time", "0.0001"],  # timing settles in 3 calls
                         cwd=str(tmp_path), env=dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hot.json: 8 functions over" in out.stdout and "(a step: one optimizer.step())" in out.stdout

    document = json.loads((workspace / ".perflsp" / "hot.json").read_text())
    assert document["version"] == 1 and document["command"] == "python train.py 40"
    assert document["step_source"] == "optimizer.step" and document["recorder"] in ("sys.monitoring", "sys.setprofile")
    steps = document["steps"]
    assert 3 <= steps < 40  # the warm-up's steps: the run stopped once measured
    functions = _by_name(document)
    assert set(functions) == {"Net.__init__", "Net.forward", "activate", "loss_fn", "build", "make_data", "log", "main"}
    assert {f["file"] for f in document["functions"]} == {"model.py", "train.py"}  # torch, stdlib: never
    for name in ("Net.forward", "activate", "loss_fn"):
        assert functions[name]["steps"] == steps and functions[name]["calls"] >= steps, functions[name]
    for name in ("Net.__init__", "build", "make_data", "main"):
        assert (functions[name]["calls"], functions[name]["steps"]) == (1, 0), functions[name]
    assert functions["log"]["steps"] <= 1  # every 10 steps
    assert functions["Net.forward"]["first_line"] == 10

    measured = load_measured(workspace)
    assert measured.is_hot("model.py", "Net.forward") is True
    assert measured.reason("model.py", "activate").startswith(f"measured: {functions['activate']['calls']} calls in ")
    assert measured.is_hot("model.py", "build") is False and measured.is_hot("train.py", "main") is False
    assert measured.is_hot("model.py", "never_called") is None


def _interpreters():
    """This one, plus a Python 3.12+ (sys.monitoring) when the machine has one."""
    found = [sys.executable]
    candidates = [shutil.which(f"python3.{minor}") for minor in range(12, 16)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                               capture_output=True, text=True)
        if probe.stdout.strip() == "True":
            found.append(candidate)
            break
    return found


@pytest.mark.parametrize("python", _interpreters())
def test_recorder_counts_steps_pauses_and_generators_alike_on_every_python(python):
    out = subprocess.run([python, str(HOT / "recorded.py"), str(ROOT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    # 11 boundaries; the steps that began at calls 4, 5 and 6 were cut by the pause.
    assert document["steps"] == 7 and document["step_source"] == "target"
    functions = _by_name(document)
    assert set(functions) == {"Model.__init__", "Model.forward", "helper", "numbers", "setup", "step"}
    for name in ("Model.forward", "helper", "numbers", "step"):  # a generator counts once per call, not per item
        assert (functions[name]["calls"], functions[name]["steps"]) == (8, 7), (name, functions[name])
    assert (functions["setup"]["calls"], functions["setup"]["steps"]) == (1, 0)
    assert {f["file"] for f in document["functions"]} == {"recorded.py"}
    monitoring = python != sys.executable or sys.version_info >= (3, 12)
    assert document["recorder"] == ("sys.monitoring" if monitoring else "sys.setprofile")


def test_qualnames_from_source_before_python_311(tmp_path):
    from perflsp.runtime.hot_record import _source_qualnames

    source = tmp_path / "m.py"
    source.write_text("class A:\n    @staticmethod\n    @other\n    def f():\n        def g():\n            pass\n\n"
                      "def h():\n    pass\n")
    assert _source_qualnames(str(source)) == {("f", 2): "A.f", ("g", 5): "A.f.<locals>.g", ("h", 8): "h"}
