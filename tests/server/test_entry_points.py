"""The ways docs/editors.md says to start the server never import a `perflsp/` folder of the
project the editor starts it in (a cloned repository's code would run on open)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs" / "editors.md"


def _documented_commands():
    text = DOCS.read_text(encoding="utf-8")
    found = sorted(set(re.findall(r"`((?:python -P -m perflsp|perflsp) serve(?: --stdio)?)`", text)))
    assert "perflsp serve" in found and "python -P -m perflsp serve" in found, found
    return found


@pytest.mark.parametrize("command", _documented_commands())
def test_documented_server_commands_ignore_a_perflsp_folder_in_the_project(tmp_path, command):
    if command.startswith("python -P") and sys.version_info < (3, 11):
        pytest.skip("-P is new in Python 3.11")
    marker = tmp_path / "ran"
    (tmp_path / "perflsp").mkdir()
    (tmp_path / "perflsp" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    program = shutil.which("perflsp", path=str(Path(sys.executable).parent))
    argv = command.split()
    argv[0] = sys.executable if argv[0] == "python" else program
    # stdin at its end: the server starts, reads end of input and exits
    result = subprocess.run(argv, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


def test_the_unsafe_module_form_is_not_offered():
    assert "`python -m perflsp.server`" not in DOCS.read_text(encoding="utf-8")
