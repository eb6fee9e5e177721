"""Shared fixtures for the runtime tests.

The CPU ceilings are measured once per session (short budget) into a private cache folder, so
every subprocess test finds them cached and none measures again.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perflsp import profile_result
from perflsp.runtime import worker

TARGETS = Path(__file__).parent / "targets"


def _load(name: str):
    """Import a file from targets/ under a private name (tests never touch sys.path)."""
    spec = importlib.util.spec_from_file_location(f"perflsp_test_targets.{name}", TARGETS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def targets_dir() -> Path:
    return TARGETS


@pytest.fixture(scope="session")
def ref_cases():
    return _load("ref_cases")


@pytest.fixture(scope="session")
def noisy_cases():
    return _load("noisy_cases")


@pytest.fixture(scope="session")
def peaks_cache(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("perflsp-cache")
    saved = os.environ.get("PERFLSP_CACHE_DIR")
    os.environ["PERFLSP_CACHE_DIR"] = str(folder)
    try:
        from perflsp.runtime import peaks

        peaks.save(peaks.measure("cpu", budget_s=0.6))
    finally:
        if saved is None:
            os.environ.pop("PERFLSP_CACHE_DIR", None)
        else:
            os.environ["PERFLSP_CACHE_DIR"] = saved
    return folder


@pytest.fixture(scope="session")
def cpu_peaks(peaks_cache):
    import json

    (path,) = (peaks_cache / "peaks").glob("*.json")
    return json.loads(path.read_text())


@pytest.fixture
def run_runtime(peaks_cache, tmp_path):
    """Run `python -m perflsp.runtime ARGS` in a fresh workspace with the session's cached peaks."""

    def run(*args: str, cwd: Path = None, timeout: float = 120, env: dict = None) -> subprocess.CompletedProcess:
        environment = dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache))
        environment.update(env or {})
        return subprocess.run([sys.executable, "-m", "perflsp.runtime", *args], cwd=str(cwd or tmp_path),
                              env=environment, capture_output=True, text=True, timeout=timeout)

    return run


def line_of(path: Path, text: str) -> int:
    """The 1-based line number of the first line containing `text` (tests refer to lines by
    their code, so the target files can be edited freely)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


@pytest.fixture(scope="session")
def find_line():
    return line_of


@pytest.fixture
def run_job(peaks_cache, tmp_path, monkeypatch):
    """The `--run` profiling job in this process (the program runs in-process too): much faster
    than the CLI; the program's sys.path and modules are undone after."""
    monkeypatch.setenv("PERFLSP_CACHE_DIR", str(peaks_cache))
    saved_path, saved_modules = list(sys.path), set(sys.modules)

    def run(target: str, command: str, **options):
        data = {"command": "profile", "target": target, "cwd": str(tmp_path), "setup": None, "run": command,
                "stop_program": True, "warmup": None, "iters": 5, "min_time_s": 0.05, "timeout_s": 60.0,
                "device": "auto", "top_lines": 10, "result": str(tmp_path / "result.json")}
        data.update(options)
        code = worker.run_profile(worker.Job(data))
        result = json.loads((tmp_path / "result.json").read_text())
        assert profile_result.check(result) == []
        return code, result

    yield run
    assert sys.path == saved_path  # the program's sys.path changes are undone
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]
