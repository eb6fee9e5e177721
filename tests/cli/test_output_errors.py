"""`perflsp` when stdout cannot take its output: a reader that closes the pipe early (`| head -1`)
ends the run quietly, as git's and Ruff's do; a full disk is one line of error and exit status 2."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# PFL302, fixable: the check prints a finding, and --diff a diff.
OPS = "import torch\n\n\n# perflsp: hot\ndef zero_state(batch, device):\n    return torch.zeros(2, batch, device=device).contiguous()\n"
PERFLSP = [sys.executable, "-m", "perflsp"]
COMMANDS = [
    ["check", ".", "--no-cache"],
    ["check", ".", "--diff"],
    ["check", "-", "--fix", "--unsafe-fixes", "--stdin-filename", "ops.py"],
    ["rule", "PFL101"],
    ["rule", "--all"],
    ["--version"],
    # A profile on the CPU (a few seconds: torch's import and the measuring process).
    ["profile", "add.py:add", "--setup", "add:make_inputs", "--progress", "none"],
]
ADD = "import torch\n\n\ndef add(x):\n    return x + 1\n\n\ndef make_inputs():\n    return (torch.ones(64),), {}\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "add.py").write_text(ADD)
    return tmp_path


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_pipe_its_reader_closed_ends_the_run_quietly(project, args):
    process = subprocess.Popen([*PERFLSP, *args], cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first byte: every write fails
    _, stderr = process.communicate(OPS.encode(), timeout=120)
    assert stderr == b""
    assert process.returncode == 141  # 128 + SIGPIPE, what the shell reports for git or cat


def test_diff_piped_to_head(tmp_path):
    # 40 fixes of 4 KiB rows each: more than the pipe holds, so perflsp is still writing when `head`
    # has its line and goes.
    long = "".join(f"\n\n# perflsp: hot\ndef zero_state_{i}(batch, device):\n"
                   f"    return torch.zeros(2, batch, device=device).contiguous()  # {'x' * 2000}\n" for i in range(40))
    (tmp_path / "ops.py").write_text("import torch\n" + long)
    command = f"{shlex.join(PERFLSP)} check . --diff | head -1; echo \"status ${{PIPESTATUS[0]}}\""
    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (result.stdout, result.stderr) == ("--- a/ops.py\nstatus 141\n", "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_full_disk_is_one_line_of_error_and_exit_status_2(project, args):
    with open("/dev/full", "w") as full:
        result = subprocess.run([*PERFLSP, *args], cwd=project, input=OPS, stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=120)
    assert result.stderr == "perflsp: error: cannot write the output: No space left on device\n"
    assert result.returncode == 2
