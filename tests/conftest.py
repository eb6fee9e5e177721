import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def perflsp_cli(tmp_path):
    """Run the installed `perflsp` console entry in a subprocess, as users and CI do."""

    def run(*args, cwd=None, stdin=None, timeout=120):
        """`stdin`: text, or bytes sent as they are (then stdout and stderr come back as bytes too)."""
        env = dict(os.environ, PYTHONIOENCODING="utf-8")
        return subprocess.run(
            [sys.executable, "-m", "perflsp", *map(str, args)], cwd=cwd or tmp_path, input=stdin,
            capture_output=True, text=not isinstance(stdin, bytes), timeout=timeout, env=env,
        )

    return run


@pytest.fixture
def python_without_torch(tmp_path: Path) -> Path:
    """A venv with perflsp importable but no torch (like a project env someone forgot torch in)."""
    env = tmp_path / "notorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    editable = [p for d in map(Path, sys.path) if d.is_dir() for p in d.glob("__editable__*perflsp*")]
    if not editable:
        pytest.skip("perflsp is not installed in editable mode; cannot build a torch-less interpreter")
    for path in editable:
        shutil.copy(path, site / path.name)
    return python


@pytest.fixture
def shadowing_project(tmp_path: Path) -> Path:
    """A cloned project that ships its own `perflsp/` package: importing it, or `python -m perflsp...`
    in the folder, writes `PWNED` there. Whatever perflsp starts must never run it.

    `src/step.py:step` is a profilable target whose inputs come from `helpers.py` at the project's
    top, importable only with the project folder on sys.path (as under `python -m` run there).
    """
    project = tmp_path / "cloned"
    (project / "perflsp").mkdir(parents=True)
    (project / "src").mkdir()
    pwn = f"open({str(project / 'PWNED')!r}, 'w').close()\n"
    (project / "perflsp" / "__init__.py").write_text(pwn)
    (project / "perflsp" / "__main__.py").write_text(pwn)
    (project / "helpers.py").write_text("import torch\n\n\ndef make_inputs():\n    return (torch.randn(64, 64),)\n")
    (project / "src" / "step.py").write_text(
        "import perflsp\nfrom helpers import make_inputs\n\n\n"
        "@perflsp.profile(setup=make_inputs, warmup=1, iters=3)\ndef step(x):\n    return x @ x\n")
    return project
