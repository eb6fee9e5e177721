"""A real, independent editor: headless Neovim 0.7 runs `perflsp serve` on an example and applies a quick fix.

Needs `nvim` on PATH (CI: `apt-get install -y neovim`); skipped with the reason otherwise.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parent.parent
EXAMPLE = REPO / "examples" / "train_loop.py"
SERVE = [sys.executable, "-m", "perflsp", "serve", "--stdio"]

pytestmark = pytest.mark.skipif(shutil.which("nvim") is None,
                                reason="headless Neovim not installed (apt-get install -y neovim)")


def run_neovim(script: str, tmp_path: Path) -> tuple:
    """Copy the example into a fresh project, run `script` in headless Neovim there; (report, file)."""
    if not EXAMPLE.is_file():
        pytest.fail(f"{EXAMPLE} is missing: the Neovim tests open this example")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".git").mkdir()  # a project root, as Neovim users have
    target = project / "train_loop.py"
    shutil.copy(EXAMPLE, target)
    out = tmp_path / "report.json"
    env = dict(os.environ, PERFLSP_CMD=json.dumps(SERVE), PERFLSP_ROOT=str(project), PERFLSP_FILE=str(target),
               PERFLSP_OUT=str(out), PERFLSP_EDITORS=str(REPO / "editors"),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    run = subprocess.run(["nvim", "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(HERE / script)],
                         env=env, capture_output=True, timeout=120, cwd=project)
    assert out.is_file(), f"Neovim wrote no report (status {run.returncode}): {run.stderr.decode()[-2000:]}"
    report = json.loads(out.read_text())
    assert report["ok"], report.get("error")
    return report, target


def test_neovim_shows_diagnostics_and_applies_a_quick_fix(tmp_path: Path):
    report, target = run_neovim("nvim_quickfix.lua", tmp_path)
    original = EXAMPLE.read_text()

    before = {(d["code"], d["lnum"]) for d in report["before"]}
    assert ("PFL106", report["target"]["lnum"]) in before
    assert any(code == "PFL603" for code, _ in before)  # the rest of the file is linted too
    assert report["lazy"] is True  # Neovim 0.7 resolves edits lazily: the server deferred it
    assert any(t.startswith("Ignore PFL106") for t in report["titles"])

    # The fix added `non_blocking=True` to that call and nothing else changed in the file.
    line, fixed = report["target"]["line"], report["after_line"]
    assert "non_blocking=True" in fixed and "non_blocking" not in line
    expected = original.splitlines()
    expected[report["target"]["lnum"]] = fixed
    assert report["text"] == "\n".join(expected) + "\n"
    # ... and the server re-linted the edited buffer: that finding is gone, the others stay, and a
    # transfer the fixed finding named as right after it (still blocking) is now reported on its own.
    after = {(d["code"], d["lnum"]) for d in report["after"]}
    [fixed_finding] = [d for d in report["before"] if (d["code"], d["lnum"]) == ("PFL106", report["target"]["lnum"])]
    assert after - before <= {("PFL106", lnum) for lnum, text in enumerate(expected)
                              if any(f"`{call}`" in fixed_finding["message"] for call in _calls_in(text))}
    assert before - after == {("PFL106", report["target"]["lnum"])}
    assert target.read_text() == original  # Neovim edited the buffer, not the file


def test_the_shipped_neovim_config_starts_the_server_at_the_project_root(tmp_path: Path):
    report, target = run_neovim("nvim_config.lua", tmp_path)  # loads editors/neovim/perflsp.lua
    assert report["codes"] == ["PFL503"]  # the stable rule: no settings needed, and no preview rule
    assert report["clients"] == [{"name": "perflsp", "root": str(target.parent)}]  # found by its .git


PROFILED = """\
import torch
import perflsp


def make_inputs():
    return (torch.randn(64, 64), torch.randn(64, 64))


@perflsp.profile(setup=make_inputs)
def step(a, b):
    c = a @ b
    return (c.relu() + a).sum()
"""


def test_neovim_profiles_a_function_and_shows_the_verdict(tmp_path: Path):
    pytest.importorskip("torch")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".git").mkdir()
    target = project / "kernels.py"
    target.write_text(PROFILED)
    def_line = PROFILED.split("\n").index("def step(a, b):")
    out = tmp_path / "report.json"
    env = dict(os.environ, PERFLSP_CMD=json.dumps(SERVE), PERFLSP_ROOT=str(project), PERFLSP_FILE=str(target),
               PERFLSP_OUT=str(out), PERFLSP_LINE=str(def_line + 1),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    run = subprocess.run(["nvim", "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(HERE / "nvim_profile.lua")],
                         env=env, capture_output=True, timeout=180, cwd=project)
    assert out.is_file(), f"Neovim wrote no report (status {run.returncode}): {run.stderr.decode()[-2000:]}"
    report = json.loads(out.read_text())
    assert report["ok"], report.get("error")
    assert "Profile this function (step)" in report["titles"]
    assert report["reply"]["status"] == "ok"
    regime = report["reply"]["regime"]
    verdict = [d for d in report["measured"] if d["lnum"] == def_line]
    assert len(verdict) == 1 and regime in verdict[0]["message"] and verdict[0]["severity"] == 3  # Information
    assert all(def_line <= d["lnum"] <= def_line + 2 for d in report["measured"])
    assert list((project / ".perflsp" / "profiles").glob("kernels.step.json"))


def _calls_in(line: str):
    """`labels.cuda()` in `labels = labels.cuda() if ... else labels`: the calls a message may name."""
    return re.findall(r"[\w.]+\([^()]*\)", line)
