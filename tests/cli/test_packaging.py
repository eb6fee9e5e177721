"""What the install docs promise: a wheel and an sdist build from a clone (`python -m build`), and the
wheel alone installs the four packages and the `perflsp` command."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("perflsp", "perflsp/rules", "perflsp/server", "perflsp/runtime")


def _clone(into: Path) -> Path:
    """The work tree as a clone would have it (tracked and new files, nothing ignored), so that the
    build writes nothing into this checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    source = _clone(tmp_path_factory.mktemp("clone"))
    dist = tmp_path_factory.mktemp("dist")
    # --no-isolation: setuptools from this environment, so the build needs no package index
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
                   capture_output=True, check=True, timeout=600)
    [wheel] = dist.glob("perflsp-*.whl")
    [sdist] = dist.glob("perflsp-*.tar.gz")
    return wheel, sdist


def test_the_wheel_holds_every_package_and_the_sdist_the_sources(built):
    wheel, sdist = built
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names
    assert {"perflsp/rules/engine.py", "perflsp/server/app.py", "perflsp/runtime/profiling.py",
            "perflsp/profile_result.schema.json", "perflsp/py.typed"} <= names
    assert not any(name.startswith(("tests/", "rules/", "server/", "runtime/")) for name in names)
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "rules/engine.py", "server/app.py", "runtime/profiling.py"} <= members


def test_the_wheel_installs_alone_into_a_fresh_environment(built, tmp_path):
    wheel, _ = built
    env = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], capture_output=True, check=True, timeout=300)
    version = subprocess.run([str(env / "bin" / "perflsp"), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("perflsp "), version.stderr
    where = subprocess.run([str(python), "-c", "import perflsp; print(perflsp.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert where.startswith(str(env))


# `pip install perflsp` or `pip install 'perflsp[plot]'` asks the package index, where perflsp is not.
_FROM_THE_INDEX = re.compile(r"""pip install (-U |--upgrade )?['"]?perflsp\b(?!/)""")


def test_no_text_tells_users_to_install_perflsp_from_the_package_index():
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    texts = [ROOT / n for n in listed if n.endswith((".md", ".py", ".ts", ".json")) and (ROOT / n).is_file()]
    found = [f"{path.relative_to(ROOT)}:{row}: {line.strip()}"
             for path in texts if path.name != "test_packaging.py"
             for row, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if _FROM_THE_INDEX.search(line) and "finds nothing" not in line]
    assert not found, "perflsp is not on the package index:\n" + "\n".join(found)
