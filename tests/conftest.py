import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def perflsp_cli(tmp_path):
    """Run the installed `perflsp` console entry in a subprocess, as users and CI do."""

    def run(*args, cwd=None, stdin=None, timeout=120):
        env = dict(os.environ, PYTHONIOENCODING="utf-8")
        return subprocess.run(
            [sys.executable, "-m", "perflsp", *map(str, args)],
            cwd=cwd or tmp_path, input=stdin, capture_output=True, text=True, timeout=timeout, env=env,
        )

    return run
