"""`python -m perflsp.runtime profile|peaks` end to end: exit codes, result files, faults."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perflsp import profile_result
from perflsp.processes import descendants
from perflsp.runtime.cli import main


def _validate(result):
    assert profile_result.check(result) == []
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(profile_result.load_schema()).validate(result)


def _published(workspace):
    folder = workspace / ".perflsp" / "profiles"
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.exists() else []


def test_profile_writes_a_valid_result_table_json_and_plot(run_runtime, targets_dir, tmp_path):
    out = run_runtime("profile", f"{targets_dir / 'ref_cases.py'}:matmul", "--min-time", "0.05",
                      "--workspace", str(tmp_path), "--json", str(tmp_path / "copy.json"),
                      "--plot", str(tmp_path / "roofline.html"), "--progress", "json")
    assert out.returncode == 0, out.stderr
    assert "verdict    compute-bound" in out.stdout
    assert "USDT:" not in out.stderr  # kineto's start/stop chatter is filtered
    phases = [json.loads(line)["phase"] for line in out.stderr.splitlines() if line.startswith('{"event": "phase"')]
    assert phases[-5:] == ["warm-up", "timing", "profile", "attribution", "analysis"]
    assert _published(tmp_path) == ["ref_cases.matmul.json"]  # nothing else, no temporary files
    result = profile_result.read_result(tmp_path / ".perflsp" / "profiles" / "ref_cases.matmul.json")
    _validate(result)
    assert result["settings"]["inputs"] == "marker"
    assert result["ceilings"]["source"] == "cache"
    assert json.loads((tmp_path / "copy.json").read_text()) == result
    assert (tmp_path / "roofline.html").read_text().startswith("<!DOCTYPE html>")


def test_target_not_found_lists_the_definitions(run_runtime, targets_dir, tmp_path):
    out = run_runtime("profile", f"{targets_dir / 'ref_cases.py'}:matmull", "--workspace", str(tmp_path))
    assert out.returncode == 6
    assert "'matmull' is not defined" in out.stdout and "matmul" in out.stdout and "tiny_ops" in out.stdout
    assert _published(tmp_path) == []  # a typo leaves no result behind
    out = run_runtime("profile", f"{tmp_path / 'missing.py'}:f", "--workspace", str(tmp_path))
    assert out.returncode == 6 and "no such file" in out.stdout


def test_usage_errors_return_two(targets_dir, capsys):
    assert main(["profile", f"{targets_dir / 'program' / 'layers.py'}:step", "--run", "torchrun train.py"]) == 2
    assert "must start with python" in capsys.readouterr().out  # refused before any process starts
    assert main(["profile"]) == 2
    assert main(["profile", "no_colon_here"]) == 2
    assert main(["profile", "x.py:f", "--min-time", "-1"]) == 2
    assert main(["peaks", "--budget", "0"]) == 2
    assert main(["--help"]) == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc")
def test_timeout_kills_a_target_stuck_in_c_and_its_children(run_runtime, targets_dir, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    out = run_runtime("profile", f"{targets_dir / 'faults.py'}:hangs_in_c", "--timeout", "10",
                      "--workspace", str(tmp_path), env={"PERFLSP_TEST_PIDFILE": str(pidfile)})
    assert time.monotonic() - started < 40
    assert out.returncode == 4, out.stdout + out.stderr
    result = json.loads((tmp_path / ".perflsp" / "profiles" / "faults.hangs_in_c.json").read_text())
    _validate(result)
    assert result["error"]["kind"] == "timeout"
    assert "timed out after 10 s" in result["error"]["message"]
    assert pidfile.exists(), "the target never started: the machine is too slow for this timeout"
    assert "faults.py:" in result["error"]["message"] and "in hangs_in_c" in result["error"]["message"]
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)
    assert _published(tmp_path) == ["faults.hangs_in_c.json"]


def test_peaks_command_measures_and_caches(run_runtime, peaks_cache, tmp_path):
    cache = tmp_path / "cache"
    out = run_runtime("peaks", "--budget", "0.3", "--json", "-", env={"PERFLSP_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    measured = json.loads(out.stdout)
    assert measured["bandwidth_bytes_per_s"] > 0 and measured["compute_flops_per_s"]["float32"] > 0
    assert list((cache / "peaks").glob("*.json"))  # cached for the next profile


def test_supervisor_side_imports_no_torch():
    code = "import sys, perflsp, perflsp.runtime.cli, perflsp.runtime.supervisor, perflsp.runtime.report; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_hang_location_prefers_the_targets_file():
    from perflsp.runtime.supervisor import hang_location

    dump = ('Thread 0x00007f01 (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
            '\n'
            'Current thread 0x00007f00 (most recent call first):\n'
            '  File "/proj/lib/helpers.py", line 9 in spin\n'
            '  File "/proj/train.py", line 42 in step\n'
            '  File "/site/perflsp/runtime/timing.py", line 160 in warm_up\n')
    assert hang_location(dump, "/proj/train.py") == "train.py:42 in step"
    assert hang_location(dump, "/elsewhere.py") == "/proj/lib/helpers.py:9 in spin"  # the current thread's
    assert hang_location("", "/proj/train.py") is None


def test_a_perflsp_package_in_the_project_never_runs(shadowing_project, peaks_cache):
    """`perflsp profile` in a cloned project: its profiling process starts outside the project (with
    `-m`, the current folder comes first on sys.path), yet the user's code imports as before."""
    console = shutil.which("perflsp", path=os.path.dirname(sys.executable))
    if console is None:
        pytest.skip("no perflsp console script beside this interpreter")
    out = subprocess.run([console, "profile", "src/step.py:step", "--min-time", "0.05"], cwd=shadowing_project,
                         env=dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache)), capture_output=True, text=True,
                         timeout=120)
    assert not (shadowing_project / "PWNED").exists()
    assert out.returncode == 0, out.stdout + out.stderr
    assert _published(shadowing_project) == ["step.step.json"]


def test_cwd_runs_the_target_in_the_project_from_elsewhere(run_runtime, shadowing_project, tmp_path):
    """How the editor starts it: from a folder of its own, with the project as --cwd."""
    outside = tmp_path / "home"
    outside.mkdir()
    out = run_runtime("profile", "src/step.py:step", "--cwd", str(shadowing_project), "--min-time", "0.05",
                      cwd=outside)
    assert not (shadowing_project / "PWNED").exists()
    assert out.returncode == 0, out.stdout + out.stderr
    assert _published(shadowing_project) == ["step.step.json"] and not (outside / ".perflsp").exists()
    assert run_runtime("profile", "src/step.py:step", "--cwd", str(tmp_path / "nowhere")).returncode == 2


def test_a_file_target_that_is_not_python_source_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert main(["profile", f"{tmp_path / 'passwd'}:root", "--workspace", str(tmp_path)]) == 2
    assert f"{tmp_path / 'passwd'} is not a Python file" in capsys.readouterr().err
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00\x01def f(): pass\n")
    assert main(["profile", f"{tmp_path / 'binary.py'}:f", "--workspace", str(tmp_path)]) == 2
    assert f"cannot read {tmp_path / 'binary.py'} as Python source" in capsys.readouterr().out
    assert not (tmp_path / ".perflsp").exists()


LAZY = {
    "generator": "def step(n):\n    for i in range(n):\n        yield i\n",
    "async function": "async def step(n):\n    return n\n",
}


@pytest.mark.parametrize("kind", sorted(LAZY))
def test_a_generator_or_async_function_is_refused_as_a_file_or_module_target(tmp_path, capsys, kind):
    source = "import perflsp\n\n\ndef make():\n    return (3,)\n\n\n@perflsp.profile(setup=make)\n" + LAZY[kind]
    (tmp_path / "lazy.py").write_text(source)
    for spec in (f"{tmp_path / 'lazy.py'}:step", "lazy:step"):  # a module target is checked once imported
        assert main(["profile", spec, "--cwd", str(tmp_path), "--min-time", "0.05"]) == 2, spec
        out = capsys.readouterr().out
        assert f"step is {'a generator function' if kind == 'generator' else 'an async function'}" in out
        assert "nothing to measure" in out and "list(step(*args))" in out
    assert not (tmp_path / ".perflsp" / "profiles").exists()


def test_an_image_plot_that_cannot_be_written_is_refused_before_measuring(targets_dir, tmp_path, capsys, monkeypatch):
    target = f"{targets_dir / 'ref_cases.py'}:matmul"
    assert main(["profile", target, "--plot", str(tmp_path / "r.jpeg2000"), "--workspace", str(tmp_path)]) == 2
    assert "matplotlib cannot write .jpeg2000" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in an environment without it
    monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", None)
    assert main(["profile", target, "--plot", str(tmp_path / "r.png"), "--workspace", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    # perflsp is not on the package index: the command installs matplotlib itself.
    assert "image plots need matplotlib" in error and f"{sys.executable} -m pip install matplotlib" in error
    assert not (tmp_path / ".perflsp").exists()  # nothing was measured


def _all_dead(pids, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(pid) for pid in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc")
def test_children_in_sessions_of_their_own_do_not_outlive_the_profile(run_runtime, targets_dir, tmp_path):
    pidfile = tmp_path / "children.pid"
    out = run_runtime("profile", f"{targets_dir / 'faults.py'}:leaves_session_children", "--min-time", "0.05",
                      "--workspace", str(tmp_path), env={"PERFLSP_TEST_PIDFILE": str(pidfile)})
    assert out.returncode == 0, out.stdout + out.stderr
    children = [int(pid) for pid in pidfile.read_text().split()]
    assert len(children) == 3 and _all_dead(children), "children started with start_new_session survived the profile"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc")
def test_kill_9_of_the_supervisor_takes_the_workers_children_and_a_later_run_sweeps_its_folder(
        peaks_cache, targets_dir, tmp_path):
    pidfile, temp = tmp_path / "children.pid", tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache), PERFLSP_TEST_PIDFILE=str(pidfile), TMPDIR=str(temp))
    supervisor = subprocess.Popen([sys.executable, "-m", "perflsp.runtime", "profile",
                                   f"{targets_dir / 'faults.py'}:hangs_with_session_children", "--timeout", "120",
                                   "--workspace", str(tmp_path)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and len(pidfile.read_text().split()) == 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pidfile.exists(), "the target never started"
        tree = descendants(supervisor.pid)
        assert len(tree) >= 4  # the profiling process(es) and the three children
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait()
        assert _all_dead(tree), "processes of the profile outlived its supervisor"
    finally:
        for pid in [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert [p.name for p in temp.iterdir() if p.name.startswith("perflsp-job-")]  # nobody could remove it
    out = subprocess.run([sys.executable, "-m", "perflsp.runtime", "peaks", "--cached"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not [p.name for p in temp.iterdir() if p.name.startswith("perflsp-job-")]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def _start_profile(target: str, workspace, peaks_cache, env=None, prefix=()) -> subprocess.Popen:
    environment = dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache), **(env or {}))
    return subprocess.Popen([*prefix, sys.executable, "-m", "perflsp.runtime", "profile", target, "--timeout", "120",
                             "--workspace", str(workspace)], env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _failed_result(profile: subprocess.Popen, workspace, name: str) -> dict:
    out, err = profile.communicate(timeout=120)
    path = workspace / ".perflsp" / "profiles" / name
    assert path.exists(), out + err
    result = json.loads(path.read_text())
    _validate(result)
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the profiling processes through /proc")
@pytest.mark.parametrize("victim, signum, message", [
    ("reaper", signal.SIGKILL, "the profiling process was killed by SIGKILL during warm-up "
                               "(by another process or the system's out-of-memory killer)"),
    ("worker", signal.SIGKILL, "the profiling process was killed by SIGKILL during warm-up "
                               "(by another process or the system's out-of-memory killer)"),
    ("reaper", signal.SIGTERM, "the profiling process was stopped by SIGTERM from another process during "
                               "warm-up; perflsp killed every process of the job"),
], ids=["kill-9-reaper", "kill-9-worker", "sigterm-reaper"])
def test_a_profiling_process_killed_from_outside_is_not_blamed_on_memory(peaks_cache, targets_dir, tmp_path,
                                                                          victim, signum, message):
    # Nothing says the out-of-memory killer sent that SIGKILL: the cgroup's OOM kill count did not move.
    # (A killed worker made the reaper fail on `signal(SIGKILL, ...)`: "exited with status 1"; a
    # stopped reaper left before the worker's threads were gone: "status 0".)
    pidfile = tmp_path / "grandchild.pid"
    profile = _start_profile(f"{targets_dir / 'faults.py'}:hangs_in_c", tmp_path, peaks_cache,
                             env={"PERFLSP_TEST_PIDFILE": str(pidfile)})
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        worker = _parent(grandchild)
        os.kill(worker if victim == "worker" else _parent(worker), signum)
        result = _failed_result(profile, tmp_path, "faults.hangs_in_c.json")
    finally:
        profile.kill()
        profile.wait()
    assert profile.returncode == 3
    assert (result["error"]["kind"], result["error"]["message"]) == ("crash", message)
    assert _all_dead([grandchild])


def _small_memory_cgroup(limit_bytes: int):
    """A new memory cgroup under ours limited to `limit_bytes` (its folder), or None where this
    process may not make one (not root, no writable memory controller)."""
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        memberships = [line.rstrip("\n").split(":", 2) for line in handle]
    for _, controllers, path in memberships:
        if "memory" in controllers.split(","):
            base, limit_file = Path(f"/sys/fs/cgroup/memory{path}"), "memory.limit_in_bytes"
        elif not controllers:
            base, limit_file = Path(f"/sys/fs/cgroup{path}"), "memory.max"
        else:
            continue
        folder = base / f"perflsp-test-{os.getpid()}"
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            (folder / limit_file).write_text(str(limit_bytes))
            return folder
        except OSError:
            folder.rmdir()
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memory cgroups are Linux's")
def test_a_profiling_process_the_oom_killer_ended_is_out_of_memory(peaks_cache, targets_dir, tmp_path):
    cgroup = _small_memory_cgroup(1 << 30)
    if cgroup is None:
        pytest.skip("cannot make a memory cgroup here (needs root and a writable memory controller)")
    try:
        # The profile runs in the cgroup from its first instruction: its children are born there.
        profile = _start_profile(f"{targets_dir / 'faults.py'}:fills_memory", tmp_path, peaks_cache,
                                 prefix=["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup)])
        try:
            result = _failed_result(profile, tmp_path, "faults.fills_memory.json")
        finally:
            profile.kill()
            profile.wait()
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                cgroup.rmdir()
                break
            except OSError:  # its last processes are still exiting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    assert profile.returncode == 5
    assert (result["error"]["kind"], result["error"]["message"]) == (
        "out-of-memory", "the profiling process was killed by the system's out-of-memory killer during warm-up "
                         "(the OOM kill count of its memory cgroup rose by 1)")
